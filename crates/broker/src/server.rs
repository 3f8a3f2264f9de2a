//! The listener: binds, accepts, runs one task per connection, and shuts
//! down gracefully (controlled shutdown in a multi-node quorum, then stop
//! accepting, let in-flight requests finish, close the data folder
//! cleanly).
//!
//! Connection limits (`crate::limits`), as Kafka's acceptor applies them:
//! at `max.connections` the loop stops accepting until a connection closes
//! (new ones wait in the listen queue); a connection from an address that
//! already has `max.connections.per.ip` (or its override) is accepted and
//! closed at once with an info line.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::error::{io, Result};
use crate::limits::{ConnectionLimits, RequestMemory};

/// How often "max.connections reached" may be logged.
const FULL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    broker: Arc<Broker>,
    listener: TcpListener,
    memory: Arc<RequestMemory>,
    connections: Arc<ConnectionLimits>,
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
        let memory = RequestMemory::from_settings(&broker.settings);
        // Override host names are resolved here, off the async threads.
        let settings = broker.settings.clone();
        let connections =
            tokio::task::spawn_blocking(move || ConnectionLimits::from_settings(&settings))
                .await
                .map_err(|e| io("start-up task", std::io::Error::other(e)))??;
        tracing::debug!(
            queued_max_request_bytes = memory.limit(),
            max_connections = connections.max_total(),
            "request and connection limits"
        );
        Ok(Self {
            broker,
            listener,
            memory,
            connections,
        })
    }

    /// The broker this server serves (in-process tests).
    #[cfg(test)]
    pub(crate) fn broker(&self) -> &Arc<Broker> {
        &self.broker
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
        let txn_task = tokio::spawn(crate::txn_coordinator::run(
            Arc::clone(&self.broker),
            stop_rx.clone(),
        ));
        // Replication: follower fetches and the leaders' ISR changes.
        let fetchers = tokio::spawn(crate::replication::fetcher::run(
            Arc::downgrade(&self.broker),
            stop_rx.clone(),
        ));
        let isr_task = tokio::spawn(crate::replication::isr::run(
            Arc::downgrade(&self.broker),
            stop_rx.clone(),
        ));
        let rebalance_task = tokio::spawn(crate::replication::rebalance::run(
            Arc::downgrade(&self.broker),
            stop_rx.clone(),
        ));
        let log_dirs_task = tokio::spawn(crate::log_dir_failure::run(
            Arc::downgrade(&self.broker),
            stop_rx.clone(),
        ));
        let mut tasks = tokio::task::JoinSet::new();
        // Asked to stop, a node of a metadata quorum first hands its
        // leaderships over (controlled shutdown) while it still serves
        // connections, so followers catch up and clients move on.
        let broker = Arc::clone(&self.broker);
        let shutdown = async move {
            shutdown.await;
            broker
                .controlled_shutdown(crate::controlled_shutdown::CONTROLLED_SHUTDOWN_TIMEOUT)
                .await;
            drop(broker);
        };
        tokio::pin!(shutdown);
        // A broker-wide connection slot, taken before accepting.
        let mut slot = None;
        let mut last_full_log: Option<tokio::time::Instant> = None;
        loop {
            if slot.is_none() {
                slot = self.connections.try_slot();
                let quiet = last_full_log.is_some_and(|t| t.elapsed() < FULL_LOG_INTERVAL);
                if slot.is_none() && !quiet {
                    tracing::info!(
                        max_connections = self.connections.max_total(),
                        "max.connections reached: not accepting until a connection closes"
                    );
                    last_full_log = Some(tokio::time::Instant::now());
                }
            }
            tokio::select! {
                () = &mut shutdown => break,
                p = self.connections.slot(), if slot.is_none() => slot = p,
                accepted = self.listener.accept(), if slot.is_some() => match accepted {
                    Ok((stream, peer)) => {
                        let Some(s) = slot.take() else { continue };
                        let conn = match self.connections.admit(peer.ip(), s) {
                            Ok(c) => c,
                            Err(e) => {
                                tracing::info!(
                                    "Rejected connection from {}, address already has the configured maximum of {} connections.",
                                    e.ip, e.max
                                );
                                drop(stream);
                                continue;
                            }
                        };
                        let _ = stream.set_nodelay(true);
                        let broker = Arc::clone(&self.broker);
                        let memory = Arc::clone(&self.memory);
                        let stop = stop_rx.clone();
                        tasks.spawn(async move {
                            crate::connection::serve(broker, memory, stream, peer, stop).await;
                            drop(conn);
                        });
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
        let _ = txn_task.await;
        let _ = fetchers.await;
        let _ = isr_task.await;
        let _ = rebalance_task.await;
        let _ = log_dirs_task.await;
        let broker = self.broker;
        tokio::task::spawn_blocking(move || broker.shutdown())
            .await
            .map_err(|e| io("shutdown task", std::io::Error::other(e)))??;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The request memory budget and connection limits against a running
    //! server: raw sockets, the budget counter, and the log lines.

    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    use super::*;

    const MIB: usize = 1 << 20;

    /// Log lines written while the guard lives (this thread's tasks).
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("logs").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Logs;
        fn make_writer(&'a self) -> Logs {
            self.clone()
        }
    }

    impl Logs {
        fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
            let logs = Logs::default();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(logs.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .finish();
            (logs, tracing::subscriber::set_default(subscriber))
        }

        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
        }
    }

    struct Running {
        addr: std::net::SocketAddr,
        memory: Arc<RequestMemory>,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
        _dir: tempfile::TempDir,
    }

    async fn start(overrides: &[(&str, &str)]) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = BrokerConfig::default();
        c.set("log.dirs", &dir.path().display().to_string())
            .expect("log.dirs");
        c.set("listeners", "PLAINTEXT://127.0.0.1:0")
            .expect("listeners");
        for (k, v) in overrides {
            c.set(k, v).expect("override");
        }
        let server = Server::bind(c).await.expect("bind");
        let addr = server.local_addr().expect("addr");
        let memory = Arc::clone(&server.memory);
        let (stop, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = rx.await;
                })
                .await
                .expect("run");
        });
        Running {
            addr,
            memory,
            stop,
            task,
            _dir: dir,
        }
    }

    impl Running {
        async fn stop(self) {
            let _ = self.stop.send(());
            self.task.await.expect("server task");
        }
    }

    /// ApiVersions v0 on `s`; the response's error code.
    async fn api_versions(s: &mut TcpStream, correlation_id: i32) -> i16 {
        let mut req = Vec::new();
        req.extend_from_slice(&10i32.to_be_bytes());
        req.extend_from_slice(&18i16.to_be_bytes());
        req.extend_from_slice(&0i16.to_be_bytes());
        req.extend_from_slice(&correlation_id.to_be_bytes());
        req.extend_from_slice(&(-1i16).to_be_bytes());
        s.write_all(&req).await.expect("send");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.expect("size");
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.expect("body");
        assert_eq!(&body[..4], &correlation_id.to_be_bytes());
        i16::from_be_bytes([body[4], body[5]])
    }

    async fn still_serves(addr: std::net::SocketAddr) {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let answered = tokio::time::timeout(Duration::from_secs(10), api_versions(&mut s, 7)).await;
        assert_eq!(answered.expect("answered in time"), 0);
    }

    /// Whether the server closes `s` (EOF or reset) within `wait`.
    async fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
        let mut buf = [0u8; 64];
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Err(_) => false,
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!("expected a close, got {n} bytes"),
        }
    }

    /// Polls the budget counter until `pred` holds (or fails after 10 s).
    async fn wait_held(memory: &RequestMemory, pred: impl Fn(usize) -> bool) -> usize {
        for _ in 0..1000 {
            let held = memory.held();
            if pred(held) {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("budget counter stuck at {}", memory.held());
    }

    /// A frame announcing `size` bytes followed by `sent` of them.
    async fn partial_frame(addr: std::net::SocketAddr, size: usize, sent: usize) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(&(size as i32).to_be_bytes())
            .await
            .expect("size");
        s.write_all(&vec![7u8; sent]).await.expect("body");
        s
    }

    #[tokio::test]
    async fn slow_body_times_out_and_closes_with_a_log_line() {
        let (logs, _guard) = Logs::capture();
        let srv = start(&[("connections.max.idle.ms", "400")]).await;
        let mut slow = partial_frame(srv.addr, 1000, 10).await;
        let started = std::time::Instant::now();
        assert!(closed_within(&mut slow, Duration::from_secs(5)).await);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // A body trickling in byte by byte is closed at the same deadline:
        // the deadline covers the whole body, not each read.
        let mut trickle = partial_frame(srv.addr, 1000, 1).await;
        let started = std::time::Instant::now();
        let closed = loop {
            if trickle.write_all(&[1]).await.is_err() {
                break true;
            }
            if closed_within(&mut trickle, Duration::from_millis(100)).await {
                break true;
            }
            if started.elapsed() > Duration::from_secs(5) {
                break false;
            }
        };
        assert!(closed, "a trickling body kept its connection");
        wait_held(&srv.memory, |h| h == 0).await;
        let text = logs.text();
        assert!(
            text.contains(
                "request body did not arrive within connections.max.idle.ms; closing connection"
            ),
            "{text}"
        );
        assert!(
            text.contains("size=1000") && text.contains("received=10"),
            "{text}"
        );
        still_serves(srv.addr).await;
        srv.stop().await;
    }

    #[tokio::test]
    async fn slow_clients_announcing_100_mib_hold_only_what_they_sent() {
        let srv = start(&[]).await;
        let mut conns = Vec::new();
        for _ in 0..50 {
            conns.push(partial_frame(srv.addr, 100 * MIB, 20_000).await);
        }
        // Each buffer is 16 KiB, grown once (eightfold, see
        // `next_body_capacity`) to 128 KiB for 20,000 bytes: not the
        // 100 MiB announced.
        let held = wait_held(&srv.memory, |h| h == 50 * 128 * 1024).await;
        assert_eq!(held, 50 * 128 * 1024);
        still_serves(srv.addr).await;
        drop(conns);
        wait_held(&srv.memory, |h| h == 0).await;
        srv.stop().await;
    }

    #[tokio::test]
    async fn reading_pauses_past_queued_max_request_bytes() {
        let srv = start(&[
            ("socket.request.max.bytes", "1048576"),
            ("queued.max.request.bytes", "2097152"),
        ])
        .await;
        // Four clients each send all but one byte of a 1 MiB frame.
        let mut holders = Vec::new();
        for _ in 0..4 {
            holders.push(partial_frame(srv.addr, MIB, MIB - 1).await);
        }
        // Two fit the budget, a third finishes its buffer on the overdraft,
        // the fourth is paused: at most budget + one frame is held.
        let held = wait_held(&srv.memory, |h| h > 2 * MIB).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = srv.memory.held().max(held);
        assert_eq!(srv.memory.held(), held, "still reading");
        assert!(held <= 2 * MIB + MIB, "held {held}");
        // Less than the clients sent: the rest waits in the sockets.
        assert!(held < 4 * (MIB - 1), "held {held}");
        // A new request waits for budget too.
        let mut late = TcpStream::connect(srv.addr).await.expect("connect");
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), api_versions(&mut late, 1)).await;
        assert!(waiting.is_err(), "answered while the budget was spent");
        // The holders finish their frames: the one on the overdraft
        // completes first (a bad request: closed), gives budget back, and
        // the others follow one by one; then the late request is answered
        // (its request was sent in full above).
        for h in &mut holders {
            h.write_all(&[7]).await.expect("last byte");
        }
        for h in &mut holders {
            assert!(closed_within(h, Duration::from_secs(10)).await);
        }
        let mut len = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), late.read_exact(&mut len))
            .await
            .expect("answered once budget came back")
            .expect("read");
        drop(late);
        drop(holders);
        wait_held(&srv.memory, |h| h == 0).await;
        still_serves(srv.addr).await;
        srv.stop().await;
    }

    #[tokio::test]
    async fn connections_over_max_connections_per_ip_are_closed_with_a_log_line() {
        let (logs, _guard) = Logs::capture();
        let srv = start(&[("max.connections.per.ip", "3")]).await;
        let mut held = Vec::new();
        for i in 0..3 {
            let mut s = TcpStream::connect(srv.addr).await.expect("connect");
            assert_eq!(api_versions(&mut s, i).await, 0);
            held.push(s);
        }
        let mut extra = TcpStream::connect(srv.addr).await.expect("connect");
        assert!(closed_within(&mut extra, Duration::from_secs(5)).await);
        assert!(logs.text().contains(
            "Rejected connection from 127.0.0.1, address already has the configured maximum of 3 connections."
        ), "{}", logs.text());
        // The admitted ones keep working; a closed one frees its place.
        assert_eq!(api_versions(&mut held[2], 9).await, 0);
        drop(held.remove(0));
        tokio::time::sleep(Duration::from_millis(100)).await;
        still_serves(srv.addr).await;
        drop(held);
        srv.stop().await;
    }

    #[tokio::test]
    async fn max_connections_makes_new_connections_wait_for_a_slot() {
        let (logs, _guard) = Logs::capture();
        let srv = start(&[("max.connections", "2")]).await;
        let mut a = TcpStream::connect(srv.addr).await.expect("connect");
        let mut b = TcpStream::connect(srv.addr).await.expect("connect");
        assert_eq!(api_versions(&mut a, 1).await, 0);
        assert_eq!(api_versions(&mut b, 2).await, 0);
        // The third is left in the listen queue: not answered, not closed.
        let mut c = TcpStream::connect(srv.addr)
            .await
            .expect("connect (backlog)");
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), api_versions(&mut c, 3)).await;
        assert!(waiting.is_err(), "served past max.connections");
        assert!(
            logs.text().contains("max.connections reached"),
            "{}",
            logs.text()
        );
        drop(a);
        let mut len = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut len))
            .await
            .expect("served once a slot freed")
            .expect("read");
        drop(b);
        drop(c);
        srv.stop().await;
    }
}
