//! The batched, parallel path gives exactly the verdicts of `Policies::verify_tx`, on
//! random batches mixing schemes, good and bad signatures, missing policies and
//! endorsements, multi-namespace txs and several endorsements per namespace.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use sigverifier::{Policies, Verifier};
use std::sync::{Arc, OnceLock};
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, Status, Tx, TxId, TxNamespace, Write};

/// Namespaces with a policy, by scheme; `nopolicy` has none.
const NAMESPACES: [(&str, Option<crypto::Scheme>); 5] = [
    ("eda", Some(crypto::Scheme::Ed25519)),
    ("edb", Some(crypto::Scheme::Ed25519)),
    ("ec", Some(crypto::Scheme::EcdsaP256)),
    ("bls", Some(crypto::Scheme::Bls12381)),
    ("nopolicy", None),
];

struct Keys {
    /// Per namespace: the owner key (or a stray ed25519 key for `nopolicy`).
    owners: Vec<crypto::SigningKey>,
    /// One stranger key per scheme.
    strangers: Vec<crypto::SigningKey>,
    policies: Policies,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut policies = Policies::new();
        let owners = NAMESPACES
            .iter()
            .map(|(ns, scheme)| {
                let sk = crypto::derive_signing_key(scheme.unwrap_or(crypto::Scheme::Ed25519), ns);
                if scheme.is_some() {
                    let p = sigverifier::policy_of(&sk.public_key());
                    policies.set(ns, &p).unwrap();
                }
                sk
            })
            .collect();
        let strangers = crypto::Scheme::ALL
            .iter()
            .map(|s| crypto::derive_signing_key(*s, "stranger"))
            .collect();
        Keys {
            owners,
            strangers,
            policies,
        }
    })
}

/// How one endorsement is made.
#[derive(Debug, Clone, Copy)]
enum Sig {
    /// By the namespace's owner over the right bytes.
    Good,
    /// By a stranger key of scheme index `.0`.
    Stranger(usize),
    /// By the owner over other bytes.
    WrongMessage,
    /// Random bytes of a plausible or implausible length.
    Garbage(u8),
    /// A good signature with one bit flipped.
    Flipped,
}

fn sig_strategy() -> impl Strategy<Value = Sig> {
    prop_oneof![
        4 => Just(Sig::Good),
        1 => (0usize..3).prop_map(Sig::Stranger),
        1 => Just(Sig::WrongMessage),
        1 => any::<u8>().prop_map(Sig::Garbage),
        1 => Just(Sig::Flipped),
    ]
}

/// One namespace of a generated tx: which namespace, and its endorsements.
type NsSpec = (usize, Vec<Sig>);

/// A generated tx: namespaces (distinct), and whether to drop the last endorsement set.
#[derive(Debug, Clone)]
struct TxSpec {
    namespaces: Vec<NsSpec>,
    drop_last_set: bool,
    metadata: Vec<u8>,
}

fn tx_strategy() -> impl Strategy<Value = TxSpec> {
    (
        proptest::sample::subsequence((0..NAMESPACES.len()).collect::<Vec<_>>(), 0..=3).prop_shuffle(),
        proptest::collection::vec(proptest::collection::vec(sig_strategy(), 0..=3), 3),
        proptest::bool::weighted(0.05),
        proptest::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(nss, sigs, drop_last_set, metadata)| TxSpec {
            namespaces: nss.into_iter().zip(sigs).collect(),
            drop_last_set,
            metadata,
        })
}

fn build(index: usize, spec: &TxSpec) -> (TxId, Arc<Tx>) {
    let k = keys();
    let id = TxId(format!("tx{index}"));
    let mut tx = Tx {
        metadata: if spec.metadata.is_empty() {
            vec![]
        } else {
            vec![spec.metadata.clone()]
        },
        ..Default::default()
    };
    for (ns_index, sigs) in &spec.namespaces {
        let ns = TxNamespace {
            ns_id: NAMESPACES[*ns_index].0.into(),
            ns_version: *ns_index as u64,
            blind_writes: vec![Write {
                key: vec![*ns_index as u8],
                value: id.0.clone().into_bytes(),
            }],
            ..Default::default()
        };
        let msg = namespace_signing_bytes(&id, &ns, &tx.metadata);
        let owner = &k.owners[*ns_index];
        let endorsements = sigs
            .iter()
            .map(|s| {
                let bytes = match *s {
                    Sig::Good => crypto::sign_namespace_endorsement(owner, &msg).into_bytes(),
                    Sig::Stranger(i) => {
                        crypto::sign_namespace_endorsement(&k.strangers[i], &msg).into_bytes()
                    }
                    Sig::WrongMessage => crypto::sign_namespace_endorsement(owner, b"other").into_bytes(),
                    Sig::Garbage(n) => vec![n; usize::from(n % 100)],
                    Sig::Flipped => {
                        let mut b = crypto::sign_namespace_endorsement(owner, &msg).into_bytes();
                        let i = index % b.len();
                        b[i] ^= 1 << (index % 8);
                        b
                    }
                };
                Endorsement {
                    signature: bytes,
                    ..Default::default()
                }
            })
            .collect();
        tx.namespaces.push(ns);
        tx.endorsements.push(endorsements);
    }
    if spec.drop_last_set {
        tx.endorsements.pop();
    }
    (id, Arc::new(tx))
}

