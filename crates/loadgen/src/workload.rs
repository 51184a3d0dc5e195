//! A UTXO-like token workload, planned deterministically from a seed and pre-signed.
//!
//! Namespace `tok_<tag>` holds coins: a coin is a key, created at version 0 by a
//! read-write that requires it to be absent, and spent by a read-write at version 0 that
//! marks it spent (version 1). Every load tx spends `min(reads, writes)` coins, creates
//! `writes - spends` new coins and reads `reads - spends` reference keys (issued at
//! genesis and never written) without writing them.
//!
//! The genesis (block 0: a `_meta` tx that creates the namespace with its policy; then
//! issuance blocks) issues exactly the coins the load needs: the planner takes coins from a
//! pool of spendable coins and mints a genesis coin whenever the pool is empty. The coins a
//! tx creates join the pool [`MATURITY`] blocks later, once they would be committed.
//!
//! **Conflict rate** `p`: each tx, with probability `p`, is a double spend — its first
//! input is a coin that an earlier tx of the window (the current and the previous block)
//! spends and that is expected to commit. The double spend comes later in block order, so
//! it is the one that aborts (`ABORTED_MVCC_CONFLICT`). A tx that has no earlier spender
//! in its window to copy (the first tx of a run) stays honest.
//! **Invalid-signature rate** `q`: each tx, with probability `q`, carries a signature made
//! by the right key over other bytes, so it aborts `ABORTED_SIGNATURE_INVALID` (signature
//! checks come before MVCC checks, so a double spend with a bad signature counts here).
//! A tx that aborts frees nothing and creates nothing: its inputs stay out of the pool.

use crate::signer::Signer;
use crate::{Error, Result};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use types::endorsement::namespace_signing_bytes;
use types::{
    Block, Endorsement, META_NAMESPACE, NamespacePolicy, Read, ReadWrite, Status, Tx, TxId, TxNamespace,
};

/// Blocks after its creation that a coin becomes spendable.
pub const MATURITY: usize = 2;
/// Coins issued per genesis issuance tx.
pub const COINS_PER_ISSUE_TX: usize = 500;
/// Issuance txs per genesis block.
pub const ISSUE_TXS_PER_BLOCK: usize = 20;
/// Reference keys (read-only reads) issued at genesis.
pub const REFERENCE_KEYS: usize = 64;
/// Threshold and group size of the `bls-threshold` scheme.
pub const BLS_THRESHOLD: (u32, u32) = (3, 5);
/// Seed of the key that endorses `_meta` txs (Ed25519).
pub const META_SEED: &str = "loadgen-admin";
/// Seed of the token namespace's key (or threshold group).
pub const ISSUER_SEED: &str = "loadgen-issuer";

/// The signature scheme of the token namespace's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Ed25519.
    Ed25519,
    /// ECDSA P-256.
    EcdsaP256,
    /// 3-of-5 threshold BLS12-381 (endorsements are aggregated partial signatures).
    BlsThreshold,
}

impl Scheme {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ed25519 => "ed25519",
            Scheme::EcdsaP256 => "ecdsa-p256",
            Scheme::BlsThreshold => "bls-threshold",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = Error;
    fn from_str(s: &str) -> Result<Scheme> {
        match s {
            "ed25519" => Ok(Scheme::Ed25519),
            "ecdsa-p256" => Ok(Scheme::EcdsaP256),
            "bls-threshold" => Ok(Scheme::BlsThreshold),
            other => Err(Error::InvalidParam {
                flag: "scheme",
                detail: format!("{other:?}: expected ed25519, ecdsa-p256 or bls-threshold"),
            }),
        }
    }
}

