//! Changelog restoration against a real in-process broker: from scratch,
//! from a checkpoint (only the records after it), after the store folder is
//! deleted (everything again, same contents), and a checkpoint past the end.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use sluice_client::{ProducerRecord, TopicPartition};
use sluice_streams::internal_topics::{InternalTopicConfig, InternalTopicManager};
use sluice_streams::restore::{ChangelogRestore, StoreChangelogReader};
use sluice_streams::state::directory::StateDirectory;
use sluice_streams::state::persistent::PersistentKeyValueStore;
use sluice_streams::state::KeyValueStore;
use sluice_streams::{StreamsError, TaskId};

const CHANGELOG: &str = "app-counts-changelog";

/// Writes `n` changelog records starting at record number `from`: puts of
/// `k<i % 200>`, every 7th a tombstone. Applies them to `expected`.
async fn write_changelog(
    server: &common::TestServer,
    from: usize,
    n: usize,
    expected: &mut BTreeMap<Bytes, Bytes>,
) {
    let producer = server.producer(|_| {}).await;
    let mut pending = Vec::new();
    for i in from..from + n {
        let key = format!("k{}", i % 200);
        let mut rec = ProducerRecord::new(CHANGELOG, Vec::new())
            .key(key.clone().into_bytes())
            .partition(0);
        if i % 7 == 3 {
            rec.value = None;
            expected.remove(key.as_bytes());
        } else {
            let v = format!("v{i}");
            rec.value = Some(v.clone().into_bytes().into());
            expected.insert(Bytes::from(key), Bytes::from(v));
        }
        pending.push(producer.send(rec).await.expect("send"));
    }
    for p in pending {
        p.await.expect("ack");
    }
    producer.close().await.expect("close");
}

async fn restore_once(
    server: &common::TestServer,
    store: &mut PersistentKeyValueStore,
    checkpoint: Option<i64>,
) -> Result<(u64, Option<i64>), StreamsError> {
    let mut reader = StoreChangelogReader::new(server.client_config())
        .await
        .expect("reader");
    let mut targets = [ChangelogRestore {
        store,
        changelog: TopicPartition::new(CHANGELOG, 0),
        checkpoint,
    }];
    let out = reader.restore(&mut targets).await;
    reader.close().await.expect("close");
    let out = out?;
    Ok((out[0].restored, out[0].checkpoint))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_from_checkpoint_and_from_scratch() {
    let server = common::start().await;
    InternalTopicManager::new(server.admin().await, 1)
        .make_ready(&[InternalTopicConfig::changelog(CHANGELOG, 1)])
        .await
        .expect("changelog");
    let mut expected = BTreeMap::new();
    write_changelog(&server, 0, 2000, &mut expected).await;

    let state = tempfile::tempdir().expect("state dir");
    let sd = StateDirectory::new(state.path(), "app").expect("state dir");
    let task = TaskId::new(0, 0);
    let lock = sd.lock(task).expect("lock").expect("free");
    let tp = TopicPartition::new(CHANGELOG, 0);

    // 1. From scratch: every record.
    let mut store =
        PersistentKeyValueStore::open("counts", &sd.store_dir(task, "counts")).expect("store");
    let (restored, cp) = restore_once(&server, &mut store, None)
        .await
        .expect("restore");
    assert_eq!(restored, 2000);
    assert_eq!(cp, Some(1999));
    assert_eq!(
        store.all().expect("all"),
        expected.clone().into_iter().collect::<Vec<_>>()
    );
    sd.checkpoint(task)
        .write(&BTreeMap::from([(tp.clone(), 1999)]))
        .expect("checkpoint");
    store.close().expect("close");

    // 2. Clean restart after 10 more records: only those are restored.
    write_changelog(&server, 2000, 10, &mut expected).await;
    let cp = sd.checkpoint(task).read().expect("read").expect("present");
    let mut store =
        PersistentKeyValueStore::open("counts", &sd.store_dir(task, "counts")).expect("reopen");
    let (restored, new_cp) = restore_once(&server, &mut store, cp.get(&tp).copied())
        .await
        .expect("restore");
    assert_eq!(restored, 10, "fewer than 1% of the 2010-record changelog");
    assert_eq!(new_cp, Some(2009));
    let after_checkpoint = store.all().expect("all");
    assert_eq!(
        after_checkpoint,
        expected.clone().into_iter().collect::<Vec<_>>()
    );
    store.close().expect("close");

    // 3. The store folder deleted: a full restore, identical contents.
    sd.wipe_store(task, "counts", Some(&tp)).expect("wipe");
    assert!(!sd.store_dir(task, "counts").exists());
    let mut store =
        PersistentKeyValueStore::open("counts", &sd.store_dir(task, "counts")).expect("fresh");
    let (restored, _) = restore_once(&server, &mut store, None)
        .await
        .expect("restore");
    assert_eq!(restored, 2010);
    assert_eq!(store.all().expect("all"), after_checkpoint);

    // 4. A checkpoint past the changelog's end: the task is corrupted.
    let err = restore_once(&server, &mut store, Some(5000))
        .await
        .expect_err("corrupted");
    assert!(matches!(err, StreamsError::TaskCorrupted(_)), "{err}");
    store.close().expect("close");
    drop(lock);
    server.stop().await;
}
