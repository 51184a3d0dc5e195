//! Test-only Byzantine behaviour of a batcher node (feature `testing`, never in a build
//! of the release binary): what a faulty party's batcher may do, so that multi-process
//! tests can show the other parties cope (docs/ordering-faults.md).

use types::PartyId;

/// A Byzantine batcher's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Byzantine {
    /// As primary, it serves its batches (`Pull`) only to party `to`'s batcher: with its
    /// own attestation that makes f + 1 (n = 4), so the batches are ordered although no
    /// other party's batcher or assembler can pull them. Every `Fetch` it answers with
    /// forged requests under the asked id and digest.
    Withhold {
        /// The one party it serves.
        to: PartyId,
    },
}

impl std::str::FromStr for Byzantine {
    type Err = String;

    /// `withhold:P`.
    fn from_str(text: &str) -> Result<Byzantine, String> {
        match text.split_once(':') {
            Some(("withhold", to)) => to
                .parse()
                .map(|to| Byzantine::Withhold { to })
                .map_err(|e| format!("withhold:P needs a party: {e}")),
            _ => Err(format!("unknown Byzantine behaviour {text:?} (withhold:P)")),
        }
    }
}

impl Byzantine {
    /// Whether a `Pull` from `caller` is served.
    pub(crate) fn serves_pull(self, caller: Option<PartyId>) -> bool {
        match self {
            Byzantine::Withhold { to } => caller == Some(to),
        }
    }

    /// Whether `Fetch` answers are forged.
    pub(crate) fn forges_fetch(self) -> bool {
        matches!(self, Byzantine::Withhold { .. })
    }
}
