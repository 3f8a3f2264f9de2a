//! Start-up keeps every topic and record: unknown folders become strays,
//! only recorded deletions delete, and topic retention never reaches the
//! metadata log, snapshots or not.

use std::path::{Path, PathBuf};

use sluice_controller::store::METADATA_TOPIC;
use sluice_controller::MetadataRecord;

use super::*;
use crate::handlers::test_support::{append, open_broker};

fn folders(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn strays(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    folders(dir)
        .into_iter()
        .filter(|n| n.starts_with(prefix) && n.ends_with("-stray"))
        .map(|n| dir.join(n))
        .collect()
}

fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    v.sort();
    v
}

fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

fn topics(broker: &Broker) -> Vec<String> {
    broker.image().topics().map(|t| t.name.clone()).collect()
}

#[test]
fn a_folder_the_metadata_does_not_know_is_renamed_stray_and_kept() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data");
    let dir = dir.as_path();
    let broker = open_broker(dir, &[]);
    broker
        .create_topic("known", 1, 1, &[], false)
        .expect("create");
    broker
        .create_topic("ghost", 2, 1, &[], false)
        .expect("create");
    append(&broker, "known", 0, 5);
    append(&broker, "ghost", 1, 7);
    broker.shutdown().expect("shutdown");
    drop(broker);
    // The metadata loses "ghost" (as when an older build let retention eat
    // the metadata log): move the metadata log away, keep a copy of the
    // image with only "known".
    let ghost_size = size_of(&dir.join("ghost-1"));
    assert!(ghost_size > 0);
    let meta = dir.join(format!("{METADATA_TOPIC}-0"));
    std::fs::rename(&meta, root.path().join("saved-metadata")).expect("move");
    let broker = open_broker(dir, &[]);
    assert!(topics(&broker).is_empty());
    for p in ["ghost-0", "ghost-1", "known-0"] {
        assert!(!dir.join(p).exists(), "{p} moved aside");
    }
    let ghost = strays(dir, "ghost-1.");
    assert_eq!(ghost.len(), 1, "{:?}", folders(dir));
    assert_eq!(size_of(&ghost[0]), ghost_size, "every byte kept");
    assert_eq!(strays(dir, "known-0.").len(), 1);
    assert_eq!(strays(dir, "ghost-0.").len(), 1);
    broker.shutdown().expect("shutdown");
    drop(broker);
    // A restart keeps the strays as they are.
    let broker = open_broker(dir, &[]);
    assert_eq!(strays(dir, "ghost-1.").len(), 1);
    assert_eq!(size_of(&strays(dir, "ghost-1.")[0]), ghost_size);
    broker.shutdown().expect("shutdown");
}

#[test]
fn a_folder_of_another_topic_id_is_set_aside_not_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    let t = broker.create_topic("t", 1, 1, &[], false).expect("create");
    append(&broker, "t", 0, 3);
    broker.shutdown().expect("shutdown");
    drop(broker);
    let folder = dir.path().join("t-0");
    assert_eq!(
        partition_metadata::read(&folder).expect("read"),
        Some(*t.id.as_bytes())
    );
    let other = Uuid::from_u128(0xfeed);
    partition_metadata::write(&folder, *other.as_bytes()).expect("write");
    let size = size_of(&folder);
    let broker = open_broker(dir.path(), &[]);
    let aside = strays(dir.path(), "t-0.");
    assert_eq!(aside.len(), 1);
    assert_eq!(size_of(&aside[0]), size);
    // The topic's partition starts afresh, with its own id on file.
    assert_eq!(broker.log("t", 0).expect("log").log_end_offset(), 0);
    assert_eq!(
        partition_metadata::read(&folder).expect("read"),
        Some(*t.id.as_bytes())
    );
    broker.shutdown().expect("shutdown");
}

/// Appends the RemoveTopic record the way `delete_topic` does, but stops
/// before renaming the folders (a crash between the two).
fn record_removal_only(broker: &Broker, name: &str) -> Uuid {
    let id = broker.image().topic(name).expect("topic").id;
    let _g = broker.metadata.lock_for_change();
    broker
        .metadata
        .append(&[MetadataRecord::RemoveTopic { topic_id: id }])
        .expect("append");
    id
}

