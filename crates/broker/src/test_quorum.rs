//! Test support for in-process clusters: free loopback ports, waiting for a
//! condition, and the configurations of three combined nodes
//! (`process.roles=broker,controller`) of one metadata quorum, each with
//! its own data folder. Used by the metadata-follower and replication
//! tests.

use std::time::Duration;

use crate::config::BrokerConfig;

/// A free port on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Waits up to `max_ms` (in 25 ms steps) for `f`; panics naming `what`.
pub(crate) async fn eventually_within(max_ms: u64, what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..max_ms / 25 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}")
}

/// Configurations of three combined nodes (ids 1 to 3) voting in one
/// quorum on free ports, plus `extra` keys for every node (a closure of
/// the node's index, so keys may differ per node). The folders live as
/// long as the returned `TempDir`s.
pub(crate) fn three_node_configs(
    extra: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> (Vec<BrokerConfig>, Vec<tempfile::TempDir>) {
    let controllers: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let voters = controllers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let configs = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let mut c = BrokerConfig::default();
            let listeners = format!(
                "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
                free_port(),
                controllers[i]
            );
            let common = [
                ("log.dirs", dir.path().display().to_string()),
                ("node.id", (i + 1).to_string()),
                ("process.roles", "broker,controller".into()),
                ("listeners", listeners),
                ("controller.listener.names", "CONTROLLER".into()),
                ("controller.quorum.voters", voters.clone()),
                ("controller.quorum.election.timeout.ms", "300".into()),
                ("controller.quorum.request.timeout.ms", "5000".into()),
            ];
            for (k, v) in common.into_iter().chain(extra(i)) {
                c.set(k, &v).expect(k);
            }
            c
        })
        .collect();
    (configs, dirs)
}

/// Held for the whole of a test that runs a three-node cluster: such tests
/// run one at a time, so two clusters' timers (elections, the ISR lag
/// time) never compete for the same cores.
pub(crate) async fn one_cluster_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::LazyLock<tokio::sync::Mutex<()>> =
        std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));
    LOCK.lock().await
}
