#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The assembler's core (docs/assembler.md): blocks come out in chain order whatever
//! order batches arrive in; a batch whose requests do not have its digest is refused;
//! a header that breaks the chain is an error and re-read headers are skipped; the
//! prefetch index stays within its byte bound; a term change forgets a shard's
//! prefetched batches. And a served block verifies only with its quorum, its data and
//! its chain intact.

use std::sync::Arc;

use arma::{DecisionProof, OrderedHeader, Outcome, Request, TermChange};
use assembler::core::{Core, CoreError, Limits, OfferedBatch};
use assembler::store::encode_block;
use bft::{InstanceId, Phase};
use crypto::{Scheme, derive_signing_key};
use proptest::prelude::*;
use types::digest::batch_digest;

fn requests(tag: u64, count: usize) -> Vec<Request> {
    (0..count)
        .map(|i| Arc::from(format!("req-{tag}-{i}").into_bytes()))
        .collect()
}

/// A chain of `n` headers from block 0, batch `i` = (shard i % 2, primary 1, seq i / 2 + 1).
fn chain(n: u64) -> (Vec<OrderedHeader>, Vec<OfferedBatch>) {
    let mut previous = [0u8; 32];
    let mut headers = Vec::new();
    let mut batches = Vec::new();
    for i in 0..n {
        let reqs = requests(i, 1 + (i as usize % 3));
        let h = OrderedHeader {
            number: i,
            previous_hash: previous,
            digest: batch_digest(&reqs),
            shard: (i % 2) as u32,
            term: 0,
            primary: 1,
            seq: i / 2 + 1,
            decision: i + 1,
            index: 0,
            tx_count: reqs.len() as u32,
        };
        previous = h.hash();
        batches.push(OfferedBatch {
            shard: h.shard,
            primary: h.primary,
            seq: h.seq,
            digest: h.digest,
            requests: reqs,
        });
        headers.push(h);
    }
    (headers, batches)
}

fn proof(decision: u64) -> Arc<DecisionProof> {
    Arc::new(DecisionProof {
        instance: InstanceId(0),
        decision,
        view: 0,
        requests_root: [0; 32],
        metadata: Vec::new(),
        signatures: Vec::new(),
    })
}

fn feed(core: &mut Core, headers: &[OrderedHeader]) {
    for h in headers {
        core.on_decision(proof(h.decision), std::slice::from_ref(h), &[])
            .unwrap();
    }
}

proptest! {
    #[test]
    fn blocks_come_out_in_chain_order(order in Just((0..12usize).collect::<Vec<_>>()).prop_shuffle()) {
        let (headers, batches) = chain(12);
        let mut core = Core::new(Limits::default(), 0, None);
        feed(&mut core, &headers);
        let mut out = Vec::new();
        for i in order {
            core.offer(batches[i].clone()).unwrap();
            out.extend(core.take_blocks());
        }
        let numbers: Vec<u64> = out.iter().map(|b| b.header.number).collect();
        prop_assert_eq!(numbers, (0..12).collect::<Vec<_>>());
        for b in &out {
            prop_assert_eq!(batch_digest(&b.requests), b.header.digest);
        }
        prop_assert_eq!(core.next_block(), 12);
        prop_assert_eq!(core.index_bytes(), 0);
    }
}

#[test]
fn the_front_block_names_its_missing_batch_and_a_wrong_digest_is_refused() {
    let (headers, batches) = chain(3);
    let mut core = Core::new(Limits::default(), 0, None);
    feed(&mut core, &headers);
    let w = core.wanted().unwrap();
    assert_eq!((w.block, w.shard, w.seq, w.digest), (0, 0, 1, headers[0].digest));
    let mut forged = batches[0].clone();
    forged.requests.push(Arc::from(&b"extra"[..]));
    assert!(matches!(core.offer(forged), Err(CoreError::Digest { .. })));
    assert!(core.take_blocks().is_empty());
    core.offer(batches[0].clone()).unwrap();
    assert_eq!(core.take_blocks().len(), 1);
    assert_eq!(core.wanted().unwrap().block, 1);
}

