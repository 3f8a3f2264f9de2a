//! Plain Rust inputs and outputs of the transaction coordinator: the
//! configuration, requests, responses, the [`Effects`] every call returns
//! (responses, records to append, markers to write), the events the
//! runtime reports back, and the producer-id source. No wire types.

use std::fmt;

use crate::error::CoordinatorError;
use crate::kafka_error::KafkaError;
use crate::offsets::Record;
use crate::txn::schema::TransactionLogValue;

pub use crate::group::RequestToken;

/// Default `transaction.state.log.num.partitions`.
pub const DEFAULT_TRANSACTION_STATE_PARTITIONS: i32 = 50;

/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Configuration (Kafka broker configs of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: InitProducerId with a larger (or a
    /// non-positive) `transaction_timeout_ms` gets INVALID_TRANSACTION_TIMEOUT.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an id idle this long in Empty,
    /// CompleteCommit or CompleteAbort is removed (tombstone).
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often `tick` looks for Ongoing transactions past their timeout.
    pub abort_timed_out_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how
    /// often `tick` looks for expired transactional ids.
    pub remove_expired_interval_ms: i64,
    /// `transaction.state.log.num.partitions` as the topic has it (the
    /// existing topic's count wins over the config, as for groups). A
    /// request whose transactional id hashes to another partition gets
    /// NOT_COORDINATOR.
    pub num_partitions: i32,
    /// `TransactionLogValue` version written: 0 for `transaction.version`
    /// 0, 1 for `transaction.version` 1 (Kafka's
    /// `TransactionVersion.transactionLogValueVersion`). Both are read.
    pub log_value_version: i16,
    /// Backoff before a marker that failed with a retriable error, or a
    /// completion record that failed with COORDINATOR_NOT_AVAILABLE, is
    /// tried again (Kafka retries on its marker sender thread's next poll;
    /// the backoff keeps a local failure from spinning).
    pub retry_backoff_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
            num_partitions: DEFAULT_TRANSACTION_STATE_PARTITIONS,
            log_value_version: 0,
            retry_backoff_ms: 50,
        }
    }
}

/// A topic partition of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Commit or abort (Kafka's `TransactionResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Commit,
    Abort,
}

/// Where producer ids come from (the broker's allocator, e.g.
/// `MetadataStore::allocate_producer_ids` behind a block cache). Kafka's
/// `ProducerIdManager.generateProducerId`: an error (e.g.
/// COORDINATOR_LOAD_IN_PROGRESS while no block is available yet) is
/// answered to the client as is.
pub trait ProducerIdSource {
    fn next_producer_id(&mut self) -> Result<i64, KafkaError>;
}

impl<F> ProducerIdSource for F
where
    F: FnMut() -> Result<i64, KafkaError>,
{
    fn next_producer_id(&mut self) -> Result<i64, KafkaError> {
        self()
    }
}

/// InitProducerId with a transactional id. (A null transactional id never
/// reaches the coordinator: the broker hands out a fresh producer id with
/// epoch 0.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    /// v3+ (KIP-360): the producer's current id and epoch when it
    /// re-initializes after an error; `None` when the request carries
    /// -1/-1. (-1 with a non-negative other half is INVALID_REQUEST,
    /// answered by the broker.)
    pub producer_id_and_epoch: Option<(i64, i16)>,
}

/// InitProducerId response. Producer id and epoch are -1 on error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    pub error: Option<KafkaError>,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl InitProducerIdResponse {
    pub(crate) fn error(error: KafkaError) -> Self {
        InitProducerIdResponse {
            error: Some(error),
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }
    }
}

/// AddPartitionsToTxn v0-v3 (one transaction, from a client). The broker
/// answers unknown or unauthorized topics itself (with
/// OPERATION_NOT_ATTEMPTED for the others) and passes only the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<TopicPartition>,
}

/// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub group_id: String,
}

/// EndTxn v0-v4 (transaction version 0/1 semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub result: TxnResult,
}

/// EndTxn response. Producer id and epoch (EndTxn v5+ fields, which
/// Sluice does not serve) are what Kafka's coordinator reports: the
/// transaction's on success, -1 on error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnResponse {
    pub error: Option<KafkaError>,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl EndTxnResponse {
    pub(crate) fn error(error: KafkaError) -> Self {
        EndTxnResponse {
            error: Some(error),
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }
    }
}

/// A response, delivered through [`Effects`] under the caller's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResponse {
    InitProducerId(InitProducerIdResponse),
    /// The error for every partition of the request (`None`: added).
    AddPartitions(Option<KafkaError>),
    AddOffsets(Option<KafkaError>),
    EndTxn(EndTxnResponse),
}

impl TxnResponse {
    /// The response's error, whatever the API.
    pub fn error(&self) -> Option<KafkaError> {
        match self {
            TxnResponse::InitProducerId(r) => r.error,
            TxnResponse::AddPartitions(e) | TxnResponse::AddOffsets(e) => *e,
            TxnResponse::EndTxn(r) => r.error,
        }
    }
}

/// Identifies one record the coordinator asked to append; the runtime
/// reports its fate with `append_completed` / `append_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppendId(pub u64);

/// A record for `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    /// `None` is a tombstone (the id expired).
    pub value: Option<TransactionLogValue>,
}

