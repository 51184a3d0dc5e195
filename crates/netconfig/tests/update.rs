#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Config updates (netconfig::update): every reason `validate` refuses one, exactly K
//! signatures against K − 1, signers counted once, stale and future sequences, tampered
//! bytes, the file form's round trip, `merge`, and admin keys as generated.

mod support;

use crypto::SigningKey;
use netconfig::file::{NetworkFile, UpdatePolicyFile};
use netconfig::update::{self, ConfigUpdate, UpdateError, UpdateSignature};
use netconfig::{Error, GenerateSpec, NetworkConfig, generate};
use types::PartyId;

/// A generated 4-party, 2-shard network (seeded) and its parties' admin keys (index p − 1).
struct Net {
    _dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
}

fn net() -> Net {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(5),
        ..GenerateSpec::new(4, 2, dir.path())
    })
    .unwrap();
    let admins = g
        .admin_key_files
        .iter()
        .map(|(p, path)| g.config.read_admin_key(*p, path).unwrap())
        .collect();
    Net {
        _dir: dir,
        config: g.config,
        admins,
    }
}

/// `current`'s file with the next sequence and `edit` applied.
fn next_of(current: &NetworkConfig, edit: impl FnOnce(&mut NetworkFile)) -> NetworkFile {
    let mut file = current.file().clone();
    file.sequence = current.sequence() + 1;
    edit(&mut file);
    file
}

/// The batch timeout set to `ms`.
fn timeout(ms: u64) -> impl FnOnce(&mut NetworkFile) {
    move |f: &mut NetworkFile| f.batching.batch_timeout_ms = ms
}

