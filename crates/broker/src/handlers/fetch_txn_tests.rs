//! Fetch and transactions, every version: `last_stable_offset` in every
//! answer, read_committed reads stop at it and report the aborted
//! transactions of the range, read_uncommitted unchanged, and a parked
//! read_committed fetch wakes when a marker moves the LSO.

use std::sync::Arc;

use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use sluice_protocol::record::BatchIter;

use super::super::test_support::{append, call, open_broker};
use super::*;
use crate::broker::Broker;
use crate::txn_markers::tests::{produce_txn, write};

fn request(
    broker: &Broker,
    version: i16,
    offset: i64,
    isolation: i8,
    max_wait_ms: i32,
) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    if version >= 13 {
        t.topic_id = broker.image().topic("t").expect("topic").id;
    } else {
        t.topic = TopicName(StrBytes::from_string("t".into()));
    }
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.isolation_level = isolation;
    req.session_epoch = -1;
    req.topics = vec![t];
    req
}

/// (high watermark, last stable offset, aborted (pid, first), record
/// offsets) of the only partition.
type Answer = (i64, i64, Option<Vec<(i64, i64)>>, Vec<i64>);

async fn fetch(broker: &Arc<Broker>, version: i16, offset: i64, isolation: i8) -> Answer {
    fetch_waiting(broker, version, offset, isolation, 0).await
}

async fn fetch_waiting(
    broker: &Arc<Broker>,
    version: i16,
    offset: i64,
    isolation: i8,
    max_wait_ms: i32,
) -> Answer {
    let req = request(broker, version, offset, isolation, max_wait_ms);
    let resp: FetchResponse = call(broker, ApiKey::Fetch, version, &req)
        .await
        .expect("response");
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let mut offsets = Vec::new();
    for b in BatchIter::new(p.records.as_deref().unwrap_or_default()) {
        let (_, h, _) = b.expect("batch");
        offsets.extend(h.base_offset..=h.last_offset());
    }
    (
        p.high_watermark,
        p.last_stable_offset,
        p.aborted_transactions.as_ref().map(|a| {
            a.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        }),
        offsets,
    )
}

const UNCOMMITTED: i8 = 0;
const COMMITTED: i8 = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_in_every_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("create");
    append(&broker, "t", 0, 1); // 0
    produce_txn(&broker, "t", 0, (7, 0, 0), 2); // 1-2
    produce_txn(&broker, "t", 0, (8, 0, 0), 1); // 3
    broker
        .write_txn_markers(write(7, 0, 0, false, &[("t", 0)]))
        .await; // 4
    append(&broker, "t", 0, 1); // 5
    for v in VERSIONS.0..=VERSIONS.1 {
        // read_uncommitted: everything, no aborted list, the LSO told.
        assert_eq!(
            fetch(&broker, v, 0, UNCOMMITTED).await,
            (6, 3, None, (0..6).collect()),
            "v{v}"
        );
        // read_committed: up to the LSO (8's open transaction at 3), with
        // 7's aborted transaction.
        assert_eq!(
            fetch(&broker, v, 0, COMMITTED).await,
            (6, 3, Some(vec![(7, 1)]), vec![0, 1, 2]),
            "v{v}"
        );
        // At the LSO: nothing, an empty list.
        assert_eq!(
            fetch(&broker, v, 3, COMMITTED).await,
            (6, 3, Some(vec![]), vec![]),
            "v{v}"
        );
    }
    // 8 commits: the LSO reaches the high watermark.
    broker
        .write_txn_markers(write(8, 0, 0, true, &[("t", 0)]))
        .await; // 6
    for v in VERSIONS.0..=VERSIONS.1 {
        assert_eq!(
            fetch(&broker, v, 0, COMMITTED).await,
            (7, 7, Some(vec![(7, 1)]), (0..7).collect()),
            "v{v}"
        );
        assert_eq!(
            fetch(&broker, v, 5, COMMITTED).await,
            (7, 7, Some(vec![]), vec![5, 6]),
            "v{v}"
        );
    }
    broker.shutdown().expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_read_committed_fetch_wakes_when_the_lso_moves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("create");
    produce_txn(&broker, "t", 0, (7, 0, 0), 2); // 0-1, open
    let b = Arc::clone(&broker);
    // Waits up to 60 s for a record below the LSO (none yet).
    let parked = tokio::spawn(async move { fetch_waiting(&b, 12, 0, COMMITTED, 60_000).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!parked.is_finished(), "nothing readable yet");
    broker
        .write_txn_markers(write(7, 0, 0, true, &[("t", 0)]))
        .await;
    // The marker moved the LSO: the fetch answers before its deadline.
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), parked)
        .await
        .expect("woken by the marker")
        .expect("fetch task");
    assert_eq!(got, (3, 3, Some(vec![]), vec![0, 1, 2]));
    broker.shutdown().expect("shutdown");
}
