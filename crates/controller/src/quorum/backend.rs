//! The metadata quorum behind [`crate::MetadataStore`]'s synchronous API:
//! the broker's change paths (on blocking threads, or in `block_in_place`)
//! call `append` as before; here it runs the quorum write on the runtime
//! and waits. A multi-threaded runtime is required (on a current-thread
//! runtime the waiting thread would be the one the write needs).

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_storage::{Clock, Log};
use tokio::runtime::{Handle, RuntimeFlavor};

use super::{MetadataQuorum, QuorumConfig};
use crate::error::{ControllerError, Result};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

/// A running controller of the quorum, driven from blocking threads.
#[derive(Debug)]
pub struct QuorumBackend {
    quorum: Arc<MetadataQuorum>,
    handle: Handle,
    log: Arc<Log>,
    write: Mutex<()>,
}

/// Runs `fut` on the runtime and waits for it from this (non-async)
/// thread.
fn run_on<T: Send + 'static>(
    handle: &Handle,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = || {
        rx.recv()
            .map_err(|_| ControllerError::Quorum("the runtime stopped".into()))
    };
    match Handle::try_current() {
        // On an async worker: hand its other tasks away while waiting.
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

impl QuorumBackend {
    /// Starts this node's controller on `listener` (the CONTROLLER
    /// listener, bound) within the runtime of `handle`.
    pub fn start(
        data_dir: &Path,
        config: QuorumConfig,
        listener: std::net::TcpListener,
        handle: Handle,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            // A change waits for the runtime from the change's own thread.
            return Err(ControllerError::Quorum(
                "the metadata quorum needs a multi-threaded async runtime".into(),
            ));
        }
        let dir = data_dir.to_path_buf();
        let quorum = run_on(&handle, async move {
            listener
                .set_nonblocking(true)
                .map_err(|e| ControllerError::Quorum(format!("controller listener: {e}")))?;
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| ControllerError::Quorum(format!("controller listener: {e}")))?;
            MetadataQuorum::start(&dir, config, listener, clock).await
        })??;
        let log = quorum.log();
        Ok(Self {
            quorum: Arc::new(quorum),
            handle,
            log,
            write: Mutex::new(()),
        })
    }

    pub fn quorum(&self) -> &Arc<MetadataQuorum> {
        &self.quorum
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image()
    }

    pub fn lock_for_change(&self) -> MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `records` through the quorum leader and returns this node's
    /// image including them. Call from a blocking thread, not from async
    /// code.
    pub fn append(&self, records: &[MetadataRecord]) -> Result<Arc<MetadataImage>> {
        let q = Arc::clone(&self.quorum);
        let records = records.to_vec();
        run_on(&self.handle, async move { q.write(records).await })?
    }

    pub fn log(&self) -> &Arc<Log> {
        &self.log
    }

    /// Builds a snapshot now.
    pub fn snapshot_now(&self) -> Result<()> {
        let q = Arc::clone(&self.quorum);
        run_on(&self.handle, async move { q.snapshot_now().await })?
    }

    pub fn shutdown(&self) -> Result<()> {
        let q = Arc::clone(&self.quorum);
        run_on(&self.handle, async move { q.shutdown().await })?
    }
}