/// The parameters of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    /// Load blocks (genesis blocks come on top).
    pub blocks: usize,
    /// Txs per load block.
    pub block_size: usize,
    /// Keys each tx reads (spent coins count as reads).
    pub reads: usize,
    /// Keys each tx writes (spent coins count as writes).
    pub writes: usize,
    /// The token namespace's signature scheme.
    pub scheme: Scheme,
    /// Probability that a tx double-spends a coin of its window.
    pub conflict_rate: f64,
    /// Probability that a tx carries a bad signature.
    pub invalid_sig_rate: f64,
    /// Seed of the planner.
    pub seed: u64,
    /// Run tag: the namespace is `tok_<tag>`, tx ids start with `<tag>-`.
    pub tag: String,
    /// Whether coins a load tx creates are spent by later load txs (`MATURITY` blocks
    /// on). Off, every load tx spends genesis coins only, so the load txs do not depend
    /// on each other's order: what a network run needs, where the orderer, not the
    /// planner, decides the blocks.
    pub reuse_outputs: bool,
    /// Bytes added to the value of every coin a load tx creates (a memo), to make txs of
    /// a chosen size (`--tx-size`).
    pub output_padding: usize,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            blocks: 200,
            block_size: 500,
            reads: 1,
            writes: 2,
            scheme: Scheme::Ed25519,
            conflict_rate: 0.0,
            invalid_sig_rate: 0.0,
            seed: 42,
            tag: "run".into(),
            reuse_outputs: true,
            output_padding: 0,
        }
    }
}

fn invalid(flag: &'static str, detail: impl Into<String>) -> Error {
    Error::InvalidParam {
        flag,
        detail: detail.into(),
    }
}

fn check_rate(flag: &'static str, p: f64) -> Result<()> {
    if p.is_finite() && (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(invalid(flag, format!("{p} is not a probability in [0, 1]")))
    }
}

impl WorkloadSpec {
    /// Checks every parameter; the planner relies on it.
    pub fn validate(&self) -> Result<()> {
        if self.blocks == 0 {
            return Err(invalid("blocks", "must be at least 1"));
        }
        if self.block_size == 0 {
            return Err(invalid("block-size", "must be at least 1"));
        }
        if self.reads + self.writes == 0 {
            return Err(invalid(
                "writes",
                "--reads + --writes is 0: a tx must touch a key",
            ));
        }
        if self.writes == 0 {
            return Err(invalid(
                "writes",
                "must be at least 1: a tx without writes is malformed (110)",
            ));
        }
        if self.reads > 1000 || self.writes > 1000 {
            return Err(invalid("reads", "--reads and --writes are at most 1000"));
        }
        check_rate("conflict-rate", self.conflict_rate)?;
        check_rate("invalid-sig-rate", self.invalid_sig_rate)?;
        if self.conflict_rate > 0.0 && self.reads == 0 {
            return Err(invalid(
                "conflict-rate",
                "a double spend needs --reads >= 1 (a spent coin)",
            ));
        }
        let ns = self.namespace();
        if self.tag.len() > 40 || !types::check::is_valid_namespace_id(&ns) {
            return Err(invalid("tag", format!("{:?}: 1 to 40 of [a-z0-9_]", self.tag)));
        }
        Ok(())
    }

    /// The token namespace: `tok_<tag>`.
    pub fn namespace(&self) -> String {
        format!("tok_{}", self.tag)
    }

    /// Coins spent per tx.
    pub fn spends(&self) -> usize {
        self.reads.min(self.writes)
    }

    fn signer(&self) -> Result<Signer> {
        Ok(match self.scheme {
            Scheme::Ed25519 => Signer::single(crypto::Scheme::Ed25519, ISSUER_SEED),
            Scheme::EcdsaP256 => Signer::single(crypto::Scheme::EcdsaP256, ISSUER_SEED),
            Scheme::BlsThreshold => Signer::threshold(BLS_THRESHOLD.0, BLS_THRESHOLD.1, ISSUER_SEED)?,
        })
    }
}

/// What the planner meant a tx to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Intent {
    /// Spends a coin an earlier tx of its window spends.
    pub double_spend: bool,
    /// Carries a bad signature.
    pub bad_signature: bool,
}

impl Intent {
    /// The status the tx should end with.
    pub fn expected(self) -> Status {
        if self.bad_signature {
            Status::AbortedSignatureInvalid
        } else if self.double_spend {
            Status::AbortedMvccConflict
        } else {
            Status::Committed
        }
    }
}