#[test]
fn the_chain_must_continue_and_rereads_are_skipped() {
    let (headers, batches) = chain(4);
    // A ledger holding blocks 0 and 1 (restart): re-reading them is harmless.
    let mut core = Core::new(Limits::default(), 2, Some(headers[1].hash()));
    feed(&mut core, &headers);
    assert_eq!(core.queued(), 2);
    core.offer(batches[2].clone()).unwrap();
    core.offer(batches[3].clone()).unwrap();
    let numbers: Vec<u64> = core.take_blocks().iter().map(|b| b.header.number).collect();
    assert_eq!(numbers, [2, 3]);
    // A gap, then a wrong previous hash.
    let (more, _) = chain(7);
    let err = core.on_decision(proof(6), &more[5..6], &[]).unwrap_err();
    assert!(matches!(err, CoreError::Chain { number: 5, .. }), "{err}");
    let mut wrong = more[4];
    wrong.previous_hash = [9; 32];
    let err = core.on_decision(proof(5), &[wrong], &[]).unwrap_err();
    assert!(matches!(err, CoreError::Chain { number: 4, .. }), "{err}");
    core.on_decision(proof(5), &more[4..5], &[]).unwrap();
    assert_eq!(core.queued(), 1);
}

#[test]
fn the_prefetch_index_stays_within_its_byte_bound() {
    let limits = Limits {
        lane_bytes: 2_000,
        max_queued: 16,
    };
    let mut core = Core::new(limits, 0, None);
    let batch = |seq: u64| {
        let reqs = requests(seq, 4);
        OfferedBatch {
            shard: 0,
            primary: 1,
            seq,
            digest: batch_digest(&reqs),
            requests: reqs,
        }
    };
    for seq in (1..=100).rev() {
        core.offer(batch(seq)).unwrap();
        assert!(core.index_bytes() <= 2_000, "{} bytes", core.index_bytes());
    }
    // The lowest seqs (those needed first) are the ones kept.
    let (headers, _) = {
        let reqs = requests(1, 4);
        let h = OrderedHeader {
            number: 0,
            previous_hash: [0; 32],
            digest: batch_digest(&reqs),
            shard: 0,
            term: 0,
            primary: 1,
            seq: 1,
            decision: 1,
            index: 0,
            tx_count: 4,
        };
        (vec![h], ())
    };
    feed(&mut core, &headers);
    assert_eq!(core.take_blocks().len(), 1, "seq 1 was kept");
    // A batch a queued header needs is kept even beyond the bound.
    let big: Vec<Request> = vec![Arc::from(vec![7u8; 5_000])];
    let h = OrderedHeader {
        number: 1,
        previous_hash: headers[0].hash(),
        digest: batch_digest(&big),
        shard: 1,
        term: 0,
        primary: 2,
        seq: 1,
        decision: 2,
        index: 0,
        tx_count: 1,
    };
    feed(&mut core, &[h]);
    core.offer(OfferedBatch {
        shard: 1,
        primary: 2,
        seq: 1,
        digest: h.digest,
        requests: big,
    })
    .unwrap();
    assert_eq!(core.take_blocks().len(), 1);
    assert!(!core.has_room() || core.queued() == 0);
}

#[test]
fn a_term_change_forgets_the_shards_prefetched_batches() {
    let (headers, batches) = chain(2);
    let mut core = Core::new(Limits::default(), 0, None);
    core.offer(batches[0].clone()).unwrap();
    assert!(core.index_bytes() > 0);
    let term = TermChange {
        shard: 0,
        term: 1,
        last_ordered_seq: 0,
    };
    core.on_decision(proof(1), &[], &[term]).unwrap();
    assert_eq!(core.index_bytes(), 0);
    feed(&mut core, &headers[..1]);
    assert_eq!(core.wanted().unwrap().block, 0);
}

// ---- block verification (arma::verify_pb_block) ----

const N: u32 = 4;

fn consenter_key(i: u32) -> crypto::SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("assembler-test-consenter-{i}"))
}