fn signed(net: &Net, current: &NetworkConfig, next: &NetworkFile, by: &[PartyId]) -> ConfigUpdate {
    let mut u = update::propose(current, next).unwrap();
    for &p in by {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    prove_new_keys(&mut u, current);
    u
}

thread_local! {
    /// The keys [`new_key`] derived on this test's thread: their holders prove them.
    static DERIVED: std::cell::RefCell<Vec<SigningKey>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Proves in `u` each new node key that this test derived with [`new_key`].
fn prove_new_keys(u: &mut ConfigUpdate, current: &NetworkConfig) {
    let keys = DERIVED.with(|d| d.borrow().clone());
    support::prove_with(u, current, &keys);
}

/// Like [`signed`] without `propose`'s checks (which refuse what `validate` refuses).
fn signed_unchecked(net: &Net, current: &NetworkConfig, next: &NetworkFile, by: &[PartyId]) -> ConfigUpdate {
    let mut u = ConfigUpdate {
        chain: current.chain().to_string(),
        sequence: current.sequence(),
        config: update::canonical_json(next),
        signatures: Vec::new(),
        proofs: Vec::new(),
    };
    for &p in by {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    prove_new_keys(&mut u, current);
    u
}

/// A public key (config text form) derived from `name`, named by no generated network;
/// the updates this test signs prove it held.
fn new_key(name: &str) -> String {
    let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, name);
    let public = key.public_key().to_string();
    DERIVED.with(|d| d.borrow_mut().push(key));
    public
}

/// `current` with the file changed by `edit` (same sequence), validated.
fn reloaded(current: &NetworkConfig, edit: impl FnOnce(&mut NetworkFile)) -> NetworkConfig {
    let mut file = current.file().clone();
    edit(&mut file);
    NetworkConfig::from_file(file).unwrap()
}

#[test]
fn exactly_k_signatures_pass_and_k_minus_one_fail() {
    let net = net();
    let current = &net.config;
    assert_eq!(current.update_signatures(), 3, "a majority of 4");
    let next = next_of(current, timeout(50));
    let two = signed(&net, current, &next, &[1, 2]);
    let e = update::validate(current, &two).unwrap_err();
    assert!(
        matches!(
            e,
            UpdateError::NotEnoughSignatures {
                signatures: 2,
                needed: 3
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "2 admin signatures, the update policy needs 3");
    let one = signed(&net, current, &next, &[4]);
    assert_eq!(
        update::validate(current, &one).unwrap_err().to_string(),
        "1 admin signature, the update policy needs 3"
    );
    let three = signed(&net, current, &next, &[1, 2, 4]);
    let applied = update::validate(current, &three).unwrap();
    assert_eq!(applied.sequence(), 1);
    assert_eq!(applied.file().batching.batch_timeout_ms, 50);
    assert_eq!(applied.file(), &next);
    // Unchanged: the config in force is read only.
    assert_eq!(current.sequence(), 0);
    assert_eq!(current.file().batching.batch_timeout_ms, 200);
}

#[test]
fn an_explicit_policy_sets_k() {
    let net = net();
    for k in [1u32, 2, 4] {
        let current = reloaded(&net.config, |f| {
            f.update_policy = Some(UpdatePolicyFile { signatures: k })
        });
        assert_eq!(current.update_signatures(), k);
        let next = next_of(&current, timeout(70));
        let parties: Vec<PartyId> = (1..=k).collect();
        let short = signed(&net, &current, &next, &parties[..parties.len() - 1]);
        let full = signed(&net, &current, &next, &parties);
        if k > 1 {
            assert!(
                matches!(
                    update::validate(&current, &short),
                    Err(UpdateError::NotEnoughSignatures { signatures, needed })
                        if signatures == k - 1 && needed == k
                ),
                "k = {k}"
            );
        } else {
            assert!(matches!(
                update::validate(&current, &short),
                Err(UpdateError::NotEnoughSignatures {
                    signatures: 0,
                    needed: 1
                })
            ));
        }
        assert!(update::validate(&current, &full).is_ok(), "k = {k}");
    }
}

#[test]
fn a_signer_listed_twice_is_refused_and_never_counts_twice() {
    let net = net();
    let current = &net.config;
    let next = next_of(current, timeout(50));
    // Parties 1 and 2, party 2 twice with its valid signature: three entries, two signers.
    let mut u = signed(&net, current, &next, &[1, 2]);
    u.signatures.push(u.signatures[1].clone());
    assert_eq!(u.signers(), vec![1, 2, 2]);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::DuplicateSigner { party: 2 })
    ));
    // `sign` by a party that already signed replaces its signature.
    let mut again = signed(&net, current, &next, &[1, 2]);
    update::sign(&mut again, 2, &net.admins[1]);
    update::sign(&mut again, 1, &net.admins[0]);
    assert_eq!(again.signers(), vec![1, 2]);
    assert!(matches!(
        update::validate(current, &again),
        Err(UpdateError::NotEnoughSignatures {
            signatures: 2,
            needed: 3
        })
    ));
}

#[test]
fn bad_unknown_and_keyless_signers_are_refused_by_party() {
    let net = net();
    let current = &net.config;
    let next = next_of(current, timeout(50));
    // Party 2's entry holds party 3's signature.
    let mut u = signed(&net, current, &next, &[1, 3, 4]);
    update::sign(&mut u, 2, &net.admins[2]);
    let e = update::validate(current, &u).unwrap_err();
    assert!(matches!(e, UpdateError::BadSignature { party: 2 }), "{e:?}");
    assert!(e.to_string().contains("party 2"), "{e}");
    // Bytes that are no signature at all.
    let mut u = signed(&net, current, &next, &[1, 2, 3]);
    u.signatures[0].signature = crypto::Signature::from_bytes(vec![7; 5]);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::BadSignature { party: 1 })
    ));
    // A party the network does not have, however well it signed.
    let stranger = crypto::derive_signing_key(crypto::Scheme::Ed25519, "stranger");
    let mut u = signed(&net, current, &next, &[1, 2, 3]);
    update::sign(&mut u, 9, &stranger);
    let e = update::validate(current, &u).unwrap_err();
    assert!(
        matches!(&e, UpdateError::UnknownSigner { party: 9, parties } if parties.len() == 4),
        "{e:?}"
    );
    // A party without an admin key.
    let keyless = reloaded(current, |f| f.parties[3].admin_key = None);
    let u = signed(&net, &keyless, &next, &[1, 2, 3, 4]);
    assert!(matches!(
        update::validate(&keyless, &u),
        Err(UpdateError::SignerWithoutKey { party: 4 })
    ));
    let u = signed(&net, &keyless, &next, &[1, 2, 3]);
    assert!(update::validate(&keyless, &u).is_ok());
}

