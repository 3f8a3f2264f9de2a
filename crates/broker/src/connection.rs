//! One client connection: read a size-prefixed frame (refusing sizes over
//! `socket.request.max.bytes` before allocating), handle it, write the
//! response, next. Requests on one connection are handled one at a time, so
//! pipelined requests get their responses in order, as in Kafka. Anything
//! malformed closes this connection with one log line; others are
//! unaffected.
//!
//! A frame's body is read into a buffer that grows with what has arrived
//! (never zero-filled), taking budget from the broker-wide
//! `queued.max.request.bytes` as it grows (`crate::limits`): while the
//! budget is spent the connection stops reading. The body must arrive
//! within `connections.max.idle.ms` of its size (waiting for budget
//! included: Kafka too closes a connection muted for memory once it has
//! been idle that long), so a slow client cannot hold a half-sent frame
//! forever; the budget is given back once the request is answered.
//!
//! A response is a list of chunks: bytes, and regions of segment files
//! (Fetch records). On plaintext connections regions go to the socket with
//! `sendfile(2)` (zero-copy, as Kafka's `transferTo`), the whole response
//! corked so headers and records leave in full segments; otherwise (and
//! where `sendfile` is refused) they are read and written.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_storage::FileRegion;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::limits::{Claim, RequestMemory};

/// First buffer for a frame body (or the frame, if smaller); it grows as
/// bytes arrive (see [`next_body_capacity`]).
const INITIAL_BODY_BUFFER: usize = 16 << 10;

/// The capacity a full body buffer of `capacity` bytes grows to: the whole
/// `size` once that is at most 16 times what already arrived, else eight
/// times as much. A client that stops sending holds at most 16 times the
/// bytes it sent, and a 1 MiB body is copied twice while growing (16 and
/// 128 KiB) rather than six times with doubling.
fn next_body_capacity(capacity: usize, size: usize) -> usize {
    if capacity == 0 {
        size.min(INITIAL_BODY_BUFFER)
    } else if size / 16 <= capacity {
        size
    } else {
        size.min(capacity.saturating_mul(8))
    }
}

pub(crate) async fn serve(
    broker: Arc<Broker>,
    memory: Arc<RequestMemory>,
    stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    // Only PLAINTEXT listeners exist; a TLS connection must copy.
    let zero_copy = true;
    let max = broker.settings.socket_request_max_bytes.max(1) as usize;
    let idle = Duration::from_millis(broker.settings.connections_max_idle_ms.max(1) as u64);
    loop {
        let mut len = [0u8; 4];
        tokio::select! {
            r = tokio::time::timeout(idle, rd.read_exact(&mut len)) => match r {
                Err(_) => {
                    tracing::debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                    return;
                }
                Ok(Err(e)) => {
                    if e.kind() != std::io::ErrorKind::UnexpectedEof {
                        tracing::debug!(%peer, error = %e, "connection read failed");
                    }
                    return;
                }
                Ok(Ok(_)) => {}
            },
            _ = stop.changed() => return,
        }
        let size = i32::from_be_bytes(len);
        if size < 0 || size as usize > max {
            tracing::warn!(%peer, size, max, "request size outside 0..=socket.request.max.bytes; closing connection");
            return;
        }
        let body = tokio::select! {
            r = read_body(&mut rd, size as usize, &memory, idle) => r,
            _ = stop.changed() => return,
        };
        let (frame, claim) = match body {
            Ok(x) => x,
            Err(BodyError::Deadline { received }) => {
                tracing::warn!(
                    %peer, size, received, timeout_ms = idle.as_millis() as u64,
                    "request body did not arrive within connections.max.idle.ms; closing connection"
                );
                return;
            }
            Err(BodyError::Eof { received }) => {
                tracing::warn!(%peer, size, received, "truncated request; closing connection");
                return;
            }
            Err(BodyError::Io(e)) => {
                tracing::warn!(%peer, error = %e, "reading request failed; closing connection");
                return;
            }
        };
        let handled = crate::handlers::handle(&broker, frame, Some(peer)).await;
        match handled {
            Ok(Some(response)) => {
                if let Err(e) = response.write_to(&mut wr, zero_copy).await {
                    tracing::debug!(%peer, error = %e, "writing response failed");
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad request; closing connection");
                return;
            }
        }
        // The request is answered: its bytes no longer count.
        drop(claim);
    }
}

/// Why a frame body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The body did not arrive in time.
    Deadline {
        received: usize,
    },
    /// The peer closed the connection mid-frame.
    Eof {
        received: usize,
    },
    Io(io::Error),
}