fn oracle(policies: &Policies, txs: &[(TxId, Arc<Tx>)]) -> Vec<Option<Status>> {
    txs.iter()
        .map(|(id, tx)| policies.verify_tx(id, tx).err())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn batch_equals_verify_tx(
        specs in proptest::collection::vec(tx_strategy(), 0..40),
        chunk in 1usize..70,
        bad_per_mille in 0usize..400,
    ) {
        let k = keys();
        let txs: Vec<_> = specs.iter().enumerate().map(|(i, s)| build(i, s)).collect();
        let want = oracle(&k.policies, &txs);
        prop_assert_eq!(&k.policies.verify_batch(&txs), &want);
        let verifier = Verifier::new(2).unwrap().with_chunks(sigverifier::batch::Chunks::uniform(std::num::NonZeroUsize::new(chunk).unwrap()));
        // Twice: the second call batches by the share the first one saw.
        prop_assert_eq!(&verifier.verify(&k.policies, &txs), &want);
        prop_assert_eq!(&verifier.verify(&k.policies, &txs), &want);
        // Batch sizes chosen for any bad share give the same verdicts.
        let adaptive = sigverifier::batch::Adaptive::new(sigverifier::batch::Chunks::uniform(std::num::NonZeroUsize::new(chunk).unwrap()));
        adaptive.observe(1000, bad_per_mille);
        prop_assert_eq!(&sigverifier::batch::verify_batch_adaptive(&k.policies, &txs, &adaptive), &want);
    }
}

/// The generator does produce both verdicts in quantity (else the property is vacuous).
#[test]
fn generator_mixes_verdicts() {
    let k = keys();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(tx_strategy(), 200);
    let specs = strategy.new_tree(&mut runner).unwrap().current();
    let txs: Vec<_> = specs.iter().enumerate().map(|(i, s)| build(i, s)).collect();
    let verdicts = Verifier::new(2).unwrap().verify(&k.policies, &txs);
    let valid = verdicts.iter().filter(|v| v.is_none()).count();
    assert!(valid > 20, "only {valid} of 200 valid");
    assert!(200 - valid > 20, "only {} of 200 invalid", 200 - valid);
    assert_eq!(verdicts, oracle(&k.policies, &txs));
}

/// Hand-picked cases with known answers, including a valid endorsement after bad ones
/// (the round-based path must keep looking) and an invalid one in a valid tx's batch.
#[test]
fn known_cases() {
    let k = keys();
    let spec = |namespaces: Vec<NsSpec>| TxSpec {
        namespaces,
        drop_last_set: false,
        metadata: vec![],
    };
    let cases: Vec<(TxSpec, bool)> = vec![
        (spec(vec![(0, vec![Sig::Good])]), true),
        (spec(vec![(2, vec![Sig::Good])]), true),
        (spec(vec![(3, vec![Sig::Good])]), true),
        (
            spec(vec![(3, vec![Sig::Garbage(96), Sig::Stranger(2), Sig::Good])]),
            true,
        ),
        (spec(vec![(0, vec![Sig::Good]), (2, vec![Sig::Flipped])]), false),
        (spec(vec![(0, vec![]), (2, vec![Sig::Good])]), false),
        (spec(vec![(4, vec![Sig::Good])]), false),
        // No namespace: nothing endorses the tx, so it is not valid (a hostile-input finding).
        (spec(vec![]), false),
        (
            TxSpec {
                drop_last_set: true,
                ..spec(vec![(0, vec![Sig::Good]), (1, vec![Sig::Good])])
            },
            false,
        ),
        (
            spec(vec![
                (0, vec![Sig::Good]),
                (1, vec![Sig::Good]),
                (3, vec![Sig::WrongMessage, Sig::Good]),
            ]),
            true,
        ),
    ];
    let txs: Vec<_> = cases.iter().enumerate().map(|(i, (s, _))| build(i, s)).collect();
    let want: Vec<Option<Status>> = cases
        .iter()
        .map(|(_, ok)| (!ok).then_some(Status::AbortedSignatureInvalid))
        .collect();
    assert_eq!(oracle(&k.policies, &txs), want);
    for threads in [1, 2, 3] {
        let verifier = Verifier::new(threads).unwrap();
        assert_eq!(verifier.verify(&k.policies, &txs), want);
        assert_eq!(verifier.verify_each(&k.policies, &txs), want);
    }
}
