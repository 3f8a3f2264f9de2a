//! ListOffsets (key 2), v1-10 as Kafka 4 serves them (v0 was removed in
//! Kafka 4.0, KIP-896). Per partition, the offset for a target timestamp:
//! - `-1` latest: what the requester may read: for consumers the last
//!   stable offset under read_committed (`isolation_level` 1, v2+) and the
//!   high watermark under read_uncommitted; the log end for followers and
//!   the debugging replica (Kafka's `Partition.fetchOffsetForTimestamp`);
//! - `-2` earliest and (v8+, KIP-405) `-4` earliest-local: the log start
//!   offset (without tiered storage the local log is the whole log, as
//!   Kafka's `UnifiedLog.fetchOffsetByTimestamp` answers when remote storage
//!   is disabled);
//! - `-3` (v7+, KIP-734) the record with the largest timestamp;
//! - `-5` (v9+, KIP-1005) the last tiered offset: -1 with leader epoch -1,
//!   Kafka's answer for a topic without remote storage;
//! - a timestamp >= 0: the first record at or after it (time index).
//!
//! Any other negative target, or one newer than the request version, is
//! UNSUPPORTED_VERSION for that partition; a partition named twice is
//! INVALID_REQUEST (Kafka's `ReplicaManager.fetchOffset`). A lookup that
//! lands at or past what the requester may read (the same bound as
//! latest) answers offset -1. v4+
//! carry leader epochs: the request's `current_leader_epoch` is checked
//! (older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH) and answers
//! carry the epoch of the returned offset. v10's `timeout_ms` bounds reads
//! from remote storage, which a single node without tiering never does.

use std::collections::HashSet;
use std::sync::Arc;

use proto_kafka::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use proto_kafka::messages::{ListOffsetsRequest, ListOffsetsResponse};
use proto_kafka::ResponseError;
use sluice_controller::PartitionImage;
use sluice_storage::{Log, OffsetSpec};

use super::errors::storage_error;
use super::offset_for_leader_epoch::check_current_epoch;
use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (1, 10);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
/// `ListOffsetsRequest.CONSUMER_REPLICA_ID`: an ordinary client.
const CONSUMER_REPLICA_ID: i32 = -1;
/// `RecordBatch.NO_PARTITION_LEADER_EPOCH`.
const NO_EPOCH: i32 = -1;

/// The first request version that may ask for a special target
/// (Kafka's `ReplicaManager.timestampMinSupportedVersion`); `None` for
/// negative targets Kafka does not know.
fn min_version(target: i64) -> Option<i16> {
    match target {
        LATEST | EARLIEST => Some(1),
        MAX_TIMESTAMP => Some(7),
        EARLIEST_LOCAL => Some(8),
        LATEST_TIERED => Some(9),
        t if t >= 0 => Some(1),
        _ => None,
    }
}

/// `IsolationLevel.READ_COMMITTED`.
const READ_COMMITTED: i8 = 1;

/// What the requester may read (Kafka's `lastFetchableOffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Followers and the debugging replica.
    LogEnd,
    /// Consumers, read_uncommitted.
    HighWatermark,
    /// Consumers, read_committed.
    LastStable,
}

/// What a lookup found: offset, timestamp, leader epoch.
struct Found {
    offset: i64,
    timestamp: i64,
    epoch: Option<i32>,
}

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ListOffsetsRequest,
    ctx: &Ctx,
) -> ListOffsetsResponse {
    let client = req.replica_id.0 == CONSUMER_REPLICA_ID;
    // Kafka reads the isolation level only from consumers (v2+).
    let read_committed = client && ctx.version >= 2 && req.isolation_level == READ_COMMITTED;
    let image = broker.image();
    // Partitions named more than once anywhere in the request.
    let mut seen = HashSet::new();
    let duplicates: HashSet<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .filter(|k| !seen.insert(k.clone()))
        .collect();
    let mut answered = HashSet::new();
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut partitions = Vec::new();
        for p in t.partitions {
            if !answered.insert((name.clone(), p.partition_index)) {
                continue;
            }
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            pr.leader_epoch = NO_EPOCH;
            let state = image
                .topic(&name)
                .and_then(|t| t.partitions.get(&p.partition_index));
            let result = if duplicates.contains(&(name.clone(), p.partition_index)) {
                Err(ResponseError::InvalidRequest)
            } else if min_version(p.timestamp).is_none_or(|v| ctx.version < v) {
                Err(ResponseError::UnsupportedVersion)
            } else {
                match (state, broker.log(&name, p.partition_index)) {
                    (Some(state), Some(log)) => {
                        let current = if ctx.version >= 4 {
                            p.current_leader_epoch
                        } else {
                            NO_EPOCH
                        };
                        let bound = if !client {
                            Bound::LogEnd
                        } else if read_committed {
                            Bound::LastStable
                        } else {
                            Bound::HighWatermark
                        };
                        lookup(&log, state, current, p.timestamp, bound)
                    }
                    _ => Err(ResponseError::UnknownTopicOrPartition),
                }
            };
            match result {
                Ok(Some(found)) => {
                    pr.offset = found.offset;
                    pr.timestamp = found.timestamp;
                    if ctx.version >= 4 {
                        pr.leader_epoch = found.epoch.unwrap_or(NO_EPOCH);
                    }
                }
                Ok(None) => {}
                Err(code) => pr.error_code = code.code(),
            }
            partitions.push(pr);
        }
        // A topic named twice is answered once, as Kafka groups by topic.
        match resp.topics.iter_mut().find(|r| r.name == t.name) {
            Some(existing) => existing.partitions.extend(partitions),
            None => {
                let mut tr = ListOffsetsTopicResponse::default();
                tr.name = t.name;
                tr.partitions = partitions;
                resp.topics.push(tr);
            }
        }
    }
    resp
}

