//! Test support for in-process clusters: free loopback ports, waiting for a
//! condition, and the configurations of three combined nodes
//! (`process.roles=broker,controller`) of one metadata quorum, each with
//! its own data folder, started as running servers. Used by the
//! metadata-follower, replication and coordinator failover tests.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::server::Server;

/// [`eventually_within`] 40 s: generous for a loaded 2-core machine.
pub(crate) async fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(40_000, what, f).await
}

/// A free port on 127.0.0.1, below the ephemeral range (so a node
/// restarted on its port finds it free).
pub(crate) use sluice_testkit::free_port;

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

/// A running node: its broker, config, and how to stop it.
pub(crate) struct Node {
    pub(crate) broker: Arc<Broker>,
    config: BrokerConfig,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a server on `config`. With `SLUICETEST_LOG` set, the nodes' logs
/// go to the test's output, filtered by its value as a `RUST_LOG`-style
/// directive (`1` or anything unparsable: info and up).
pub(crate) async fn start(config: BrokerConfig) -> Node {
    if std::env::var_os("SLUICETEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("SLUICETEST_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_test_writer()
            .try_init();
    }
    let server = Server::bind(config.clone()).await.expect("bind");
    let broker = Arc::clone(server.broker());
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("run");
    });
    Node {
        broker,
        config,
        stop,
        task,
    }
}

impl Node {
    /// Stops the server; its config restarts it on the same folder.
    pub(crate) async fn stop(self) -> BrokerConfig {
        let _ = self.stop.send(());
        drop(self.broker);
        self.task.await.expect("server task");
        self.config
    }
}

/// Three running combined nodes of one quorum (node ids 1 to 3), every
/// one registered; `lag_ms` is their `replica.lag.time.max.ms`.
pub(crate) async fn cluster(lag_ms: u64) -> (Vec<Option<Node>>, Vec<tempfile::TempDir>) {
    cluster_with(lag_ms, &[]).await
}

/// [`cluster`] with more keys for every node.
pub(crate) async fn cluster_with(
    lag_ms: u64,
    more: &[(&'static str, &'static str)],
) -> (Vec<Option<Node>>, Vec<tempfile::TempDir>) {
    let (configs, dirs) = three_node_configs(|_| {
        vec![
            ("broker.session.timeout.ms", "2000".into()),
            ("replica.lag.time.max.ms", lag_ms.to_string()),
            ("replica.fetch.wait.max.ms", "200".into()),
            ("replica.fetch.backoff.ms", "50".into()),
        ]
        .into_iter()
        .chain(more.iter().map(|(k, v)| (*k, v.to_string())))
        .collect()
    });
    let mut nodes: Vec<Option<Node>> = Vec::new();
    for c in configs {
        nodes.push(Some(start(c).await));
    }
    for n in nodes.iter().flatten() {
        let broker = Arc::clone(&n.broker);
        eventually("three registered brokers", || {
            broker.cluster_brokers().len() == 3
        })
        .await;
    }
    (nodes, dirs)
}

/// The running broker of node `id`.
pub(crate) fn node(nodes: &[Option<Node>], id: i32) -> Arc<Broker> {
    Arc::clone(&nodes[(id - 1) as usize].as_ref().expect("running").broker)
}

/// Configurations of a split cluster (design 025): `controllers`
/// controller-only voters (ids 1 to `controllers`, a CONTROLLER listener
/// each) and `brokers` broker-only observers (the next ids, a PLAINTEXT
/// listener each), plus `extra` keys for every node (a closure of the
/// node's id). Controllers first, then brokers.
pub(crate) fn split_configs(
    controllers: usize,
    brokers: usize,
    extra: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> (Vec<BrokerConfig>, Vec<BrokerConfig>, Vec<tempfile::TempDir>) {
    let ports: Vec<u16> = (0..controllers).map(|_| free_port()).collect();
    let voters = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let dirs: Vec<tempfile::TempDir> = (0..controllers + brokers)
        .map(|_| tempfile::tempdir().expect("dir"))
        .collect();
    let mut all: Vec<BrokerConfig> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let id = i + 1;
            let (roles, listeners) = if i < controllers {
                ("controller", format!("CONTROLLER://127.0.0.1:{}", ports[i]))
            } else {
                ("broker", format!("PLAINTEXT://127.0.0.1:{}", free_port()))
            };
            let common = [
                ("log.dirs", dir.path().display().to_string()),
                ("node.id", id.to_string()),
                ("process.roles", roles.into()),
                ("listeners", listeners),
                ("controller.listener.names", "CONTROLLER".into()),
                ("controller.quorum.voters", voters.clone()),
                ("controller.quorum.election.timeout.ms", "300".into()),
                ("controller.quorum.request.timeout.ms", "5000".into()),
            ];
            let mut c = BrokerConfig::default();
            for (k, v) in common.into_iter().chain(extra(id)) {
                c.set(k, &v).expect(k);
            }
            c
        })
        .collect();
    let brokers = all.split_off(controllers);
    (all, brokers, dirs)
}

/// A running controller-only node.
pub(crate) struct ControllerProc {
    pub(crate) quorum: Arc<sluice_controller::quorum::MetadataQuorum>,
    config: BrokerConfig,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a controller-only node on `config`.
pub(crate) async fn start_controller(config: BrokerConfig) -> ControllerProc {
    let node = crate::controller_node::ControllerNode::bind(config.clone())
        .await
        .expect("bind a controller");
    let quorum = Arc::clone(node.quorum());
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        node.run(async {
            let _ = rx.await;
        })
        .await
        .expect("run");
    });
    ControllerProc {
        quorum,
        config,
        stop,
        task,
    }
}

impl ControllerProc {
    /// Stops the controller; its config restarts it on the same folder.
    pub(crate) async fn stop(self) -> BrokerConfig {
        let _ = self.stop.send(());
        drop(self.quorum);
        self.task.await.expect("controller task");
        self.config
    }
}
