//! AddOffsetsToTxn v0-v4 through the whole dispatch path: whole responses
//! per version.

use proto_kafka::messages::{ApiKey, GroupId, ProducerId};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_coordinator::offsets::coordinator_partition;
use sluice_coordinator::txn::{TopicPartition, TransactionState};

use super::*;
use crate::handlers::test_support::{call, open_broker};
use crate::txn_coordinator::testing::{end, init, start, state, txn_id, wait_state};

fn request(id: &str, pid: i64, epoch: i16, group: &str) -> AddOffsetsToTxnRequest {
    let mut r = AddOffsetsToTxnRequest::default();
    r.transactional_id = txn_id(id);
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.group_id = GroupId(StrBytes::from_string(group.to_string()));
    r
}

async fn add_at(broker: &Arc<Broker>, v: i16, req: &AddOffsetsToTxnRequest) -> i16 {
    let r: AddOffsetsToTxnResponse = call(broker, ApiKey::AddOffsetsToTxn, v, req)
        .await
        .expect("response");
    assert_eq!(
        r,
        AddOffsetsToTxnResponse::default().with_error_code(r.error_code)
    );
    r.error_code
}

/// Every version adds the group's `__consumer_offsets` partition (by the
/// group coordinator's partition count, `offsets.topic.num.partitions`
/// while the topic does not exist), and the commit's marker goes there.
#[tokio::test]
async fn every_version_adds_the_groups_offsets_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(
        dir.path(),
        &[
            ("transaction.state.log.num.partitions", "1"),
            ("offsets.topic.num.partitions", "7"),
        ],
    );
    let runner = start(&broker);
    for v in VERSIONS.0..=VERSIONS.1 {
        let id = format!("tx-{v}");
        let group = format!("group-{v}");
        let (pid, epoch) = init(&broker, &id, 60_000).await;
        assert_eq!(
            add_at(&broker, v, &request(&id, pid, epoch, &group)).await,
            0,
            "v{v}"
        );
        let shard = broker.txns.shard(&broker, &id, false).expect("shard");
        let parts = crate::groups::lock(&shard).machine.partitions(&id);
        let offsets = TopicPartition::new("__consumer_offsets", coordinator_partition(&group, 7));
        assert_eq!(parts, vec![offsets], "v{v}");
        assert_eq!(end(&broker, &id, pid, epoch, true).await, 0);
        // `__consumer_offsets` does not exist: the marker is skipped.
        wait_state(&broker, &id, Some(TransactionState::CompleteCommit)).await;
    }
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2; unknown ids
/// INVALID_PRODUCER_ID_MAPPING; CONCURRENT_TRANSACTIONS while markers are
/// pending; NOT_COORDINATOR before `__transaction_state` exists.
#[tokio::test]
async fn errors_per_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    for v in VERSIONS.0..=VERSIONS.1 {
        let code = add_at(&broker, v, &request("tx", 0, 0, "g")).await;
        assert_eq!(code, ResponseError::NotCoordinator.code(), "v{v}");
    }
    let (pid, _) = init(&broker, "tx", 60_000).await;
    let (_, epoch) = init(&broker, "tx", 60_000).await;
    for v in VERSIONS.0..=VERSIONS.1 {
        let fenced = if v >= 2 {
            ResponseError::ProducerFenced
        } else {
            ResponseError::InvalidProducerEpoch
        };
        let code = add_at(&broker, v, &request("tx", pid, epoch - 1, "g")).await;
        assert_eq!(code, fenced.code(), "v{v}");
        let code = add_at(&broker, v, &request("nobody", pid, epoch, "g")).await;
        assert_eq!(code, ResponseError::InvalidProducerIdMapping.code(), "v{v}");
    }
    assert_eq!(add_at(&broker, 0, &request("tx", pid, epoch, "g")).await, 0);
    assert_eq!(end(&broker, "tx", pid, epoch, false).await, 0);
    assert_eq!(state(&broker, "tx"), Some(TransactionState::PrepareAbort));
    for v in VERSIONS.0..=VERSIONS.1 {
        let code = add_at(&broker, v, &request("tx", pid, epoch, "g")).await;
        assert_eq!(code, ResponseError::ConcurrentTransactions.code(), "v{v}");
    }
    broker.shutdown().expect("shutdown");
}
