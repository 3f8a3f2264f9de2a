//! A data folder failing on a partition leader (design 024), on three
//! in-process combined nodes (the harness of `replication::cluster_tests`)
//! each with two `log.dirs` and the metadata log in a third folder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use proto_kafka::ResponseError;
use sluice_protocol::record::codec::decode_batch;
use sluice_storage::{AppendOrigin, Log, TopicPartition};

use crate::broker::Broker;
use crate::partition::{Acks, AppendError};
use crate::replication::cluster_tests::{batch, raw};
use crate::test_quorum::{
    eventually, node, one_cluster_at_a_time, start, three_node_configs, Node,
};

const LAG_MS: u64 = 2000;

/// Three running nodes whose `log.dirs` are `<root>/a,<root>/b` and whose
/// metadata log is in `<root>/meta`.
async fn two_folder_cluster() -> (Vec<Option<Node>>, Vec<tempfile::TempDir>) {
    let roots: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let paths: Vec<PathBuf> = roots.iter().map(|r| r.path().to_path_buf()).collect();
    let (configs, dirs) = three_node_configs(|i| {
        let root = &paths[i];
        vec![
            (
                "log.dirs",
                format!("{},{}", root.join("a").display(), root.join("b").display()),
            ),
            ("metadata.log.dir", root.join("meta").display().to_string()),
            ("broker.session.timeout.ms", "2000".into()),
            ("replica.lag.time.max.ms", LAG_MS.to_string()),
            ("replica.fetch.wait.max.ms", "200".into()),
            ("replica.fetch.backoff.ms", "50".into()),
        ]
    });
    let mut nodes = Vec::new();
    for c in configs {
        nodes.push(Some(start(c).await));
    }
    for n in nodes.iter().flatten() {
        let b = Arc::clone(&n.broker);
        eventually("three registered brokers", || {
            b.cluster_brokers().len() == 3
        })
        .await;
    }
    let mut all = roots;
    all.extend(dirs);
    (nodes, all)
}

fn state(b: &Broker, p: i32) -> sluice_controller::PartitionImage {
    b.image()
        .topic("j")
        .and_then(|t| t.partitions.get(&p).cloned())
        .expect("partition")
}

fn log(b: &Broker, p: i32) -> Arc<Log> {
    b.logs.get(&TopicPartition::new("j", p)).expect("log")
}

/// An acks=all produce of one record to `j-p` on its leader `b`: the end
/// offset, or the error code.
async fn produce(b: &Broker, p: i32, value: &str) -> Result<i64, ResponseError> {
    let part = b.partition("j", p).expect("led");
    let info = match part
        .append(batch(value), AppendOrigin::Client, Acks::All)
        .await
    {
        Ok(info) => info,
        Err(AppendError::Api(e)) => return Err(e.code),
        Err(AppendError::Storage(e)) => panic!("storage: {e}"),
    };
    let end = info.last_offset + 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    part.wait_replicated(end, deadline).await.map(|()| end)
}