/// Reads a `size`-byte frame body. The buffer starts small and grows as
/// it fills ([`next_body_capacity`]), each growth taken from `memory` first (waiting, and not
/// reading, while the budget is spent); nothing is zero-filled. The whole
/// body must arrive within `deadline`.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    size: usize,
    memory: &Arc<RequestMemory>,
    deadline: Duration,
) -> Result<(Bytes, Claim), BodyError> {
    let mut claim = memory.claim();
    let mut buf: Vec<u8> = Vec::new();
    let deadline_at = tokio::time::Instant::now() + deadline;
    while buf.len() < size {
        if buf.len() == buf.capacity() {
            let target = next_body_capacity(buf.capacity(), size);
            let received = buf.len();
            tokio::time::timeout_at(deadline_at, claim.grow(target - buf.capacity()))
                .await
                .map_err(|_| BodyError::Deadline { received })?;
            buf.reserve_exact(target - buf.len());
        }
        let want = (buf.capacity() - buf.len()).min(size - buf.len());
        let read =
            tokio::time::timeout_at(deadline_at, (&mut *rd).take(want as u64).read_buf(&mut buf))
                .await;
        match read {
            Err(_) => {
                return Err(BodyError::Deadline {
                    received: buf.len(),
                })
            }
            Ok(Err(e)) => return Err(BodyError::Io(e)),
            Ok(Ok(0)) => {
                return Err(BodyError::Eof {
                    received: buf.len(),
                })
            }
            Ok(Ok(_)) => {}
        }
    }
    Ok((Bytes::from(buf), claim))
}

/// One response frame, size prefix included, as written to the socket.
#[derive(Debug)]
pub(crate) struct Response {
    chunks: Vec<Chunk>,
}

/// Part of a response frame.
#[derive(Debug, Clone)]
pub(crate) enum Chunk {
    Bytes(Bytes),
    /// Bytes of a segment file, sent with `sendfile(2)` where possible.
    File(FileRegion),
}

impl From<BytesMut> for Response {
    fn from(buf: BytesMut) -> Self {
        Self {
            chunks: vec![Chunk::Bytes(buf.freeze())],
        }
    }
}

impl Response {
    pub(crate) fn from_chunks(chunks: Vec<Chunk>) -> Self {
        Self { chunks }
    }

    /// Frame length on the wire, size prefix included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| match c {
                Chunk::Bytes(b) => b.len() as u64,
                Chunk::File(r) => r.length,
            })
            .sum()
    }

    /// The frame in memory (the copy path: regions read into it).
    pub(crate) fn to_bytes(&self) -> io::Result<Bytes> {
        if let [Chunk::Bytes(b)] = self.chunks.as_slice() {
            return Ok(b.clone());
        }
        let mut buf = BytesMut::new();
        for c in &self.chunks {
            match c {
                Chunk::Bytes(b) => buf.extend_from_slice(b),
                Chunk::File(r) => {
                    let v = r.read_to_vec()?;
                    if v.len() as u64 != r.length {
                        return Err(short_region());
                    }
                    buf.extend_from_slice(&v);
                }
            }
        }
        Ok(buf.freeze())
    }

    /// Writes the frame; with `zero_copy`, file regions go by `sendfile`.
    pub(crate) async fn write_to(
        &self,
        wr: &mut OwnedWriteHalf,
        zero_copy: bool,
    ) -> io::Result<()> {
        let has_files = self.chunks.iter().any(|c| matches!(c, Chunk::File(_)));
        if !has_files || !zero_copy {
            return wr.write_all(&self.to_bytes()?).await;
        }
        let _cork = Cork::new(wr.as_ref());
        for c in &self.chunks {
            match c {
                Chunk::Bytes(b) => wr.write_all(b).await?,
                Chunk::File(r) => send_region(wr, r).await?,
            }
        }
        Ok(())
    }
}

fn short_region() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "segment file ended inside a fetch region",
    )
}

