//! One TCP connection to one broker: size-prefixed frames, request and
//! response headers (versions chosen per [`ApiKey`]), correlation ids,
//! request timeouts and `ApiVersions` negotiation on connect.
//!
//! The connection is pipelined: several requests may be outstanding at once.
//! [`Connection::send_request`] writes one frame (frames never interleave:
//! writes are serialised by a FIFO lock) and returns a [`PendingResponse`];
//! a background reader task per connection reads response frames and routes
//! each to its request by correlation id (Kafka brokers answer in request
//! order per connection, but routing does not rely on it).
//! [`Connection::send`] is `send_request` followed by
//! [`PendingResponse::wait`]; callers that only ever have one request out
//! (metadata, admin, the consumer) keep using it, usually behind the mutex
//! of [`crate::cluster::Cluster`]. (`send`, `send_negotiated` and
//! `send_oneway` take `&mut self` for API stability; `send_request` takes
//! `&self`, so a pipelining caller only holds that mutex while writing.)
//!
//! Failure model: a request that gets no response within its timeout, an
//! I/O error, a write cancelled midway, an unexpected correlation id or the
//! broker closing the socket marks the connection *broken* and fails every
//! outstanding request at once (a late response would otherwise be
//! ambiguous). A broken connection refuses new requests; it must be
//! replaced (the cluster reconnects on the next use).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes};
use proto_kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use proto_kafka::protocol::{Decodable, Encodable, Request, SegmentedBuf, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{ClientError, Result};

/// Largest response frame accepted (guards against garbage length prefixes).
pub const MAX_RESPONSE_SIZE: usize = 256 * 1024 * 1024;

/// The `ApiVersions` version sent first; older brokers answer
/// `UNSUPPORTED_VERSION` in the v0 layout and we retry.
const API_VERSIONS_FIRST: i16 = 3;
const UNSUPPORTED_VERSION: i16 = 35;

/// Settings for a single connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// `client.id` sent in every request header.
    pub client_id: String,
    /// Time allowed to establish the TCP connection.
    pub connect_timeout: Duration,
    /// Time allowed for a request to get its response (and for writing a
    /// request frame).
    pub request_timeout: Duration,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            client_id: "sluice-client".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a connection broke (kept to explain later failures).
#[derive(Debug, Clone)]
enum Failure {
    Io {
        kind: std::io::ErrorKind,
        message: String,
    },
    Protocol(String),
}

impl Failure {
    fn io(e: &std::io::Error) -> Self {
        let message = if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "connection closed by the broker".to_string()
        } else {
            e.to_string()
        };
        Failure::Io {
            kind: e.kind(),
            message,
        }
    }

    /// The error handed to a request outstanding when the connection broke.
    fn error(&self, addr: &str) -> ClientError {
        match self {
            Failure::Io { kind, message } => ClientError::Io {
                addr: addr.to_string(),
                source: std::io::Error::new(*kind, message.clone()),
            },
            Failure::Protocol(m) => ClientError::Protocol(format!("{addr}: {m}")),
        }
    }

    fn describe(&self) -> &str {
        match self {
            Failure::Io { message, .. } => message,
            Failure::Protocol(m) => m,
        }
    }
}

/// A request waiting for its response.
#[derive(Debug)]
struct Waiter {
    header_version: i16,
    tx: oneshot::Sender<Result<Bytes>>,
}

#[derive(Debug, Default)]
struct SharedState {
    /// Outstanding requests by correlation id.
    waiters: HashMap<i32, Waiter>,
    /// Set once the connection broke.
    failure: Option<Failure>,
}

/// State shared by the connection handle and its reader task.
#[derive(Debug)]
struct Shared {
    addr: String,
    state: StdMutex<SharedState>,
    /// Stops the reader once the connection broke.
    reader: StdMutex<Option<tokio::task::AbortHandle>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection broken (the first failure wins) and fails every
    /// outstanding request.
    fn fail(&self, failure: Failure) {
        let (waiters, failure) = {
            let mut st = self.lock();
            let failure = st.failure.get_or_insert(failure).clone();
            (std::mem::take(&mut st.waiters), failure)
        };
        if let Some(reader) = self
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            reader.abort();
        }
        if !waiters.is_empty() {
            tracing::debug!(
                addr = %self.addr,
                outstanding = waiters.len(),
                cause = failure.describe(),
                "connection broken; failing outstanding requests"
            );
        }
        for (_, w) in waiters {
            let _ = w.tx.send(Err(failure.error(&self.addr)));
        }
    }

    /// The error for a request on a broken connection, if it is broken.
    fn broken_error(&self) -> Option<ClientError> {
        let st = self.lock();
        st.failure.as_ref().map(|f| ClientError::Io {
            addr: self.addr.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("connection broken by an earlier failure: {}", f.describe()),
            ),
        })
    }
}

