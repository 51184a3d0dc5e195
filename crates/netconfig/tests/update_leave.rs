//! A party leaving through a config update (docs/reconfiguration.md "Removing a party"):
//! the next config `netconfig::update::without_party` writes is a valid update, its result
//! reads with a gap in the party ids, the id that left is never given again, and every
//! rule of a removal refuses what breaks it with its own error.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod support;

use crypto::SigningKey;
use netconfig::file::NetworkFile;
use netconfig::generate::party::{PartySpec, add_party};
use netconfig::update::{self, ConfigUpdate, UpdateError};
use netconfig::{Error, GenerateSpec, NetworkConfig, generate};
use types::PartyId;

struct Net {
    dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
}

fn net(parties: u32) -> Net {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(13),
        tls: true,
        ..GenerateSpec::new(parties, 2, dir.path())
    })
    .unwrap();
    let admins = g
        .admin_key_files
        .iter()
        .map(|(p, path)| g.config.read_admin_key(*p, path).unwrap())
        .collect();
    Net {
        dir,
        config: g.config,
        admins,
    }
}

/// `next` as an update of `current`, signed by the admins of `by`, without `propose`'s
/// checks.
fn verdict(
    net: &Net,
    current: &NetworkConfig,
    next: &NetworkFile,
    by: &[PartyId],
) -> Result<NetworkConfig, UpdateError> {
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
    support::prove_with(
        &mut u,
        current,
        &support::keys_under(&net.dir.path().join("keys")),
    );
    update::validate(current, &u)
}

#[test]
fn a_party_leaves_with_its_ordering_nodes_and_its_id_is_never_given_again() {
    let net = net(5);
    let current = &net.config;
    let next = update::without_party(current, 2).unwrap();
    assert_eq!(next.sequence, 1);
    assert_eq!(next.left_parties, vec![2]);
    assert!(next.parties.iter().all(|p| p.id != 2));
    let ordering_certs_of = |f: &NetworkFile, party: PartyId| {
        f.tls
            .as_ref()
            .unwrap()
            .certificates
            .iter()
            .filter(|c| {
                c.party == party && ["router", "batcher", "consenter", "assembler"].contains(&c.role.as_str())
            })
            .count()
    };
    assert_eq!(
        ordering_certs_of(&next, 2),
        5,
        "its ordering nodes keep their certificates until a later update, to read their removal"
    );
    // Its keys are retired: the consenter's, the batchers' and the admin's.
    let was = current.party(2).unwrap();
    for k in [&was.consenter_key]
        .into_iter()
        .chain(was.batchers.iter().map(|b| &b.public_key))
        .chain(was.admin_key.as_ref())
    {
        assert!(next.retired_keys.contains(&k.to_string()), "{k} retired");
    }
    // A majority of the five signs it (party 2's admin may be one of them).
    let after = verdict(&net, current, &next, &[1, 2, 3]).unwrap();
    assert_eq!(after.party_list(), vec![1, 3, 4, 5]);
    assert_eq!(after.party_ids().ids(), &[1, 3, 4, 5]);
    assert_eq!(after.party_ids().replicas().ids(), &[0, 2, 3, 4]);
    assert_eq!(
        after.consenters_by_replica().keys().copied().collect::<Vec<_>>(),
        [0, 2, 3, 4]
    );
    assert!(matches!(
        after.party(2),
        Err(Error::UnknownParty { party: 2, .. })
    ));
    assert_eq!(after.party(3).unwrap().id, 3);
    assert_eq!(after.left_parties(), &[2]);
    assert_eq!(after.next_party_id(), 6);
    assert_eq!(after.update_signatures(), 3);
    // The role configs of the parties that stay read the gap.
    let batcher = after.batcher_config(3, 1).unwrap();
    assert_eq!(batcher.parties.ids(), &[1, 3, 4, 5]);
    assert_eq!(
        batcher.primary_of(0),
        3,
        "shard 1, term 0: the second party in force"
    );
    // The party that left signs no later update.
    let later = {
        let mut f = after.file().clone();
        f.sequence = 2;
        f.batching.batch_timeout_ms += 1;
        f
    };
    assert!(matches!(
        verdict(&net, &after, &later, &[1, 2, 3]),
        Err(UpdateError::UnknownSigner { party: 2, .. })
    ));
    assert_eq!(verdict(&net, &after, &later, &[1, 3, 4]).unwrap().sequence(), 2);
    // `tls add` issues no certificate for the party that left; `tls retire` drops its
    // five with the old ones of the others.
    let (added, issued) = netconfig::tls::rotate::add_next(net.dir.path(), after.file(), &[]).unwrap();
    assert_eq!(issued.len(), 20, "{issued:?}");
    assert!(issued.iter().all(|n| !n.contains("-2")), "{issued:?}");
    let added = verdict(&net, &after, &added, &[1, 3, 4]).unwrap();
    let (retired, names) = netconfig::tls::rotate::retire_old(added.file(), &[]).unwrap();
    assert_eq!(names.len(), 25, "{names:?}");
    assert_eq!(ordering_certs_of(&retired, 2), 0);
    let retired = verdict(&net, &added, &retired, &[1, 3, 4]).unwrap();
    assert_eq!(retired.sequence(), 3);
    // A party joining after takes id 6, not 2.
    let spec = PartySpec {
        dir: net.dir.path().to_path_buf(),
        host: None,
        k8s: None,
        seed: Some(13),
        ports_in_use: Vec::new(),
    };
    // Not built yet: `party add` (which proposes the join) is refused until the
    // consenters link replicas by id.
    assert!(matches!(
        add_party(&after, &spec),
        Err(netconfig::generate::party::PartyAddError::Invalid(
            UpdateError::JoinAfterLeave { party: 6, left: 2 }
        ))
    ));
}