/// `file` without party 4 and everything that names it.
fn without_party_4(f: &mut NetworkFile) {
    f.parties.retain(|p| p.id != 4);
    if let Some(c) = &mut f.committer {
        c.parties.retain(|p| p.party != 4);
    }
    if let Some(t) = &mut f.token {
        t.query.retain(|q| q.party != 4);
        for e in &mut t.endorsers {
            if e.party == 4 {
                e.party = 1;
            }
        }
    }
    if let Some(fabric) = &mut f.fabric {
        fabric.orgs.retain(|o| o.party != 4);
        fabric.clients.retain(|c| c.msp_id != "party4");
    }
    if let Some(tls) = &mut f.tls {
        tls.certificates.retain(|c| c.party != 4);
    }
}

#[test]
fn a_removed_party_cannot_sign_the_next_update() {
    let net = net();
    let current = &net.config;
    // A removal must list the id among the parties that left (netconfig's
    // `update::without_party` writes such a config; tests/update_leave.rs).
    let removal = signed_unchecked(&net, current, &next_of(current, without_party_4), &[1, 2, 3]);
    assert!(update::propose(current, &next_of(current, without_party_4)).is_err());
    let e = update::validate(current, &removal).unwrap_err();
    assert!(matches!(e, UpdateError::LeftParties { .. }), "{e:?}");
    // A network at sequence 1 without party 4 (as such an update would leave it).
    let after = reloaded(current, |f| {
        without_party_4(f);
        f.left_parties = vec![4];
        f.sequence = 1;
    });
    assert_eq!(
        (after.n(), after.sequence(), after.update_signatures()),
        (3, 1, 2)
    );
    let next = next_of(&after, timeout(80));
    let mut u = signed(&net, &after, &next, &[1]);
    update::sign(&mut u, 4, &net.admins[3]);
    let e = update::validate(&after, &u).unwrap_err();
    assert!(
        matches!(&e, UpdateError::UnknownSigner { party: 4, parties } if *parties == vec![1, 2, 3]),
        "{e:?}"
    );
    let u = signed(&net, &after, &next, &[1, 3]);
    assert_eq!(update::validate(&after, &u).unwrap().sequence(), 2);
}

#[test]
fn tampered_updates_are_refused() {
    let net = net();
    let current = &net.config;
    let good = signed(&net, current, &next_of(current, timeout(50)), &[1, 2, 3]);
    assert!(update::validate(current, &good).is_ok());
    // Another value in the config text, still canonical: no signature covers it.
    let mut u = good.clone();
    u.config = u
        .config
        .replace("\"batch_timeout_ms\":50", "\"batch_timeout_ms\":60");
    assert_ne!(u.config, good.config);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::BadSignature { party: 1 })
    ));
    // The signatures are checked before the config text is parsed: an unsigned change is
    // refused for its signatures whatever the text holds.
    let resign = |u: &mut ConfigUpdate| {
        u.signatures.clear();
        for p in [1, 2, 3] {
            update::sign(u, p, &net.admins[p as usize - 1]);
        }
    };
    // The same config, not in canonical form.
    let mut u = good.clone();
    u.config = serde_json::to_string_pretty(&u.next_file().unwrap()).unwrap();
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::BadSignature { party: 1 })
    ));
    resign(&mut u);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::NotCanonical)
    ));
    // Not a config at all.
    let mut u = good.clone();
    u.config = "{\"version\": 1".into();
    resign(&mut u);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::BadConfig {
            source: Error::Parse { .. }
        })
    ));
    // Another chain.
    let mut u = good.clone();
    u.chain = "other".into();
    let e = update::validate(current, &u).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the update is for chain \"other\", the network is chain \"fabrx\""
    );
}

