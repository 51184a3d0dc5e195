#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Transition tables of the Arma consenter application (docs/consenter.md): counting
//! BAFs into block headers, equivocation, complaints and terms, request admission, the
//! proposal metadata and the decision proof.

use std::collections::BTreeMap;
use std::sync::Arc;

use arma::{Baf, Complaint, ComplaintReason, Parties, SignedBatch};
use bft::{Application, Certificate, Decision, InstanceId, Phase, Proposal, ProposalContext, Signer as _};
use consenter::application::{
    ArmaApp, ArmaConfig, ArmaError, ArmaState, DecisionProof, Item, Metadata, OrderedHeader,
    PrimarySignatures, TermChange, decode, decode_verified, decode_verified_with, encode_baf,
    encode_complaint,
};
use consenter::keys::{ClusterKeys, EngineSigner, EngineVerifier};
use crypto::{Scheme, SigningKey, derive_signing_key};
use types::BatchId;

const N: u32 = 4;
const SHARDS: u32 = 2;

fn batcher_key(party: u32, shard: u32) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("arma-test/batcher/{party}/{shard}"))
}

fn config() -> ArmaConfig {
    let keys = (1..=N)
        .flat_map(|p| (0..SHARDS).map(move |s| ((p, s), batcher_key(p, s).public_key())))
        .collect::<BTreeMap<_, _>>();
    ArmaConfig::new(Parties::contiguous(N), SHARDS, 64, keys).unwrap()
}

/// A batch of `shard` cut by `primary` in `term` at `seq`, with `tag` making its digest.
fn batch(shard: u32, term: u64, primary: u32, seq: u64, tag: u8) -> SignedBatch {
    let requests: Vec<arma::Request> = vec![Arc::from(vec![tag, 1, 2, 3].as_slice())];
    SignedBatch::sign(
        BatchId::new(shard, primary, seq),
        term,
        requests,
        &batcher_key(primary, shard),
    )
}

fn baf(b: &SignedBatch, signer: u32) -> Item {
    Item::Baf(Baf::sign(b, signer, &batcher_key(signer, b.id().shard)))
}

fn complaint(shard: u32, term: u64, signer: u32) -> Item {
    Item::Complaint(Complaint::sign(
        shard,
        term,
        signer,
        ComplaintReason::Censorship,
        &batcher_key(signer, shard),
    ))
}

fn term(shard: u32, term: u64, last_ordered_seq: u64) -> TermChange {
    TermChange {
        shard,
        term,
        last_ordered_seq,
    }
}

#[test]
fn f_plus_one_bafs_order_a_batch_and_headers_chain() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let b1 = batch(0, 0, 1, 1, 1);
    let b2 = batch(0, 0, 1, 2, 2);
    // One BAF is not enough (f+1 = 2); the same signer twice counts once.
    let out = s.execute(&cfg, 1, &[baf(&b1, 1), baf(&b1, 1)]);
    assert!(out.headers.is_empty() && out.terms.is_empty());
    let out = s.execute(&cfg, 2, &[baf(&b1, 3)]);
    assert_eq!(out.headers.len(), 1);
    let h0 = out.headers[0];
    assert_eq!(
        h0,
        OrderedHeader {
            number: 0,
            previous_hash: [0; 32],
            digest: b1.header.digest,
            shard: 0,
            term: 0,
            primary: 1,
            seq: 1,
            decision: 2,
            index: 0,
            tx_count: 1,
        }
    );
    // Seq 2 ordered next, chained to block 0; a BAF for seq 1 again changes nothing.
    let out = s.execute(&cfg, 3, &[baf(&b2, 2), baf(&b1, 4), baf(&b2, 4)]);
    assert_eq!(out.headers.len(), 1);
    assert_eq!(out.headers[0].number, 1);
    assert_eq!(out.headers[0].previous_hash, h0.hash());
    assert_eq!(out.headers[0].seq, 2);
    assert_eq!(s.shards[0].last_ordered_seq, 2);
    assert_eq!(s.next_block, 2);
}

