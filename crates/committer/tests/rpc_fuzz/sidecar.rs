//! The sidecar under fuzzing: its methods' corpora and honest lookups.

use super::*;
use wire::pb::sidecar_client::SidecarClient;

/// Every stored block, by lookup.
pub async fn blocks(client: &mut SidecarClient<Channel>, next: u64) -> Vec<pb::CommittedBlock> {
    let mut out = Vec::new();
    for number in 0..next {
        out.push(
            client
                .get_block(pb::BlockQuery { number })
                .await
                .unwrap()
                .into_inner(),
        );
    }
    out
}

pub async fn tx_statuses(client: &mut SidecarClient<Channel>, ids: &[String]) -> Vec<pb::TxStatus> {
    let query = pb::StatusQuery { tx_ids: ids.to_vec() };
    client.get_tx_status(query).await.unwrap().into_inner().statuses
}

pub async fn next_block(client: &mut SidecarClient<Channel>) -> u64 {
    client
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner()
        .number
}

/// Subscribes to a final id: answered at once with its status, then the stream ends.
pub async fn subscribe_final(client: &mut SidecarClient<Channel>, want: &pb::TxStatus) {
    let request = pb::SubscribeRequest {
        tx_ids: vec![want.tx_id.clone()],
    };
    let mut events = client
        .subscribe(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let event = events.message().await.unwrap().expect("the final status");
    assert_eq!(event.status.as_ref(), Some(want));
    assert!(events.message().await.unwrap().is_none());
}

pub fn rpcs(ids: &[String], next: u64) -> Vec<Rpc> {
    let subscribe = vec![
        enc(&pb::SubscribeRequest {
            tx_ids: ids.iter().take(3).cloned().collect(),
        }),
        enc(&pb::SubscribeRequest {
            tx_ids: vec!["never-seen".into()],
        }),
        enc(&pb::SubscribeRequest::default()),
    ];
    let blocks = [0, 1, next - 1, next, u64::MAX]
        .map(|number| enc(&pb::BlockQuery { number }))
        .to_vec();
    let queries = vec![
        enc(&pb::StatusQuery {
            tx_ids: ids.iter().take(4).cloned().collect(),
        }),
        enc(&pb::StatusQuery {
            tx_ids: vec![String::new(), "x".into()],
        }),
    ];
    let mut subscribe_rpc = rpc(
        "Sidecar/Subscribe",
        "/fabrx.v1.Sidecar/Subscribe",
        true,
        subscribe,
        decodes::<pb::SubscribeRequest>,
    );
    subscribe_rpc.may_stay_open = true;
    vec![
        subscribe_rpc,
        rpc(
            "Sidecar/GetBlock",
            "/fabrx.v1.Sidecar/GetBlock",
            false,
            blocks,
            decodes::<pb::BlockQuery>,
        ),
        rpc(
            "Sidecar/GetTxStatus",
            "/fabrx.v1.Sidecar/GetTxStatus",
            false,
            queries,
            decodes::<pb::StatusQuery>,
        ),
        rpc(
            "Sidecar/GetNextBlock",
            "/fabrx.v1.Sidecar/GetNextBlock",
            false,
            vec![enc(&pb::LastCommittedRequest {})],
            decodes::<pb::LastCommittedRequest>,
        ),
    ]
}