#[test]
fn stale_and_future_updates_change_nothing() {
    let net = net();
    let current = &net.config;
    let first = signed(&net, current, &next_of(current, timeout(50)), &[1, 2, 3]);
    let at_1 = update::validate(current, &first).unwrap();
    let before = at_1.to_json();
    let e = update::validate(&at_1, &first).unwrap_err();
    assert!(
        matches!(
            e,
            UpdateError::StaleSequence {
                update: 0,
                current: 1
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "stale config sequence 0, the network is at 1");
    assert_eq!(at_1.to_json(), before);
    assert_eq!(at_1.sequence(), 1);
    // The update after `at_1`, checked against the genesis config.
    let second = signed(&net, &at_1, &next_of(&at_1, timeout(90)), &[2, 3, 4]);
    assert!(matches!(
        update::validate(current, &second),
        Err(UpdateError::FutureSequence {
            update: 1,
            current: 0
        })
    ));
    assert_eq!(update::validate(&at_1, &second).unwrap().sequence(), 2);
}

#[test]
fn the_next_config_must_be_valid_and_follow_the_current() {
    let net = net();
    let current = &net.config;
    let propose = |next: NetworkFile| update::propose(current, &next).unwrap_err();
    let e = propose(next_of(current, timeout(0)));
    assert!(
        matches!(
            e,
            UpdateError::BadConfig {
                source: Error::OutOfRange {
                    field: "batching.batch_timeout_ms",
                    ..
                }
            }
        ),
        "{e:?}"
    );
    let e = propose(next_of(current, |f| f.sequence = 0));
    assert!(
        matches!(e, UpdateError::NextSequence { next: 0, expected: 1 }),
        "{e:?}"
    );
    let e = propose(next_of(current, |f| f.sequence = 7));
    assert!(matches!(e, UpdateError::NextSequence { next: 7, expected: 1 }));
    let e = propose(next_of(current, |f| f.chain = "other".into()));
    assert!(matches!(e, UpdateError::ChainChanged { .. }), "{e:?}");
    let e = propose(next_of(current, |f| f.shards = 3));
    assert!(
        matches!(e, UpdateError::ShardsChanged { current: 2, next: 3 }),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("adding or removing shards is not supported")
    );
    // `validate` refuses the same bodies even when they carry enough signatures.
    let mut u = signed(&net, current, &next_of(current, timeout(50)), &[1, 2, 3]);
    let mut bad = u.next_file().unwrap();
    bad.shards = 3;
    u.config = update::canonical_json(&bad);
    for p in [1, 2, 3] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::ShardsChanged { .. })
    ));
    // The last sequence there is cannot be followed.
    let last = reloaded(current, |f| f.sequence = u64::MAX);
    let e = update::propose(&last, last.file()).unwrap_err();
    assert!(
        matches!(e, UpdateError::SequenceOverflow { current: u64::MAX }),
        "{e:?}"
    );
}