impl TxnRecord {
    /// Key and value bytes, the value at `log_value_version` (0 or 1).
    pub fn to_record(&self, log_value_version: i16) -> Result<Record, CoordinatorError> {
        match &self.value {
            None => Record::transaction_tombstone(&self.transactional_id),
            Some(v) => Record::transaction(&self.transactional_id, v, log_value_version),
        }
    }
}

/// A record to append, with the id to confirm it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRecord {
    pub id: AppendId,
    pub record: TxnRecord,
}

/// "Write these transaction markers": a COMMIT or ABORT control record
/// for `producer_id`/`producer_epoch` on each partition, through the
/// partition layer (the leader may be remote: WriteTxnMarkers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteMarkers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The `__transaction_state` partition's leader epoch at load: markers
    /// carry it so partition leaders can refuse a stale coordinator
    /// (TRANSACTION_COORDINATOR_FENCED).
    pub coordinator_epoch: i32,
    pub result: TxnResult,
    pub partitions: Vec<TopicPartition>,
}

/// What happened to the marker for one partition (the runtime maps
/// Kafka's WriteTxnMarkers partition errors as Kafka's
/// `TransactionMarkerRequestCompletionHandler` does; design 012).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerOutcome {
    /// Written (NONE).
    Written,
    /// Not written, try again after a backoff: UNKNOWN_TOPIC_OR_PARTITION,
    /// NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
    /// REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a disconnect.
    Retry,
    /// The partition needs no marker: it has no leader any more (deleted),
    /// or UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION. Counts as
    /// done.
    Skip,
    /// INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: a newer
    /// producer epoch or coordinator owns the partition. Kafka stops
    /// sending this transaction's markers; it stays in
    /// PrepareCommit/PrepareAbort until the partition is reloaded.
    Fenced,
}

/// The runtime's report on (some of) one [`WriteMarkers`]' partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerCompletion {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub result: TxnResult,
    pub partitions: Vec<(TopicPartition, MarkerOutcome)>,
}

/// What a call asks the runtime to do. Contract (design 012):
/// - append `records` to the shard's `__transaction_state` partition (in
///   order, acks=all, uncompressed) and report each with
///   `append_completed(id)` or `append_failed(id, error)`: the transition
///   a record carries takes effect only then;
/// - send `responses` now: every response here is already final (one
///   that depends on a record is only emitted after its confirmation);
/// - write `markers` to the partitions' leaders and report each
///   partition's outcome with `markers_completed`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Effects {
    pub responses: Vec<(RequestToken, TxnResponse)>,
    pub records: Vec<PendingRecord>,
    pub markers: Vec<WriteMarkers>,
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        self.responses.is_empty() && self.records.is_empty() && self.markers.is_empty()
    }

    /// Appends another call's effects after these.
    pub fn extend(&mut self, other: Effects) {
        self.responses.extend(other.responses);
        self.records.extend(other.records);
        self.markers.extend(other.markers);
    }

    pub(crate) fn respond(&mut self, token: RequestToken, response: TxnResponse) {
        self.responses.push((token, response));
    }
}

/// One topic of a described transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTopic {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// DescribeTransactions, one transactional id. On error only the id and
/// the error are meaningful (Kafka leaves the other fields at the
/// schema's defaults: "" and zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTxn {
    pub transactional_id: String,
    pub error: Option<KafkaError>,
    /// Kafka's state name ("Ongoing", "PrepareCommit", ...).
    pub state: String,
    pub transaction_timeout_ms: i32,
    pub transaction_start_time_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The partitions still in the transaction: while markers are being
    /// written, those without a marker yet.
    pub topics: Vec<DescribedTopic>,
}

impl DescribedTxn {
    pub(crate) fn error(transactional_id: &str, error: KafkaError) -> Self {
        DescribedTxn {
            transactional_id: transactional_id.to_string(),
            error: Some(error),
            state: String::new(),
            transaction_timeout_ms: 0,
            transaction_start_time_ms: 0,
            producer_id: 0,
            producer_epoch: 0,
            topics: Vec::new(),
        }
    }
}

/// ListTransactions filters (v0: states and producer ids; v1: duration).
/// The default filters nothing (duration -1, as a v0 request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListTransactionsFilter {
    /// State names; empty means all. Unknown names are reported back.
    pub states: Vec<String>,
    /// Empty means all.
    pub producer_ids: Vec<i64>,
    /// v1: only transactions running longer than this; negative (-1, the
    /// v0 default) means no filter.
    pub duration_ms: i64,
}

impl Default for ListTransactionsFilter {
    fn default() -> Self {
        ListTransactionsFilter {
            states: Vec::new(),
            producer_ids: Vec::new(),
            duration_ms: -1,
        }
    }
}

/// One listed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
}

/// ListTransactions of one shard. The broker merges the shards'
/// `transactions`; `unknown_state_filters` is the same for every shard.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedTxns {
    pub unknown_state_filters: Vec<String>,
    pub transactions: Vec<ListedTxn>,
}

/// What the shard is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardStatus {
    /// Not (or no longer) the coordinator of the partition: requests get
    /// NOT_COORDINATOR.
    Unloaded,
    /// Replaying the partition: requests get COORDINATOR_LOAD_IN_PROGRESS.
    Loading,
    /// Serving.
    Active,
}
