#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Config updates ordered by the consenters (ADR 0018): four consenter replicas — the
//! BFT engine with the Arma application under the network's own update rules
//! (`netconfig::update::NetworkRules`) and the generated consenter keys — on a lossless
//! in-test network.
//!
//! Checked: a signed update is ordered and every replica puts its config in force at the
//! same decision, whose certificate says so; every shard moves to its next term there;
//! a rotated consenter key signs from the next decision on and the old one no longer
//! counts; an update without enough admin signatures, a stale one, or one of another
//! chain is refused when submitted and changes nothing; a replica restarted from its WAL
//! and a fresh application comes back in the new set; a replica that installs a
//! snapshot taken after the switch adopts the config in it.

mod support;

use std::collections::VecDeque;
use std::sync::Arc;

use bft::{
    ChainId, Decision, Input, MemWal, Message, Output, Refusal, Replica, ReplicaId, Wal, verify_decision,
};
use consenter::application::{ArmaApp, ArmaState, Metadata, Reconfig, encode_config_update};
use consenter::keys::{ClusterKeys, EngineSigner, EngineVerifier};
use crypto::{Scheme, SigningKey};
use netconfig::file::NetworkFile;
use netconfig::update::{self, ConfigUpdate, NetworkRules, config_bytes};
use netconfig::{GenerateSpec, NetworkConfig, Node, generate};
use types::PartyId;

const PARTIES: u32 = 4;

/// A generated network, its admin keys and its consenters' keys (index p − 1).
struct Net {
    _dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
    consenters: Vec<SigningKey>,
    /// Party 1's batcher key of shard 0.
    batcher_1_0: SigningKey,
}

fn net() -> Net {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(11),
        ..GenerateSpec::new(PARTIES, 2, dir.path())
    })
    .unwrap();
    let admins = g
        .admin_key_files
        .iter()
        .map(|(p, path)| g.config.read_admin_key(*p, path).unwrap())
        .collect();
    let consenters = (1..=PARTIES)
        .map(|p| {
            let (_, path) = g
                .key_files
                .iter()
                .find(|(n, _)| *n == Node::Consenter(p))
                .unwrap();
            g.config.read_node_key(Node::Consenter(p), path).unwrap()
        })
        .collect();
    let batcher = Node::Batcher { party: 1, shard: 0 };
    let (_, path) = g.key_files.iter().find(|(n, _)| *n == batcher).unwrap();
    let batcher_1_0 = g.config.read_node_key(batcher, path).unwrap();
    Net {
        _dir: dir,
        config: g.config,
        admins,
        consenters,
        batcher_1_0,
    }
}