#[test]
fn a_removal_breaking_a_rule_is_refused() {
    let net = net(5);
    let current = &net.config;
    let good = update::without_party(current, 2).unwrap();
    // Two parties at once.
    let mut two = good.clone();
    two.parties.retain(|p| p.id != 3);
    two.left_parties = vec![2, 3];
    assert!(matches!(
        verdict(&net, current, &two, &[1, 4, 5]),
        Err(UpdateError::LeaveSeveralParties { parties }) if parties == vec![2, 3]
    ));
    // left_parties not naming it, or naming another id.
    for listed in [vec![], vec![3], vec![2, 7]] {
        let mut next = good.clone();
        next.left_parties.clone_from(&listed);
        assert!(
            matches!(
                verdict(&net, current, &next, &[1, 3, 4]),
                Err(UpdateError::LeftParties { .. }) | Err(UpdateError::BadConfig { .. })
            ),
            "{listed:?}"
        );
    }
    // left_parties changed without a party leaving.
    let mut renamed = current.file().clone();
    renamed.sequence = 1;
    renamed.left_parties = vec![9];
    assert!(matches!(
        verdict(&net, current, &renamed, &[1, 2, 3]),
        Err(UpdateError::LeftParties { .. })
    ));
    // A party leaving in the update that adds another.
    let mut swap = good.clone();
    let mut six = current.file().parties[4].clone();
    six.id = 6;
    swap.parties.push(six);
    assert!(matches!(
        verdict(&net, current, &swap, &[1, 3, 4]),
        Err(UpdateError::LeaveWithJoin {
            leaving: 2,
            joining: 6
        })
    ));
    // A later update may not give a node of the party that left a new certificate.
    let after = verdict(&net, current, &good, &[1, 3, 4]).unwrap();
    let (mut renewed, _) =
        netconfig::tls::rotate::add_next(net.dir.path(), after.file(), &["router-3".into()]).unwrap();
    for c in &mut renewed.tls.as_mut().unwrap().certificates {
        if c.name.starts_with("router-3") && c.party == 3 && c.pem.is_some() {
            c.party = 2;
        }
    }
    assert!(
        matches!(
            verdict(&net, &after, &renewed, &[1, 3, 4]),
            Err(UpdateError::LeftPartyCertificate { party: 2, .. })
        ),
        "a new certificate for router 2"
    );
    // The removal itself may not drop the leaving party's certificates: its nodes could
    // not read their removal.
    let mut dropped = good.clone();
    dropped
        .tls
        .as_mut()
        .unwrap()
        .certificates
        .retain(|c| !(c.party == 2 && c.role == "router"));
    assert!(matches!(
        verdict(&net, current, &dropped, &[1, 3, 4]),
        Err(UpdateError::TlsNoCertificate { holder }) if holder == "router of party 2"
            || holder.contains("router")
    ));
    // Not enough signatures: two of five.
    assert!(matches!(
        verdict(&net, current, &good, &[1, 3]),
        Err(UpdateError::NotEnoughSignatures {
            signatures: 2,
            needed: 3
        })
    ));
    // Removing a party and rotating a consenter key at once: over the four that stay,
    // f = 1, so one rotation passes with the removal and two do not.
    let rotate = |next: &mut NetworkFile, party: PartyId, name: &str| {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, name);
        let p = next.parties.iter_mut().find(|p| p.id == party).unwrap();
        p.consenter.public_key = key.public_key().to_string();
        key
    };
    let mut one = good.clone();
    let k3 = rotate(&mut one, 3, "leave-rotate-3");
    let mut u = update::propose(current, &one).unwrap();
    for p in [1, 3, 4] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    support::prove_with(&mut u, current, std::slice::from_ref(&k3));
    update::validate(current, &u).unwrap();
    let mut both = one.clone();
    let k4 = rotate(&mut both, 4, "leave-rotate-4");
    let mut u = update::propose(current, &both).unwrap_or_else(|_| ConfigUpdate {
        chain: current.chain().to_string(),
        sequence: 0,
        config: update::canonical_json(&both),
        signatures: Vec::new(),
        proofs: Vec::new(),
    });
    for p in [1, 3, 4] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    support::prove_with(&mut u, current, &[k3, k4]);
    assert!(matches!(
        update::validate(current, &u),
        Err(UpdateError::TooManyConsenterKeys { .. }) | Err(UpdateError::RetiredKeys { .. })
    ));
    // An unknown party, and the only party.
    assert!(matches!(
        update::without_party(current, 9),
        Err(UpdateError::UnknownLeaver { party: 9, .. })
    ));
    let alone = net_of_one();
    assert!(matches!(
        update::without_party(&alone, 1),
        Err(UpdateError::LeaveLastParty { party: 1 })
    ));
}