/// Marks the connection broken if a frame write is dropped midway (the
/// stream may hold half a frame).
struct BreakOnDrop<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for BreakOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.fail(Failure::Io {
                kind: std::io::ErrorKind::Interrupted,
                message: "request write cancelled midway".into(),
            });
        }
    }
}

/// A negotiated, pipelined connection to one broker.
#[derive(Debug)]
pub struct Connection {
    addr: String,
    config: ConnectionConfig,
    writer: Mutex<OwnedWriteHalf>,
    shared: Arc<Shared>,
    correlation: AtomicI32,
    reader: JoinHandle<()>,
    /// Broker-supported (min, max) version per API key.
    versions: HashMap<i16, (i16, i16)>,
}

impl Drop for Connection {
    /// Requests still waiting for a response fail now: without the handle
    /// nothing reads their responses (the reader stops), so they would
    /// otherwise wait out their whole request timeout.
    fn drop(&mut self) {
        self.shared.fail(Failure::Io {
            kind: std::io::ErrorKind::ConnectionAborted,
            message: "connection closed by the client".into(),
        });
        self.reader.abort();
    }
}

/// A view of a [`Connection`]'s state that needs no lock on it (see
/// [`Connection::health`]).
#[derive(Debug, Clone)]
pub struct ConnectionHealth(Arc<Shared>);

impl ConnectionHealth {
    /// Whether the connection broke.
    pub fn is_broken(&self) -> bool {
        self.0.lock().failure.is_some()
    }

    /// How many requests are waiting for their responses.
    pub fn in_flight(&self) -> usize {
        self.0.lock().waiters.len()
    }
}

/// The response to a request written by [`Connection::send_request`].
///
/// Dropping it abandons the response (it is discarded when it arrives) but
/// then nothing enforces its timeout; wait for it.
#[derive(Debug)]
#[must_use = "a pending response does nothing unless waited for"]
pub struct PendingResponse<T> {
    rx: oneshot::Receiver<Result<Bytes>>,
    shared: Arc<Shared>,
    api: ApiKey,
    version: i16,
    correlation: i32,
    timeout: Duration,
    deadline: Instant,
    _response: PhantomData<fn() -> T>,
}

impl<T> PendingResponse<T> {
    /// The request's correlation id.
    pub fn correlation_id(&self) -> i32 {
        self.correlation
    }

    /// When the request times out.
    pub fn deadline(&self) -> std::time::Instant {
        self.deadline.into_std()
    }

    /// Waits for the response body (after the response header). A timeout
    /// breaks the connection and fails every other outstanding request.
    async fn wait_body(self) -> Result<Bytes> {
        let PendingResponse {
            rx,
            shared,
            api,
            correlation,
            timeout,
            deadline,
            ..
        } = self;
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(shared.broken_error().unwrap_or_else(|| ClientError::Io {
                addr: shared.addr.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotConnected, "connection closed"),
            })),
            Err(_) => {
                shared.fail(Failure::Io {
                    kind: std::io::ErrorKind::TimedOut,
                    message: format!(
                        "request {api:?} (correlation id {correlation}) timed out after \
                         {timeout:?}; connection closed"
                    ),
                });
                Err(ClientError::Timeout {
                    api: format!("{api:?}"),
                    addr: shared.addr.clone(),
                    timeout,
                })
            }
        }
    }
}

impl<T: Decodable> PendingResponse<T> {
    /// Waits for and decodes the response (see [`Connection`] for failures).
    pub async fn wait(self) -> Result<T> {
        let version = self.version;
        let mut body = self.wait_body().await?;
        Ok(T::decode(&mut body, version)?)
    }
}

fn api_key<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY)
        .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))
}