/// One partition's lookup (Kafka's `Partition.fetchOffsetForTimestamp`
/// over `UnifiedLog.fetchOffsetByTimestamp`).
fn lookup(
    log: &Log,
    state: &PartitionImage,
    current_epoch: i32,
    target: i64,
    bound: Bound,
) -> Result<Option<Found>, ResponseError> {
    if log.is_offline() {
        return Err(ResponseError::KafkaStorageError);
    }
    check_current_epoch(current_epoch, state.leader_epoch)?;
    let last_fetchable = match bound {
        Bound::LogEnd => log.log_end_offset(),
        Bound::HighWatermark => log.high_watermark(),
        Bound::LastStable => log.last_stable_offset(),
    };
    let epochs = log.leader_epochs();
    let spec = match target {
        LATEST => {
            return Ok(Some(Found {
                offset: last_fetchable,
                timestamp: -1,
                epoch: Some(state.leader_epoch),
            }))
        }
        EARLIEST | EARLIEST_LOCAL => {
            let start = log.log_start_offset();
            // The first cached epoch, when it covers the log start.
            let epoch = epochs.first().filter(|(_, s)| *s <= start).map(|(e, _)| *e);
            return Ok(Some(Found {
                offset: start,
                timestamp: -1,
                epoch,
            }));
        }
        LATEST_TIERED => {
            return Ok(Some(Found {
                offset: -1,
                timestamp: -1,
                epoch: Some(NO_EPOCH),
            }))
        }
        MAX_TIMESTAMP => OffsetSpec::MaxTimestamp,
        ts => OffsetSpec::Timestamp(ts),
    };
    let found = log.fetch_offset(spec).map_err(|e| storage_error(&e).code)?;
    Ok(found
        .filter(|to| to.offset < last_fetchable)
        .map(|to| Found {
            offset: to.offset,
            timestamp: to.timestamp,
            epoch: epoch_for_offset(&epochs, to.offset),
        }))
}