fn net_of_one() -> NetworkConfig {
    let dir = tempfile::tempdir().unwrap();
    generate(&GenerateSpec {
        seed: Some(14),
        ..GenerateSpec::new(1, 1, dir.path())
    })
    .unwrap()
    .config
}

#[test]
fn a_config_with_a_gap_reads_only_with_the_gap_listed() {
    let net = net(4);
    let mut file = update::without_party(&net.config, 3).unwrap();
    NetworkConfig::from_file(file.clone()).unwrap();
    // The gap must be listed as a party that left.
    file.left_parties.clear();
    assert!(matches!(
        NetworkConfig::from_file(file.clone()),
        Err(Error::PartyIds { .. })
    ));
    // An id that left is never a party again.
    file.left_parties = vec![3];
    let mut back = file.clone();
    let mut three = net.config.file().parties[2].clone();
    three.id = 3;
    back.parties.insert(2, three);
    assert!(matches!(
        NetworkConfig::from_file(back),
        Err(Error::PartyLeft { id: 3 })
    ));
    // A genesis config (sequence 0) has no gap.
    let mut genesis = file.clone();
    genesis.sequence = 0;
    assert!(matches!(
        NetworkConfig::from_file(genesis),
        Err(Error::PartyIds { .. })
    ));
    // left_parties increasing, without 0.
    let mut zero = file.clone();
    zero.left_parties = vec![0, 3];
    assert!(matches!(
        NetworkConfig::from_file(zero),
        Err(Error::PartyIds { .. })
    ));
}
