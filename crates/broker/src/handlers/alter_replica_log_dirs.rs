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
//! ([`sluice_storage::LogManager::move_log`]); it has finished when the
//! answer comes (Kafka answers once the future log exists and finishes in
//! the background), and a failure is KAFKA_STORAGE_ERROR with the log left
//! where it was. The partition is then led again with its new log.

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
    match broker.logs.move_log(tp, dest) {
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
}