/// Sends a file region with `sendfile(2)`, waiting for the socket when its
/// buffer is full; falls back to copying if the kernel refuses the file.
#[cfg(target_os = "linux")]
async fn send_region(wr: &mut OwnedWriteHalf, region: &FileRegion) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use tokio::io::Interest;

    // Linux moves at most this much per call.
    const MAX_PER_CALL: u64 = 0x7fff_f000;
    let end = region.position + region.length;
    let mut pos = region.position;
    let unsupported = {
        let stream: &TcpStream = wr.as_ref();
        let sock = stream.as_raw_fd();
        let file = region.file.as_raw_fd();
        loop {
            if pos >= end {
                break false;
            }
            let count = (end - pos).min(MAX_PER_CALL) as usize;
            let mut offset = pos as libc::off_t;
            let sent = stream.try_io(Interest::WRITABLE, || {
                // SAFETY: `sock` and `file` are open descriptors for the
                // whole call (the stream and the `Arc<File>` are borrowed),
                // and `offset` is a valid, exclusive `off_t`.
                let n = unsafe { libc::sendfile(sock, file, &mut offset, count) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as u64)
                }
            });
            match sent {
                Ok(0) => return Err(short_region()),
                Ok(n) => pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if pos == region.position
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                        ) =>
                {
                    break true
                }
                Err(e) => return Err(e),
            }
        }
    };
    if unsupported {
        tracing::debug!("sendfile refused the segment file; copying");
        return copy_region(wr, region).await;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
async fn send_region(wr: &mut OwnedWriteHalf, region: &FileRegion) -> io::Result<()> {
    copy_region(wr, region).await
}

/// Reads a region in pieces and writes it.
async fn copy_region(wr: &mut OwnedWriteHalf, region: &FileRegion) -> io::Result<()> {
    use std::os::unix::fs::FileExt;

    const PIECE: u64 = 1 << 20;
    let mut buf = vec![0u8; region.length.min(PIECE) as usize];
    let end = region.position + region.length;
    let mut pos = region.position;
    while pos < end {
        let n = (end - pos).min(PIECE) as usize;
        let read = region.file.read_at(&mut buf[..n], pos)?;
        if read == 0 {
            return Err(short_region());
        }
        wr.write_all(&buf[..read]).await?;
        pos += read as u64;
    }
    Ok(())
}

/// `TCP_CORK` for the life of the value: the pieces of one response leave
/// in full segments despite `TCP_NODELAY`. Must not outlive the socket.
struct Cork {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fd: std::os::fd::RawFd,
}

impl Cork {
    fn new(stream: &TcpStream) -> Self {
        use std::os::fd::AsRawFd;
        let cork = Self {
            fd: stream.as_raw_fd(),
        };
        cork.set(true);
        cork
    }

    #[cfg(target_os = "linux")]
    fn set(&self, on: bool) {
        let value: libc::c_int = on.into();
        // SAFETY: an open socket (the caller's stream outlives the cork)
        // and a `c_int` option value of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd,
                libc::IPPROTO_TCP,
                libc::TCP_CORK,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::trace!(error = %io::Error::last_os_error(), "TCP_CORK");
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn set(&self, _on: bool) {}
}

impl Drop for Cork {
    fn drop(&mut self) {
        self.set(false);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tokio::net::TcpListener;

    use super::*;

    fn region(file: &Arc<std::fs::File>, position: u64, length: u64) -> Chunk {
        Chunk::File(FileRegion {
            file: Arc::clone(file),
            position,
            length,
        })
    }

    #[test]
    fn body_buffers_grow_with_the_bytes_that_arrived() {
        // Small bodies get one buffer of their size.
        assert_eq!(next_body_capacity(0, 100), 100);
        // A 1 MiB body: 16 KiB first, then 128 KiB, then the whole body.
        let mib = 1 << 20;
        assert_eq!(next_body_capacity(0, mib + 61), 16 << 10);
        assert_eq!(next_body_capacity(16 << 10, mib + 61), 128 << 10);
        assert_eq!(next_body_capacity(128 << 10, mib + 61), mib + 61);
        // A claimed 100 MB body grows eightfold while bytes arrive, and
        // never past its size.
        let big = 100_000_000;
        assert_eq!(next_body_capacity(1 << 20, big), 8 << 20);
        assert_eq!(next_body_capacity(64 << 20, big), big);
        let mut capacity = 0;
        let mut growths = 0;
        while capacity < big {
            let next = next_body_capacity(capacity, big);
            assert!(next > capacity && next <= big);
            assert!(capacity == 0 || next <= capacity * 16);
            capacity = next;
            growths += 1;
        }
        assert_eq!(growths, 5);
    }

    /// Sends `resp` over a loopback socket and returns what arrived; the
    /// reader starts late so the sender fills the socket buffer and must
    /// wait for it (EAGAIN, partial sends).
    async fn over_socket(resp: Response, zero_copy: bool) -> Vec<u8> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let sender = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let _ = stream.set_nodelay(true);
            let (_rd, mut wr) = stream.into_split();
            resp.write_to(&mut wr, zero_copy).await.expect("write");
        });
        let mut client = TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        sender.await.expect("sender");
        got
    }

    #[tokio::test]
    async fn sendfile_and_copy_paths_send_the_same_bytes() {
        let mut f = tempfile::tempfile().expect("tempfile");
        let data: Vec<u8> = (0..12_000_000u32)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        f.write_all(&data).expect("write");
        let file = Arc::new(f);
        let chunks = vec![
            Chunk::Bytes(Bytes::from_static(b"head")),
            region(&file, 3, 10_000_000),
            Chunk::Bytes(Bytes::from_static(b"middle")),
            region(&file, 11_000_000, 5000),
            region(&file, 0, 1),
            Chunk::Bytes(Bytes::from_static(b"tail")),
        ];
        let resp = Response::from_chunks(chunks.clone());
        let expected = resp.to_bytes().expect("copy");
        assert_eq!(expected.len() as u64, resp.len());
        assert_eq!(&expected[4..14], &data[3..13]);
        let zero = over_socket(Response::from_chunks(chunks.clone()), true).await;
        let copied = over_socket(Response::from_chunks(chunks), false).await;
        assert!(zero == expected, "sendfile path differs");
        assert!(copied == expected, "copy path differs");
    }

    #[tokio::test]
    async fn region_past_the_end_of_file_is_an_error() {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(b"short").expect("write");
        let file = Arc::new(f);
        let resp = Response::from_chunks(vec![region(&file, 0, 100)]);
        assert!(resp.to_bytes().is_err());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let _client = client.expect("connect");
        let (stream, _) = accepted.expect("accept");
        let (_rd, mut wr) = stream.into_split();
        let result = resp.write_to(&mut wr, true).await;
        assert_eq!(
            result.map_err(|e| e.kind()),
            Err(io::ErrorKind::UnexpectedEof)
        );
    }
}