/// `current`'s file with the next sequence and `edit` applied, proposed and signed by `by`.
fn update_of(
    net: &Net,
    current: &NetworkConfig,
    by: &[PartyId],
    edit: impl FnOnce(&mut NetworkFile),
) -> ConfigUpdate {
    let mut file = current.file().clone();
    file.sequence = current.sequence() + 1;
    edit(&mut file);
    let mut u = update::propose(current, &file).unwrap();
    for &p in by {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    // The node keys these tests rotate to, proven by their holders.
    support::prove_with(&mut u, current, &[rotated_key(), rotated_batcher_key()]);
    u
}

/// Party 1's new shard-0 batcher key.
fn rotated_batcher_key() -> SigningKey {
    crypto::derive_signing_key(Scheme::Ed25519, "ordered-update-batcher-1-0")
}

/// Party 1's new consenter key.
fn rotated_key() -> SigningKey {
    crypto::derive_signing_key(Scheme::Ed25519, "ordered-update-rotated-1")
}

/// Four replicas; replica 0 (party 1) holds its rotated key as well.
struct Cluster {
    net: Net,
    genesis: Arc<Vec<u8>>,
    chain: ChainId,
    nodes: Vec<Replica<ArmaApp>>,
    wals: Vec<MemWal>,
    delivered: Vec<Vec<Arc<Decision>>>,
    refused: Vec<Vec<Refusal>>,
    queue: VecDeque<(ReplicaId, ReplicaId, Message)>,
    now: u64,
    /// A replica cut off: it neither sends nor receives.
    cut: Option<usize>,
}

impl Cluster {
    fn new() -> Cluster {
        let net = net();
        let genesis = Arc::new(config_bytes(&net.config));
        let chain = net.config.cluster_keys().chain_id();
        let mut c = Cluster {
            genesis,
            chain,
            nodes: Vec::new(),
            wals: vec![MemWal::default(); PARTIES as usize],
            delivered: vec![Vec::new(); PARTIES as usize],
            refused: vec![Vec::new(); PARTIES as usize],
            queue: VecDeque::new(),
            now: 0,
            cut: None,
            net,
        };
        for i in 0..PARTIES as usize {
            let (r, _) = c.build(i, &[]);
            c.nodes.push(r);
        }
        c
    }

    fn engine(&self, i: usize) -> bft::Config {
        let mut e = self.net.config.consenter_engine(i as PartyId + 1).unwrap();
        e.batch_interval_ms = 5;
        e.request_timeout_ms = 2_000;
        e.heartbeat_interval_ms = 100;
        e.heartbeat_timeout_ms = 1_000;
        e.view_change_timeout_ms = 1_000;
        e
    }

    fn app(&self, i: usize, state: ArmaState) -> ArmaApp {
        let mut keys = vec![self.net.consenters[i].clone()];
        if i == 0 {
            keys.push(rotated_key());
        }
        let reconfig = Reconfig {
            rules: Arc::new(NetworkRules::new()),
            genesis: Arc::clone(&self.genesis),
            chain: self.chain,
            keys,
            party: u32::try_from(i + 1).unwrap(),
        };
        ArmaApp::reconfigurable(self.net.config.arma_config().unwrap(), state, reconfig).unwrap()
    }

    /// Replica `i` from the genesis keys, restored from `wal`.
    fn build(&self, i: usize, wal: &[bft::WalEntry]) -> (Replica<ArmaApp>, Vec<Output>) {
        let shards = self.net.config.shards().get();
        Replica::restore(
            self.engine(i),
            self.app(i, ArmaState::genesis(shards)),
            Box::new(EngineSigner::new(self.net.consenters[i].clone())),
            Arc::new(EngineVerifier::new(self.net.config.cluster_keys())),
            wal,
        )
        .expect("restore")
    }

    fn execute(&mut self, i: usize, outputs: Vec<Output>) {
        let n = self.nodes[i].config().n();
        for o in outputs {
            match o {
                Output::Persist(e) => self.wals[i].append(&[e]).unwrap(),
                Output::Send { to, msg } => self.queue.push_back((i as u32, to, msg)),
                Output::Broadcast(msg) => {
                    for to in (0..n).filter(|t| *t != i as u32) {
                        self.queue.push_back((i as u32, to, msg.clone()));
                    }
                }
                Output::Deliver(d) => self.delivered[i].push(d),
                Output::Refused { reason, .. } => self.refused[i].push(reason),
                Output::Installed { .. } | Output::ViewInstalled { .. } => {}
            }
        }
    }

    fn input(&mut self, i: usize, input: Input) {
        let out = self.nodes[i].handle(input);
        self.execute(i, out);
    }

    fn submit(&mut self, u: &ConfigUpdate) {
        let request = encode_config_update(u.to_json().as_bytes());
        for i in 0..self.nodes.len() {
            self.input(i, Input::Request(request.clone()));
        }
    }

    /// Runs `ms` of virtual time: every message delivered, then the clock ticks.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            let mut budget = 100_000;
            while let Some((from, to, msg)) = self.queue.pop_front() {
                budget -= 1;
                assert!(budget > 0, "message storm");
                if self.cut.is_some_and(|x| x == to as usize || x == from as usize) {
                    continue;
                }
                self.input(to as usize, Input::Message { from, msg });
            }
            self.now += 5;
            for i in 0..self.nodes.len() {
                self.input(i, Input::Tick(self.now));
            }
        }
    }

    /// With `first` (of the config `current`) in force, a second update signed by `by` is
    /// ordered: every replica switches twice, to epoch 2, and none diverged.
    fn orders_a_second_update(&mut self, current: &NetworkConfig, first: &ConfigUpdate, by: &[PartyId]) {
        let next = update::validate(current, first).unwrap();
        let second = update_of(&self.net, &next, by, |f| f.batching.batch_timeout_ms = 46);
        self.submit(&second);
        self.run(500);
        for i in 0..PARTIES as usize {
            assert_eq!(self.switches(i).len(), 2, "replica {i}: {:?}", self.switches(i));
            assert_eq!(self.nodes[i].app().state().epoch, 2);
            assert_eq!(self.nodes[i].app().diverged, 0);
        }
    }

    /// The decisions of replica `i` that put a config in force, with that config's epoch.
    fn switches(&self, i: usize) -> Vec<(u64, u64)> {
        self.delivered[i]
            .iter()
            .filter_map(|d| {
                let m = Metadata::decode(&d.proposal.metadata).unwrap();
                m.config.map(|c| (d.seq(), c.epoch))
            })
            .collect()
    }
}

