//! ListTransactions v0-v1 through the whole dispatch path: whole
//! responses per version.

use proto_kafka::messages::ApiKey;

use super::*;
use crate::handlers::test_support::{call, open_broker};
use crate::txn_coordinator::testing::{add, init, txn_id};

async fn list(
    broker: &Arc<Broker>,
    v: i16,
    states: &[&str],
    pids: &[i64],
    duration: i64,
) -> ListTransactionsResponse {
    let mut req = ListTransactionsRequest::default();
    req.state_filters = states
        .iter()
        .map(|s| StrBytes::from_string((*s).to_string()))
        .collect();
    req.producer_id_filters = pids.iter().map(|p| ProducerId(*p)).collect();
    if v >= 1 {
        req.duration_filter = duration;
    }
    call(broker, ApiKey::ListTransactions, v, &req)
        .await
        .expect("response")
}

fn listed(unknown: &[&str], txns: &[(&str, i64, &str)]) -> ListTransactionsResponse {
    let mut r = ListTransactionsResponse::default();
    r.unknown_state_filters = unknown
        .iter()
        .map(|s| StrBytes::from_string((*s).to_string()))
        .collect();
    r.transaction_states = txns
        .iter()
        .map(|(id, pid, state)| {
            let mut s = TransactionState::default();
            s.transactional_id = txn_id(id);
            s.producer_id = ProducerId(*pid);
            s.transaction_state = StrBytes::from_string((*state).to_string());
            s
        })
        .collect();
    r
}

#[tokio::test]
async fn every_version_lists_with_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One partition, so the listing is in transactional id order.
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    for v in VERSIONS.0..=VERSIONS.1 {
        let r = list(&broker, v, &["Ongoing", "ongoing"], &[], -1).await;
        assert_eq!(
            r,
            listed(&["ongoing"], &[]),
            "v{v}: no topic, nothing listed"
        );
    }
    let (a, ae) = init(&broker, "a", 60_000).await;
    let (b, _) = init(&broker, "b", 60_000).await;
    assert_eq!(add(&broker, "a", a, ae, &[("t", &[0])]).await, 0);
    let all = [("a", a, "Ongoing"), ("b", b, "Empty")];
    for v in VERSIONS.0..=VERSIONS.1 {
        assert_eq!(
            list(&broker, v, &[], &[], -1).await,
            listed(&[], &all),
            "v{v}"
        );
        assert_eq!(
            list(&broker, v, &["Ongoing", "Bogus"], &[], -1).await,
            listed(&["Bogus"], &all[..1]),
            "v{v} states"
        );
        assert_eq!(
            list(&broker, v, &[], &[b, 999], -1).await,
            listed(&[], &all[1..]),
            "v{v} producer ids"
        );
    }
    // v1: only transactions running longer than the duration; an Empty id
    // has no start time and always passes (as Kafka).
    assert_eq!(
        list(&broker, 1, &[], &[], 3_600_000).await,
        listed(&[], &all[1..]),
        "v1 duration"
    );
    broker.shutdown().expect("shutdown");
}