impl Connection {
    /// Connects to `addr` (`host:port`) and negotiates API versions.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Self> {
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout {
                api: "connect".into(),
                addr: addr.to_string(),
                timeout: config.connect_timeout,
            })?
            .map_err(|source| ClientError::Io {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            state: StdMutex::new(SharedState::default()),
            reader: StdMutex::new(None),
        });
        let reader = tokio::spawn(read_loop(shared.clone(), rd));
        *shared.reader.lock().unwrap_or_else(PoisonError::into_inner) = Some(reader.abort_handle());
        let mut conn = Connection {
            addr: addr.to_string(),
            config,
            writer: Mutex::new(wr),
            shared,
            correlation: AtomicI32::new(0),
            reader,
            versions: HashMap::new(),
        };
        conn.negotiate().await?;
        Ok(conn)
    }

    /// The broker address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether a timeout, an I/O error or the broker closing the socket
    /// made this connection unusable.
    pub fn is_broken(&self) -> bool {
        self.shared.lock().failure.is_some()
    }

    /// A handle that tells whether this connection broke and how busy it
    /// is without taking the connection's lock (which a caller awaiting a
    /// slow response may hold).
    pub fn health(&self) -> ConnectionHealth {
        ConnectionHealth(self.shared.clone())
    }

    /// How many requests are waiting for their responses.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().waiters.len()
    }

    /// The connection settings.
    pub fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// The broker's supported version range for `key`, if it advertises one.
    pub fn broker_versions(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.versions.get(&(key as i16)).copied()
    }

    /// The highest version of `key` supported by both the broker and this
    /// client, capped at `our_max`. Errors when the ranges do not overlap.
    pub fn version_for(&self, key: ApiKey, our_max: i16) -> Result<i16> {
        let ours = key.valid_versions();
        let unsupported = || ClientError::UnsupportedVersion {
            api: format!("{key:?}"),
            addr: self.addr.clone(),
        };
        let (bmin, bmax) = self.broker_versions(key).ok_or_else(unsupported)?;
        let max = bmax.min(our_max).min(ours.max);
        let min = bmin.max(ours.min);
        if min > max {
            return Err(unsupported());
        }
        Ok(max)
    }

    async fn negotiate(&mut self) -> Result<()> {
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str("sluice-client");
        req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let resp = self.api_versions(&req, API_VERSIONS_FIRST).await?;
        let resp = if resp.error_code == UNSUPPORTED_VERSION {
            // The broker answered in the v0 layout; use its ApiVersions range.
            let v = resp
                .api_keys
                .iter()
                .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                .map(|k| k.max_version.min(API_VERSIONS_FIRST))
                .unwrap_or(0);
            self.api_versions(&req, v).await?
        } else {
            resp
        };
        if let Some(e) = ClientError::from_code(resp.error_code, None, "ApiVersions") {
            return Err(e);
        }
        self.versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    async fn api_versions(
        &self,
        req: &ApiVersionsRequest,
        version: i16,
    ) -> Result<ApiVersionsResponse> {
        let body = self.send_request(req, version).await?.wait_body().await?;
        // A broker that rejects our version replies in the v0 layout.
        match ApiVersionsResponse::decode(&mut body.clone(), version) {
            Ok(r) if r.error_code != UNSUPPORTED_VERSION => Ok(r),
            _ => Ok(ApiVersionsResponse::decode(&mut body.clone(), 0)?),
        }
    }

    /// Sends `req` at `version` and decodes the response.
    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        self.send_request(req, version).await?.wait().await
    }

    /// Sends `req` at the highest version both sides support (capped at
    /// `our_max`) and returns the response with the version used.
    pub async fn send_negotiated<R: Request>(
        &mut self,
        req: &R,
        our_max: i16,
    ) -> Result<(R::Response, i16)> {
        let version = self.version_for(api_key::<R>()?, our_max)?;
        Ok((self.send(req, version).await?, version))
    }

    /// Writes `req` at `version` and returns a handle to its response
    /// without waiting for it, so that several requests can be outstanding
    /// on this connection. The response must arrive within the configured
    /// request timeout.
    pub async fn send_request<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<PendingResponse<R::Response>> {
        self.send_request_timeout(req, version, self.config.request_timeout)
            .await
    }

    /// [`Self::send_request`] with an explicit response timeout (counted
    /// from the end of the write).
    pub async fn send_request_timeout<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<PendingResponse<R::Response>> {
        let key = api_key::<R>()?;
        let (mut frame, correlation) = self.frame(key, version, req)?;
        let (tx, rx) = oneshot::channel();
        {
            // Registered before the write so the reader always finds it.
            let mut st = self.shared.lock();
            if st.failure.is_some() {
                drop(st);
                return Err(self.broken());
            }
            st.waiters.insert(
                correlation,
                Waiter {
                    header_version: key.response_header_version(version),
                    tx,
                },
            );
        }
        self.write(&mut frame, key).await?;
        Ok(PendingResponse {
            rx,
            shared: self.shared.clone(),
            api: key,
            version,
            correlation,
            timeout,
            deadline: Instant::now() + timeout,
            _response: PhantomData,
        })
    }

    /// Sends `req` at `version` without waiting for a response (Produce with
    /// `acks=0`, which the broker never answers).
    pub async fn send_oneway<R: Request>(&mut self, req: &R, version: i16) -> Result<()> {
        let key = api_key::<R>()?;
        let (mut frame, _) = self.frame(key, version, req)?;
        self.write(&mut frame, key).await
    }

    fn broken(&self) -> ClientError {
        self.shared
            .broken_error()
            .unwrap_or_else(|| ClientError::Io {
                addr: self.addr.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotConnected, "connection broken"),
            })
    }

    /// Writes one whole frame (its shared record segments by `writev`, not
    /// copied); frames of concurrent requests never interleave. Any failure
    /// breaks the connection.
    async fn write(&self, frame: &mut SegmentedBuf, key: ApiKey) -> Result<()> {
        let mut writer = self.writer.lock().await;
        if self.is_broken() {
            return Err(self.broken());
        }
        let mut guard = BreakOnDrop {
            shared: &self.shared,
            armed: true,
        };
        let timeout = self.config.request_timeout;
        let result = tokio::time::timeout(timeout, writer.write_all_buf(frame)).await;
        guard.armed = false;
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => {
                self.shared.fail(Failure::io(&source));
                Err(ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                })
            }
            Err(_) => {
                self.shared.fail(Failure::Io {
                    kind: std::io::ErrorKind::TimedOut,
                    message: format!("writing a {key:?} request timed out after {timeout:?}"),
                });
                Err(ClientError::Timeout {
                    api: format!("{key:?}"),
                    addr: self.addr.clone(),
                    timeout,
                })
            }
        }
    }

    /// Encodes one request frame (length prefix, header, body) with the next
    /// correlation id; returns the frame and that id. Record batches (a
    /// Produce request's `records`) stay shared `Bytes` segments of the
    /// frame instead of being copied into it.
    fn frame<E: Encodable>(
        &self,
        key: ApiKey,
        version: i16,
        body: &E,
    ) -> Result<(SegmentedBuf, i32)> {
        if self.is_broken() {
            return Err(self.broken());
        }
        // Wraps like Kafka's; ids are only compared for equality.
        let correlation = self
            .correlation
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = correlation;
        header.client_id = Some(StrBytes::from_string(self.config.client_id.clone()));
        let hv = key.request_header_version(version);
        let size = header.compute_size(hv)? + body.compute_size(version)?;
        let len = i32::try_from(size)
            .map_err(|_| ClientError::InvalidArgument(format!("request of {size} bytes")))?;
        let mut frame = SegmentedBuf::new();
        frame.put_i32(len);
        header.encode(&mut frame, hv)?;
        body.encode(&mut frame, version)?;
        Ok((frame, correlation))
    }
}

