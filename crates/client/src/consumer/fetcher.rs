//! Fetching: one `Fetch` request per partition leader, run as a background
//! task on a connection owned by the consumer (separate from the cluster's
//! shared connections, so a long-polling fetch never delays metadata,
//! commits or heartbeats). The task decodes the answer (`decode`), so
//! `poll` only hands records out.
//!
//! The fetch position moves past the last complete batch fetched even when
//! none of its records is visible (compaction gaps, control batches).

use std::collections::BTreeMap;
use std::time::Duration;

use proto_kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use proto_kafka::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use proto_kafka::protocol::StrBytes;

use crate::admin::IsolationLevel;
use crate::connection::{Connection, ConnectionConfig};
use crate::consumer::decode::FetchedRecords;
use crate::error::{ClientError, Result};
use crate::TopicPartition;

/// Highest Fetch version used (v13 replaces topic names with topic ids).
const FETCH_MAX: i16 = 12;

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
    /// The visible records at or after the fetch offset, and the error of
    /// the bad batch that ended them, if any.
    pub records: FetchedRecords,
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
                None => {
                    let (records, next_offset) = FetchedRecords::decode(
                        &tp,
                        fetch_offset,
                        p.records.as_ref(),
                        p.aborted_transactions.as_deref().unwrap_or_default(),
                        settings.isolation,
                        settings.check_crcs,
                    );
                    Ok(FetchedData {
                        records,
                        next_offset,
                        high_watermark: p.high_watermark,
                    })
                }
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