/// A decision over `headers` signed by `signers`, as the consenters would.
fn signed_proof(decision: u64, headers: &[OrderedHeader], signers: &[u32]) -> Arc<DecisionProof> {
    let metadata = Outcome {
        headers: headers.to_vec(),
        terms: Vec::new(),
        config: None,
    }
    .metadata();
    let requests_root = [3u8; 32];
    let keys = arma::ClusterKeys::new((0..N).map(|i| consenter_key(i).public_key()).collect());
    let digest = bft::proposal_digest(InstanceId(0), decision, &requests_root, &metadata);
    let bytes = bft::vote_bytes(
        &keys.chain_id(),
        Phase::Commit,
        InstanceId(0),
        0,
        decision,
        &digest,
    );
    let signatures = signers
        .iter()
        .map(|i| {
            let sig = crypto::sign_decision_certificate(&consenter_key(*i), &bytes);
            (*i, bft::Signature(sig.into_bytes()))
        })
        .collect();
    Arc::new(DecisionProof {
        instance: InstanceId(0),
        decision,
        view: 0,
        requests_root,
        metadata,
        signatures,
    })
}

#[test]
fn a_served_block_verifies_only_with_quorum_data_and_chain() {
    let keys = arma::ClusterKeys::new((0..N).map(|i| consenter_key(i).public_key()).collect());
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let chain_id = keys.chain_id();
    let (headers, batches) = chain(2);
    let mut h1 = headers[1];
    h1.decision = 1;
    h1.index = 1;
    let mut h0 = headers[0];
    h0.decision = 1;
    // Re-chain after changing decision fields.
    h1.previous_hash = h0.hash();
    let block = |h: OrderedHeader, reqs: Vec<Request>, proof: Arc<DecisionProof>| {
        encode_block(
            &assembler::core::Block {
                header: h,
                requests: reqs,
                proof,
            },
            false,
        )
    };
    let good = signed_proof(1, &[h0, h1], &[0, 1, 2]);
    let b0 = block(h0, batches[0].requests.clone(), good.clone());
    let b1 = block(h1, batches[1].requests.clone(), good.clone());
    let v0 = arma::verify_pb_block(&b0, None, &chain_id, &verifier, &bft::Members::contiguous(N)).unwrap();
    assert_eq!(v0.signers, [0, 1, 2]);
    let v1 = arma::verify_pb_block(
        &b1,
        Some((0, v0.hash)),
        &chain_id,
        &verifier,
        &bft::Members::contiguous(N),
    )
    .unwrap();
    assert_eq!(v1.header, h1);
    // Two signatures are not a quorum of four.
    let weak = block(
        h0,
        batches[0].requests.clone(),
        signed_proof(1, &[h0, h1], &[0, 1]),
    );
    assert!(arma::verify_pb_block(&weak, None, &chain_id, &verifier, &bft::Members::contiguous(N)).is_err());
    // Other requests than the header's digest.
    let swapped = block(h0, batches[1].requests.clone(), good.clone());
    assert!(matches!(
        arma::verify_pb_block(&swapped, None, &chain_id, &verifier, &bft::Members::contiguous(N)),
        Err(arma::BlockError::DataHash { number: 0 })
    ));
    // A header the decision does not list.
    let mut other = h0;
    other.tx_count += 1;
    let unlisted = block(other, batches[0].requests.clone(), good.clone());
    assert!(
        arma::verify_pb_block(
            &unlisted,
            None,
            &chain_id,
            &verifier,
            &bft::Members::contiguous(N)
        )
        .is_err()
    );
    // Out of chain.
    assert!(matches!(
        arma::verify_pb_block(
            &b1,
            Some((0, [1; 32])),
            &chain_id,
            &verifier,
            &bft::Members::contiguous(N)
        ),
        Err(arma::BlockError::Chain { .. })
    ));
    // Headers only: verifies without the requests.
    let mut headers_only = b1.clone();
    headers_only.requests.clear();
    let v = arma::verify_pb_block(
        &headers_only,
        Some((0, v0.hash)),
        &chain_id,
        &verifier,
        &bft::Members::contiguous(N),
    )
    .unwrap();
    assert!(!v.with_requests);
}
