//! AlterReplicaLogDirs (key 34): moves replicas of this broker between its
//! data folders (`log.dirs`, design 024).
//!
//! Each named folder must be one of `log.dirs` (compared as absolute
//! paths; LOG_DIR_NOT_FOUND otherwise). Each partition must have a replica
//! here: REPLICA_NOT_AVAILABLE when the partition exists but not on this
//! broker (Kafka keeps that code for this API), UNKNOWN_TOPIC_OR_PARTITION
//! when the cluster does not know it; in the first case the folder is
//! remembered and the replica's log is created there when it comes (Kafka's
//! preferred log dir). A topic whose future folder name
//! would pass 255 bytes is INVALID_TOPIC_EXCEPTION, as in Kafka. The move
//! itself is the log manager's crash-safe copy and commit
//! ([`sluice_storage::LogManager::move_log_limited`]): the sealed segments
//! are copied while produce goes on, paced by the dynamic broker config
//! `replica.alter.log.dirs.io.max.bytes.per.second` (read before every
//! chunk), the rest with the partition's appends waiting. It has finished
//! when the answer comes (Kafka answers once the future log exists and
//! finishes in the background; the move of a client whose request timed out
//! on a slow, throttled copy goes on, and asking again waits for it and
//! answers 0), and a failure is KAFKA_STORAGE_ERROR with the log
//! left where it was. The partition is then led again with its new log.

use std::sync::Arc;

use proto_kafka::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use proto_kafka::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};
use proto_kafka::ResponseError;
use sluice_storage::{MoveOutcome, TopicPartition};

use super::describe_log_dirs::absolute;
use super::Ctx;
use crate::broker::Broker;
use crate::limits::MAX_PARTITIONS_PER_REQUEST;

pub(crate) const VERSIONS: (i16, i16) = (1, 2);

/// Kafka's `UnifiedLog.logFutureDirName` length: `<topic>-<p>.<32 hex>-future`.
fn future_name_len(tp: &TopicPartition) -> usize {
    tp.dir_name().len() + 1 + 32 + "-future".len()
}

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: AlterReplicaLogDirsRequest,
    _ctx: &Ctx,
) -> AlterReplicaLogDirsResponse {
    let count: usize = req
        .dirs
        .iter()
        .flat_map(|d| d.topics.iter())
        .map(|t| t.partitions.len())
        .sum();
    let too_many = count as i64 > MAX_PARTITIONS_PER_REQUEST;
    let dirs: Vec<_> = broker.logs.dirs().iter().map(|d| absolute(d)).collect();
    let image = broker.image();
    let mut resp = AlterReplicaLogDirsResponse::default();
    for dir in req.dirs {
        let dest = dirs
            .iter()
            .position(|d| *d == absolute(std::path::Path::new(dir.path.as_str())));
        for t in dir.topics {
            let mut result = AlterReplicaLogDirTopicResult::default();
            result.topic_name = t.name.clone();
            for p in t.partitions {
                let tp = TopicPartition::new(t.name.0.as_str(), p);
                let code = if too_many {
                    ResponseError::PolicyViolation.code()
                } else {
                    match dest {
                        None => ResponseError::LogDirNotFound.code(),
                        Some(dest) => move_one(broker, &image, &tp, dest),
                    }
                };
                let mut r = AlterReplicaLogDirPartitionResult::default();
                r.partition_index = p;
                r.error_code = code;
                result.partitions.push(r);
            }
            resp.results.push(result);
        }
    }
    resp
}