#[test]
fn a_network_without_admin_keys_cannot_be_updated() {
    let net = net();
    // A file of before admin keys and sequences: neither field in its text.
    let mut file = net.config.file().clone();
    for p in &mut file.parties {
        p.admin_key = None;
    }
    let text = serde_json::to_string_pretty(&file)
        .unwrap()
        .replace("\n  \"sequence\": 0,", "");
    assert!(!text.contains("sequence") && !text.contains("admin_key"));
    let old = NetworkConfig::from_json(&text).unwrap();
    assert_eq!(old.sequence(), 0);
    assert!(matches!(old.admin_key(1), Err(Error::NoAdminKey { party: 1 })));
    let e = update::propose(&old, &next_of(&old, timeout(50))).unwrap_err();
    assert!(
        matches!(
            e,
            UpdateError::NotUpdatable {
                sequence: 0,
                admins: 0,
                needed: 3
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot be updated"), "{e}");
    // An update made elsewhere is refused the same way, whoever signed it.
    let u = signed(&net, &net.config, &next_of(&net.config, timeout(50)), &[1, 2, 3]);
    assert!(matches!(
        update::validate(&old, &u),
        Err(UpdateError::NotUpdatable { .. })
    ));
    // Two of four parties with keys is not enough for a majority either.
    let half = reloaded(&net.config, |f| {
        f.parties[2].admin_key = None;
        f.parties[3].admin_key = None;
    });
    assert!(matches!(
        update::propose(&half, &next_of(&half, timeout(50))),
        Err(UpdateError::NotUpdatable {
            admins: 2,
            needed: 3,
            ..
        })
    ));
}

#[test]
fn the_file_form_round_trips() {
    let net = net();
    let current = &net.config;
    let u = signed(&net, current, &next_of(current, timeout(50)), &[3, 1]);
    assert_eq!(u.signers(), vec![1, 3], "kept in party order");
    let text = u.to_json();
    let back = ConfigUpdate::from_json(&text).unwrap();
    assert_eq!(back, u);
    assert_eq!(back.to_json(), text);
    assert_eq!(back.signed_bytes(), u.signed_bytes());
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["version"], 1);
    assert_eq!(value["sequence"], 0);
    assert_eq!(value["chain"], "fabrx");
    assert_eq!(value["config"].as_str().unwrap(), u.config);
    assert_eq!(
        value["signatures"][0]["signature"].as_str().unwrap(),
        u.signatures[0].signature.to_hex()
    );
    // An unsigned update round-trips too, and its file may leave the list out.
    let bare = update::propose(current, &next_of(current, timeout(50))).unwrap();
    assert_eq!(ConfigUpdate::from_json(&bare.to_json()).unwrap(), bare);
    let mut value =
        serde_json::to_value(serde_json::from_str::<serde_json::Value>(&bare.to_json()).unwrap()).unwrap();
    value.as_object_mut().unwrap().remove("signatures");
    assert_eq!(ConfigUpdate::from_json(&value.to_string()).unwrap(), bare);
    // Refused: another version, an unknown field, a signature that is not hex, not JSON.
    let v2 = text.replacen("\"version\": 1", "\"version\": 2", 1);
    assert!(matches!(
        ConfigUpdate::from_json(&v2),
        Err(UpdateError::UnsupportedVersion {
            version: 2,
            supported: 1
        })
    ));
    let extra = text.replacen("\"version\": 1", "\"version\": 1, \"note\": \"x\"", 1);
    assert!(matches!(
        ConfigUpdate::from_json(&extra),
        Err(UpdateError::Parse { .. })
    ));
    let hex = u.signatures[0].signature.to_hex();
    let not_hex = text.replacen(&hex, "zz", 1);
    assert!(matches!(
        ConfigUpdate::from_json(&not_hex),
        Err(UpdateError::Parse { .. })
    ));
    assert!(matches!(
        ConfigUpdate::from_json("[]"),
        Err(UpdateError::Parse { .. })
    ));
    // The signed bytes: tag ‖ chain ‖ u64le(sequence) ‖ SHA-256(config).
    let mut expected = b"fabrx/config/v1/update".to_vec();
    expected.extend_from_slice(b"fabrx");
    expected.extend_from_slice(&0u64.to_le_bytes());
    expected.extend_from_slice(&u.config_digest());
    assert_eq!(u.signed_bytes(), expected);
}

#[test]
fn merge_joins_the_signatures_of_one_update() {
    let net = net();
    let current = &net.config;
    let next = next_of(current, timeout(50));
    let a = signed(&net, current, &next, &[3]);
    let b = signed(&net, current, &next, &[1, 3, 2]);
    let merged = update::merge(&a, &b).unwrap();
    assert_eq!(merged.signers(), vec![1, 2, 3]);
    assert_eq!(update::merge(&b, &a).unwrap(), merged);
    assert!(update::validate(current, &merged).is_ok());
    let other = signed(&net, current, &next_of(current, timeout(51)), &[2]);
    assert!(matches!(
        update::merge(&a, &other),
        Err(UpdateError::DifferentUpdates { what: "config" })
    ));
    let mut later = a.clone();
    later.sequence = 1;
    assert!(matches!(
        update::merge(&a, &later),
        Err(UpdateError::DifferentUpdates { what: "sequence" })
    ));
    let mut conflicting = a.clone();
    conflicting.signatures = vec![UpdateSignature {
        party: 3,
        signature: crypto::Signature::from_bytes(vec![1; 64]),
    }];
    assert!(matches!(
        update::merge(&a, &conflicting),
        Err(UpdateError::ConflictingSignatures { party: 3 })
    ));
}

#[test]
fn admin_keys_are_generated_per_party_and_checked_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(5),
        ..GenerateSpec::new(3, 1, dir.path())
    })
    .unwrap();
    assert_eq!(g.admin_key_files.len(), 3);
    for (party, path) in &g.admin_key_files {
        assert_eq!(path, &netconfig::admin_key_path(dir.path(), *party));
        assert!(path.ends_with(format!("keys/party-{party}/admin.key")));
        let key = g.config.read_admin_key(*party, path).unwrap();
        assert_eq!(&key.public_key(), g.config.admin_key(*party).unwrap());
        // Seeded: the key of the seed string.
        let derived = crypto::derive_signing_key(
            crypto::Scheme::Ed25519,
            &format!("fabrx-net/5/party-admin/{party}"),
        );
        assert_eq!(key.public_key(), derived.public_key());
    }
    let (_, other) = &g.admin_key_files[1];
    assert!(matches!(
        g.config.read_admin_key(1, other),
        Err(Error::AdminKeyMismatch { party: 1, .. })
    ));
    // The node key files are what they were; the admin keys are listed on their own.
    assert_eq!(g.key_files.len(), 3 * 2);
    assert_eq!(g.config.sequence(), 0);
    assert!(g.config.file().update_policy.is_none());
    assert_eq!(g.config.update_signatures(), 2);
    let text = std::fs::read_to_string(&g.config_path).unwrap();
    assert!(text.contains("\"sequence\": 0"));
    assert_eq!(text.matches("\"admin_key\"").count(), 3);
}