#[test]
fn seqs_are_ordered_consecutively_across_shards_in_one_chain() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let a2 = batch(0, 0, 1, 2, 2);
    let a1 = batch(0, 0, 1, 1, 1);
    // Shard 1's primary in term 0 is party 2.
    let c1 = batch(1, 0, 2, 1, 9);
    let out = s.execute(&cfg, 1, &[baf(&a2, 1), baf(&a2, 2), baf(&c1, 2)]);
    assert!(out.headers.is_empty(), "seq 2 waits for seq 1");
    assert_eq!(s.shards[0].pending_seqs(), 1);
    let out = s.execute(&cfg, 2, &[baf(&a1, 3), baf(&c1, 4), baf(&a1, 4)]);
    let ids: Vec<_> = out
        .headers
        .iter()
        .map(|h| (h.number, h.shard, h.seq, h.index))
        .collect();
    assert_eq!(ids, vec![(0, 1, 1, 0), (1, 0, 1, 1), (2, 0, 2, 2)]);
    assert_eq!(out.headers[2].previous_hash, out.headers[1].hash());
}

#[test]
fn bafs_of_another_term_primary_or_window_are_ignored() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let other_term = batch(0, 1, 1, 1, 1);
    let not_primary = batch(0, 0, 3, 1, 1);
    let too_far = batch(0, 0, 1, 65, 1);
    let out = s.execute(
        &cfg,
        1,
        &[
            baf(&other_term, 1),
            baf(&other_term, 2),
            baf(&not_primary, 1),
            baf(&not_primary, 2),
            baf(&too_far, 1),
            baf(&too_far, 2),
        ],
    );
    assert_eq!(out, consenter::application::Outcome::default());
    assert_eq!(s.shards[0].pending_seqs(), 0);
}

#[test]
fn two_digests_for_one_seq_are_equivocation_and_change_the_term() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let x = batch(0, 0, 1, 1, 1);
    let y = batch(0, 0, 1, 1, 2);
    let out = s.execute(&cfg, 1, &[baf(&x, 2), baf(&y, 3), baf(&x, 4), baf(&y, 4)]);
    assert!(out.headers.is_empty(), "neither digest is ordered");
    assert_eq!(out.terms, vec![term(0, 1, 0)]);
    assert_eq!(s.equivocations, 1);
    // Term 1's primary of shard 0 is party 2; BAFs of term 0 no longer count.
    let late = s.execute(&cfg, 2, &[baf(&x, 1), baf(&x, 3)]);
    assert!(late.headers.is_empty());
    let z = batch(0, 1, 2, 1, 3);
    let out = s.execute(&cfg, 3, &[baf(&z, 1), baf(&z, 2)]);
    assert_eq!(
        (out.headers[0].term, out.headers[0].primary, out.headers[0].seq),
        (1, 2, 1)
    );
}