/// The values of `log`'s records at offsets below `end` (one-record
/// batches).
fn values(log: &Log, end: i64) -> Vec<String> {
    let bytes = raw(log);
    let mut out = Vec::new();
    for b in sluice_protocol::record::BatchIter::new(&bytes) {
        let (at, h, _) = b.expect("batch");
        let batch = decode_batch(&bytes[at..at + h.total_size()], 1 << 20).expect("decode");
        for r in batch.records.into_iter().filter(|r| r.record.offset < end) {
            out.push(String::from_utf8_lossy(&r.record.value.unwrap_or_default()).into_owned());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_folder_on_the_leader_hands_its_partitions_to_another_isr_member() {
    let _cluster = one_cluster_at_a_time().await;
    let (nodes, _dirs) = two_folder_cluster().await;
    let creator = node(&nodes, 1);
    let topic = tokio::task::spawn_blocking(move || {
        creator.create_topic(
            "j",
            4,
            3,
            &[("min.insync.replicas".into(), "2".into())],
            false,
        )
    })
    .await
    .expect("task")
    .expect("topic");
    for (&p, s) in &topic.partitions {
        let leader = node(&nodes, s.leader);
        eventually("the leaders lead", || leader.partition("j", p).is_some()).await;
    }
    let failed_id = topic.partitions[&0].leader;
    let failed = node(&nodes, failed_id);
    // Both folders of every node hold partitions.
    let dir = failed.logs.dir_index_of(&log(&failed, 0)).expect("folder");
    for p in 0..4 {
        assert!(failed.logs.dir_index_of(&log(&failed, p)).is_some());
    }
    let written: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    for v in &written {
        produce(&failed, 0, v).await.expect("acks=all");
    }
    // The partitions the failing node leads, in the failing folder and in
    // the other one.
    let (moving, staying): (Vec<i32>, Vec<i32>) = (0..4)
        .filter(|&p| state(&failed, p).leader == failed_id)
        .partition(|&p| failed.logs.dir_index_of(&log(&failed, p)) == Some(dir));
    assert!(moving.contains(&0));
    let before: Vec<_> = (0..4).map(|p| state(&failed, p)).collect();

    // An I/O error in the folder: j-0's folder vanishes under its log.
    let failing = log(&failed, 0);
    std::fs::remove_dir_all(failing.dir()).expect("rm");
    // The next write and flush find it missing (the fsync of the folder).
    let mut lost = batch("lost");
    let _ = failing.append_as_leader(&mut lost, before[0].leader_epoch);
    let _ = failing.flush();
    assert!(failing.is_offline());

    // Every partition it led in that folder gets another leader from the
    // ISR, with the next leader epoch; the failed node leaves the ISR.
    for &p in &moving {
        for id in 1..=3 {
            let n = node(&nodes, id);
            eventually("the leadership handed over", || {
                let s = state(&n, p);
                s.leader != failed_id && s.leader >= 0 && !s.isr.contains(&failed_id)
            })
            .await;
        }
        let s = state(&failed, p);
        assert_eq!(s.leader_epoch, before[p as usize].leader_epoch + 1);
        assert!(before[p as usize].isr.contains(&s.leader));
        assert_eq!(s.isr.len(), 2);
        eventually("the failed node resigned", || {
            failed.partition("j", p).is_none()
        })
        .await;
    }
    // A partition it follows in that folder: it stops fetching, and its
    // leader takes it out of the ISR after the lag time.
    let followed: Vec<i32> = (0..4)
        .filter(|&p| !moving.contains(&p) && !staying.contains(&p))
        .filter(|&p| failed.logs.dir_index_of(&log(&failed, p)) == Some(dir))
        .collect();
    for &p in &followed {
        let leader = node(&nodes, before[p as usize].leader);
        eventually("the failed follower out of the ISR", || {
            !state(&leader, p).isr.contains(&failed_id)
        })
        .await;
        assert_eq!(state(&leader, p).leader, before[p as usize].leader);
    }
    // Its partitions in the other folder keep their leader.
    for &p in &staying {
        let s = state(&failed, p);
        assert_eq!(s.leader, failed_id);
        assert_eq!(s.leader_epoch, before[p as usize].leader_epoch);
        assert!(s.isr.contains(&failed_id));
        produce(&failed, p, "still here").await.expect("acks=all");
    }

    // The new leader has what was written before, and acks=all goes on
    // with the two replicas left.
    let new_id = state(&failed, 0).leader;
    let new_leader = node(&nodes, new_id);
    eventually("the new leader leads", || {
        new_leader.partition("j", 0).is_some()
    })
    .await;
    let end = written.len() as i64;
    let new_log = log(&new_leader, 0);
    let after = produce(&new_leader, 0, "after").await.expect("acks=all");
    assert!(after > end);
    assert!(new_log.high_watermark() >= after);
    assert_eq!(values(&new_log, end), written);
    let other_id = (1..=3)
        .find(|&id| id != failed_id && id != new_id)
        .expect("third");
    assert!(log(&node(&nodes, other_id), 0).log_end_offset() >= after);

    // The failed node neither fetches into its offline log nor comes back
    // into the ISR; the leadership stays away from it.
    let offline_end = failing.log_end_offset();
    for i in 0..3 {
        produce(&new_leader, 0, &format!("more{i}"))
            .await
            .expect("acks=all");
        tokio::time::sleep(Duration::from_millis(LAG_MS)).await;
    }
    let s = state(&new_leader, 0);
    assert_eq!(s.leader, new_id);
    assert!(!s.isr.contains(&failed_id), "{s:?}");
    assert!(failing.is_offline());
    assert_eq!(failing.log_end_offset(), offline_end);
    // The automatic rebalance (the preferred replica leads again) does
    // not choose it: it is out of the ISR.
    let b = Arc::clone(&new_leader);
    tokio::task::spawn_blocking(move || b.rebalance_leaders())
        .await
        .expect("task");
    let s = state(&new_leader, 0);
    assert_eq!(s.leader, new_id);
    assert!(!s.isr.contains(&failed_id));

    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}