/// Keys and the parameters every role takes at the switch pass; anything else an update
/// could change is refused and named, so that no role runs on a config the others left.
#[test]
fn an_update_may_change_only_what_the_roles_follow() {
    let net = net();
    let current = &net.config;
    let followed = next_of(current, |f| {
        f.parties[0].consenter.public_key = new_key("followed-consenter");
        f.parties[1].batchers[0].public_key = new_key("followed-batcher");
        f.parties[2].admin_key = Some(new_key("followed-admin"));
        f.batching.batch_timeout_ms += 1;
        f.batching.max_batch_requests += 1;
        f.batching.complain_timeout_ms += 1;
        f.consensus.view_change_timeout_ms += 1;
        f.consensus.max_pending += 1;
        f.consensus.max_seqs_ahead += 1;
        f.update_policy = Some(UpdatePolicyFile { signatures: 4 });
    });
    let u = signed(&net, current, &followed, &[1, 2, 3]);
    update::validate(current, &u).unwrap();

    type Edit = Box<dyn Fn(&mut NetworkFile)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "party 1 router: ",
            Box::new(|f| f.parties[0].router = "10.0.0.9:7050".into()),
        ),
        (
            "party 2 consenter endpoint: ",
            Box::new(|f| f.parties[1].consenter.endpoint = "10.0.0.9:7051".into()),
        ),
        (
            "party 3 batcher of shard 1 endpoint: ",
            Box::new(|f| f.parties[2].batchers[1].endpoint = "10.0.0.9:7052".into()),
        ),
        ("batching.window: ", Box::new(|f| f.batching.window += 1)),
        (
            "batching.mempool_max_requests: ",
            Box::new(|f| f.batching.mempool_max_requests += 1),
        ),
        ("consensus.tick_ms: ", Box::new(|f| f.consensus.tick_ms += 1)),
        (
            "router.answer_timeout_ms: ",
            Box::new(|f| f.router.answer_timeout_ms += 1),
        ),
        (
            "tls certificate ",
            Box::new(|f| {
                let certs = &mut f.tls.as_mut().unwrap().certificates;
                let client = certs.iter().position(|c| c.role == "client").unwrap();
                certs[client].role = "batcher".into();
                certs[client].party = 2;
                certs[client].shard = Some(0);
            }),
        ),
    ];
    for (what, edit) in cases {
        let next = next_of(current, |f| edit(f));
        let u = signed_unchecked(&net, current, &next, &[1, 2, 3]);
        match update::validate(current, &u) {
            Err(UpdateError::NotFollowed { changes }) => {
                assert!(changes.iter().any(|c| c.starts_with(what)), "{what}: {changes:?}");
                assert!(changes.iter().all(|c| !c.starts_with("sequence")), "{changes:?}");
            }
            other => panic!("{what}: {other:?}"),
        }
        let e = update::validate_unsigned(current, &u).unwrap_err();
        assert!(e.to_string().contains("do not follow"), "{e}");
    }
}

