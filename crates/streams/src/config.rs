//! `StreamsConfig`: the runtime's settings, with Kafka Streams' names and
//! defaults, settable by name ([`StreamsConfig::set`]).

use std::path::PathBuf;
use std::time::Duration;

use sluice_client::ClientConfig;

use crate::error::{Result, StreamsError};
use crate::task::DeserializationHandler;

/// The runtime's settings.
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    /// `application.id`: the consumer group, the prefix of internal topics
    /// and the state folder name. Required.
    pub application_id: String,
    /// `bootstrap.servers` and connection settings.
    pub client: ClientConfig,
    /// `num.stream.threads` (default 1).
    pub num_stream_threads: usize,
    /// `commit.interval.ms` (default 30000 under at-least-once).
    pub commit_interval: Duration,
    /// `state.dir` (default `<tmp>/kafka-streams`).
    pub state_dir: PathBuf,
    /// `state.cleanup.delay.ms` (default 600000).
    pub state_cleanup_delay: Duration,
    /// `poll.ms` (default 100).
    pub poll: Duration,
    /// `max.poll.records` of the main consumer (default 1000).
    pub max_poll_records: usize,
    /// `buffered.records.per.partition` (default 1000): fetching of a
    /// partition pauses while its task holds this many unprocessed records.
    pub buffered_records_per_partition: usize,
    /// `replication.factor` of internal topics (default -1: the broker's).
    pub replication_factor: i16,
    /// `repartition.purge.interval.ms` (default 30000).
    pub repartition_purge_interval: Duration,
    /// `application.server`: `host:port` for interactive queries, sent in
    /// the subscription.
    pub application_server: Option<String>,
    /// `max.task.idle.ms` (default 0).
    pub max_task_idle_ms: i64,
    /// `statestore.cache.max.bytes` (default 10485760), split over the threads.
    pub cache_max_bytes: usize,
    /// `default.deserialization.exception.handler` (default: log and fail).
    pub deserialization_handler: DeserializationHandler,
    /// `session.timeout.ms` of the main consumer (default 45000).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` of the main consumer (default 3000).
    pub heartbeat_interval: Duration,
}

impl StreamsConfig {
    /// Defaults for `application_id` on `client`.
    pub fn new(application_id: &str, client: ClientConfig) -> Self {
        Self {
            application_id: application_id.to_string(),
            client,
            num_stream_threads: 1,
            commit_interval: Duration::from_secs(30),
            state_dir: std::env::temp_dir().join("kafka-streams"),
            state_cleanup_delay: Duration::from_secs(600),
            poll: Duration::from_millis(100),
            max_poll_records: 1000,
            buffered_records_per_partition: 1000,
            replication_factor: -1,
            repartition_purge_interval: Duration::from_secs(30),
            application_server: None,
            max_task_idle_ms: 0,
            cache_max_bytes: 10 * 1024 * 1024,
            deserialization_handler: DeserializationHandler::LogAndFail,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
        }
    }

    /// Sets a setting by its Kafka name.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = || StreamsError::Config(format!("{key}={value:?} is not valid"));
        let ms = |v: &str| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| bad())
        };
        match key {
            "application.id" => self.application_id = value.to_string(),
            "bootstrap.servers" => {
                let old = std::mem::replace(&mut self.client, ClientConfig::new(value));
                self.client.connection = old.connection;
            }
            "num.stream.threads" => {
                self.num_stream_threads = value.parse().map_err(|_| bad())?;
            }
            "commit.interval.ms" => self.commit_interval = ms(value)?,
            "state.dir" => self.state_dir = PathBuf::from(value),
            "state.cleanup.delay.ms" => self.state_cleanup_delay = ms(value)?,
            "poll.ms" => self.poll = ms(value)?,
            "max.poll.records" => self.max_poll_records = value.parse().map_err(|_| bad())?,
            "buffered.records.per.partition" => {
                self.buffered_records_per_partition = value.parse().map_err(|_| bad())?;
            }
            "replication.factor" => self.replication_factor = value.parse().map_err(|_| bad())?,
            "repartition.purge.interval.ms" => self.repartition_purge_interval = ms(value)?,
            "application.server" => self.application_server = Some(value.to_string()),
            "session.timeout.ms" => self.session_timeout = ms(value)?,
            "max.task.idle.ms" => self.max_task_idle_ms = value.parse().map_err(|_| bad())?,
            "statestore.cache.max.bytes" => {
                self.cache_max_bytes = value.parse().map_err(|_| bad())?;
            }
            "heartbeat.interval.ms" => self.heartbeat_interval = ms(value)?,
            "processing.guarantee" if value == "at_least_once" => {}
            "default.deserialization.exception.handler" => {
                self.deserialization_handler = match value.rsplit('.').next().unwrap_or(value) {
                    "LogAndFailExceptionHandler" | "LogAndFail" => {
                        DeserializationHandler::LogAndFail
                    }
                    "LogAndContinueExceptionHandler" | "LogAndContinue" => {
                        DeserializationHandler::LogAndContinue
                    }
                    _ => return Err(bad()),
                };
            }
            _ => {
                return Err(StreamsError::Config(format!(
                    "unknown or unsupported setting {key}={value}"
                )))
            }
        }
        Ok(())
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        if self.application_id.is_empty() {
            return Err(StreamsError::Config("application.id is required".into()));
        }
        if self.max_poll_records == 0 || self.buffered_records_per_partition == 0 {
            return Err(StreamsError::Config(
                "max.poll.records and buffered.records.per.partition must be positive".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_by_kafka_names() {
        let mut c = StreamsConfig::new("wc", ClientConfig::new("127.0.0.1:9092"));
        assert_eq!(c.commit_interval, Duration::from_secs(30));
        c.set("commit.interval.ms", "100").expect("set");
        c.set("num.stream.threads", "3").expect("set");
        c.set("state.dir", "/tmp/x").expect("set");
        assert_eq!(c.commit_interval, Duration::from_millis(100));
        assert_eq!(c.num_stream_threads, 3);
        assert_eq!(c.state_dir, PathBuf::from("/tmp/x"));
        assert!(c.set("commit.interval.ms", "soon").is_err());
        assert!(c.set("processing.guarantee", "exactly_once_v2").is_err());
        assert!(c.set("no.such", "1").is_err());
        c.set(
            "default.deserialization.exception.handler",
            "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler",
        )
        .expect("set");
        assert_eq!(
            c.deserialization_handler,
            DeserializationHandler::LogAndContinue
        );
        c.validate().expect("valid");
        c.set("application.id", "").expect("set");
        assert!(c.validate().is_err());
    }
}
