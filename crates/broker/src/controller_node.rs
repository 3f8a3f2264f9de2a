//! A controller-only node (`process.roles=controller`, design 025): a
//! voter of the metadata quorum that serves only its CONTROLLER listener —
//! Raft between the voters, and what brokers ask the controllers there
//! (forwarded metadata changes, DescribeQuorum's Describe, observers'
//! Join). It has no client listener and no partition logs, never
//! registers as a broker, and is in no broker list; while it leads the
//! quorum it fences brokers whose heartbeats stopped, as any leader does.
//! Its data folder holds `meta.properties` and `__cluster_metadata-0`.

use std::sync::Arc;

use sluice_controller::quorum::MetadataQuorum;
use sluice_controller::MetadataStore;

use crate::config::BrokerConfig;
use crate::error::{io, BrokerError, Result};

/// A running controller-only node.
#[derive(Debug)]
pub struct ControllerNode {
    metadata: MetadataStore,
    quorum: Arc<MetadataQuorum>,
    addr: std::net::SocketAddr,
}

impl ControllerNode {
    /// Validates `config` (it must be controller-only), opens the data
    /// folder and starts the quorum voter on the CONTROLLER listener.
    pub async fn bind(config: BrokerConfig) -> Result<Self> {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || Self::open(config, handle))
            .await
            .map_err(|e| io("start-up task", std::io::Error::other(e)))?
    }

    fn open(config: BrokerConfig, handle: tokio::runtime::Handle) -> Result<Self> {
        config.validate()?;
        if !config.process_roles()?.controller_only() {
            return Err(BrokerError::Malformed(
                "a controller-only node needs process.roles=controller".into(),
            ));
        }
        // The metadata log's folder (`metadata.log.dir`, else the first of
        // `log.dirs`): a controller holds no partition logs.
        let dir = config.metadata_log_dir();
        let node_id = config.node_id();
        let cluster_id = crate::broker::format_dirs(
            std::slice::from_ref(&dir),
            node_id,
            &config.quorum_voters()?,
        )?;
        let (qc, l) = config.quorum_config()?.ok_or_else(|| {
            BrokerError::Malformed("a controller-only node needs controller.quorum.voters".into())
        })?;
        let bind = format!("{}:{}", l.host, l.port);
        let listener = std::net::TcpListener::bind(&bind)
            .map_err(|e| io(format!("controller listener {bind}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io("controller listener address", e))?;
        tracing::info!(
            data_dir = %dir.display(), %cluster_id, node_id, listener = %addr, voters = ?qc.voters,
            "starting a controller-only node (process.roles=controller)"
        );
        let metadata = MetadataStore::open_quorum(
            &dir,
            qc,
            listener,
            handle,
            Arc::new(sluice_storage::SystemClock),
        )?;
        let quorum = metadata.quorum().map(Arc::clone).ok_or_else(|| {
            BrokerError::Malformed("a controller-only node runs the metadata quorum".into())
        })?;
        Ok(Self {
            metadata,
            quorum,
            addr,
        })
    }

    /// The CONTROLLER listener's bound address.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// This node's controller.
    pub fn quorum(&self) -> &Arc<MetadataQuorum> {
        &self.quorum
    }

    /// Serves until `shutdown` resolves, then stops the controller and
    /// closes the metadata log.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        shutdown.await;
        tracing::info!("shutting down the controller");
        let metadata = self.metadata;
        drop(self.quorum);
        tokio::task::spawn_blocking(move || metadata.shutdown())
            .await
            .map_err(|e| io("shutdown task", std::io::Error::other(e)))??;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}