/// An update after which no update could pass (fewer admin keys than the next policy
/// needs) is refused: it would be the network's last config.
#[test]
fn an_update_that_leaves_the_network_not_updatable_is_refused() {
    let net = net();
    let current = &net.config;
    let next = next_of(current, |f| {
        f.parties[2].admin_key = None;
        f.parties[3].admin_key = None;
    });
    let u = signed_unchecked(&net, current, &next, &[1, 2, 3]);
    let e = update::validate(current, &u).unwrap_err();
    assert!(
        matches!(e, UpdateError::NextNotUpdatable { admins: 2, needed: 3 }),
        "{e:?}"
    );
    let next = next_of(current, |f| {
        f.update_policy = Some(UpdatePolicyFile { signatures: 4 });
        f.parties[3].admin_key = None;
    });
    let u = signed_unchecked(&net, current, &next, &[1, 2, 3]);
    let e = update::validate(current, &u).unwrap_err();
    assert!(
        matches!(e, UpdateError::NextNotUpdatable { admins: 3, needed: 4 }),
        "{e:?}"
    );
    // Keeping K admin keys passes.
    let next = next_of(current, |f| f.parties[3].admin_key = None);
    let u = signed(&net, current, &next, &[1, 2, 3]);
    assert!(update::validate(current, &u).is_ok());
}

/// Two certificates under one name would hide one of them from `show`: refused.
#[test]
fn a_certificate_name_listed_twice_is_refused() {
    let net = net();
    let mut file = net.config.file().clone();
    let certs = &mut file.tls.as_mut().unwrap().certificates;
    let mut twin = certs[0].clone();
    twin.sha256 = "cd".repeat(32);
    certs.push(twin);
    let e = NetworkConfig::from_file(file).unwrap_err();
    assert!(e.to_string().contains("listed twice"), "{e}");
}

/// The consenters' chain id binds the genesis config's digest: nodes started from two
/// genesis files that differ in anything (here a router limit, which no role checks
/// against the others) sign under different chain ids and form no quorum together,
/// instead of judging a later config update against different configs.
#[test]
fn the_chain_id_binds_the_whole_genesis_config() {
    let net = net();
    let same = reloaded(&net.config, |_| {});
    assert_eq!(
        same.cluster_keys().chain_id(),
        net.config.cluster_keys().chain_id()
    );
    let other = reloaded(&net.config, |f| f.router.answer_timeout_ms += 1);
    assert_eq!(other.consenter_keys(), net.config.consenter_keys());
    assert_ne!(
        other.cluster_keys().chain_id(),
        net.config.cluster_keys().chain_id()
    );
    assert!(
        net.config
            .bound_chain()
            .starts_with(&format!("{}#", net.config.chain()))
    );
}

/// At most f consenter keys rotate in one update (f = 1 of 4): two at once are refused,
/// naming them; one passes.
#[test]
fn at_most_f_consenter_keys_rotate_in_one_update() {
    let net = net();
    let current = &net.config;
    let two = next_of(current, |f| {
        f.parties[0].consenter.public_key = new_key("two-1");
        f.parties[2].consenter.public_key = new_key("two-3");
    });
    let u = signed_unchecked(&net, current, &two, &[1, 2, 3]);
    let e = update::validate(current, &u).unwrap_err();
    assert!(
        matches!(&e, UpdateError::TooManyConsenterKeys { parties, f: 1 } if *parties == vec![1, 3]),
        "{e:?}"
    );
    let one = next_of(current, |f| f.parties[2].consenter.public_key = new_key("one-3"));
    assert!(update::validate(current, &signed(&net, current, &one, &[1, 2, 3])).is_ok());
}

/// Every node key an update brings in is proven held by a signature of that key (a typo,
/// or a key nobody holds, would make its node faulty from the switch on): none, a proof by
/// another key, one made for another chain, and one of a key the update does not bring in
/// are each refused with their reason; the proof of the holder passes.
#[test]
fn every_new_node_key_is_proven_held() {
    let net = net();
    let current = &net.config;
    let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "proof-batcher-2-1");
    let next = next_of(current, |f| {
        f.parties[1].batchers[1].public_key = key.public_key().to_string();
    });
    let mut u = update::propose(current, &next).unwrap();
    for p in [1, 2, 3] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    let e = update::validate(current, &u).unwrap_err();
    assert!(
        matches!(&e, UpdateError::KeyNotProven { holder, .. } if holder == "party 2 batcher of shard 1"),
        "{e}"
    );
    assert!(e.to_string().contains("fabrx network update prove"), "{e}");

    // A proof by another key, under the new key's name.
    let other = crypto::derive_signing_key(crypto::Scheme::Ed25519, "proof-other");
    let mut forged = u.clone();
    update::prove(&mut forged, &other);
    forged.proofs[0].key = key.public_key();
    let e = update::validate(current, &forged).unwrap_err();
    assert!(matches!(e, UpdateError::BadKeyProof { .. }), "{e}");

    // A proof made for another chain.
    let mut elsewhere = u.clone();
    elsewhere.chain = "another".into();
    update::prove(&mut elsewhere, &key);
    let mut replayed = u.clone();
    replayed.proofs = elsewhere.proofs.clone();
    let e = update::validate(current, &replayed).unwrap_err();
    assert!(matches!(e, UpdateError::BadKeyProof { .. }), "{e}");

    // A proof of a key the update does not bring in (refused before any is verified).
    let mut stuffed = u.clone();
    update::prove(&mut stuffed, &key);
    update::prove(&mut stuffed, &other);
    let e = update::validate(current, &stuffed).unwrap_err();
    assert!(matches!(e, UpdateError::KeyProofNotNeeded { .. }), "{e}");

    // The holder's proof: valid, and the proof survives the file form and a merge.
    update::prove(&mut u, &key);
    assert_eq!(update::validate(current, &u).unwrap().sequence(), 1);
    let read = ConfigUpdate::from_json(&u.to_json()).unwrap();
    assert_eq!(read, u);
    let mut unproven = u.clone();
    unproven.proofs.clear();
    let merged = update::merge(&unproven, &u).unwrap();
    assert_eq!(update::validate(current, &merged).unwrap().sequence(), 1);
}