/// The epoch of the batch holding `offset`: the last cache entry starting
/// at or before it (Kafka's `LeaderEpochFileCache.epochForOffset`).
fn epoch_for_offset(epochs: &[(i32, i64)], offset: i64) -> Option<i32> {
    epochs
        .iter()
        .rev()
        .find(|(_, start)| *start <= offset)
        .map(|(e, _)| *e)
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use proto_kafka::messages::{ApiKey, BrokerId, TopicName};
    use proto_kafka::protocol::StrBytes;
    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    use super::*;
    use crate::handlers::test_support::{ctx, open_broker, roundtrip};

    fn topic(name: &str, parts: &[(i32, i64, i32)]) -> ListOffsetsTopic {
        let mut t = ListOffsetsTopic::default();
        t.name = TopicName(StrBytes::from_string(name.into()));
        t.partitions = parts
            .iter()
            .map(|&(p, ts, epoch)| {
                let mut x = ListOffsetsPartition::default();
                x.partition_index = p;
                x.timestamp = ts;
                x.current_leader_epoch = epoch;
                x
            })
            .collect();
        t
    }

    fn request(replica: i32, topics: Vec<ListOffsetsTopic>) -> ListOffsetsRequest {
        let mut r = ListOffsetsRequest::default();
        r.replica_id = BrokerId(replica);
        r.topics = topics;
        r
    }

    /// `(partition, error, timestamp, offset, leader epoch)` per topic.
    type Row = (i32, i16, i64, i64, i32);

    fn rows(resp: &ListOffsetsResponse) -> Vec<(String, Vec<Row>)> {
        resp.topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| {
                            (
                                p.partition_index,
                                p.error_code,
                                p.timestamp,
                                p.offset,
                                p.leader_epoch,
                            )
                        })
                        .collect(),
                )
            })
            .collect()
    }

    fn call(broker: &Arc<Broker>, version: i16, req: ListOffsetsRequest) -> ListOffsetsResponse {
        let req = roundtrip(&req, version);
        roundtrip(
            &handle(broker, req, &ctx(ApiKey::ListOffsets, version)),
            version,
        )
    }

    /// Appends one batch per timestamp at `epoch` (the log's epoch cache
    /// records it), leaving the high watermark where `hw` says.
    fn append(broker: &Broker, topic: &str, epoch: i32, timestamps: &[i64]) {
        let log = broker.log(topic, 0).expect("log");
        for &ts in timestamps {
            let mut b = BatchBuilder::new(Compression::None, ts);
            b.push(Record::new(None, Some(b"v".to_vec()), ts));
            let mut bytes = b.build(0).expect("batch");
            log.append_as_leader(&mut bytes, epoch).expect("append");
        }
    }

    const NONE: i16 = 0;
    const READ_COMMITTED: i8 = 1;

    #[test]
    fn every_target_at_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        // Offsets 0..4 with timestamps 1000, 3000, 2000, 5000, 4000.
        append(&broker, "t", 0, &[1000, 3000, 2000, 5000, 4000]);
        let log = broker.log("t", 0).expect("log");
        log.set_high_watermark(5);
        let targets = [
            LATEST,
            EARLIEST,
            MAX_TIMESTAMP,
            EARLIEST_LOCAL,
            LATEST_TIERED,
            2500,
            9000,
            -6,
        ];
        for version in VERSIONS.0..=VERSIONS.1 {
            let parts: Vec<(i32, i64, i32)> = targets.iter().map(|&ts| (0, ts, -1)).collect();
            // One partition per request: the same partition twice is an error.
            let got: Vec<Row> = parts
                .iter()
                .map(|p| {
                    let resp = call(&broker, version, request(-1, vec![topic("t", &[*p])]));
                    rows(&resp)[0].1[0]
                })
                .collect();
            let e = |epoch: i32| if version >= 4 { epoch } else { -1 };
            let unsupported = (0, ResponseError::UnsupportedVersion.code(), -1, -1, -1);
            let expected: Vec<Row> = vec![
                (0, NONE, -1, 5, e(0)),
                (0, NONE, -1, 0, e(0)),
                if version >= 7 {
                    (0, NONE, 5000, 3, e(0))
                } else {
                    unsupported
                },
                if version >= 8 {
                    (0, NONE, -1, 0, e(0))
                } else {
                    unsupported
                },
                if version >= 9 {
                    (0, NONE, -1, -1, -1)
                } else {
                    unsupported
                },
                (0, NONE, 3000, 1, e(0)),
                (0, NONE, -1, -1, -1),
                unsupported,
            ];
            assert_eq!(got, expected, "v{version}");
        }
    }

    #[test]
    fn consumers_see_the_high_watermark_replicas_the_log_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        append(&broker, "t", 0, &[1000, 2000, 3000]);
        broker.log("t", 0).expect("log").set_high_watermark(2);
        let ask = |replica: i32, ts: i64, isolation: i8| {
            let mut r = request(replica, vec![topic("t", &[(0, ts, -1)])]);
            r.isolation_level = isolation;
            rows(&call(&broker, 10, r))[0].1[0]
        };
        // Consumer (either isolation level): the high watermark, and no
        // lookup result past it.
        assert_eq!(ask(-1, LATEST, 0), (0, NONE, -1, 2, 0));
        assert_eq!(ask(-1, LATEST, READ_COMMITTED), (0, NONE, -1, 2, 0));
        assert_eq!(ask(-1, 3000, 0), (0, NONE, -1, -1, -1));
        assert_eq!(ask(-1, MAX_TIMESTAMP, 0), (0, NONE, -1, -1, -1));
        assert_eq!(ask(-1, 2000, 0), (0, NONE, 2000, 1, 0));
        // A follower (id >= 0) and the debugging replica (-2): the log end.
        for replica in [1, -2] {
            assert_eq!(ask(replica, LATEST, 0), (0, NONE, -1, 3, 0));
            assert_eq!(ask(replica, 3000, 0), (0, NONE, 3000, 2, 0));
        }
    }

    #[test]
    fn leader_epochs_come_from_the_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        // Epoch 0 writes offsets 0-1, epoch 3 offsets 2-3 (as after leader
        // changes in a cluster).
        append(&broker, "t", 0, &[1000, 2000]);
        append(&broker, "t", 3, &[3000, 4000]);
        let log = broker.log("t", 0).expect("log");
        log.set_high_watermark(4);
        let ask = |ts: i64| {
            rows(&call(
                &broker,
                9,
                request(-1, vec![topic("t", &[(0, ts, -1)])]),
            ))[0]
                .1[0]
        };
        assert_eq!(ask(1500), (0, NONE, 2000, 1, 0));
        assert_eq!(ask(2500), (0, NONE, 3000, 2, 3));
        assert_eq!(ask(MAX_TIMESTAMP), (0, NONE, 4000, 3, 3));
        assert_eq!(ask(EARLIEST), (0, NONE, -1, 0, 0));
        // Latest carries the partition's current epoch (0 on this node).
        assert_eq!(ask(LATEST), (0, NONE, -1, 4, 0));
        // After DeleteRecords past epoch 0's batches, earliest is in epoch 3.
        log.advance_log_start_offset(2).expect("delete records");
        assert_eq!(ask(EARLIEST), (0, NONE, -1, 2, 3));
        assert_eq!(ask(EARLIEST_LOCAL), (0, NONE, -1, 2, 3));
    }

    #[test]
    fn errors_per_partition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        let req = request(
            -1,
            vec![
                topic("t", &[(0, LATEST, -1), (1, LATEST, 0), (9, LATEST, -1)]),
                topic("missing", &[(0, EARLIEST, -1)]),
                // Partition 0 again, in a second entry for the same topic.
                topic("t", &[(0, EARLIEST, -1)]),
            ],
        );
        let resp = call(&broker, 6, req);
        let invalid = ResponseError::InvalidRequest.code();
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(
            rows(&resp),
            vec![
                (
                    "t".to_string(),
                    vec![
                        (0, invalid, -1, -1, -1),
                        (1, NONE, -1, 0, 0),
                        (9, unknown, -1, -1, -1)
                    ]
                ),
                ("missing".to_string(), vec![(0, unknown, -1, -1, -1)]),
            ]
        );
        // Current leader epoch checks (v4+): older is fenced, newer unknown.
        let ask = |version: i16, epoch: i32| {
            rows(&call(
                &broker,
                version,
                request(-1, vec![topic("t", &[(1, LATEST, epoch)])]),
            ))[0]
                .1[0]
                .1
        };
        assert_eq!(ask(4, 0), NONE);
        assert_eq!(ask(4, 1), ResponseError::UnknownLeaderEpoch.code());
        assert_eq!(ask(10, -1), NONE);
        // v1-3 carry no epoch: nothing to check.
        assert_eq!(ask(3, -1), NONE);
    }

    /// Under read_committed (v2+) latest is the last stable offset, and a
    /// lookup past it answers -1; read_uncommitted and replicas are
    /// unchanged; v1 has no isolation level.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_committed_latest_is_the_last_stable_offset() {
        use crate::txn_markers::tests::{produce_txn, write};
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        append(&broker, "t", 0, &[1000, 2000]); // 0-1
        broker
            .partition("t", 0)
            .expect("partition")
            .maybe_advance_high_watermark();
        produce_txn(&broker, "t", 0, (7, 0, 0), 2); // 2-3, open
        let ask = |version: i16, replica: i32, ts: i64, isolation: i8| {
            let mut r = request(replica, vec![topic("t", &[(0, ts, -1)])]);
            r.isolation_level = isolation;
            rows(&call(&broker, version, r))[0].1[0]
        };
        let e = |v: i16| if v >= 4 { 0 } else { -1 };
        for v in 2..=VERSIONS.1 {
            assert_eq!(
                ask(v, -1, LATEST, READ_COMMITTED),
                (0, NONE, -1, 2, e(v)),
                "v{v}"
            );
            assert_eq!(ask(v, -1, LATEST, 0), (0, NONE, -1, 4, e(v)), "v{v}");
            assert_eq!(
                ask(v, 1, LATEST, READ_COMMITTED),
                (0, NONE, -1, 4, e(v)),
                "v{v}"
            );
            // The transaction's records (timestamp now) lie past the LSO.
            assert_eq!(
                ask(v, -1, 3000, READ_COMMITTED),
                (0, NONE, -1, -1, -1),
                "v{v}"
            );
            assert_eq!(
                ask(v, -1, 1500, READ_COMMITTED),
                (0, NONE, 2000, 1, e(v)),
                "v{v}"
            );
        }
        // v1 carries no isolation level: the high watermark.
        assert_eq!(ask(1, -1, LATEST, 0), (0, NONE, -1, 4, -1));
        broker
            .write_txn_markers(write(7, 0, 0, false, &[("t", 0)]))
            .await;
        assert_eq!(ask(10, -1, LATEST, READ_COMMITTED), (0, NONE, -1, 5, 0));
        broker.shutdown().expect("shutdown");
    }
}
