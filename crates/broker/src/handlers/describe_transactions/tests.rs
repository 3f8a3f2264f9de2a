//! DescribeTransactions v0 through the whole dispatch path: whole
//! responses.

use proto_kafka::messages::{ApiKey, TransactionalId};
use proto_kafka::ResponseError;

use super::*;
use crate::handlers::test_support::{call, open_broker};
use crate::txn_coordinator::testing::{add, init, txn_id};

async fn describe_ids(broker: &Arc<Broker>, ids: &[&str]) -> DescribeTransactionsResponse {
    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = ids.iter().map(|i| txn_id(i)).collect();
    call(broker, ApiKey::DescribeTransactions, 0, &req)
        .await
        .expect("response")
}

fn error(id: &str, code: ResponseError) -> TransactionState {
    let mut s = TransactionState::default();
    s.transactional_id = TransactionalId(StrBytes::from_string(id.to_string()));
    s.error_code = code.code();
    s
}

#[tokio::test]
async fn describes_states_partitions_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "3")]);
    broker.create_topic("t", 3, 1, &[], false).expect("topic");
    broker.create_topic("a", 1, 1, &[], false).expect("topic");
    let r = describe_ids(&broker, &["tx"]).await;
    assert_eq!(
        r.transaction_states,
        vec![error("tx", ResponseError::NotCoordinator)],
        "before __transaction_state exists"
    );
    let before = crate::groups::now_ms();
    let (pid, epoch) = init(&broker, "tx", 45_000).await;
    let (idle_pid, _) = init(&broker, "idle", 30_000).await;
    assert_eq!(
        add(&broker, "tx", pid, epoch, &[("t", &[2, 0]), ("a", &[0])]).await,
        0
    );
    let r = describe_ids(&broker, &["tx", "idle", "", "nobody"]).await;
    let start = r.transaction_states[0].transaction_start_time_ms;
    assert!(start >= before, "start time {start}");
    let topic = |name: &str, partitions: Vec<i32>| {
        let mut t = TopicData::default();
        t.topic = TopicName(StrBytes::from_string(name.to_string()));
        t.partitions = partitions;
        t
    };
    let mut ongoing = TransactionState::default();
    ongoing.transactional_id = txn_id("tx");
    ongoing.transaction_state = StrBytes::from_static_str("Ongoing");
    ongoing.transaction_timeout_ms = 45_000;
    ongoing.transaction_start_time_ms = start;
    ongoing.producer_id = ProducerId(pid);
    ongoing.producer_epoch = epoch;
    ongoing.topics = vec![topic("a", vec![0]), topic("t", vec![0, 2])];
    let mut idle = TransactionState::default();
    idle.transactional_id = txn_id("idle");
    idle.transaction_state = StrBytes::from_static_str("Empty");
    idle.transaction_timeout_ms = 30_000;
    idle.transaction_start_time_ms = -1;
    idle.producer_id = ProducerId(idle_pid);
    idle.producer_epoch = 0;
    let mut want = DescribeTransactionsResponse::default();
    want.transaction_states = vec![
        ongoing,
        idle,
        error("", ResponseError::InvalidRequest),
        error("nobody", ResponseError::TransactionalIdNotFound),
    ];
    assert_eq!(r, want);
    broker.shutdown().expect("shutdown");
}