/// Reads one size-prefixed frame.
async fn read_frame(rd: &mut OwnedReadHalf) -> std::io::Result<Bytes> {
    let len = rd.read_i32().await?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= MAX_RESPONSE_SIZE)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad response size {len}"),
            )
        })?;
    // Read into the spare capacity: no zero-filling of a buffer the
    // socket overwrites anyway (a fetch answer is up to fetch.max.bytes).
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        // The spare capacity is exactly what is left of the frame.
        if rd.read_buf(&mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed {} bytes into a {len}-byte response",
                    buf.len()
                ),
            ));
        }
    }
    Ok(Bytes::from(buf))
}

/// The reader task: routes each response frame to its waiter by
/// correlation id until the connection fails.
async fn read_loop(shared: Arc<Shared>, mut rd: OwnedReadHalf) {
    loop {
        let frame = match read_frame(&mut rd).await {
            Ok(f) => f,
            Err(e) => {
                shared.fail(Failure::io(&e));
                return;
            }
        };
        // Every response header version starts with the correlation id.
        let Some(id) = frame.get(..4) else {
            shared.fail(Failure::Protocol(format!(
                "response frame of {} bytes",
                frame.len()
            )));
            return;
        };
        let correlation = i32::from_be_bytes([id[0], id[1], id[2], id[3]]);
        let waiter = shared.lock().waiters.remove(&correlation);
        let Some(waiter) = waiter else {
            shared.fail(Failure::Protocol(format!(
                "response with unexpected correlation id {correlation}"
            )));
            return;
        };
        let mut body = frame;
        let result = ResponseHeader::decode(&mut body, waiter.header_version)
            .map(|_| body)
            .map_err(ClientError::from);
        let _ = waiter.tx.send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use proto_kafka::messages::api_versions_response::ApiVersion;
    use proto_kafka::messages::{MetadataRequest, MetadataResponse};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    const METADATA_VERSION: i16 = 12;

    /// Reads one request frame: (api key, version, correlation id).
    async fn read_request(s: &mut TcpStream) -> std::io::Result<(i16, i16, i32)> {
        let len = s.read_i32().await?;
        let mut buf = vec![0u8; len as usize];
        s.read_exact(&mut buf).await?;
        Ok((
            i16::from_be_bytes([buf[0], buf[1]]),
            i16::from_be_bytes([buf[2], buf[3]]),
            i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        ))
    }

    async fn write_response<E: Encodable>(
        s: &mut TcpStream,
        key: ApiKey,
        version: i16,
        correlation: i32,
        body: &E,
    ) {
        let mut header = ResponseHeader::default();
        header.correlation_id = correlation;
        let hv = key.response_header_version(version);
        let mut buf = BytesMut::new();
        header.encode(&mut buf, hv).expect("header");
        body.encode(&mut buf, version).expect("body");
        let mut frame = BytesMut::new();
        frame.put_i32(buf.len() as i32);
        frame.extend_from_slice(&buf);
        s.write_all(&frame).await.expect("write response");
    }

    /// A fake broker: answers ApiVersions, then hands the connection over.
    /// A connection (request timeout `timeout`) to a fake broker that
    /// reads every request and answers none; the broker's task ends when
    /// the connection closes.
    async fn silent_broker(timeout: Duration) -> (Connection, tokio::task::JoinHandle<()>) {
        let (addr, broker) = fake_broker().await;
        let conn = Connection::connect(&addr, config(timeout))
            .await
            .expect("connect");
        let mut s = broker.await.expect("fake broker");
        let fake = tokio::spawn(async move { while read_request(&mut s).await.is_ok() {} });
        (conn, fake)
    }

    async fn fake_broker() -> (String, tokio::task::JoinHandle<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let (key, version, correlation) = read_request(&mut s).await.expect("request");
            assert_eq!(key, ApiKey::ApiVersions as i16);
            let mut resp = ApiVersionsResponse::default();
            for (k, max) in [
                (ApiKey::ApiVersions, 3),
                (ApiKey::Metadata, METADATA_VERSION),
            ] {
                let mut v = ApiVersion::default();
                v.api_key = k as i16;
                v.min_version = 0;
                v.max_version = max;
                resp.api_keys.push(v);
            }
            write_response(&mut s, ApiKey::ApiVersions, version, correlation, &resp).await;
            s
        });
        (addr, task)
    }

    fn config(timeout: Duration) -> ConnectionConfig {
        ConnectionConfig {
            request_timeout: timeout,
            ..ConnectionConfig::default()
        }
    }

    #[tokio::test]
    async fn pipelined_requests_then_peer_close_fails_all() {
        let (addr, broker) = fake_broker().await;
        let mut conn = Connection::connect(&addr, config(Duration::from_secs(20)))
            .await
            .expect("connect");
        let mut s = broker.await.expect("fake broker");
        assert_eq!(
            conn.version_for(ApiKey::Metadata, 12).expect("version"),
            METADATA_VERSION
        );
        // Phase 1: five requests written before any response; the fake
        // broker reads all five, then answers in order, slowly.
        let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
        let fake = tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..5 {
                let (key, version, correlation) = read_request(&mut s).await.expect("request");
                assert_eq!((key, version), (ApiKey::Metadata as i16, METADATA_VERSION));
                ids.push(correlation);
                let _ = seen_tx.send(correlation);
            }
            for (i, id) in ids.iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let mut resp = MetadataResponse::default();
                resp.throttle_time_ms = i as i32;
                write_response(&mut s, ApiKey::Metadata, METADATA_VERSION, *id, &resp).await;
            }
            // Phase 2: read three more requests, then hang up.
            for _ in 0..3 {
                read_request(&mut s).await.expect("request");
            }
            let _ = seen_tx.send(-1);
            drop(s);
        });
        let req = MetadataRequest::default();
        let mut pending = Vec::new();
        for _ in 0..5 {
            pending.push(
                conn.send_request(&req, METADATA_VERSION)
                    .await
                    .expect("send"),
            );
        }
        for _ in 0..5 {
            seen_rx.recv().await.expect("broker saw request");
        }
        assert_eq!(conn.in_flight(), 5, "all five outstanding at once");
        for (i, p) in pending.into_iter().enumerate() {
            let resp = p.wait().await.expect("response");
            assert_eq!(resp.throttle_time_ms, i as i32, "matched by correlation id");
        }
        assert_eq!(conn.in_flight(), 0);
        assert!(!conn.is_broken());

        let mut pending = Vec::new();
        for _ in 0..3 {
            pending.push(
                conn.send_request(&req, METADATA_VERSION)
                    .await
                    .expect("send"),
            );
        }
        assert_eq!(seen_rx.recv().await, Some(-1));
        for p in pending {
            let e = p.wait().await.expect_err("peer closed");
            assert!(matches!(e, ClientError::Io { .. }), "{e}");
            assert!(e.to_string().contains("closed by the broker"), "{e}");
        }
        assert!(conn.is_broken());
        assert!(conn.send(&req, METADATA_VERSION).await.is_err());
        fake.await.expect("fake");
    }

    /// A handle dropped with a request outstanding fails that request at
    /// once: nothing would read its response any more (the reader stops),
    /// so it used to wait out its whole timeout (a producer stalled 30 s
    /// after a broker restart when a pooled connection was replaced).
    #[tokio::test]
    async fn dropping_the_handle_fails_outstanding_requests_at_once() {
        let (conn, fake) = silent_broker(Duration::from_secs(60)).await;
        let pending = conn
            .send_request_timeout(
                &MetadataRequest::default(),
                METADATA_VERSION,
                Duration::from_secs(60),
            )
            .await
            .expect("send");
        drop(conn);
        let started = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(5), pending.wait())
            .await
            .expect("failed at once, not after the request timeout")
            .expect_err("no response can come");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("closed by the client"), "{e}");
        fake.await.expect("fake");
    }

    #[tokio::test]
    async fn timeout_breaks_connection_and_fails_all_outstanding() {
        let (conn, fake) = silent_broker(Duration::from_millis(300)).await;
        let req = MetadataRequest::default();
        let first = conn
            .send_request_timeout(&req, METADATA_VERSION, Duration::from_millis(200))
            .await
            .expect("send");
        let second = conn
            .send_request_timeout(&req, METADATA_VERSION, Duration::from_secs(60))
            .await
            .expect("send");
        let third = conn
            .send_request_timeout(&req, METADATA_VERSION, Duration::from_secs(60))
            .await
            .expect("send");
        assert_eq!(conn.in_flight(), 3);
        let started = std::time::Instant::now();
        let (a, b, c) = tokio::join!(first.wait(), second.wait(), third.wait());
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(matches!(a, Err(ClientError::Timeout { .. })), "{a:?}");
        for r in [b, c] {
            let e = r.expect_err("failed with the connection");
            assert!(e.to_string().contains("timed out"), "{e}");
        }
        assert!(conn.is_broken());
        assert_eq!(conn.in_flight(), 0);
        assert!(conn.send_request(&req, METADATA_VERSION).await.is_err());
        drop(conn);
        fake.await.expect("fake");
    }
}