/// A key never changes holder (two batchers swapping keys: each node would sign as the
/// other), `retired_keys` lists exactly what was retired, and a retired key stays retired.
#[test]
fn keys_never_change_holder_and_retired_keys_stay_retired() {
    let net = net();
    let current = &net.config;
    let swap = next_of(current, |f| {
        let a = f.parties[0].batchers[0].public_key.clone();
        let b = f.parties[2].batchers[0].public_key.clone();
        f.parties[0].batchers[0].public_key = b;
        f.parties[2].batchers[0].public_key = a;
    });
    let e = update::validate(current, &signed_unchecked(&net, current, &swap, &[1, 2, 3])).unwrap_err();
    assert!(matches!(e, UpdateError::KeyMoved { .. }), "{e:?}");
    assert!(update::propose(current, &swap).is_err());
    // A rotation through `propose` retires the old key.
    let old = current.file().parties[1].batchers[1].public_key.clone();
    let fresh = new_key("fresh-2-1");
    let rotate = next_of(current, |f| f.parties[1].batchers[1].public_key = fresh.clone());
    let u = signed(&net, current, &rotate, &[1, 2, 3]);
    let after = update::validate(current, &u).unwrap();
    assert_eq!(after.file().retired_keys, vec![old.clone()]);
    // Listing a key that is not retired, or leaving a retired one off, is refused.
    let mut listed = rotate.clone();
    let stranger = new_key("never-named");
    listed.retired_keys = vec![old.clone(), stranger];
    let e = update::validate(current, &signed_unchecked(&net, current, &listed, &[1, 2, 3])).unwrap_err();
    assert!(
        matches!(&e, UpdateError::RetiredKeys { extra, .. } if extra.len() == 1),
        "{e:?}"
    );
    listed.retired_keys = vec![];
    let e = update::validate(current, &signed_unchecked(&net, current, &listed, &[1, 2, 3])).unwrap_err();
    assert!(
        matches!(&e, UpdateError::RetiredKeys { missing, .. } if *missing == vec![old.clone()]),
        "{e:?}"
    );
    // An active key listed as retired makes the config itself invalid.
    listed.retired_keys = vec![
        old.clone(),
        current.file().parties[3].consenter.public_key.clone(),
    ];
    let e = update::validate(current, &signed_unchecked(&net, current, &listed, &[1, 2, 3])).unwrap_err();
    assert!(e.to_string().contains("retired"), "{e}");
    // The next update keeps it retired (propose carries the list on), and naming it again
    // for anyone is refused.
    let next = next_of(&after, |f| f.batching.batch_timeout_ms += 1);
    let u2 = signed(&net, &after, &next, &[1, 2, 3]);
    assert_eq!(
        update::validate(&after, &u2).unwrap().file().retired_keys,
        vec![old.clone()]
    );
    let reuse = next_of(&after, |f| f.parties[0].batchers[1].public_key = old.clone());
    let e = update::propose(&after, &reuse).unwrap_err();
    assert!(e.to_string().contains("retired"), "{e}");
}