/// A late equivocation: the primary serves version A to itself and one honest secondary
/// (their two BAFs order A) and version B, with the victim's tx, to the others, whose
/// BAFs arrive after A is ordered. Before, those BAFs were ignored as stale: no
/// equivocation, no term change, and B's requests stayed in flight for ever. Now the
/// primary-signed B for an ordered seq changes the term.
#[test]
fn another_digest_for_an_ordered_seq_is_equivocation_found_late() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let a = batch(0, 0, 1, 1, 1);
    let b = batch(0, 0, 1, 1, 2);
    let out = s.execute(&cfg, 1, &[baf(&a, 1), baf(&a, 2)]);
    assert_eq!(out.headers.len(), 1, "A ordered with f+1 BAFs");
    assert!(out.terms.is_empty());
    // A late BAF for A changes nothing.
    let out = s.execute(&cfg, 2, &[baf(&a, 3)]);
    assert!(out.headers.is_empty() && out.terms.is_empty());
    // B's BAFs, late.
    let out = s.execute(&cfg, 3, &[baf(&b, 3), baf(&b, 4)]);
    assert!(out.headers.is_empty());
    assert_eq!(out.terms, vec![term(0, 1, 1)], "the term changes at once");
    assert_eq!(s.equivocations, 1);
    // The snapshot keeps what the check needs.
    let again = ArmaState::decode(&s.encode(), SHARDS).unwrap();
    assert_eq!(again, s);
    // A snapshot written before the check existed decodes; the check starts at the
    // shard's next term change, the same decision on every consenter, so consenters that
    // replay from different snapshots cannot disagree.
    let old_json = serde_json::to_string(&ArmaState::genesis(SHARDS))
        .unwrap()
        .replace(",\"ordered\":{}", "");
    assert!(!old_json.contains("\"ordered\""), "{old_json}");
    let mut old = ArmaState::decode(old_json.as_bytes(), SHARDS).unwrap();
    assert_eq!(old.execute(&cfg, 1, &[baf(&a, 1), baf(&a, 2)]).headers.len(), 1);
    assert!(old.execute(&cfg, 2, &[baf(&b, 3), baf(&b, 4)]).terms.is_empty());
    assert_eq!(
        old.execute(&cfg, 3, &[complaint(0, 0, 3), complaint(0, 0, 4)])
            .terms
            .len(),
        1
    );
    let a1 = batch(0, 1, 2, 2, 1);
    let b1 = batch(0, 1, 2, 2, 2);
    assert_eq!(old.execute(&cfg, 4, &[baf(&a1, 2), baf(&a1, 1)]).headers.len(), 1);
    assert_eq!(old.execute(&cfg, 5, &[baf(&b1, 3)]).terms, vec![term(0, 2, 2)]);
}

#[test]
fn f_plus_one_complaints_of_the_term_change_it_once() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let pending = batch(1, 0, 2, 1, 1);
    let out = s.execute(
        &cfg,
        1,
        &[
            baf(&pending, 2),
            complaint(1, 0, 3),
            complaint(1, 0, 3),
            complaint(1, 5, 4),
        ],
    );
    assert!(out.terms.is_empty(), "one distinct complaint of the term");
    assert_eq!(s.shards[1].complaints(), 1);
    let out = s.execute(&cfg, 2, &[complaint(1, 0, 4), complaint(1, 0, 1)]);
    assert_eq!(out.terms, vec![term(1, 1, 0)]);
    assert_eq!(s.shards[1].pending_seqs(), 0, "the old term's BAFs are dropped");
    assert_eq!(s.shards[1].complaints(), 0);
    // The abandoned batch's BAFs no longer order it.
    let out = s.execute(&cfg, 3, &[baf(&pending, 3)]);
    assert!(out.headers.is_empty());
}

#[test]
fn a_batch_primary_signature_is_verified_once_and_forgeries_still_fail() {
    let cfg = config();
    let primaries = PrimarySignatures::default();
    let b = batch(0, 0, 1, 1, 1);
    for signer in 1..=N {
        let good = Baf::sign(&b, signer, &batcher_key(signer, 0));
        assert_eq!(
            decode_verified_with(&cfg, &encode_baf(&good), &primaries),
            Ok(Item::Baf(good))
        );
    }
    assert_eq!(primaries.len(), 1, "one entry for the four BAFs of one batch");
    // A cached primary signature does not vouch for another header or signature.
    let mut forged_primary = Baf::sign(&b, 2, &batcher_key(2, 0));
    forged_primary.primary_signature = batch(0, 0, 1, 1, 7).signature;
    assert_eq!(
        decode_verified_with(&cfg, &encode_baf(&forged_primary), &primaries),
        Err(sig_err("primary", 1, 0))
    );
    let mut other_header = Baf::sign(&b, 3, &batcher_key(3, 0));
    other_header.header.tx_count += 1;
    assert!(decode_verified_with(&cfg, &encode_baf(&other_header), &primaries).is_err());
    // Nor does it excuse the signer's own signature.
    let wrong_signer = Baf::sign(&b, 2, &batcher_key(2, 1));
    assert_eq!(
        decode_verified_with(&cfg, &encode_baf(&wrong_signer), &primaries),
        Err(sig_err("BAF", 2, 0))
    );
    assert_eq!(primaries.len(), 1);
}