fn move_one(
    broker: &Arc<Broker>,
    image: &sluice_controller::MetadataImage,
    tp: &TopicPartition,
    dest: usize,
) -> i16 {
    if future_name_len(tp) > 255 {
        return ResponseError::InvalidTopicException.code();
    }
    let known = image
        .topic(&tp.topic)
        .is_some_and(|t| t.partitions.contains_key(&tp.partition));
    if !known {
        return ResponseError::UnknownTopicOrPartition.code();
    }
    // Paced by the dynamic `replica.alter.log.dirs.io.max.bytes.per.second`,
    // read again before every chunk of the copy.
    match broker
        .logs
        .move_log_limited(tp, dest, &|| broker.alter_log_dirs_rate())
    {
        Ok(MoveOutcome::NoSuchLog) => {
            // Kafka remembers the folder for when the replica is created.
            broker.logs.prefer_dir(tp, dest);
            ResponseError::ReplicaNotAvailable.code()
        }
        Ok(MoveOutcome::AlreadyThere) => 0,
        Ok(MoveOutcome::Moved(_)) => {
            // Lead (or follow) with the new log: the partition layer
            // held the old one.
            broker.partitions.forget(tp);
            broker.sync_partitions();
            0
        }
        Err(e) => {
            tracing::error!(partition = %tp, error = %e, "moving a replica between data folders failed");
            ResponseError::KafkaStorageError.code()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use proto_kafka::messages::alter_replica_log_dirs_request::{
        AlterReplicaLogDir, AlterReplicaLogDirTopic,
    };
    use proto_kafka::messages::{ApiKey, TopicName};
    use proto_kafka::protocol::StrBytes;

    use super::super::test_support::{append, ctx, open_broker, roundtrip};
    use super::*;

    fn request(dir: &Path, topic: &str, partitions: &[i32]) -> AlterReplicaLogDirsRequest {
        let mut t = AlterReplicaLogDirTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = partitions.to_vec();
        let mut d = AlterReplicaLogDir::default();
        d.path = StrBytes::from_string(dir.display().to_string());
        d.topics = vec![t];
        let mut req = AlterReplicaLogDirsRequest::default();
        req.dirs = vec![d];
        req
    }

    fn codes(broker: &Arc<Broker>, req: AlterReplicaLogDirsRequest, v: i16) -> Vec<i16> {
        let resp = roundtrip(
            &handle(broker, req, &ctx(ApiKey::AlterReplicaLogDirs, v)),
            v,
        );
        resp.results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect()
    }

    fn folder_of(broker: &Broker, topic: &str, p: i32) -> std::path::PathBuf {
        let log = broker
            .logs
            .get(&TopicPartition::new(topic, p))
            .expect("log");
        log.dir().parent().expect("parent").to_path_buf()
    }

    #[test]
    fn moves_a_replica_with_its_data_and_keeps_it_after_a_restart() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let overrides = [("log.dirs", dirs.as_str())];
        let broker = open_broker(&a, &overrides);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        assert_eq!(folder_of(&broker, "t", 0), a);
        assert_eq!(folder_of(&broker, "t", 1), b);
        append(&broker, "t", 0, 5);
        let v = VERSIONS.1;
        assert_eq!(codes(&broker, request(&b, "t", &[0]), v), vec![0]);
        assert_eq!(folder_of(&broker, "t", 0), b);
        assert!(!a.join("t-0").exists());
        // The partition leads with the moved log: appends land in it.
        let led = broker.log("t", 0).expect("led");
        assert_eq!(led.dir().parent(), Some(b.as_path()));
        assert_eq!(led.log_end_offset(), 5);
        append(&broker, "t", 0, 3);
        assert_eq!(led.log_end_offset(), 8);
        // Already there; errors.
        for v in VERSIONS.0..=VERSIONS.1 {
            assert_eq!(codes(&broker, request(&b, "t", &[0]), v), vec![0]);
            assert_eq!(
                codes(&broker, request(&root.path().join("c"), "t", &[0]), v),
                vec![ResponseError::LogDirNotFound.code()]
            );
            assert_eq!(
                codes(&broker, request(&a, "nope", &[0]), v),
                vec![ResponseError::UnknownTopicOrPartition.code()]
            );
            assert_eq!(
                codes(&broker, request(&a, "t", &[7]), v),
                vec![ResponseError::UnknownTopicOrPartition.code()]
            );
        }
        broker.shutdown().expect("shutdown");
        drop((led, broker));

        let broker = open_broker(&a, &overrides);
        assert_eq!(folder_of(&broker, "t", 0), b);
        let log = broker.log("t", 0).expect("led");
        assert_eq!(log.log_end_offset(), 8);
        // And back to the first folder.
        assert_eq!(codes(&broker, request(&a, "t", &[0]), 1), vec![0]);
        assert_eq!(folder_of(&broker, "t", 0), a);
        assert_eq!(broker.log("t", 0).expect("led").log_end_offset(), 8);
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn a_partition_without_a_replica_here_is_not_available() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        assert!(broker
            .logs
            .delete(&TopicPartition::new("t", 0))
            .expect("delete"));
        assert_eq!(
            codes(&broker, request(&b, "t", &[0]), 2),
            vec![ResponseError::ReplicaNotAvailable.code()]
        );
        // The folder is remembered: the log is created there, although
        // the first folder holds as few partitions.
        let log = broker
            .logs
            .get_or_create(
                &TopicPartition::new("t", 0),
                sluice_storage::LogConfig::default(),
            )
            .expect("create");
        assert_eq!(log.dir().parent(), Some(b.as_path()));
        let long = "x".repeat(249);
        assert_eq!(
            codes(&broker, request(&b, &long, &[0]), 2),
            vec![ResponseError::InvalidTopicException.code()]
        );
    }

    /// Sets (`Some`) or deletes (`None`) this broker's
    /// `replica.alter.log.dirs.io.max.bytes.per.second` through
    /// IncrementalAlterConfigs; returns the error code.
    fn set_move_rate(broker: &Arc<Broker>, value: Option<&str>) -> i16 {
        use proto_kafka::messages::incremental_alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        use proto_kafka::messages::IncrementalAlterConfigsRequest;
        let mut c = AlterableConfig::default();
        c.name = StrBytes::from_static_str(crate::replication::throttle::ALTER_LOG_DIRS_RATE);
        c.config_operation = if value.is_some() { 0 } else { 1 };
        c.value = value.map(|v| StrBytes::from_string(v.to_string()));
        let mut r = AlterConfigsResource::default();
        r.resource_type = 4;
        r.resource_name = StrBytes::from_string(broker.node_id.to_string());
        r.configs = vec![c];
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![r];
        let resp = super::super::incremental_alter_configs::handle(
            broker,
            req,
            &ctx(ApiKey::IncrementalAlterConfigs, 1),
        );
        resp.responses[0].error_code
    }

    /// DescribeConfigs of this broker's move throttle: value and source.
    fn describe_move_rate(broker: &Arc<Broker>) -> (Option<String>, i8, bool) {
        use proto_kafka::messages::describe_configs_request::DescribeConfigsResource;
        use proto_kafka::messages::DescribeConfigsRequest;
        let mut r = DescribeConfigsResource::default();
        r.resource_type = 4;
        r.resource_name = StrBytes::from_string(broker.node_id.to_string());
        r.configuration_keys = Some(vec![StrBytes::from_static_str(
            crate::replication::throttle::ALTER_LOG_DIRS_RATE,
        )]);
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![r];
        let resp =
            super::super::describe_configs::handle(broker, req, &ctx(ApiKey::DescribeConfigs, 1));
        let c = &resp.results[0].configs[0];
        (
            c.value.as_ref().map(|v| v.to_string()),
            c.config_source,
            c.read_only,
        )
    }

    /// The dynamic `replica.alter.log.dirs.io.max.bytes.per.second` paces
    /// a move's copy: set to 1 byte/s the move waits while produce goes on
    /// to the partition, and it completes, with every record, once the
    /// throttle is deleted.
    #[test]
    fn the_dynamic_move_throttle_paces_a_move_while_appends_go_on() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        let log = broker.log("t", 0).expect("led");
        for _ in 0..3 {
            append(&broker, "t", 0, 5);
            log.roll().expect("roll");
        }
        assert_eq!(
            describe_move_rate(&broker),
            (Some(i64::MAX.to_string()), 5, false),
            "Kafka's default, not set"
        );
        assert_eq!(
            set_move_rate(&broker, Some("-1")),
            ResponseError::InvalidConfig.code()
        );
        assert_eq!(set_move_rate(&broker, Some("1")), 0);
        assert_eq!(describe_move_rate(&broker), (Some("1".into()), 2, false));
        assert_eq!(broker.alter_log_dirs_rate(), 1);
        std::thread::scope(|s| {
            let mover = s.spawn(|| codes(&broker, request(&b, "t", &[0]), 2));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while broker.logs.moves().is_empty() {
                assert!(std::time::Instant::now() < deadline, "no move");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // Produce goes on while the throttled copy waits.
            append(&broker, "t", 0, 4);
            assert_eq!(log.log_end_offset(), 19);
            assert_eq!(broker.logs.moves().len(), 1, "still copying at 1 byte/s");
            assert_eq!(set_move_rate(&broker, None), 0);
            assert_eq!(mover.join().expect("join"), vec![0]);
        });
        assert_eq!(folder_of(&broker, "t", 0), b);
        let moved = broker.log("t", 0).expect("led");
        assert_eq!(moved.log_end_offset(), 19);
        assert_eq!(moved.segment_count(), 4);
        append(&broker, "t", 0, 1);
        assert_eq!(moved.log_end_offset(), 20);
        broker.shutdown().expect("shutdown");
    }
}