/// Who endorses a planned tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endorser {
    Meta,
    Issuer,
}

/// A tx before signing.
#[derive(Debug, Clone)]
pub struct PlannedTx {
    /// The id.
    pub id: TxId,
    /// Its only namespace.
    pub ns: TxNamespace,
    /// What it is meant to be.
    pub intent: Intent,
    endorser: Endorser,
}

/// A workload before signing.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The parameters.
    pub spec: WorkloadSpec,
    /// Genesis blocks: the namespace, then the issuance.
    pub genesis: Vec<Vec<PlannedTx>>,
    /// Load blocks.
    pub load: Vec<Vec<PlannedTx>>,
    /// Coins issued at genesis.
    pub coins_issued: usize,
}

/// A signed workload, ready to be ordered.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The parameters.
    pub spec: WorkloadSpec,
    /// The policy that endorses `_meta` txs.
    pub meta_policy: NamespacePolicy,
    /// The token namespace's policy.
    pub ns_policy: NamespacePolicy,
    /// Genesis blocks, numbered from 0.
    pub genesis: Vec<Block>,
    /// Load blocks, numbered after the genesis.
    pub load: Vec<Block>,
    /// The intent of every load tx, by block and index.
    pub intents: Vec<Vec<Intent>>,
}

impl Workload {
    /// Plans and signs (in parallel) a workload.
    pub fn generate(spec: &WorkloadSpec) -> Result<Workload> {
        plan(spec)?.sign()
    }

    /// Load txs.
    pub fn load_txs(&self) -> usize {
        self.load.iter().map(|b| b.txs.len()).sum()
    }

    /// How many load txs are meant to end with `status`.
    pub fn expected_count(&self, status: Status) -> usize {
        self.intents
            .iter()
            .flatten()
            .filter(|i| i.expected() == status)
            .count()
    }
}

fn rw(key: Vec<u8>, version: Option<u64>, value: &[u8]) -> ReadWrite {
    ReadWrite {
        key,
        version,
        value: value.to_vec(),
    }
}

/// State of the planner while it walks the load blocks.
struct Planner {
    rng: rand_chacha::ChaCha8Rng,
    pool: Vec<Vec<u8>>,
    maturing: VecDeque<(usize, Vec<Vec<u8>>)>,
    minted: usize,
    created: usize,
    window_prev: Vec<Vec<u8>>,
    window_cur: Vec<Vec<u8>>,
}

impl Planner {
    fn take_coin(&mut self) -> Vec<u8> {
        if self.pool.is_empty() {
            self.minted += 1;
            return format!("g{}", self.minted - 1).into_bytes();
        }
        let i = self.rng.gen_range(0..self.pool.len());
        self.pool.swap_remove(i)
    }

    fn victim(&mut self) -> Option<Vec<u8>> {
        let n = self.window_prev.len() + self.window_cur.len();
        if n == 0 {
            return None;
        }
        let i = self.rng.gen_range(0..n);
        Some(match i.checked_sub(self.window_prev.len()) {
            None => self.window_prev[i].clone(),
            Some(j) => self.window_cur[j].clone(),
        })
    }