#[test]
fn requests_are_admitted_only_with_valid_signatures() {
    let cfg = config();
    let b = batch(0, 0, 1, 1, 1);
    let good = Baf::sign(&b, 2, &batcher_key(2, 0));
    assert_eq!(
        decode_verified(&cfg, &encode_baf(&good)).unwrap(),
        Item::Baf(good.clone())
    );
    // Signed with another shard's key.
    let wrong_key = Baf::sign(&b, 2, &batcher_key(2, 1));
    // A Byzantine secondary attests a header the primary never signed.
    let mut forged = good.clone();
    forged.header.digest[0] ^= 1;
    forged.signature = Baf::sign(&b, 2, &batcher_key(2, 0)).signature;
    let mut forged_primary = Baf::sign(&b, 2, &batcher_key(2, 0));
    forged_primary.primary_signature = batch(0, 0, 1, 1, 7).signature;
    let bad_complaint = Complaint::sign(0, 0, 3, ComplaintReason::BogusBatch, &batcher_key(4, 0));
    let cases: Vec<(Vec<u8>, ArmaError)> = vec![
        (encode_baf(&wrong_key), sig_err("BAF", 2, 0)),
        (encode_baf(&forged), sig_err("BAF", 2, 0)),
        (encode_baf(&forged_primary), sig_err("primary", 1, 0)),
        (encode_complaint(&bad_complaint), sig_err("complaint", 3, 0)),
        (
            vec![0xff, 0xff, 0xff],
            ArmaError::Decode {
                what: "not a ConsenterRequest",
            },
        ),
        (
            Vec::new(),
            ArmaError::Decode {
                what: "empty request",
            },
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_verified(&cfg, &bytes), Err(want));
    }
    let other_shard = batch(5, 0, 1, 1, 1);
    let mut far = Baf::sign(&other_shard, 2, &batcher_key(2, 0));
    assert_eq!(
        decode(&cfg, &encode_baf(&far)),
        Err(ArmaError::UnknownShard { shard: 5, shards: 2 })
    );
    far.header.id.shard = 0;
    far.signer = 9;
    assert_eq!(
        decode(&cfg, &encode_baf(&far)),
        Err(ArmaError::UnknownParty {
            party: 9,
            parties: Parties::contiguous(4)
        })
    );
}

/// BAFs and complaints name the config they were signed under: under config 3 only
/// those naming 3 are admitted, an older or newer one is refused naming both sequences
/// (before its signature is checked), and one relabelled to 3 does not verify.
#[test]
fn bafs_and_complaints_of_another_config_are_refused() {
    let mut cfg = config();
    cfg.sequence = 3;
    let b = batch(0, 0, 1, 1, 1);
    let key = batcher_key(2, 0);
    let current = Baf::sign_at(3, &b, 2, &key);
    assert_eq!(
        decode_verified(&cfg, &encode_baf(&current)).unwrap(),
        Item::Baf(current.clone())
    );
    let stale = |got: u64, which: &'static str, party: u32| ArmaError::StaleConfig {
        which,
        party,
        got,
        current: 3,
    };
    for got in [0, 2, 4] {
        let baf = Baf::sign_at(got, &b, 2, &key);
        assert_eq!(
            decode_verified(&cfg, &encode_baf(&baf)),
            Err(stale(got, "BAF", 2))
        );
        let c = Complaint::sign_at(got, 0, 0, 3, ComplaintReason::Censorship, &batcher_key(3, 0));
        assert_eq!(
            decode_verified(&cfg, &encode_complaint(&c)),
            Err(stale(got, "complaint", 3))
        );
    }
    assert_eq!(
        decode_verified(&cfg, &encode_baf(&Baf::sign(&b, 2, &key)))
            .unwrap_err()
            .to_string(),
        "BAF claiming party 2 names config sequence 0, the network is at 3"
    );
    let mut relabelled = Baf::sign_at(2, &b, 2, &key);
    relabelled.config = 3;
    assert_eq!(
        decode_verified(&cfg, &encode_baf(&relabelled)),
        Err(sig_err("BAF", 2, 0))
    );
    let c = Complaint::sign_at(3, 0, 0, 3, ComplaintReason::Censorship, &batcher_key(3, 0));
    assert!(decode_verified(&cfg, &encode_complaint(&c)).is_ok());
}

