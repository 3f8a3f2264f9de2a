//! Fetching: one `Fetch` request per partition leader, run as a background
//! task on a connection owned by the consumer (separate from the cluster's
//! shared connections, so a long-polling fetch never delays metadata,
//! commits or heartbeats), and the decoding of its answer into
//! [`ConsumerRecord`]s.
//!
//! Decoding follows the Java consumer: records before the fetch offset (a
//! compressed batch may start earlier) are skipped, control batches are
//! never returned, and under `read_committed` the records of aborted
//! transactions are dropped using the response's aborted-transaction list.
//! The fetch position moves past the last batch returned even when none of
//! its records is visible (compaction gaps, control batches).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use sluice_protocol::record::batch::{validate_crc, HEADER_LEN};
use sluice_protocol::record::codec::{decode_batch, for_each_record};
use sluice_protocol::record::{BatchIter, Compression, TimestampType};

use crate::admin::IsolationLevel;
use crate::connection::{Connection, ConnectionConfig};
use crate::consumer::ConsumerRecord;
use crate::error::{ClientError, Result};
use crate::TopicPartition;

/// Highest Fetch version used (v13 replaces topic names with topic ids).
const FETCH_MAX: i16 = 12;
/// Largest decompressed batch accepted (a guard against decompression
/// bombs; far above any `max.message.bytes`).
const MAX_DECOMPRESSED: usize = 1 << 30;
/// Control record type of an abort marker.
const ABORT_MARKER: i16 = 0;

/// What to fetch from one broker.
#[derive(Debug, Clone)]
pub(crate) struct FetchPlan {
    /// Leader broker id.
    pub broker: i32,
    /// Its `host:port`.
    pub addr: String,
    /// Partitions and the offsets to fetch from.
    pub partitions: Vec<(TopicPartition, i64)>,
    /// The leader epoch our metadata has for each partition, sent as
    /// `current_leader_epoch` (Fetch v9+, KIP-320): a broker whose epoch
    /// differs answers FENCED_LEADER_EPOCH (our metadata is older) or
    /// UNKNOWN_LEADER_EPOCH (the broker's is) instead of serving data.
    pub leader_epochs: BTreeMap<TopicPartition, i32>,
}

/// Fetch limits copied from the consumer config.
#[derive(Debug, Clone)]
pub(crate) struct FetchSettings {
    pub connection: ConnectionConfig,
    pub max_wait: Duration,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub isolation: IsolationLevel,
    pub check_crcs: bool,
}

/// Records fetched for one partition.
#[derive(Debug)]
pub(crate) struct FetchedData {
    /// Visible records at or after the fetch offset, in offset order.
    pub records: VecDeque<ConsumerRecord>,
    /// Where the next fetch starts (past the last complete batch).
    pub next_offset: i64,
    /// The partition's high watermark.
    pub high_watermark: i64,
}

/// The outcome for one partition of a fetch.
#[derive(Debug)]
pub(crate) struct PartitionFetch {
    pub tp: TopicPartition,
    /// The offset this fetch started from.
    pub fetch_offset: i64,
    /// Data, or a Kafka error / decoding failure for this partition.
    pub result: Result<FetchedData>,
    /// The broker's current-leader hint (KIP-951, v12+): leader id and
    /// epoch, sent with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH.
    pub current_leader: Option<(i32, i32)>,
}

/// The outcome of one fetch request.
#[derive(Debug)]
pub(crate) struct FetchOutcome {
    pub broker: i32,
    /// The connection, handed back when still healthy.
    pub conn: Option<Connection>,
    /// Per-partition results, or the transport error that failed them all.
    pub result: Result<Vec<PartitionFetch>>,
    /// The partitions the request asked for (to release them on failure).
    pub partitions: Vec<(TopicPartition, i64)>,
}

