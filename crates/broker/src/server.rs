//! The listener: binds, accepts, runs one task per connection, and shuts
//! down gracefully (stop accepting, let in-flight requests finish, close
//! the data folder cleanly).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::error::{io, Result};

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    broker: Arc<Broker>,
    listener: TcpListener,
}

impl Server {
    /// Opens the data folder and binds the listener.
    pub async fn bind(config: BrokerConfig) -> Result<Self> {
        let broker = tokio::task::spawn_blocking(move || Broker::open(config))
            .await
            .map_err(|e| io("start-up task", std::io::Error::other(e)))??;
        let l = broker.config.listener()?;
        let addr = format!("{}:{}", l.host, l.port);
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| io(format!("listener {addr}"), e))?;
        tracing::info!(
            listener = %listener.local_addr().map_or(addr.clone(), |a| a.to_string()),
            advertised = %format!("{}:{}", broker.advertised.host, broker.advertised.port),
            "listening"
        );
        Ok(Self { broker, listener })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| io("listener address", e))
    }

    /// Serves until `shutdown` resolves, then drains and closes cleanly.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let timers = tokio::spawn(crate::groups::run_timers(
            Arc::clone(&self.broker),
            stop_rx.clone(),
        ));
        let mut tasks = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        let broker = Arc::clone(&self.broker);
                        let stop = stop_rx.clone();
                        tasks.spawn(crate::connection::serve(broker, stream, peer, stop));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        drop(self.listener);
        let _ = stop_tx.send(true);
        let drain = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(30), drain)
            .await
            .is_err()
        {
            tracing::warn!("connections still busy after 30 s; closing anyway");
        }
        let _ = timers.await;
        let broker = self.broker;
        tokio::task::spawn_blocking(move || broker.shutdown())
            .await
            .map_err(|e| io("shutdown task", std::io::Error::other(e)))??;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}
