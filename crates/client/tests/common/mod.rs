//! Shared start-up of an in-process Sluice server for the integration
//! tests of the client and of sluice-streams (which includes this file by
//! path): a fresh data directory and a free 127.0.0.1 port per
//! server, stopped by [`TestServer::stop`].

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::time::Duration;

use sluice_broker::{BrokerConfig, Server};
use sluice_client::admin::NewTopic;
use sluice_client::{Admin, ClientConfig, Producer, ProducerConfig};
use tokio::sync::oneshot;

/// A running in-process broker.
#[derive(Debug)]
pub struct TestServer {
    /// `127.0.0.1:port` it listens on.
    pub addr: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// A port nothing listens on (at the time of the call).
/// A free port on 127.0.0.1, below the ephemeral range (so a server
/// restarted on its port finds it free).
pub use sluice_testkit::free_port;

/// Starts a broker with the default configuration.
pub async fn start() -> TestServer {
    start_with(|_| {}).await
}

/// Starts a broker after `configure` adjusts its configuration.
pub async fn start_with(configure: impl FnOnce(&mut BrokerConfig)) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut c = BrokerConfig::default();
    c.set("log.dirs", &dir.path().join("data").display().to_string())
        .expect("log.dirs");
    c.set("listeners", &format!("PLAINTEXT://127.0.0.1:{port}"))
        .expect("listeners");
    configure(&mut c);
    let server = Server::bind(c).await.expect("bind");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("server run");
    });
    TestServer {
        addr: format!("127.0.0.1:{port}"),
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

impl TestServer {
    /// Shuts the broker down and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.expect("server task");
    }

    /// The broker's `log.dirs` folder (partition folders are `topic-N`).
    pub fn data_dir(&self) -> std::path::PathBuf {
        self._dir.path().join("data")
    }

    /// A client configuration for this broker (10 s request timeout).
    pub fn client_config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new(&self.addr);
        cfg.connection.request_timeout = Duration::from_secs(10);
        cfg
    }

    /// A connected admin client.
    pub async fn admin(&self) -> Admin {
        Admin::connect(self.client_config())
            .await
            .expect("admin connect")
    }

    /// Creates `name` with `partitions` partitions.
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        self.admin()
            .await
            .create_topic(NewTopic::new(name, partitions, 1))
            .await
            .expect("create topic");
    }

    /// A producer; `f` adjusts its configuration.
    pub async fn producer(&self, f: impl FnOnce(&mut ProducerConfig)) -> Producer {
        let mut cfg = ProducerConfig::new(self.client_config());
        f(&mut cfg);
        Producer::new(cfg).await.expect("producer")
    }
}