/// Sends one fetch and decodes its answer (run in a spawned task).
pub(crate) async fn run_fetch(
    plan: FetchPlan,
    conn: Option<Connection>,
    settings: FetchSettings,
) -> FetchOutcome {
    let mut conn = match conn {
        Some(c) if !c.is_broken() => c,
        _ => match Connection::connect(&plan.addr, settings.connection.clone()).await {
            Ok(c) => c,
            Err(e) => {
                return FetchOutcome {
                    broker: plan.broker,
                    conn: None,
                    result: Err(e),
                    partitions: plan.partitions,
                }
            }
        },
    };
    let result = fetch_once(&mut conn, &plan, &settings).await;
    FetchOutcome {
        broker: plan.broker,
        conn: (!conn.is_broken()).then_some(conn),
        result,
        partitions: plan.partitions,
    }
}

async fn fetch_once(
    conn: &mut Connection,
    plan: &FetchPlan,
    settings: &FetchSettings,
) -> Result<Vec<PartitionFetch>> {
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = i32::try_from(settings.max_wait.as_millis()).unwrap_or(i32::MAX);
    req.min_bytes = settings.min_bytes;
    req.max_bytes = settings.max_bytes;
    req.isolation_level = settings.isolation.as_i8();
    // A sessionless full fetch (KIP-227: session id 0, epoch -1).
    req.session_id = 0;
    req.session_epoch = -1;
    let mut by_topic: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for (tp, offset) in &plan.partitions {
        let mut p = FetchPartition::default();
        p.partition = tp.partition;
        p.current_leader_epoch = plan.leader_epochs.get(tp).copied().unwrap_or(-1);
        p.fetch_offset = *offset;
        p.last_fetched_epoch = -1;
        p.log_start_offset = -1;
        p.partition_max_bytes = settings.partition_max_bytes;
        by_topic.entry(tp.topic.as_str()).or_default().push(p);
    }
    for (topic, partitions) in by_topic {
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = partitions;
        req.topics.push(t);
    }
    // The broker may hold the request for max_wait; allow for that on top of
    // the request timeout.
    let (resp, _): (FetchResponse, i16) = conn.send_negotiated(&req, FETCH_MAX).await?;
    if let Some(e) = ClientError::from_code(resp.error_code, None, "fetch") {
        return Err(e);
    }
    let offsets: BTreeMap<(&str, i32), i64> = plan
        .partitions
        .iter()
        .map(|(tp, o)| ((tp.topic.as_str(), tp.partition), *o))
        .collect();
    let mut out = Vec::new();
    for topic in resp.responses {
        let name = topic.topic.0.as_str().to_string();
        for p in topic.partitions {
            let Some(&fetch_offset) = offsets.get(&(name.as_str(), p.partition_index)) else {
                continue;
            };
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            let context = format!("fetch {}-{} at {fetch_offset}", name, p.partition_index);
            let result = match ClientError::from_code(p.error_code, None, context) {
                Some(e) => Err(e),
                None => decode_partition(
                    &tp,
                    fetch_offset,
                    p.records.as_ref(),
                    p.aborted_transactions.as_deref().unwrap_or_default(),
                    settings,
                )
                .map(|(records, next_offset)| FetchedData {
                    records,
                    next_offset,
                    high_watermark: p.high_watermark,
                }),
            };
            let hint = &p.current_leader;
            let current_leader =
                (p.error_code != 0 && hint.leader_id.0 >= 0 && hint.leader_epoch >= 0)
                    .then_some((hint.leader_id.0, hint.leader_epoch));
            out.push(PartitionFetch {
                tp,
                fetch_offset,
                result,
                current_leader,
            });
        }
    }
    Ok(out)
}