/// The verifier of the consenter keys `keys` (replica order).
fn verifier(keys: Vec<crypto::PublicKey>) -> EngineVerifier {
    EngineVerifier::new(ClusterKeys::new(keys))
}

#[test]
fn a_signed_update_is_ordered_and_every_replica_switches_at_its_decision() {
    let mut c = Cluster::new();
    let genesis_keys = c.net.config.consenter_keys();
    let rotated = rotated_key().public_key();
    let current = c.net.config.clone();
    let first = update_of(&c.net, &current, &[1, 2, 3], |f| {
        f.batching.batch_timeout_ms = 77;
        f.parties[0].consenter.public_key = rotated.to_string();
        // The engine's limits and timing follow the switch too.
        f.consensus.batch_interval_ms = 9;
        f.consensus.batch_max = 500;
        f.consensus.request_timeout_ms = 2_500;
    });
    c.submit(&first);
    c.run(500);

    let next = update::validate(&current, &first).unwrap();
    let at = c.switches(0);
    assert_eq!(at.len(), 1, "one switch: {at:?}");
    let (seq, epoch) = at[0];
    assert_eq!(epoch, 1);
    for i in 0..PARTIES as usize {
        assert_eq!(c.switches(i), at, "replica {i} switched elsewhere");
        let app = c.nodes[i].app();
        assert_eq!(app.state().epoch, 1);
        assert_eq!(app.config_in_force(), config_bytes(&next).as_slice());
        assert!(
            app.state().shards.iter().all(|s| s.term == 1),
            "every shard's next term"
        );
        assert_eq!(
            c.nodes[i].config().chain,
            bft::set_chain(c.chain, 1),
            "replica {i}"
        );
        assert_eq!(c.nodes[i].config().params(), next.engine_params(), "replica {i}");
        assert_eq!(c.nodes[i].config().batch_interval_ms, 9);
        assert_eq!(c.nodes[i].config().max_batch_count, 500);
        assert_eq!(app.diverged, 0);
    }

    // The next update, signed under the config now in force, is certified by the new set
    // with replica 3 cut off, so the quorum needs replica 0's vote under its rotated key.
    c.cut = Some(3);
    let second = update_of(&c.net, &next, &[2, 3, 4], |f| f.batching.batch_timeout_ms = 88);
    c.submit(&second);
    c.run(500);
    let at = c.switches(0);
    assert_eq!(at.len(), 2, "{at:?}");
    let d = c.delivered[0].iter().find(|d| d.seq() == at[1].0).unwrap();
    let mut new_keys = genesis_keys.clone();
    new_keys[0] = rotated;
    verify_decision(
        d,
        &bft::set_chain(c.chain, 1),
        &verifier(new_keys),
        &bft::Members::contiguous(PARTIES),
    )
    .expect("certified by the set of epoch 1");
    assert!(d.certificate.signatures.iter().any(|(r, _)| *r == 0));
    assert!(
        verify_decision(
            d,
            &bft::set_chain(c.chain, 1),
            &verifier(genesis_keys.clone()),
            &bft::Members::contiguous(PARTIES)
        )
        .is_err(),
        "replica 0's vote verifies only under its rotated key"
    );
    assert!(d.seq() > seq);
    c.cut = None;
    c.run(2_000);
    for i in 0..PARTIES as usize {
        assert_eq!(c.switches(i), at, "replica {i}");
        assert_eq!(c.nodes[i].app().state().epoch, 2);
    }

    readers_follow_the_switches(&mut c);

    // A replica restarted from its WAL with a fresh application replays both switches.
    let wal = c.wals[2].entries.clone();
    let (r, _) = c.build(2, &wal);
    assert_eq!(r.app().state().epoch, 2);
    assert_eq!(r.app().config_in_force(), c.nodes[0].app().config_in_force());
    assert_eq!(r.config().chain, bft::set_chain(c.chain, 2));
    assert_eq!(
        r.config().batch_interval_ms,
        9,
        "the engine's parameters replayed too"
    );
}

