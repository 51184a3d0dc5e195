//! The sigverifier under fuzzing: its method's corpus and an honest verification.

use super::*;
use pb::verify_stream_request::Kind;
use wire::pb::sig_verifier_client::SigVerifierClient;

fn key(scheme: crypto::Scheme, seed: &str) -> (crypto::SigningKey, NamespacePolicy) {
    let sk = crypto::derive_signing_key(scheme, seed);
    let p = sigverifier::policy_of(&sk.public_key());
    (sk, p)
}

fn policy_update(ns: &str, p: &NamespacePolicy) -> pb::VerifyStreamRequest {
    pb::VerifyStreamRequest {
        kind: Some(Kind::Policy(pb::PolicyUpdate {
            namespace: ns.into(),
            policy: wire::encode_policy(p),
        })),
    }
}

fn signed(id: &str, ns: &str, sk: &crypto::SigningKey) -> pb::VerifyTx {
    let tx_id = TxId(id.into());
    let n = TxNamespace {
        ns_id: ns.into(),
        blind_writes: vec![Write {
            key: b"k".to_vec(),
            value: id.as_bytes().to_vec(),
        }],
        ..Default::default()
    };
    let sig = crypto::sign_namespace_endorsement(sk, &namespace_signing_bytes(&tx_id, &n, &[]));
    let tx = Tx {
        namespaces: vec![n],
        endorsements: vec![vec![Endorsement {
            signature: sig.into_bytes(),
            ..Default::default()
        }]],
        metadata: vec![],
    };
    pb::VerifyTx {
        tx_id: id.into(),
        tx: Some(pb::Tx::from(&tx)),
    }
}

fn batch(request_id: u64, txs: Vec<pb::VerifyTx>) -> pb::VerifyStreamRequest {
    pb::VerifyStreamRequest {
        kind: Some(Kind::Batch(pb::VerifyBatch { request_id, txs })),
    }
}

/// A policy, then a batch of a validly signed tx and a forged one: [valid, invalid].
pub async fn honest_verify(client: &mut SigVerifierClient<Channel>, request_id: u64) {
    let (owner, policy) = key(crypto::Scheme::Ed25519, "fz-owner");
    let (stranger, _) = key(crypto::Scheme::Ed25519, "fz-stranger");
    let requests = vec![
        policy_update("fz", &policy),
        batch(
            request_id,
            vec![signed("good", "fz", &owner), signed("forged", "fz", &stranger)],
        ),
    ];
    let mut answers = client
        .verify(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().expect("an answer to the batch");
    assert_eq!(
        answer,
        pb::VerifyResult {
            request_id,
            codes: vec![0, Status::AbortedSignatureInvalid.code()],
        }
    );
    assert!(
        answers.message().await.unwrap().is_none(),
        "stream ends after its batch"
    );
}

pub fn rpcs() -> Vec<Rpc> {
    let mut corpus = Vec::new();
    let mut keys = Vec::new();
    for (ns, scheme) in [
        ("eda", crypto::Scheme::Ed25519),
        ("ec", crypto::Scheme::EcdsaP256),
        ("bls", crypto::Scheme::Bls12381),
    ] {
        let (sk, p) = key(scheme, ns);
        corpus.push(enc(&policy_update(ns, &p)));
        keys.push((ns, sk));
    }
    let txs: Vec<pb::VerifyTx> = keys
        .iter()
        .map(|(ns, sk)| signed(&format!("t-{ns}"), ns, sk))
        .collect();
    corpus.push(enc(&batch(1, txs.clone())));
    corpus.push(enc(&batch(u64::MAX, txs[..1].to_vec())));
    corpus.push(enc(&batch(
        2,
        vec![pb::VerifyTx {
            tx_id: "no-body".into(),
            tx: None,
        }],
    )));
    corpus.push(enc(&batch(3, vec![])));
    vec![rpc(
        "SigVerifier/Verify",
        "/fabrx.v1.SigVerifier/Verify",
        true,
        corpus,
        decodes::<pb::VerifyStreamRequest>,
    )]
}
