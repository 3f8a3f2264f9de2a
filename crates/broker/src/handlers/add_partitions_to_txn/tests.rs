//! AddPartitionsToTxn v0-v3 through the whole dispatch path: whole
//! responses per version.

use proto_kafka::messages::ApiKey;
use sluice_coordinator::txn::TransactionState;

use super::*;
use crate::handlers::test_support::{call, open_broker};
use crate::txn_coordinator::testing::{add_request, end, init, start, state, wait_state};

/// The response Kafka sends: per topic of the request, per partition, the
/// code.
fn response(topics: &[(&str, &[(i32, i16)])]) -> AddPartitionsToTxnResponse {
    let mut r = AddPartitionsToTxnResponse::default();
    for (t, parts) in topics {
        let mut tr = AddPartitionsToTxnTopicResult::default();
        tr.name = proto_kafka::messages::TopicName(proto_kafka::protocol::StrBytes::from_string(
            (*t).to_string(),
        ));
        for (p, code) in *parts {
            let mut pr = AddPartitionsToTxnPartitionResult::default();
            pr.partition_index = *p;
            pr.partition_error_code = *code;
            tr.results_by_partition.push(pr);
        }
        r.results_by_topic_v3_and_below.push(tr);
    }
    r
}

async fn add_at(
    broker: &Arc<Broker>,
    v: i16,
    req: &AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    call(broker, ApiKey::AddPartitionsToTxn, v, req)
        .await
        .expect("response")
}

#[tokio::test]
async fn every_version_adds_partitions_once_the_record_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "3")]);
    broker.create_topic("t", 3, 1, &[], false).expect("topic");
    broker.create_topic("u", 1, 1, &[], false).expect("topic");
    for v in VERSIONS.0..=VERSIONS.1 {
        let id = format!("tx-{v}");
        let (pid, epoch) = init(&broker, &id, 60_000).await;
        let req = add_request(&id, pid, epoch, &[("t", &[0, 2]), ("u", &[0])]);
        let r = add_at(&broker, v, &req).await;
        let ok = 0;
        assert_eq!(
            r,
            response(&[("t", &[(0, ok), (2, ok)]), ("u", &[(0, ok)])]),
            "v{v}"
        );
        assert_eq!(state(&broker, &id), Some(TransactionState::Ongoing));
        // Adding them again needs no record and answers the same.
        assert_eq!(add_at(&broker, v, &req).await, r, "v{v} again");
        let shard = broker.txns.shard(&broker, &id, false).expect("shard");
        let parts = crate::groups::lock(&shard).machine.partitions(&id);
        assert_eq!(
            parts,
            vec![
                TopicPartition::new("t", 0),
                TopicPartition::new("t", 2),
                TopicPartition::new("u", 0)
            ]
        );
    }
    broker.shutdown().expect("shutdown");
}

/// Unknown partitions and internal topics fail the request before the
/// coordinator: each gets its error, the others OPERATION_NOT_ATTEMPTED,
/// and nothing is added.
#[tokio::test]
async fn unknown_and_internal_partitions_fail_the_whole_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    let (pid, epoch) = init(&broker, "tx", 60_000).await;
    for v in VERSIONS.0..=VERSIONS.1 {
        let req = add_request(
            "tx",
            pid,
            epoch,
            &[
                ("t", &[0, 7]),
                ("missing", &[0]),
                ("__consumer_offsets", &[0]),
                ("__cluster_metadata", &[0]),
            ],
        );
        let r = add_at(&broker, v, &req).await;
        assert_eq!(
            r,
            response(&[
                (
                    "t",
                    &[
                        (0, ResponseError::OperationNotAttempted.code()),
                        (7, ResponseError::UnknownTopicOrPartition.code())
                    ]
                ),
                (
                    "missing",
                    &[(0, ResponseError::UnknownTopicOrPartition.code())]
                ),
                (
                    "__consumer_offsets",
                    &[(0, ResponseError::TopicAuthorizationFailed.code())]
                ),
                (
                    "__cluster_metadata",
                    &[(0, ResponseError::UnknownTopicOrPartition.code())]
                ),
            ]),
            "v{v}"
        );
        assert_eq!(state(&broker, "tx"), Some(TransactionState::Empty));
    }
    broker.shutdown().expect("shutdown");
}

/// The coordinator's errors apply to every partition: an old epoch is
/// PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2), an unknown id or
/// producer id INVALID_PRODUCER_ID_MAPPING, a transaction whose markers
/// are being written CONCURRENT_TRANSACTIONS, and NOT_COORDINATOR before
/// `__transaction_state` exists.
#[tokio::test]
async fn coordinator_errors_per_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 2, 1, &[], false).expect("topic");
    let topics: &[(&str, &[i32])] = &[("t", &[0, 1])];
    let all = |code: i16| response(&[("t", &[(0, code), (1, code)])]);
    for v in VERSIONS.0..=VERSIONS.1 {
        let r = add_at(&broker, v, &add_request("tx", 0, 0, topics)).await;
        assert_eq!(
            r,
            all(ResponseError::NotCoordinator.code()),
            "v{v} no topic yet"
        );
    }
    let (pid, _) = init(&broker, "tx", 60_000).await;
    let (_, epoch) = init(&broker, "tx", 60_000).await;
    assert_eq!(epoch, 1);
    for v in VERSIONS.0..=VERSIONS.1 {
        let fenced = if v >= 2 {
            ResponseError::ProducerFenced
        } else {
            ResponseError::InvalidProducerEpoch
        };
        let r = add_at(&broker, v, &add_request("tx", pid, 0, topics)).await;
        assert_eq!(r, all(fenced.code()), "v{v} old epoch");
        let r = add_at(&broker, v, &add_request("tx", pid + 1, 1, topics)).await;
        assert_eq!(
            r,
            all(ResponseError::InvalidProducerIdMapping.code()),
            "v{v}"
        );
        let r = add_at(&broker, v, &add_request("other", pid, 1, topics)).await;
        assert_eq!(
            r,
            all(ResponseError::InvalidProducerIdMapping.code()),
            "v{v}"
        );
    }
    // Commit without the background task: the markers wait, and so does
    // the next transaction.
    let r = add_at(&broker, 3, &add_request("tx", pid, 1, topics)).await;
    assert_eq!(r, all(0));
    assert_eq!(end(&broker, "tx", pid, 1, true).await, 0);
    for v in VERSIONS.0..=VERSIONS.1 {
        let r = add_at(&broker, v, &add_request("tx", pid, 1, topics)).await;
        assert_eq!(r, all(ResponseError::ConcurrentTransactions.code()), "v{v}");
    }
    let runner = start(&broker);
    wait_state(&broker, "tx", Some(TransactionState::CompleteCommit)).await;
    let r = add_at(&broker, 0, &add_request("tx", pid, 1, topics)).await;
    assert_eq!(r, all(0), "the next transaction");
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}