#[test]
fn refused_updates_change_nothing() {
    let mut c = Cluster::new();
    let current = c.net.config.clone();
    // Two admin signatures where the policy needs three (a majority of four).
    let short = update_of(&c.net, &current, &[1, 2], |f| f.batching.batch_timeout_ms = 66);
    let app = c.nodes[0].app().clone();
    let err = app
        .check_update(short.to_json().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("signature"), "{err}");
    c.submit(&short);
    // An update for a config sequence not yet in force.
    let mut future = update_of(&c.net, &current, &[1, 2, 3], |f| f.batching.batch_timeout_ms = 55);
    future.sequence = current.sequence() + 3;
    assert!(app.check_update(future.to_json().as_bytes()).is_err());
    c.submit(&future);
    // One for another chain.
    let mut other = update_of(&c.net, &current, &[1, 2, 3], |f| f.batching.batch_timeout_ms = 54);
    other.chain = "another-chain".into();
    assert!(app.check_update(other.to_json().as_bytes()).is_err());
    c.submit(&other);
    // Bytes that are no update at all.
    let junk = encode_config_update(b"{\"not\": \"an update\"}");
    for i in 0..PARTIES as usize {
        c.input(i, Input::Request(junk.clone()));
    }
    // A proposal holding any of them is refused too (a faulty leader's junk).
    let mut probe = c.nodes[1].app().clone();
    for request in [
        junk.clone(),
        encode_config_update(short.to_json().as_bytes()),
        encode_config_update(future.to_json().as_bytes()),
        encode_config_update(other.to_json().as_bytes()),
    ] {
        assert!(!bft::Application::verify_request(&mut probe, &request));
    }
    // The pool admits only an update valid against the config in force (the node's
    // Submit handler answers a client with the reason): each replica refuses the four,
    // nothing is ordered, nothing changes.
    c.run(300);
    for i in 0..PARTIES as usize {
        assert_eq!(c.refused[i], vec![Refusal::Invalid; 4], "replica {i}");
        assert_eq!(c.nodes[i].last_decided(), 0, "replica {i}");
        assert!(c.switches(i).is_empty());
        assert_eq!(c.nodes[i].app().state().epoch, 0);
        assert_eq!(c.nodes[i].app().config_in_force(), c.genesis.as_slice());
    }

    // Once a valid update is in force, the same update again is stale and refused.
    let good = update_of(&c.net, &current, &[2, 3, 4], |f| f.batching.batch_timeout_ms = 44);
    c.submit(&good);
    c.run(300);
    assert_eq!(c.switches(1).len(), 1);
    let err = c.nodes[1]
        .app()
        .check_update(good.to_json().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("sequence"), "{err}");
    let before: Vec<_> = c.refused.iter().map(Vec::len).collect();
    c.submit(&good);
    c.run(300);
    for (i, before) in before.into_iter().enumerate() {
        let refused = &c.refused[i][before..];
        assert!(
            matches!(refused, [Refusal::Invalid | Refusal::AlreadyDecided]),
            "replica {i}: {refused:?}"
        );
        assert_eq!(c.switches(i).len(), 1, "replica {i}");
        assert_eq!(c.nodes[i].app().state().epoch, 1);
    }
}

#[test]
fn a_snapshot_after_the_switch_carries_the_config_in_force() {
    let mut c = Cluster::new();
    let current = c.net.config.clone();
    let u = update_of(&c.net, &current, &[1, 3, 4], |f| f.batching.batch_timeout_ms = 33);
    c.submit(&u);
    c.run(300);
    let source = c.nodes[3].app();
    let seq = source.state().applied;
    let snapshot = bft::Application::snapshot(source).unwrap();

    let shards = c.net.config.shards().get();
    let mut fresh = c.app(1, ArmaState::genesis(shards));
    assert_eq!(fresh.config_in_force(), c.genesis.as_slice());
    assert!(bft::Application::install_snapshot(&mut fresh, seq, &snapshot));
    assert_eq!(fresh.state().epoch, 1);
    assert_eq!(fresh.config_in_force(), source.config_in_force());
    let m = bft::Application::membership(&mut fresh).unwrap();
    assert_eq!((m.epoch, m.members.len(), m.id), (1, PARTIES, Some(1)));
    // A snapshot whose config does not parse is refused and changes nothing.
    let mut bad = source.state().clone();
    bad.config = Some(hex::encode(b"not a config"));
    let mut other = c.app(2, ArmaState::genesis(shards));
    assert!(!bft::Application::install_snapshot(
        &mut other,
        bad.applied,
        &bad.encode()
    ));
    assert_eq!(other.state().epoch, 0);
    assert_eq!(other.config_in_force(), c.genesis.as_slice());
}