/// Decodes one partition's record bytes into visible records; returns them
/// and the next fetch offset.
fn decode_partition(
    tp: &TopicPartition,
    fetch_offset: i64,
    records: Option<&Bytes>,
    aborted: &[proto_kafka::messages::fetch_response::AbortedTransaction],
    settings: &FetchSettings,
) -> Result<(VecDeque<ConsumerRecord>, i64)> {
    let mut out = VecDeque::new();
    let mut next_offset = fetch_offset;
    let Some(bytes) = records else {
        return Ok((out, next_offset));
    };
    let read_committed = settings.isolation == IsolationLevel::ReadCommitted;
    // The topic name every record of this partition shares.
    let topic: Arc<str> = Arc::from(tp.topic.as_str());
    // Aborted transactions by first offset (smallest first).
    let mut pending: BinaryHeap<Reverse<(i64, i64)>> = aborted
        .iter()
        .map(|a| Reverse((a.first_offset, a.producer_id.0)))
        .collect();
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let bad = |what: String| ClientError::Protocol(format!("{tp} at {fetch_offset}: {what}"));
    for item in BatchIter::new(bytes) {
        let (_, header, raw) = item.map_err(|e| bad(e.to_string()))?;
        if header.magic != 2 {
            return Err(bad(format!(
                "unsupported record batch magic {}",
                header.magic
            )));
        }
        if header.last_offset() < fetch_offset {
            continue;
        }
        if settings.check_crcs {
            validate_crc(raw).map_err(|e| bad(e.to_string()))?;
        }
        next_offset = next_offset.max(header.last_offset() + 1);
        if read_committed && header.is_transactional() {
            while let Some(Reverse((first, pid))) = pending.peek().copied() {
                if first > header.last_offset() {
                    break;
                }
                pending.pop();
                aborted_producers.insert(pid);
            }
        }
        if header.is_control() {
            let decoded = decode_batch(raw, MAX_DECOMPRESSED).map_err(|e| bad(e.to_string()))?;
            if read_committed {
                let abort = decoded
                    .records
                    .first()
                    .and_then(|r| r.record.key.as_deref())
                    .is_some_and(|k| {
                        k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == ABORT_MARKER
                    });
                if abort {
                    aborted_producers.remove(&header.producer_id);
                }
            }
            continue;
        }
        if read_committed
            && header.is_transactional()
            && aborted_producers.contains(&header.producer_id)
        {
            continue;
        }
        // Keys, values and header values are slices of the response frame
        // (of the decompressed payload for a compressed batch): no copy.
        let body = raw
            .get(HEADER_LEN..header.total_size())
            .ok_or_else(|| bad("record batch shorter than its header".into()))?;
        let payload = match header.compression().map_err(|e| bad(e.to_string()))? {
            Compression::None => bytes.slice_ref(body),
            c => Bytes::from(
                c.decompress(body, MAX_DECOMPRESSED)
                    .map_err(|e| bad(e.to_string()))?,
            ),
        };
        let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
        let slice = |b: &[u8]| payload.slice_ref(b);
        for_each_record(&header, &payload, |r| {
            if r.offset < fetch_offset {
                return;
            }
            out.push_back(ConsumerRecord {
                topic: Arc::clone(&topic),
                partition: tp.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                log_append_time: log_append,
                leader_epoch: header.partition_leader_epoch,
                key: r.key.map(slice),
                value: r.value.map(slice),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.map(slice)))
                    .collect(),
            });
        })
        .map_err(|e| bad(e.to_string()))?;
    }
    Ok((out, next_offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::record::codec::{assemble, encode_record, BatchFields, ProducerInfo};
    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    fn settings(isolation: IsolationLevel) -> FetchSettings {
        FetchSettings {
            connection: ConnectionConfig::default(),
            max_wait: Duration::from_millis(10),
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
            isolation,
            check_crcs: true,
        }
    }

    fn batch(base: i64, n: usize, compression: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(compression, 1_000);
        for i in 0..n {
            b.push(Record::new(
                Some(format!("k{i}").into_bytes()),
                Some(format!("v{}", base + i as i64).into_bytes()),
                1_000 + i as i64,
            ));
        }
        b.build(base).unwrap_or_else(|e| panic!("build: {e}"))
    }

    #[test]
    fn skips_records_before_the_fetch_offset_and_moves_past_the_last_batch() {
        let tp = TopicPartition::new("t", 0);
        let mut bytes = batch(0, 5, Compression::Gzip);
        bytes.extend(batch(5, 5, Compression::None));
        let (recs, next) = decode_partition(
            &tp,
            3,
            Some(&Bytes::from(bytes)),
            &[],
            &settings(IsolationLevel::ReadUncommitted),
        )
        .unwrap_or_else(|e| panic!("decode: {e}"));
        let offsets: Vec<i64> = recs.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(next, 10);
        assert_eq!(recs[0].value.as_deref(), Some(&b"v3"[..]));
    }

    #[test]
    fn a_partial_trailing_batch_is_ignored() {
        let tp = TopicPartition::new("t", 0);
        let mut bytes = batch(0, 2, Compression::None);
        let second = batch(2, 2, Compression::None);
        bytes.extend(&second[..second.len() - 3]);
        let (recs, next) = decode_partition(
            &tp,
            0,
            Some(&Bytes::from(bytes)),
            &[],
            &settings(IsolationLevel::ReadUncommitted),
        )
        .unwrap_or_else(|e| panic!("decode: {e}"));
        assert_eq!(recs.len(), 2);
        assert_eq!(next, 2);
    }

    fn txn_batch(base: i64, pid: i64, n: usize) -> Vec<u8> {
        let info = ProducerInfo {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let mut b = BatchBuilder::new(Compression::None, 1_000).producer(info, true);
        for i in 0..n {
            b.push(Record::new(
                None,
                Some(format!("p{pid}-{i}").into_bytes()),
                1_000,
            ));
        }
        b.build(base).unwrap_or_else(|e| panic!("build: {e}"))
    }

    /// A control batch (commit or abort marker) for `pid` at `offset`.
    fn marker(offset: i64, pid: i64, abort: bool) -> Vec<u8> {
        let mut key = vec![0, 0, 0, if abort { 0 } else { 1 }];
        let mut payload = Vec::new();
        let rec = Record::new(
            Some(std::mem::take(&mut key)),
            Some(vec![0, 0, 0, 0, 0, 0]),
            1_000,
        );
        encode_record(&mut payload, &rec, 0, 0);
        assemble(
            &BatchFields {
                base_offset: offset,
                partition_leader_epoch: 0,
                attributes: 0x10 | 0x20,
                last_offset_delta: 0,
                base_timestamp: 1_000,
                max_timestamp: 1_000,
                producer: ProducerInfo {
                    producer_id: pid,
                    producer_epoch: 0,
                    base_sequence: -1,
                },
                records_count: 1,
            },
            Compression::None,
            &payload,
        )
        .unwrap_or_else(|e| panic!("assemble: {e}"))
    }

    #[test]
    fn read_committed_drops_aborted_transactions_and_markers() {
        let tp = TopicPartition::new("t", 0);
        // pid 7 commits offsets 0-2 (marker 3); pid 8 aborts 4-5 (marker 6).
        let mut bytes = txn_batch(0, 7, 3);
        bytes.extend(marker(3, 7, false));
        bytes.extend(txn_batch(4, 8, 2));
        bytes.extend(marker(6, 8, true));
        bytes.extend(batch(7, 1, Compression::None));
        let bytes = Bytes::from(bytes);
        let mut aborted = proto_kafka::messages::fetch_response::AbortedTransaction::default();
        aborted.producer_id = proto_kafka::messages::ProducerId(8);
        aborted.first_offset = 4;
        let committed = decode_partition(
            &tp,
            0,
            Some(&bytes),
            &[aborted.clone()],
            &settings(IsolationLevel::ReadCommitted),
        )
        .unwrap_or_else(|e| panic!("decode: {e}"));
        let offsets: Vec<i64> = committed.0.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2, 7]);
        assert_eq!(committed.1, 8);
        let uncommitted = decode_partition(
            &tp,
            0,
            Some(&bytes),
            &[aborted],
            &settings(IsolationLevel::ReadUncommitted),
        )
        .unwrap_or_else(|e| panic!("decode: {e}"));
        let offsets: Vec<i64> = uncommitted.0.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            vec![0, 1, 2, 4, 5, 7],
            "markers are never returned"
        );
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let tp = TopicPartition::new("t", 0);
        let mut bytes = batch(0, 2, Compression::None);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let r = decode_partition(
            &tp,
            0,
            Some(&Bytes::from(bytes)),
            &[],
            &settings(IsolationLevel::ReadUncommitted),
        );
        assert!(r.is_err());
    }
}
