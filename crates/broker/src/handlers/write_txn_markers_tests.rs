//! WriteTxnMarkers v1 through the whole dispatch path: whole responses,
//! markers of one producer merged, per-partition errors, v0 refused.

use proto_kafka::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use proto_kafka::messages::{ApiKey, ProducerId};
use proto_kafka::ResponseError;

use super::super::test_support::{call, open_broker};
use super::*;
use crate::txn_markers::tests::produce_txn;

fn marker(pid: i64, epoch: i16, commit: bool, topics: &[(&str, &[i32])]) -> WritableTxnMarker {
    let mut m = WritableTxnMarker::default();
    m.producer_id = ProducerId(pid);
    m.producer_epoch = epoch;
    m.transaction_result = commit;
    m.coordinator_epoch = 0;
    m.topics = topics
        .iter()
        .map(|(t, ps)| {
            let mut wt = WritableTxnMarkerTopic::default();
            wt.name = TopicName(StrBytes::from_string((*t).into()));
            wt.partition_indexes = ps.to_vec();
            wt
        })
        .collect();
    m
}

/// (producer id, [(topic, [(partition, error)])]) in response order.
type Rows = Vec<(i64, Vec<(String, Vec<(i32, i16)>)>)>;

fn rows(resp: &WriteTxnMarkersResponse) -> Rows {
    resp.markers
        .iter()
        .map(|m| {
            (
                m.producer_id.0,
                m.topics
                    .iter()
                    .map(|t| {
                        (
                            t.name.0.to_string(),
                            t.partitions
                                .iter()
                                .map(|p| (p.partition_index, p.error_code))
                                .collect(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_writes_markers_and_answers_per_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("a", 2, 1, &[], false).expect("create");
    broker.create_topic("b", 1, 1, &[], false).expect("create");
    produce_txn(&broker, "a", 0, (1, 0, 0), 2);
    produce_txn(&broker, "a", 1, (1, 0, 0), 2);
    produce_txn(&broker, "b", 0, (2, 3, 0), 1);

    let mut req = WriteTxnMarkersRequest::default();
    req.markers = vec![
        marker(1, 0, false, &[("a", &[0, 7]), ("zz", &[0])]),
        marker(2, 2, true, &[("b", &[0])]),
        // Producer 1 again: merged into its entry, as Kafka's map does.
        marker(1, 0, false, &[("a", &[1])]),
    ];
    let resp: WriteTxnMarkersResponse = call(&broker, ApiKey::WriteTxnMarkers, 1, &req)
        .await
        .expect("response");
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        rows(&resp),
        vec![
            (
                1,
                vec![
                    ("a".into(), vec![(0, 0), (7, unknown), (1, 0)]),
                    ("zz".into(), vec![(0, unknown)]),
                ]
            ),
            (
                2,
                vec![(
                    "b".into(),
                    vec![(0, ResponseError::InvalidProducerEpoch.code())]
                )]
            ),
        ]
    );
    for p in [0, 1] {
        let log = broker.log("a", p).expect("log");
        assert_eq!(log.last_stable_offset(), 3, "a-{p}");
        assert_eq!(log.collect_aborted_txns(0, i64::MAX).len(), 1);
    }
    // b-0: the stale-epoch marker was refused, its transaction still open.
    assert_eq!(broker.log("b", 0).expect("log").last_stable_offset(), 0);

    // No markers: an empty response.
    let resp: WriteTxnMarkersResponse = call(
        &broker,
        ApiKey::WriteTxnMarkers,
        1,
        &WriteTxnMarkersRequest::default(),
    )
    .await
    .expect("response");
    assert!(resp.markers.is_empty());
    assert_eq!(VERSIONS, (1, 1), "v0 was removed in Kafka 4, v2 is TV2");
    broker.shutdown().expect("shutdown");
}