/// What a batcher or assembler (decisions) and a sidecar or `fabrx blocks` (blocks) see of
/// replica 0's decisions: each verifies under the set in force for it, the switches'
/// config blocks teach the next set, and a reader that cannot follow is refused.
fn readers_follow_the_switches(c: &mut Cluster) {
    let applied = c.nodes[0].app_mut().take_applied();
    let delivered = c.delivered[0].clone();
    assert_eq!(applied.len(), delivered.len());
    let genesis = c.net.config.cluster_keys();
    let rules: Arc<dyn arma::ConfigRules> = Arc::new(NetworkRules::new());
    let mut decisions = arma::ConsenterSets::new(&genesis, Some(rules.clone()));
    let mut blocks = arma::ConsenterSets::new(&genesis, Some(rules));
    let mut without_rules = arma::ConsenterSets::new(&genesis, None);
    let mut stale = arma::ConsenterSets::new(&genesis, None);
    let mut config_blocks = 0;
    let mut previous = None;
    let mut refused_without_rules = false;
    for (a, d) in applied.iter().zip(&delivered) {
        let wire = consenter::decision_wire::to_pb_decision(a, d);
        let v = decisions
            .verify_decision(&wire)
            .unwrap_or_else(|e| panic!("decision {}: {e}", a.decision));
        let switched = v.config.is_some();
        if !refused_without_rules {
            match without_rules.verify_decision(&wire) {
                Ok(_) => assert!(!switched),
                Err(arma::SetsError::NoRules { decision }) => {
                    assert!(switched && decision == a.decision);
                    refused_without_rules = true;
                }
                Err(e) => panic!("decision {}: {e}", a.decision),
            }
        }
        if decisions.epoch() > 0 && !switched {
            assert!(
                stale.verify_decision(&wire).is_err(),
                "decision {} verifies under the genesis set",
                a.decision
            );
        }
        let proof = wire::pb::DecisionProof {
            decision: a.decision,
            view: a.view,
            requests_root: a.requests_root.to_vec(),
            metadata: a.metadata.clone(),
            signatures: wire.signatures.clone(),
        };
        for h in &a.outcome.headers {
            let requests = if h.is_config() {
                config_blocks += 1;
                vec![a.outcome.config.as_ref().unwrap().config.clone()]
            } else {
                Vec::new()
            };
            let block = wire::pb::OrderedBlock {
                header: Some(h.into()),
                requests,
                proof: Some(proof.clone()),
            };
            let v = blocks
                .verify_block(&block, previous)
                .unwrap_or_else(|e| panic!("block {}: {e}", h.number));
            previous = Some((v.header.number, v.hash));
        }
    }
    assert_eq!(config_blocks, 2);
    assert!(refused_without_rules);
    assert_eq!((decisions.epoch(), blocks.epoch()), (2, 2));
    // What a reader persists brings it back to the same sets.
    let mut restored = arma::ConsenterSets::new(&genesis, Some(Arc::new(NetworkRules::new())));
    restored.restore(&decisions.encode()).unwrap();
    assert_eq!(restored.epoch(), 2);
    assert_eq!(restored.encode(), decisions.encode());
    let mut cut = decisions.encode();
    cut.pop();
    assert!(
        arma::ConsenterSets::new(&genesis, Some(Arc::new(NetworkRules::new())))
            .restore(&cut)
            .is_err()
    );
}