    fn plan_tx(&mut self, spec: &WorkloadSpec, b: usize, i: usize) -> PlannedTx {
        let bad = self.rng.gen_bool(spec.invalid_sig_rate);
        let wants_double = self.rng.gen_bool(spec.conflict_rate);
        let spends = spec.spends();
        let mut inputs = Vec::with_capacity(spends);
        let mut double = false;
        if wants_double
            && spends > 0
            && let Some(v) = self.victim()
        {
            inputs.push(v);
            double = true;
        }
        while inputs.len() < spends {
            inputs.push(self.take_coin());
        }
        let outputs: Vec<Vec<u8>> = (0..spec.writes - spends)
            .map(|_| {
                self.created += 1;
                format!("c{}", self.created - 1).into_bytes()
            })
            .collect();
        let reads_only = (0..spec.reads - spends)
            .map(|_| Read {
                key: format!("r{}", self.rng.gen_range(0..REFERENCE_KEYS)).into_bytes(),
                version: Some(0),
            })
            .collect();
        let mut read_writes: Vec<ReadWrite> =
            inputs.iter().map(|k| rw(k.clone(), Some(0), b"spent")).collect();
        let mut value = b"10".to_vec();
        value.resize(2 + spec.output_padding, b' ');
        read_writes.extend(outputs.iter().map(|k| rw(k.clone(), None, &value)));
        let intent = Intent {
            double_spend: double,
            bad_signature: bad,
        };
        if intent.expected() == Status::Committed {
            self.window_cur.extend(inputs);
            if spec.reuse_outputs {
                self.maturing.push_back((b + MATURITY, outputs));
            }
        }
        PlannedTx {
            id: TxId(format!("{}-{b}-{i}", spec.tag)),
            ns: TxNamespace {
                ns_id: spec.namespace(),
                ns_version: 0,
                reads_only,
                read_writes,
                blind_writes: Vec::new(),
            },
            intent,
            endorser: Endorser::Issuer,
        }
    }

    fn start_block(&mut self, b: usize) {
        while self.maturing.front().is_some_and(|(at, _)| *at <= b) {
            if let Some((_, coins)) = self.maturing.pop_front() {
                self.pool.extend(coins);
            }
        }
        self.window_prev = std::mem::take(&mut self.window_cur);
    }
}

/// Plans a workload (no signing): load blocks first, then the genesis that issues the
/// coins they spend.
pub fn plan(spec: &WorkloadSpec) -> Result<Plan> {
    spec.validate()?;
    let mut p = Planner {
        rng: rand_chacha::ChaCha8Rng::seed_from_u64(spec.seed),
        pool: Vec::new(),
        maturing: VecDeque::new(),
        minted: 0,
        created: 0,
        window_prev: Vec::new(),
        window_cur: Vec::new(),
    };
    let mut load = Vec::with_capacity(spec.blocks);
    for b in 0..spec.blocks {
        p.start_block(b);
        load.push((0..spec.block_size).map(|i| p.plan_tx(spec, b, i)).collect());
    }
    Ok(Plan {
        genesis: genesis(spec, p.minted),
        spec: spec.clone(),
        load,
        coins_issued: p.minted,
    })
}

/// Block 0 creates the namespace; then issuance blocks create the reference keys and the
/// `coins` genesis coins.
fn genesis(spec: &WorkloadSpec, coins: usize) -> Vec<Vec<PlannedTx>> {
    let ns = spec.namespace();
    let create = PlannedTx {
        id: TxId(format!("{}-meta", spec.tag)),
        ns: TxNamespace {
            ns_id: META_NAMESPACE.into(),
            // Filled with the encoded policy when signing.
            read_writes: vec![rw(ns.clone().into_bytes(), None, b"")],
            ..Default::default()
        },
        intent: Intent::default(),
        endorser: Endorser::Meta,
    };
    let mut keys: Vec<Vec<u8>> = Vec::new();
    if spec.reads > spec.spends() {
        keys.extend((0..REFERENCE_KEYS).map(|r| format!("r{r}").into_bytes()));
    }
    keys.extend((0..coins).map(|c| format!("g{c}").into_bytes()));
    let issues: Vec<PlannedTx> = keys
        .chunks(COINS_PER_ISSUE_TX)
        .enumerate()
        .map(|(k, chunk)| PlannedTx {
            id: TxId(format!("{}-issue-{k}", spec.tag)),
            ns: TxNamespace {
                ns_id: ns.clone(),
                read_writes: chunk.iter().map(|key| rw(key.clone(), None, b"10")).collect(),
                ..Default::default()
            },
            intent: Intent::default(),
            endorser: Endorser::Issuer,
        })
        .collect();
    let mut blocks = vec![vec![create]];
    for chunk in issues.chunks(ISSUE_TXS_PER_BLOCK) {
        blocks.push(chunk.to_vec());
    }
    blocks
}