fn sig_err(which: &'static str, party: u32, shard: u32) -> ArmaError {
    ArmaError::BadSignature { which, party, shard }
}

fn cluster() -> (Vec<EngineSigner>, ClusterKeys) {
    let keys: Vec<SigningKey> = (0..N)
        .map(|i| derive_signing_key(Scheme::Ed25519, &format!("arma-test/consenter/{i}")))
        .collect();
    let cluster = ClusterKeys::for_chain("arma-test", keys.iter().map(SigningKey::public_key).collect());
    (keys.into_iter().map(EngineSigner::new).collect(), cluster)
}

/// A decision of `requests` at `seq` whose metadata `leader` assembled, signed by `signers`.
fn decide(
    leader: &mut ArmaApp,
    seq: u64,
    requests: Vec<Vec<u8>>,
    signers: &[usize],
) -> (Decision, ClusterKeys) {
    let (keys, cluster) = cluster();
    let metadata = leader.assemble(ProposalContext { seq, view: 3 }, &requests);
    let proposal = Proposal {
        instance: InstanceId(0),
        seq,
        requests,
        metadata,
    };
    let digest = proposal.digest();
    let bytes = bft::vote_bytes(&cluster.chain_id(), Phase::Commit, InstanceId(0), 3, seq, &digest);
    let signatures = signers
        .iter()
        .map(|&i| (i as u32, keys[i].sign(&bytes)))
        .collect();
    let certificate = Certificate {
        phase: Phase::Commit,
        instance: InstanceId(0),
        view: 3,
        seq,
        digest,
        signatures,
    };
    (
        Decision {
            proposal: Arc::new(proposal),
            certificate,
        },
        cluster,
    )
}

