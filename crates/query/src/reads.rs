//! Who may read whose tokens: the read policy a query service enforces (docs/token.md
//! "Who may read what").

/// Who may read whose tokens (docs/token.md "Who may read what").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPolicy {
    /// Whether `GetOwned` needs a read signed by the owner or an auditor
    /// (`token::read`); off only for experiments.
    pub signed: bool,
    /// Keys that may read any owner's tokens (the issuer, auditors).
    pub auditors: Vec<[u8; 32]>,
    /// Signed reads one reader may make per second (a burst of twice as many; 0: no limit).
    pub per_reader_per_second: u32,
    /// Signed reads all readers together may make per second (a burst of twice as many;
    /// 0: no limit): reader keys cost nothing, so this is what bounds the service.
    pub per_service_per_second: u32,
}

impl Default for ReadPolicy {
    fn default() -> Self {
        ReadPolicy {
            signed: true,
            auditors: Vec::new(),
            per_reader_per_second: 50,
            per_service_per_second: 5000,
        }
    }
}