impl Plan {
    /// Signs every tx (in parallel on the rayon pool) and numbers the blocks: genesis
    /// from 0, load after it.
    pub fn sign(self) -> Result<Workload> {
        self.sign_with_meta(crypto::derive_signing_key(crypto::Scheme::Ed25519, META_SEED))
    }

    /// [`Plan::sign`] with `meta` endorsing the `_meta` tx (a network's administrator key).
    pub fn sign_with_meta(self, meta: crypto::SigningKey) -> Result<Workload> {
        let meta = Signer::Single(Box::new(meta));
        let issuer = self.spec.signer()?;
        let ns_policy = issuer.policy();
        let encoded = wire::encode_policy(&ns_policy);
        let sign_block = |txs: &Vec<PlannedTx>| -> Result<Vec<(TxId, Arc<Tx>)>> {
            txs.par_iter()
                .map(|p| {
                    let mut ns = p.ns.clone();
                    if p.endorser == Endorser::Meta {
                        for w in &mut ns.read_writes {
                            w.value = encoded.clone();
                        }
                    }
                    let mut msg = namespace_signing_bytes(&p.id, &ns, &[]);
                    if p.intent.bad_signature {
                        // The right key over other bytes: well formed, does not verify.
                        msg.push(0xff);
                    }
                    let signature = match p.endorser {
                        Endorser::Meta => meta.sign(&msg)?,
                        Endorser::Issuer => issuer.sign(&msg)?,
                    };
                    let tx = Tx {
                        namespaces: vec![ns],
                        endorsements: vec![vec![Endorsement {
                            signature,
                            ..Default::default()
                        }]],
                        metadata: Vec::new(),
                    };
                    Ok((p.id.clone(), Arc::new(tx)))
                })
                .collect()
        };
        let number = |blocks: Vec<Vec<(TxId, Arc<Tx>)>>, first: usize| -> Vec<Block> {
            blocks
                .into_iter()
                .enumerate()
                .map(|(i, txs)| Block::unordered((first + i) as u64, txs))
                .collect()
        };
        let genesis = self.genesis.iter().map(sign_block).collect::<Result<Vec<_>>>()?;
        let load = self.load.iter().map(sign_block).collect::<Result<Vec<_>>>()?;
        let intents = self
            .load
            .iter()
            .map(|b| b.iter().map(|p| p.intent).collect())
            .collect();
        let first_load = genesis.len();
        Ok(Workload {
            meta_policy: meta.policy(),
            ns_policy,
            genesis: number(genesis, 0),
            load: number(load, first_load),
            intents,
            spec: self.spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn spec(conflict: f64) -> WorkloadSpec {
        WorkloadSpec {
            blocks: 40,
            block_size: 250,
            conflict_rate: conflict,
            invalid_sig_rate: 0.0,
            ..WorkloadSpec::default()
        }
    }

    /// Per load tx: whether one of its spent coins is also spent by an earlier tx of
    /// its window (the current or the previous block).
    fn shares_with_window(plan: &Plan) -> Vec<bool> {
        let mut last_spender: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut out = Vec::new();
        for (b, block) in plan.load.iter().enumerate() {
            for tx in block {
                let spent: Vec<&ReadWrite> =
                    tx.ns.read_writes.iter().filter(|r| r.version.is_some()).collect();
                out.push(
                    spent
                        .iter()
                        .any(|r| last_spender.get(&r.key).is_some_and(|&at| at + 1 >= b)),
                );
                for r in spent {
                    last_spender.entry(r.key.clone()).or_insert(b);
                }
            }
        }
        out
    }

    #[test]
    fn no_conflicts_means_every_coin_is_spent_once() {
        let plan = plan(&spec(0.0)).unwrap();
        let shared = shares_with_window(&plan);
        assert_eq!(shared.len(), 10_000);
        assert!(shared.iter().all(|s| !s));
        let mut spent = std::collections::HashSet::new();
        for tx in plan.load.iter().flatten() {
            assert_eq!(tx.ns.read_writes.len(), 2);
            for r in tx.ns.read_writes.iter().filter(|r| r.version.is_some()) {
                assert!(spent.insert(r.key.clone()), "coin spent twice");
            }
        }
        // Coins created by load txs are spent again once mature: fewer coins are
        // issued than spent.
        assert!(plan.coins_issued < 10_000, "issued {}", plan.coins_issued);
    }

    #[test]
    fn conflict_rate_is_the_fraction_of_double_spends() {
        for p in [0.05, 0.1, 0.3] {
            let plan = plan(&spec(p)).unwrap();
            let shared = shares_with_window(&plan);
            let intents: Vec<Intent> = plan.load.iter().flatten().map(|t| t.intent).collect();
            // A tx shares a coin with an earlier tx of its window iff it is a double spend.
            for (s, i) in shared.iter().zip(&intents) {
                assert_eq!(*s, i.double_spend);
            }
            let rate = shared.iter().filter(|s| **s).count() as f64 / shared.len() as f64;
            assert!((rate - p).abs() < 0.02, "p = {p}: measured {rate}");
        }
    }

    #[test]
    fn shapes_follow_reads_and_writes() {
        let s = WorkloadSpec {
            reads: 3,
            writes: 2,
            blocks: 3,
            block_size: 4,
            ..WorkloadSpec::default()
        };
        let plan = plan(&s).unwrap();
        for tx in plan.load.iter().flatten() {
            assert_eq!(tx.ns.reads_only.len(), 1);
            assert_eq!(tx.ns.read_writes.len(), 2);
            assert!(tx.ns.read_writes.iter().all(|r| r.version == Some(0)));
        }
        // Genesis: the namespace, then one issuance tx with 64 reference keys + 24 coins.
        assert_eq!(plan.genesis.len(), 2);
        assert_eq!(plan.genesis[1][0].ns.read_writes.len(), REFERENCE_KEYS + 24);
    }

    #[test]
    fn same_seed_same_plan_and_bad_flags_are_refused() {
        let a = plan(&spec(0.2)).unwrap();
        let b = plan(&spec(0.2)).unwrap();
        let keys = |p: &Plan| -> Vec<Vec<u8>> {
            p.load
                .iter()
                .flatten()
                .flat_map(|t| t.ns.read_writes.iter().map(|r| r.key.clone()))
                .collect()
        };
        assert_eq!(keys(&a), keys(&b));
        let bad = [
            WorkloadSpec {
                blocks: 0,
                ..spec(0.0)
            },
            WorkloadSpec {
                block_size: 0,
                ..spec(0.0)
            },
            WorkloadSpec {
                reads: 0,
                writes: 0,
                ..spec(0.0)
            },
            WorkloadSpec {
                writes: 0,
                ..spec(0.0)
            },
            WorkloadSpec {
                conflict_rate: 1.5,
                ..spec(0.0)
            },
            WorkloadSpec {
                conflict_rate: f64::NAN,
                ..spec(0.0)
            },
            WorkloadSpec {
                invalid_sig_rate: -0.1,
                ..spec(0.0)
            },
            WorkloadSpec {
                reads: 0,
                ..spec(0.1)
            },
            WorkloadSpec {
                tag: "Bad-Tag".into(),
                ..spec(0.0)
            },
        ];
        for s in bad {
            assert!(matches!(plan(&s), Err(Error::InvalidParam { .. })), "{s:?}");
        }
        assert!("rsa".parse::<Scheme>().is_err());
        assert_eq!("bls-threshold".parse::<Scheme>().unwrap(), Scheme::BlsThreshold);
    }

    #[test]
    fn without_reuse_every_load_tx_spends_genesis_coins_once() {
        let s = WorkloadSpec {
            reuse_outputs: false,
            ..spec(0.0)
        };
        let plan = plan(&s).unwrap();
        let mut spent = std::collections::HashSet::new();
        for tx in plan.load.iter().flatten() {
            for rw in tx.ns.read_writes.iter().filter(|r| r.version.is_some()) {
                assert!(rw.key.starts_with(b"g"), "a load tx spends a genesis coin");
                assert!(spent.insert(rw.key.clone()), "each coin is spent once");
            }
        }
        assert_eq!(spent.len(), plan.coins_issued);
    }
}