#[test]
fn followers_recompute_the_leaders_metadata_and_a_proof_proves_each_header() {
    let b = batch(0, 0, 1, 1, 1);
    let encode = |i: &Item| match i {
        Item::Baf(x) => encode_baf(x),
        Item::Complaint(c) => encode_complaint(c),
        Item::ConfigUpdate(u) => consenter::application::encode_config_update(u),
    };
    let requests: Vec<Vec<u8>> = [baf(&b, 1), baf(&b, 2), complaint(1, 0, 1), complaint(1, 0, 3)]
        .iter()
        .map(encode)
        .collect();
    let mut leader = ArmaApp::new(config(), ArmaState::genesis(SHARDS));
    let mut follower = ArmaApp::new(config(), ArmaState::genesis(SHARDS));
    let (decision, cluster) = decide(&mut leader, 1, requests, &[0, 2, 3]);
    assert!(requests_verify(&mut follower, &decision.proposal));
    assert!(follower.verify_proposal(&decision.proposal));
    // A leader that lies about the headers (or proposes out of order) is caught.
    let mut lie = Proposal::clone(&decision.proposal);
    lie.metadata[40] ^= 1;
    assert!(!follower.verify_proposal(&lie));
    let mut skip = Proposal::clone(&decision.proposal);
    skip.seq = 2;
    assert!(!follower.verify_proposal(&skip));
    for app in [&mut leader, &mut follower] {
        app.apply(&decision);
        assert_eq!(app.diverged, 0);
        assert_eq!(app.applied(), 1);
    }
    let applied = follower.take_applied();
    assert_eq!(applied.len(), 1);
    let a = &applied[0];
    assert_eq!(a.outcome.terms, vec![term(1, 1, 0)]);
    let header = a.outcome.headers[0];
    let proof = DecisionProof {
        instance: InstanceId(0),
        decision: a.decision,
        view: a.view,
        requests_root: a.requests_root,
        metadata: a.metadata.clone(),
        signatures: decision.certificate.signatures.clone(),
    };
    let verifier = EngineVerifier::new(cluster.clone());
    let (signers, metadata) = proof
        .verify(&cluster.chain_id(), &verifier, &bft::Members::contiguous(N))
        .unwrap();
    assert_eq!(signers, vec![0, 2, 3]);
    assert_eq!(metadata, Metadata::decode(&a.outcome.metadata()).unwrap());
    proof.proves(&metadata, &header).unwrap();
    let mut other = header;
    other.tx_count += 1;
    assert!(proof.proves(&metadata, &other).is_err());
    // Two valid signatures are below the quorum of 3; another chain's signatures fail.
    let mut short = proof.clone();
    short.signatures.truncate(2);
    assert!(
        short
            .verify(&cluster.chain_id(), &verifier, &bft::Members::contiguous(N))
            .is_err()
    );
    let foreign = cluster.with_chain("another-network");
    assert!(
        proof
            .verify(
                &foreign.chain_id(),
                &EngineVerifier::new(foreign.clone()),
                &bft::Members::contiguous(N)
            )
            .is_err()
    );
    let mut bent = proof.clone();
    bent.requests_root[0] ^= 1;
    assert!(
        bent.verify(&cluster.chain_id(), &verifier, &bft::Members::contiguous(N))
            .is_err()
    );
    // After replica 2 left and replica 4 joined (members 0, 1, 3, 4), 2's valid
    // signature does not count: 0 and 3 are below the quorum of 3. Without 1 (members
    // 0, 2, 3: f = 0, quorum 2) the same signatures are counted by id.
    let left = bft::Members::new(vec![0, 1, 3, 4]).unwrap();
    assert!(proof.verify(&cluster.chain_id(), &verifier, &left).is_err());
    let without_1 = bft::Members::new(vec![0, 2, 3]).unwrap();
    let (signers, _) = proof.verify(&cluster.chain_id(), &verifier, &without_1).unwrap();
    assert_eq!(signers, vec![0, 2, 3]);
}

fn requests_verify(app: &mut ArmaApp, p: &Proposal) -> bool {
    p.requests.iter().all(|r| app.verify_request(r))
}

