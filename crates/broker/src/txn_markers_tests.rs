//! `Broker::write_txn_markers`: markers complete transactions on data
//! partitions (LSO, aborted transactions) and on `__consumer_offsets`
//! (pending offsets), with Kafka's per-partition errors.

use std::sync::Arc;

use proto_kafka::ResponseError;
use sluice_protocol::record::codec::ProducerInfo;
use sluice_protocol::record::{BatchBuilder, Compression, Record};
use sluice_storage::AppendOrigin;

use super::MarkerWrite;
use crate::broker::Broker;
use crate::handlers::test_support::open_broker;

/// Appends a transactional batch of `n` records of producer `pid` (as its
/// client would, through the partition layer); returns its base offset.
pub(crate) fn produce_txn(
    broker: &Broker,
    topic: &str,
    partition: i32,
    (pid, epoch, seq): (i64, i16, i32),
    n: usize,
) -> i64 {
    let part = broker.partition(topic, partition).expect("partition");
    let now = crate::groups::now_ms();
    let mut b = BatchBuilder::new(Compression::None, now).producer(
        ProducerInfo {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        },
        true,
    );
    for i in 0..n {
        b.push(Record::new(
            Some(format!("k{i}").into_bytes()),
            Some(format!("txn {pid} #{}", seq + i as i32).into_bytes()),
            now,
        ));
    }
    let mut bytes = b.build(0).expect("batch");
    let info = part
        .log()
        .append_as_leader_from(&mut bytes, part.leader_epoch(), AppendOrigin::Client)
        .expect("produce");
    part.maybe_advance_high_watermark();
    info.base_offset
}

pub(crate) fn write(
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    partitions: &[(&str, i32)],
) -> MarkerWrite {
    MarkerWrite {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch,
        commit,
        partitions: partitions
            .iter()
            .map(|(t, p)| ((*t).to_string(), *p))
            .collect(),
    }
}

type Answer = Vec<((String, i32), Option<ResponseError>)>;

fn answer(rows: &[(&str, i32, Option<ResponseError>)]) -> Answer {
    rows.iter()
        .map(|(t, p, e)| (((*t).to_string(), *p), *e))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_complete_transactions_with_kafkas_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker: Arc<Broker> = open_broker(dir.path(), &[]);
    broker.create_topic("t", 2, 1, &[], false).expect("create");
    let log0 = broker.log("t", 0).expect("log");
    let log1 = broker.log("t", 1).expect("log");
    produce_txn(&broker, "t", 0, (7, 0, 0), 3); // 0-2
    produce_txn(&broker, "t", 1, (7, 0, 0), 2); // 0-1
    produce_txn(&broker, "t", 1, (8, 0, 0), 1); // 2
    assert_eq!(
        (log0.last_stable_offset(), log1.last_stable_offset()),
        (0, 0)
    );

    let got = broker
        .write_txn_markers(write(
            7,
            0,
            3,
            false,
            &[("t", 0), ("t", 1), ("t", 9), ("nope", 0)],
        ))
        .await;
    assert_eq!(
        got,
        answer(&[
            ("t", 0, None),
            ("t", 1, None),
            ("t", 9, Some(ResponseError::UnknownTopicOrPartition)),
            ("nope", 0, Some(ResponseError::UnknownTopicOrPartition)),
        ])
    );
    // Partition 0 is stable; partition 1 waits for 8's transaction.
    assert_eq!(log0.last_stable_offset(), 4);
    assert_eq!(log0.high_watermark(), 4);
    assert_eq!(log1.last_stable_offset(), 2);
    let aborted = log0.collect_aborted_txns(0, i64::MAX);
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (
            aborted[0].producer_id,
            aborted[0].first_offset,
            aborted[0].last_offset
        ),
        (7, 0, 3)
    );

    // A stale producer epoch, a stale coordinator epoch: refused by the
    // partition's producer state, nothing written.
    let end = log1.log_end_offset();
    let got = broker
        .write_txn_markers(write(7, -1, 3, true, &[("t", 1)]))
        .await;
    assert_eq!(
        got,
        answer(&[("t", 1, Some(ResponseError::InvalidProducerEpoch))])
    );
    let got = broker
        .write_txn_markers(write(7, 0, 2, true, &[("t", 1)]))
        .await;
    assert_eq!(
        got,
        answer(&[("t", 1, Some(ResponseError::TransactionCoordinatorFenced))])
    );
    assert_eq!(log1.log_end_offset(), end);
    // A retry of the same marker is written again (Kafka does not dedupe
    // markers); it completes nothing.
    let got = broker
        .write_txn_markers(write(8, 0, 3, true, &[("t", 1)]))
        .await;
    assert_eq!(got, answer(&[("t", 1, None)]));
    assert_eq!(log1.last_stable_offset(), log1.high_watermark());
    let got = broker
        .write_txn_markers(write(8, 0, 3, true, &[("t", 1)]))
        .await;
    assert_eq!(got, answer(&[("t", 1, None)]));
    assert_eq!(log1.last_stable_offset(), log1.log_end_offset());
    broker.shutdown().expect("shutdown");
}