#[test]
fn a_recorded_deletion_removes_the_folders_after_a_crash_before_the_rename() {
    for legacy in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        broker
            .create_topic("doomed", 2, 1, &[], false)
            .expect("create");
        broker
            .create_topic("kept", 1, 1, &[], false)
            .expect("create");
        append(&broker, "doomed", 0, 4);
        append(&broker, "kept", 0, 4);
        // A snapshot before the removal: the evidence is in the log after it.
        broker
            .metadata
            .snapshot_now()
            .expect("snapshot")
            .expect("taken");
        record_removal_only(&broker, "doomed");
        broker.shutdown().expect("shutdown");
        drop(broker);
        assert!(dir.path().join("doomed-0").exists());
        if legacy {
            // Folders written before partition.metadata existed: the
            // recorded removal is matched by name.
            for p in ["doomed-0", "doomed-1", "kept-0"] {
                std::fs::remove_file(dir.path().join(p).join("partition.metadata")).expect("rm");
            }
        }
        let broker = open_broker(dir.path(), &[]);
        assert_eq!(topics(&broker), vec!["kept"], "legacy={legacy}");
        for p in ["doomed-0", "doomed-1"] {
            assert!(!dir.path().join(p).exists(), "{p} legacy={legacy}");
        }
        assert!(
            strays(dir.path(), "doomed").is_empty(),
            "deleted, not stray"
        );
        assert_eq!(broker.log("kept", 0).expect("kept").log_end_offset(), 4);
        broker.shutdown().expect("shutdown");
    }
}

#[test]
fn a_topic_recreated_under_the_same_name_keeps_the_new_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[]);
    broker.create_topic("t", 1, 1, &[], false).expect("create");
    broker.delete_topic("t").expect("delete");
    broker
        .create_topic("t", 1, 1, &[], false)
        .expect("recreate");
    append(&broker, "t", 0, 6);
    broker.shutdown().expect("shutdown");
    drop(broker);
    let broker = open_broker(dir.path(), &[]);
    assert_eq!(broker.log("t", 0).expect("log").log_end_offset(), 6);
    assert!(strays(dir.path(), "t-0.").is_empty());
    broker.shutdown().expect("shutdown");
}

#[test]
fn topic_retention_overrides_never_touch_the_metadata_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hostile = [
        ("log.retention.ms", "1"),
        ("log.retention.bytes", "0"),
        ("log.roll.ms", "1"),
        ("log.segment.bytes", "1048576"),
        ("log.cleanup.policy", "compact,delete"),
        ("log.retention.check.interval.ms", "10"),
        ("log.cleaner.backoff.ms", "10"),
        // Old metadata segments that time retention would take.
        ("metadata.log.segment.ms", "1"),
    ];
    let broker = open_broker(dir.path(), &hostile);
    let mut names = Vec::new();
    for i in 0..5 {
        let name = format!("t{i}");
        broker
            .create_topic(&name, 1, 1, &[("retention.ms".into(), "-1".into())], false)
            .expect("create");
        append(&broker, &name, 0, 3);
        names.push(name);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let meta = dir.path().join(format!("{METADATA_TOPIC}-0"));
    let files = log_files(&meta);
    assert!(
        files.len() > 1,
        "metadata.log.segment.ms rolls the metadata log: {files:?}"
    );
    assert!(broker
        .logs
        .get(&TopicPartition::new(METADATA_TOPIC, 0))
        .is_none());
    for _ in 0..3 {
        broker.logs.run_retention();
        while broker.logs.clean_once().expect("clean").is_some() {}
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    assert_eq!(log_files(&meta), files);
    assert_eq!(broker.metadata.log().log_start_offset(), 0);
    broker.shutdown().expect("shutdown");
    drop(broker);
    let broker = open_broker(dir.path(), &[]);
    assert_eq!(topics(&broker), names);
    for n in &names {
        assert_eq!(broker.log(n, 0).expect("log").log_end_offset(), 3, "{n}");
    }
    broker.shutdown().expect("shutdown");
}

#[test]
fn snapshots_and_a_dropped_prefix_keep_every_topic_across_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let short = [
        ("metadata.log.segment.ms", "1"),
        ("metadata.max.retention.ms", "0"),
        ("log.retention.ms", "1"),
        ("log.roll.ms", "1"),
    ];
    let broker = open_broker(dir.path(), &short);
    let mut names = Vec::new();
    for i in 0..4 {
        let name = format!("s{i}");
        broker
            .create_topic(&name, 2, 1, &[("retention.ms".into(), "-1".into())], false)
            .expect("create");
        append(&broker, &name, 1, 2);
        names.push(name);
        std::thread::sleep(std::time::Duration::from_millis(5));
        broker.metadata.snapshot_now().expect("snapshot");
    }
    broker.delete_topic("s0").expect("delete");
    names.remove(0);
    broker.metadata.snapshot_now().expect("snapshot");
    assert!(broker.metadata.clean().expect("clean") > 0);
    let meta = dir.path().join(format!("{METADATA_TOPIC}-0"));
    assert!(!meta.join("00000000000000000000.log").exists());
    assert!(broker.metadata.log().log_start_offset() > 0);
    broker.shutdown().expect("shutdown");
    drop(broker);
    let broker = open_broker(dir.path(), &[]);
    assert_eq!(topics(&broker), names);
    for n in &names {
        assert_eq!(broker.log(n, 1).expect("log").log_end_offset(), 2, "{n}");
    }
    assert!(folders(dir.path()).iter().all(|f| !f.ends_with("-stray")));
    broker.shutdown().expect("shutdown");
}