#[test]
fn metadata_and_snapshots_round_trip_and_refuse_truncation() {
    let cfg = config();
    let mut s = ArmaState::genesis(SHARDS);
    let b = batch(0, 0, 1, 1, 1);
    let out = s.execute(
        &cfg,
        1,
        &[baf(&b, 1), baf(&b, 2), complaint(1, 0, 2), complaint(1, 0, 4)],
    );
    let bytes = out.metadata();
    let m = Metadata::decode(&bytes).unwrap();
    assert_eq!(m.header_hashes, vec![out.headers[0].hash()]);
    assert_eq!(m.terms, out.terms);
    for cut in 0..bytes.len() {
        assert!(Metadata::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Metadata::decode(&longer).is_err());
    let snapshot = s.encode();
    assert_eq!(ArmaState::decode(&snapshot, SHARDS).unwrap(), s);
    assert!(ArmaState::decode(&snapshot, 3).is_err());

    // A decision that put a config in force: the same bytes, then its section.
    let mut with = out.clone();
    with.config = Some(arma::ConfigChange {
        epoch: 3,
        sequence: 7,
        config: b"the next config".to_vec(),
    });
    let long = with.metadata();
    assert_eq!(long[..bytes.len()], bytes[..], "the section only appends");
    let m = Metadata::decode(&long).unwrap();
    let c = m.config.unwrap();
    assert_eq!((c.epoch, c.sequence), (3, 7));
    assert_eq!(c, with.config.as_ref().unwrap().certified());
    for cut in bytes.len() + 1..long.len() {
        assert!(Metadata::decode(&long[..cut]).is_err(), "cut at {cut}");
    }
    let mut marker = long.clone();
    marker[bytes.len()] = 2;
    assert!(Metadata::decode(&marker).is_err(), "unknown section marker");
    let mut longer = long;
    longer.push(0);
    assert!(Metadata::decode(&longer).is_err());
}

#[test]
fn config_needs_every_batcher_key() {
    let mut keys = BTreeMap::new();
    keys.insert((1, 0), batcher_key(1, 0).public_key());
    let parties = |ids: &[u32]| Parties::new(ids.to_vec()).unwrap();
    assert!(ArmaConfig::new(parties(&[1]), 1, 8, keys.clone()).is_ok());
    assert!(ArmaConfig::new(parties(&[1, 2]), 1, 8, keys.clone()).is_err());
    assert!(ArmaConfig::new(parties(&[1]), 1, 0, keys.clone()).is_err());
    keys.insert((2, 0), batcher_key(2, 0).public_key());
    assert!(ArmaConfig::new(parties(&[1]), 1, 8, keys.clone()).is_err());
    // A party that left leaves a gap: parties 1 and 3, and keys for exactly them.
    keys.remove(&(2, 0));
    keys.insert((3, 0), batcher_key(3, 0).public_key());
    assert!(ArmaConfig::new(parties(&[1, 3]), 1, 8, keys.clone()).is_ok());
    assert!(ArmaConfig::new(parties(&[1, 2]), 1, 8, keys).is_err());
}

#[test]
fn after_a_party_left_its_bafs_are_refused_and_primaries_rotate_over_the_others() {
    let mut keys = BTreeMap::new();
    for p in [1, 3, 4, 5] {
        for s in 0..SHARDS {
            keys.insert((p, s), batcher_key(p, s).public_key());
        }
    }
    let cfg = ArmaConfig::new(Parties::new(vec![1, 3, 4, 5]).unwrap(), SHARDS, 64, keys).unwrap();
    assert_eq!(cfg.threshold(), 2);
    let primaries: Vec<_> = (0..4).map(|t| cfg.primary_of(0, t)).collect();
    assert_eq!(primaries, [1, 3, 4, 5]);
    let b = batch(0, 0, 1, 1, 1);
    let from_2 = Baf::sign(&b, 2, &batcher_key(2, 0));
    assert!(matches!(
        decode_verified(&cfg, &encode_baf(&from_2)),
        Err(ArmaError::UnknownParty { party: 2, .. })
    ));
    let from_3 = Baf::sign(&b, 3, &batcher_key(3, 0));
    assert!(decode_verified(&cfg, &encode_baf(&from_3)).is_ok());
    // A complaint of the party that left is refused too.
    let c = Complaint::sign(0, 0, 2, ComplaintReason::Censorship, &batcher_key(2, 0));
    assert!(matches!(
        decode_verified(&cfg, &encode_complaint(&c)),
        Err(ArmaError::UnknownParty { party: 2, .. })
    ));
}

#[test]
fn an_application_without_config_rules_refuses_config_updates_and_a_decision_holding_one_changes_nothing() {
    let mut app = ArmaApp::new(config(), ArmaState::genesis(SHARDS));
    let update = consenter::application::encode_config_update(b"{\"any\": \"update\"}");
    assert!(!app.verify_request(&update));
    assert!(
        matches!(app.check_update(b"{}"), Err(ArmaError::ConfigUpdate { .. })),
        "a clear refusal"
    );
    let (decision, _) = decide(&mut app, 1, vec![update], &[0, 1, 2]);
    app.apply(&decision);
    let applied = app.take_applied();
    assert_eq!(applied[0].outcome.config, None);
    assert_eq!(app.state().epoch, 0);
    assert!(app.state().shards.iter().all(|s| s.term == 0));
    assert!(Metadata::decode(&applied[0].metadata).unwrap().config.is_none());
}
