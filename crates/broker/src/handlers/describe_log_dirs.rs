//! DescribeLogDirs (key 35): every data folder of `log.dirs` (absolute
//! paths) with the size of each requested partition's log in it (all
//! partitions when the topic list is null; partitions not on this node are
//! left out, as in Kafka). A partition being moved to another folder
//! (AlterReplicaLogDirs) is listed in its destination too, with
//! `is_future_key` and `offset_lag` = the log end offset the copy still
//! lacks; a current log's `offset_lag` is its distance below the high
//! watermark (Kafka's `getLogEndOffsetLag`). v4 adds each folder's file
//! system size and usable space (`statvfs`); a folder that failed I/O
//! (the log manager's offline folders) or cannot be examined is reported
//! with KAFKA_STORAGE_ERROR and no partitions, as Kafka reports an offline
//! folder.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proto_kafka::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use proto_kafka::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;
use sluice_controller::store::METADATA_TOPIC;

use super::Ctx;
use crate::broker::Broker;

pub(crate) const VERSIONS: (i16, i16) = (1, 4);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DescribeLogDirsRequest,
    ctx: &Ctx,
) -> DescribeLogDirsResponse {
    let wanted: Option<HashSet<(String, i32)>> = req.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
            .collect()
    });
    let is_wanted = |topic: &str, partition: i32| {
        topic != METADATA_TOPIC
            && wanted
                .as_ref()
                .is_none_or(|w| w.contains(&(topic.to_string(), partition)))
    };
    let offline = broker.logs.offline_dirs();
    let logs = broker.logs.logs();
    let moves = broker.logs.moves();
    let mut resp = DescribeLogDirsResponse::default();
    for (i, dir) in broker.logs.dirs().iter().enumerate() {
        let mut result = DescribeLogDirsResult::default();
        result.log_dir = StrBytes::from_string(absolute(dir).display().to_string());
        match disk_space(dir) {
            _ if offline.contains(&i) => {
                result.error_code = ResponseError::KafkaStorageError.code();
            }
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "statvfs on the data folder failed");
                result.error_code = ResponseError::KafkaStorageError.code();
            }
            Ok((total, usable)) => {
                if ctx.version >= 4 {
                    result.total_bytes = total;
                    result.usable_bytes = usable;
                }
                let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
                for log in &logs {
                    let tp = log.topic_partition();
                    if broker.logs.dir_index_of(log) != Some(i)
                        || !is_wanted(&tp.topic, tp.partition)
                    {
                        continue;
                    }
                    let mut p = DescribeLogDirsPartition::default();
                    p.partition_index = tp.partition;
                    p.partition_size = i64::try_from(log.size_in_bytes()).unwrap_or(i64::MAX);
                    p.offset_lag = (log.high_watermark() - log.log_end_offset()).max(0);
                    p.is_future_key = false;
                    topics.entry(tp.topic.clone()).or_default().push(p);
                }
                for m in &moves {
                    let tp = &m.topic_partition;
                    if m.dest_dir != *dir || !is_wanted(&tp.topic, tp.partition) {
                        continue;
                    }
                    let mut p = DescribeLogDirsPartition::default();
                    p.partition_index = tp.partition;
                    p.partition_size = i64::try_from(m.size_bytes).unwrap_or(i64::MAX);
                    p.offset_lag = m.offset_lag;
                    p.is_future_key = true;
                    topics.entry(tp.topic.clone()).or_default().push(p);
                }
                result.topics = topics
                    .into_iter()
                    .map(|(name, mut partitions)| {
                        partitions.sort_by_key(|p| (p.partition_index, p.is_future_key));
                        let mut t = DescribeLogDirsTopic::default();
                        t.name = TopicName(StrBytes::from_string(name));
                        t.partitions = partitions;
                        t
                    })
                    .collect();
            }
        }
        resp.results.push(result);
    }
    resp
}

pub(crate) fn absolute(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir)
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_path_buf())
}