#[test]
fn a_stale_copy_left_pending_does_not_stop_ordering() {
    let mut c = Cluster::new();
    let current = c.net.config.clone();
    let u = update_of(&c.net, &current, &[1, 2, 3], |f| f.batching.batch_timeout_ms = 45);
    // The same update in other bytes (the file form with a trailing space), and the same
    // next config with another set of signatures: both valid until one is in force.
    let mut copy = u.to_json();
    copy.push(' ');
    let other_signers = update_of(&c.net, &current, &[2, 3, 4], |f| f.batching.batch_timeout_ms = 45);
    // The copies arrive while the update is being ordered: they wait in the pools.
    c.submit(&u);
    c.run(10);
    assert!(c.switches(0).is_empty(), "proposed, not decided yet");
    for i in 0..PARTIES as usize {
        c.input(i, Input::Request(encode_config_update(copy.as_bytes())));
    }
    c.submit(&other_signers);
    c.run(500);
    assert_eq!(c.switches(0).len(), 1, "one of them switched");
    // The next update is ordered: the stale copies did not stop the cluster.
    c.orders_a_second_update(&current, &u, &[1, 3, 4]);
}

/// A BAF that waits in the pools while an update rotates the key that signed it no longer
/// verifies once that update is in force; were it kept, every proposal holding it would be
/// refused and the cluster would decide nothing again. The engine drops what no longer
/// verifies at the switch, and the next update is ordered.
#[test]
fn a_baf_signed_with_a_rotated_out_batcher_key_does_not_stop_ordering() {
    let mut c = Cluster::new();
    let current = c.net.config.clone();
    let rotated = rotated_batcher_key();
    let u = update_of(&c.net, &current, &[1, 2, 3], |f| {
        f.parties[0].batchers[0].public_key = rotated.public_key().to_string();
    });
    // Party 1 is shard 0's primary in term 0: its batch and its BAF, under the old key.
    let old = &c.net.batcher_1_0;
    let batch = arma::SignedBatch::sign(types::BatchId::new(0, 1, 1), 0, vec![Arc::from(&b"tx"[..])], old);
    let baf = arma::encode_baf(&arma::Baf::sign(&batch, 1, old));
    c.submit(&u);
    c.run(10);
    assert!(c.switches(0).is_empty(), "proposed, not decided yet");
    for i in 0..PARTIES as usize {
        c.input(i, Input::Request(baf.clone()));
    }
    c.run(500);
    assert_eq!(c.switches(0).len(), 1, "the rotation is in force");
    c.orders_a_second_update(&current, &u, &[2, 3, 4]);
}

/// An update that names, for party 3, the consenter key party 1 rotated out (which party
/// 1's node still holds) is refused: the rotation retired the key, and a retired key is
/// never named again. (Were it put in force, party 1's node would still take only the
/// key named for its own slot: `ArmaApp` picks by slot, not the first key it holds.)
#[test]
fn a_rotated_out_key_is_never_named_again() {
    let mut c = Cluster::new();
    let genesis_keys = c.net.config.consenter_keys();
    let current = c.net.config.clone();
    let rotate = update_of(&c.net, &current, &[1, 2, 3], |f| {
        f.parties[0].consenter.public_key = rotated_key().public_key().to_string();
    });
    c.submit(&rotate);
    c.run(500);
    let next = update::validate(&current, &rotate).unwrap();
    assert_eq!(
        next.file().retired_keys,
        vec![genesis_keys[0].to_string()],
        "propose lists the key the rotation retired"
    );
    let mut file = next.file().clone();
    file.sequence += 1;
    file.parties[2].consenter.public_key = genesis_keys[0].to_string();
    let e = update::propose(&next, &file).unwrap_err();
    assert!(e.to_string().contains("retired"), "{e}");
    // Nor by leaving it off the list.
    file.retired_keys.clear();
    let mut u = ConfigUpdate {
        chain: next.chain().to_string(),
        sequence: next.sequence(),
        config: update::canonical_json(&file),
        signatures: Vec::new(),
        proofs: Vec::new(),
    };
    for p in [2, 3, 4] {
        update::sign(&mut u, p, &c.net.admins[p as usize - 1]);
    }
    let e = update::validate(&next, &u).unwrap_err();
    assert!(e.to_string().contains("retired"), "{e}");
    let before = c.nodes[1].last_decided();
    c.submit(&u);
    c.run(500);
    assert_eq!(c.switches(1).len(), 1);
    assert_eq!(c.nodes[1].last_decided(), before, "refused at every pool");
}