/// `(total, usable)` bytes of the file system holding `dir`, as Java's
/// `FileStore.getTotalSpace` / `getUsableSpace` compute them.
fn disk_space(dir: &Path) -> std::io::Result<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and outlives the call; `st` is a
    // valid, exclusively borrowed out-parameter.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = u128::from(st.f_frsize);
    let bytes = |blocks: u128| i64::try_from(blocks * frsize).unwrap_or(i64::MAX);
    Ok((
        bytes(u128::from(st.f_blocks)),
        bytes(u128::from(st.f_bavail)),
    ))
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::describe_log_dirs_request::DescribableLogDirTopic;
    use proto_kafka::messages::ApiKey;

    use super::super::test_support::{append, ctx, open_broker, roundtrip};
    use super::*;

    #[test]
    fn sizes_per_partition_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker.create_topic("a", 2, 1, &[], false).expect("create");
        broker.create_topic("b", 1, 1, &[], false).expect("create");
        append(&broker, "a", 1, 3);
        let a1 = i64::try_from(broker.log("a", 1).expect("log").size_in_bytes()).expect("size");
        assert!(a1 > 0);
        for v in VERSIONS.0..=VERSIONS.1 {
            let resp = roundtrip(
                &handle(
                    &broker,
                    DescribeLogDirsRequest::default(),
                    &ctx(ApiKey::DescribeLogDirs, v),
                ),
                v,
            );
            // `topics: []` (not null) asks for nothing; a default request is
            // the empty list.
            assert_eq!(resp.results.len(), 1);
            assert!(resp.results[0].topics.is_empty());

            let mut req = DescribeLogDirsRequest::default();
            req.topics = None;
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, v)), v);
            let r = &resp.results[0];
            assert_eq!(r.error_code, 0);
            assert_eq!(
                PathBuf::from(r.log_dir.as_str()),
                std::fs::canonicalize(dir.path()).expect("canonical")
            );
            let names: Vec<&str> = r.topics.iter().map(|t| t.name.0.as_str()).collect();
            assert_eq!(names, vec!["a", "b"]);
            assert_eq!(r.topics[0].partitions.len(), 2);
            assert_eq!(r.topics[0].partitions[1].partition_size, a1);
            assert_eq!(r.topics[0].partitions[0].partition_size, 0);
            if v >= 4 {
                assert!(
                    r.total_bytes > 0 && r.usable_bytes >= 0 && r.usable_bytes <= r.total_bytes
                );
            } else {
                assert_eq!(r.total_bytes, -1);
            }

            let mut t = DescribableLogDirTopic::default();
            t.topic = TopicName(StrBytes::from_static_str("a"));
            t.partitions = vec![1, 9];
            let mut req = DescribeLogDirsRequest::default();
            req.topics = Some(vec![t]);
            let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, v)), v);
            let r = &resp.results[0];
            assert_eq!(r.topics.len(), 1);
            assert_eq!(r.topics[0].partitions.len(), 1);
            assert_eq!(r.topics[0].partitions[0].partition_index, 1);
        }
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn every_folder_with_its_partitions() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 4, 1, &[], false).expect("create");
        append(&broker, "t", 1, 3);
        let size = i64::try_from(broker.log("t", 1).expect("log").size_in_bytes()).expect("size");
        let mut req = DescribeLogDirsRequest::default();
        req.topics = None;
        let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, 4)), 4);
        assert_eq!(resp.results.len(), 2);
        for (r, (dir, parts)) in resp.results.iter().zip([(&a, [0, 2]), (&b, [1, 3])]) {
            assert_eq!(r.error_code, 0);
            assert_eq!(
                PathBuf::from(r.log_dir.as_str()),
                std::fs::canonicalize(dir).expect("canonical")
            );
            assert!(r.total_bytes > 0 && r.usable_bytes >= 0);
            let t: Vec<_> = r
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == "t")
                .collect();
            assert_eq!(t.len(), 1);
            let got: Vec<i32> = t[0].partitions.iter().map(|p| p.partition_index).collect();
            assert_eq!(got, parts);
            assert!(t[0]
                .partitions
                .iter()
                .all(|p| !p.is_future_key && p.offset_lag == 0));
        }
        let in_b = &resp.results[1]
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "t")
            .expect("t");
        assert_eq!(in_b.partitions[0].partition_size, size);
        for d in [&a, &b] {
            let meta = std::fs::read_to_string(d.join("meta.properties")).expect("meta");
            assert!(
                meta.contains(&format!("cluster.id={}", broker.cluster_id)),
                "{meta}"
            );
            assert!(meta.contains("directory.id="), "{meta}");
        }
        let ids: Vec<String> = [&a, &b]
            .iter()
            .map(|d| {
                let meta = std::fs::read_to_string(d.join("meta.properties")).expect("meta");
                meta.lines()
                    .find_map(|l| l.strip_prefix("directory.id=").map(str::to_string))
                    .expect("id")
            })
            .collect();
        assert_ne!(ids[0], ids[1]);
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn a_move_in_progress_is_a_future_key_in_its_destination() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 1, 1, &[], false).expect("create");
        append(&broker, "t", 0, 4);
        let tp = sluice_storage::TopicPartition::new("t", 0);
        let log = broker.logs.get(&tp).expect("log");
        // Hold the log's writers: the move registers, then waits to freeze.
        let held = log.freeze().expect("freeze");
        let mover = {
            let broker = Arc::clone(&broker);
            let tp = tp.clone();
            std::thread::spawn(move || broker.logs.move_log(&tp, 1))
        };
        while broker.logs.moves().is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut req = DescribeLogDirsRequest::default();
        req.topics = None;
        let resp = roundtrip(
            &handle(&broker, req.clone(), &ctx(ApiKey::DescribeLogDirs, 4)),
            4,
        );
        let parts = |r: &DescribeLogDirsResult| -> Vec<(i32, bool, i64)> {
            r.topics
                .iter()
                .filter(|t| t.name.0.as_str() == "t")
                .flat_map(|t| t.partitions.iter())
                .map(|p| (p.partition_index, p.is_future_key, p.offset_lag))
                .collect()
        };
        assert_eq!(parts(&resp.results[0]), vec![(0, false, 0)]);
        // Nothing copied yet: the copy lacks the whole log.
        assert_eq!(parts(&resp.results[1]), vec![(0, true, 4)]);
        drop(held);
        assert!(matches!(
            mover.join().expect("join").expect("move"),
            sluice_storage::MoveOutcome::Moved(_)
        ));
        let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, 4)), 4);
        assert!(parts(&resp.results[0]).is_empty());
        assert_eq!(parts(&resp.results[1]), vec![(0, false, 0)]);
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn the_metadata_log_lives_in_metadata_log_dir_which_is_not_a_log_dir() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b, m) = (
            root.path().join("a"),
            root.path().join("b"),
            root.path().join("meta"),
        );
        let dirs = format!("{},{}", a.display(), b.display());
        let meta = m.display().to_string();
        let overrides = [
            ("log.dirs", dirs.as_str()),
            ("metadata.log.dir", meta.as_str()),
        ];
        let broker = open_broker(&a, &overrides);
        broker.create_topic("t", 2, 1, &[], false).expect("create");
        assert!(m.join("__cluster_metadata-0").is_dir());
        assert!(!a.join("__cluster_metadata-0").exists());
        let ids: Vec<String> = [&a, &b, &m]
            .iter()
            .map(|d| std::fs::read_to_string(d.join("meta.properties")).expect("meta"))
            .collect();
        assert!(ids
            .iter()
            .all(|t| t.contains(&format!("cluster.id={}", broker.cluster_id))));
        let mut req = DescribeLogDirsRequest::default();
        req.topics = None;
        let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, 4)), 4);
        assert_eq!(resp.results.len(), 2);
        broker.shutdown().expect("shutdown");
        drop(broker);
        // The topic survives a restart: its records are in the metadata
        // log of metadata.log.dir.
        let broker = open_broker(&a, &overrides);
        assert!(broker.image().topic("t").is_some());
        assert!(broker.log("t", 1).is_some());
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn a_folder_that_failed_io_is_offline() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let dirs = format!("{},{}", a.display(), b.display());
        let broker = open_broker(&a, &[("log.dirs", dirs.as_str())]);
        broker.create_topic("t", 4, 1, &[], false).expect("create");
        append(&broker, "t", 1, 2);
        // An I/O error in folder b: t-1's folder vanishes under it.
        let log = broker.log("t", 1).expect("log");
        std::fs::remove_dir_all(b.join("t-1")).expect("rm");
        assert!(log.flush().is_err());
        let mut req = DescribeLogDirsRequest::default();
        req.topics = None;
        let resp = roundtrip(&handle(&broker, req, &ctx(ApiKey::DescribeLogDirs, 4)), 4);
        assert_eq!(resp.results[0].error_code, 0);
        assert_eq!(
            resp.results[1].error_code,
            ResponseError::KafkaStorageError.code()
        );
        assert!(resp.results[1].topics.is_empty());
        // Every partition of the folder is offline, the others are not.
        assert!(broker.log("t", 3).expect("log").is_offline());
        assert!(!broker.log("t", 0).expect("log").is_offline());
        // New partitions go to the folder that works.
        broker.create_topic("u", 2, 1, &[], false).expect("create");
        assert!(a.join("u-0").is_dir() && a.join("u-1").is_dir());
    }
}
