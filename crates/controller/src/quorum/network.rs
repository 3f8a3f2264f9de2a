//! Raft RPCs between controllers over the CONTROLLER listener, in a small
//! framed protocol of our own (design 018, "Transport"):
//!
//! ```text
//! frame    = size:int32 body               (size ≤ MAX_FRAME, checked first)
//! request  = kind:int8 payload             (1 Vote, 2 AppendEntries, 3 InstallSnapshot, 4 Forward,
//!                                           5 Describe)
//! response = status:int8 payload           (0 ok, 1 error: message, 2 not the leader: leader id?,
//!                                           3 rejected: reason:int8 message)
//! ```
//!
//! The client side ([`Network`], [`Peer`]) keeps one connection per peer,
//! reconnects after any error, and bounds every call by openraft's RPC
//! timeout; the server side ([`serve`]) answers one request at a time per
//! connection, serves at most [`MAX_CONNECTIONS`], and closes a connection
//! with no complete request within [`IDLE_TIMEOUT`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::codec::{CodecError, Reader, Writer};
use super::describe::{Describer, QuorumDescription};
use super::proposer::{ProposeError, Proposer};
use super::{NodeId, Raft, TypeConfig};
use crate::error::ControllerError;
use crate::records::MetadataRecord;

/// Largest frame accepted (a snapshot chunk is at most openraft's
/// `snapshot_max_chunk_size`, 3 MiB by default).
pub const MAX_FRAME: usize = 16 << 20;
/// Time allowed to connect to a peer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A server connection with no complete request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Controller connections served at once (a voter needs one per peer and
/// one per forwarding node); further ones are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

const KIND_VOTE: u8 = 1;
const KIND_APPEND: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
const KIND_FORWARD: u8 = 4;
const KIND_DESCRIBE: u8 = 5;
/// An observer (broker-only node) asks the leader to replicate the
/// committed log to it as a Raft learner at the address it names.
const KIND_JOIN: u8 = 6;

const STATUS_OK: u8 = 0;
const STATUS_ERROR: u8 = 1;
const STATUS_NOT_LEADER: u8 = 2;
const STATUS_REJECTED: u8 = 3;
const REJECTED_TOPIC_EXISTS: u8 = 0;
const REJECTED_CONFLICT: u8 = 1;

/// Reads one frame; `None` at a clean end of stream. A size over `max`
/// (or negative) is refused before anything is allocated.
pub async fn read_frame(s: &mut TcpStream, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match s.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame of {size} bytes (limit {max})"),
            )
        })?;
    // Grown as bytes arrive: a claimed size alone allocates little.
    let mut body = Vec::with_capacity(size.min(64 * 1024));
    (&mut *s).take(size as u64).read_to_end(&mut body).await?;
    if body.len() != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("frame of {size} bytes cut at {}", body.len()),
        ));
    }
    Ok(Some(body))
}

/// Writes one frame.
pub async fn write_frame(s: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {} bytes over the limit", body.len()),
        ));
    }
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf).await?;
    s.flush().await
}

fn invalid(e: CodecError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

// ------------------------------------------------------------------ codec

fn encode_append_response(w: &mut Writer, r: &AppendEntriesResponse<NodeId>) {
    match r {
        AppendEntriesResponse::Success => w.u8(0),
        AppendEntriesResponse::PartialSuccess(l) => {
            w.u8(1);
            w.opt_log_id(l);
        }
        AppendEntriesResponse::Conflict => w.u8(2),
        AppendEntriesResponse::HigherVote(v) => {
            w.u8(3);
            w.vote(v);
        }
    }
}

fn decode_append_response(r: &mut Reader<'_>) -> Result<AppendEntriesResponse<NodeId>, CodecError> {
    Ok(match r.u8()? {
        0 => AppendEntriesResponse::Success,
        1 => AppendEntriesResponse::PartialSuccess(r.opt_log_id()?),
        2 => AppendEntriesResponse::Conflict,
        3 => AppendEntriesResponse::HigherVote(r.vote()?),
        k => return Err(CodecError(format!("append response kind {k}"))),
    })
}

fn decode_append_request(
    r: &mut Reader<'_>,
) -> Result<AppendEntriesRequest<TypeConfig>, CodecError> {
    let vote = r.vote()?;
    let prev_log_id = r.opt_log_id()?;
    // An entry is at least a log id (16 bytes) and a kind byte.
    let n = r.count(17)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(r.entry()?);
    }
    let leader_commit = r.opt_log_id()?;
    Ok(AppendEntriesRequest {
        vote,
        prev_log_id,
        entries,
        leader_commit,
    })
}

// ----------------------------------------------------------------- client

/// When each peer last answered this node's AppendEntries (Raft's
/// heartbeats) and when it was last caught up: the leader's view of which
/// voters are alive, and DescribeQuorum's LastFetchTimestamp and
/// LastCaughtUpTimestamp (Kafka's `LeaderState.ReplicaState`).
#[derive(Debug, Default)]
pub struct Liveness {
    peers: std::sync::Mutex<std::collections::HashMap<NodeId, PeerTimes>>,
}

#[derive(Debug, Clone, Copy)]
struct PeerTimes {
    last_ack: std::time::Instant,
    caught_up: Option<std::time::Instant>,
}

impl Liveness {
    /// `id` answered a request sent at `sent`; `caught_up` when it then
    /// held every entry this node had when it sent the request.
    fn ack(&self, id: NodeId, sent: std::time::Instant, caught_up: bool) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let e = peers.entry(id).or_insert(PeerTimes {
            last_ack: now,
            caught_up: None,
        });
        e.last_ack = now;
        if caught_up {
            e.caught_up = Some(e.caught_up.map_or(sent, |c| c.max(sent)));
        }
    }

    /// When `id` last answered, if ever.
    pub fn last_ack(&self, id: NodeId) -> Option<std::time::Instant> {
        self.times(id).map(|t| t.last_ack)
    }

    /// The latest time at which `id` was known to hold every entry this
    /// node had (the send time of a request it answered holding all of
    /// them), if ever.
    pub fn last_caught_up(&self, id: NodeId) -> Option<std::time::Instant> {
        self.times(id).and_then(|t| t.caught_up)
    }

    fn times(&self, id: NodeId) -> Option<PeerTimes> {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
    }
}

/// Creates a [`Peer`] per voter (openraft's network factory).
#[derive(Debug, Clone, Default)]
pub struct Network {
    pub liveness: Arc<Liveness>,
    /// This node's log, to tell whether a peer is caught up.
    pub log: Option<super::log_store::LogStore>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        let mut p = Peer::new(target, node.addr.clone());
        p.liveness = Some(Arc::clone(&self.liveness));
        p.log = self.log.clone();
        p
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No connection could be made.
    #[error("controller {addr} unreachable: {source}")]
    Unreachable { addr: String, source: io::Error },
    /// The connection broke, timed out or carried garbage.
    #[error("controller {addr}: {source}")]
    Network { addr: String, source: io::Error },
    /// The peer answered with an error.
    #[error("controller {addr} answered: {message}")]
    Remote { addr: String, message: String },
    /// The peer is not the quorum leader (and names the one it knows).
    #[error("controller {addr} is not the quorum leader (leader: {leader:?})")]
    NotLeader {
        addr: String,
        leader: Option<NodeId>,
    },
    /// The leader refused the change (it does not fit the image).
    #[error("controller {addr} refused the change: {error}")]
    Rejected {
        addr: String,
        error: ControllerError,
    },
}

/// One peer controller, one connection at a time.
#[derive(Debug)]
pub struct Peer {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
    liveness: Option<Arc<Liveness>>,
    log: Option<super::log_store::LogStore>,
}

impl Peer {
    pub fn new(target: NodeId, addr: String) -> Self {
        Self {
            target,
            addr,
            conn: None,
            liveness: None,
            log: None,
        }
    }

    /// Sends `request`, returns the ok payload.
    ///
    /// Cancel-safe: the connection is taken out of the peer for the call
    /// and put back only after its answer was read, so a call dropped
    /// midway (openraft gives up on an RPC) closes the connection instead
    /// of leaving a request whose late answer the next call would take as
    /// its own.
    pub async fn call(&mut self, request: &[u8], ttl: Duration) -> Result<Vec<u8>, CallError> {
        let addr = self.addr.clone();
        let taken = self.conn.take();
        let fut = async {
            let mut s = match taken {
                Some(s) => s,
                None => {
                    let s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
                        .await
                        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                        .and_then(|r| r)
                        .map_err(|source| CallError::Unreachable {
                            addr: addr.clone(),
                            source,
                        })?;
                    let _ = s.set_nodelay(true);
                    s
                }
            };
            let net = |source| CallError::Network {
                addr: addr.clone(),
                source,
            };
            write_frame(&mut s, request).await.map_err(net)?;
            let body = read_frame(&mut s, MAX_FRAME)
                .await
                .map_err(net)?
                .ok_or_else(|| {
                    net(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed",
                    ))
                })?;
            Ok::<_, CallError>((s, body))
        };
        let body = match tokio::time::timeout(ttl, fut).await {
            Ok(Ok((s, b))) => {
                self.conn = Some(s);
                b
            }
            Ok(Err(e)) => {
                self.conn = None;
                return Err(e);
            }
            Err(_) => {
                self.conn = None;
                return Err(CallError::Network {
                    addr,
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer within {ttl:?}"),
                    ),
                });
            }
        };
        let Some((&status, rest)) = body.split_first() else {
            self.conn = None;
            return Err(CallError::Network {
                addr,
                source: io::Error::new(io::ErrorKind::InvalidData, "empty response"),
            });
        };
        let mut r = Reader::new(rest);
        match status {
            STATUS_OK => Ok(rest.to_vec()),
            STATUS_ERROR => Err(CallError::Remote {
                addr,
                message: r.string().unwrap_or_else(|e| e.to_string()),
            }),
            STATUS_NOT_LEADER => Err(CallError::NotLeader {
                addr,
                leader: r
                    .bool()
                    .ok()
                    .and_then(|p| if p { r.u64().ok() } else { None }),
            }),
            STATUS_REJECTED => {
                let kind = r.u8().unwrap_or(REJECTED_CONFLICT);
                let message = r.string().unwrap_or_else(|e| e.to_string());
                let error = if kind == REJECTED_TOPIC_EXISTS {
                    ControllerError::TopicExists(message)
                } else {
                    ControllerError::Conflict(message)
                };
                Err(CallError::Rejected { addr, error })
            }
            s => {
                self.conn = None;
                Err(CallError::Network {
                    addr,
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("response status {s}"),
                    ),
                })
            }
        }
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        e: CallError,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        match e {
            CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
            _ => RPCError::Network(NetworkError::new(&e)),
        }
    }

    /// Sends a metadata change to this peer, the quorum leader, and returns
    /// the log index it was committed at.
    pub async fn forward(
        &mut self,
        records: &[MetadataRecord],
        ttl: Duration,
    ) -> Result<u64, CallError> {
        let mut w = Writer::default();
        w.u8(KIND_FORWARD);
        w.records(records);
        let body = self.call(&w.buf, ttl).await?;
        let mut r = Reader::new(&body);
        r.u64().map_err(|e| CallError::Network {
            addr: self.addr.clone(),
            source: invalid(e),
        })
    }
}

impl Peer {
    /// Asks this peer, the quorum leader, to replicate the metadata log to
    /// observer `node_id` (a broker-only node) at `addr`, its listener for
    /// the leader's AppendEntries: added as a Raft learner, or its address
    /// updated when it restarted on another port.
    pub async fn join(
        &mut self,
        node_id: NodeId,
        addr: &str,
        ttl: Duration,
    ) -> Result<(), CallError> {
        let mut w = Writer::default();
        w.u8(KIND_JOIN);
        w.u64(node_id);
        w.str(addr);
        self.call(&w.buf, ttl).await.map(|_| ())
    }

    /// Asks this peer, the quorum leader, to describe the quorum.
    pub async fn describe(&mut self, ttl: Duration) -> Result<QuorumDescription, CallError> {
        let body = self.call(&[KIND_DESCRIBE], ttl).await?;
        let mut r = Reader::new(&body);
        QuorumDescription::decode(&mut r)
            .and_then(|d| r.finish().map(|()| d))
            .map_err(|e| CallError::Network {
                addr: self.addr.clone(),
                source: invalid(e),
            })
    }
}

// The error type is openraft's.
#[allow(clippy::result_large_err)]
fn decode_or<T, E: std::error::Error>(
    peer: &Peer,
    body: &[u8],
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, CodecError>,
) -> Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
    let mut r = Reader::new(body);
    f(&mut r)
        .and_then(|v| r.finish().map(|()| v))
        .map_err(|e| RPCError::Network(NetworkError::new(&invalid(e))))
        .inspect_err(|_| tracing::warn!(peer = peer.target, "malformed answer from a controller"))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let sent = std::time::Instant::now();
        // The follower is caught up once it acknowledges everything this
        // node had when the request left.
        let leader_last = self.log.as_ref().and_then(|l| l.last_index());
        let request_last = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.map(|p| p.index));
        let mut w = Writer::default();
        w.u8(KIND_APPEND);
        w.vote(&rpc.vote);
        w.opt_log_id(&rpc.prev_log_id);
        w.u32(rpc.entries.len() as u32);
        for e in &rpc.entries {
            w.entry(e);
        }
        w.opt_log_id(&rpc.leader_commit);
        let body = self
            .call(&w.buf, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))?;
        let resp = decode_or(self, &body, decode_append_response)?;
        if let Some(l) = &self.liveness {
            let caught_up =
                matches!(resp, AppendEntriesResponse::Success) && request_last >= leader_last;
            l.ack(self.target, sent, caught_up);
        }
        Ok(resp)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let mut w = Writer::default();
        w.u8(KIND_SNAPSHOT);
        w.vote(&rpc.vote);
        w.snapshot_meta(&rpc.meta);
        w.u64(rpc.offset);
        w.bytes(&rpc.data);
        w.bool(rpc.done);
        let body = self
            .call(&w.buf, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))?;
        decode_or(self, &body, |r| {
            Ok(InstallSnapshotResponse { vote: r.vote()? })
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let mut w = Writer::default();
        w.u8(KIND_VOTE);
        w.vote(&rpc.vote);
        w.opt_log_id(&rpc.last_log_id);
        let body = self
            .call(&w.buf, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))?;
        decode_or(self, &body, |r| {
            Ok(VoteResponse {
                vote: r.vote()?,
                vote_granted: r.bool()?,
                last_log_id: r.opt_log_id()?,
            })
        })
    }
}

// ----------------------------------------------------------------- server

/// Accepts controller connections on `listener` and serves them with
/// `raft` (and forwarded changes with `proposer`) until the task is
/// aborted.
pub fn serve(
    listener: TcpListener,
    raft: Raft,
    proposer: Arc<Proposer>,
    describer: Arc<Describer>,
) -> JoinHandle<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        // The connections are owned by this task: aborting it (on
        // shutdown) drops them all, so a stopped node's connections cannot
        // keep answering "raft stopped" to peers that would otherwise keep
        // using them (in one process, after an in-process restart on the
        // same port).
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                Some(_) = connections.join_next() => continue,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "controller listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                tracing::warn!(%peer, limit = MAX_CONNECTIONS, "too many controller connections; closing");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let raft = raft.clone();
            let proposer = Arc::clone(&proposer);
            let describer = Arc::clone(&describer);
            connections.spawn(async move {
                if let Err(e) = serve_connection(stream, raft, proposer, describer).await {
                    tracing::debug!(%peer, error = %e, "controller connection closed");
                }
                drop(slot);
            });
        }
    })
}

async fn serve_connection(
    mut s: TcpStream,
    raft: Raft,
    proposer: Arc<Proposer>,
    describer: Arc<Describer>,
) -> io::Result<()> {
    loop {
        let frame = match tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut s, MAX_FRAME)).await {
            Err(_) => return Ok(()),
            Ok(r) => r?,
        };
        let Some(frame) = frame else { return Ok(()) };
        let answer = handle(&frame, &raft, &proposer, &describer).await?;
        write_frame(&mut s, &answer).await?;
    }
}

fn ok(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(STATUS_OK);
    f(&mut w);
    w.buf
}

fn error(message: impl std::fmt::Display) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(STATUS_ERROR);
    w.str(&message.to_string());
    w.buf
}

fn not_leader(leader: Option<NodeId>) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(STATUS_NOT_LEADER);
    match leader {
        Some(id) => {
            w.u8(1);
            w.u64(id);
        }
        None => w.u8(0),
    }
    w.buf
}

/// Answers one request; a malformed one is an error (the connection is
/// closed).
async fn handle(
    frame: &[u8],
    raft: &Raft,
    proposer: &Proposer,
    describer: &Describer,
) -> io::Result<Vec<u8>> {
    let Some((&kind, rest)) = frame.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "empty request"));
    };
    let mut r = Reader::new(rest);
    let answer = match kind {
        KIND_VOTE => {
            let req = VoteRequest {
                vote: r.vote().map_err(invalid)?,
                last_log_id: r.opt_log_id().map_err(invalid)?,
            };
            r.finish().map_err(invalid)?;
            let answer = match describer.refuse_disruptive_vote(&req) {
                Some(refused) => Ok(refused),
                None => raft.vote(req).await,
            };
            match answer {
                Ok(v) => ok(|w| {
                    w.vote(&v.vote);
                    w.bool(v.vote_granted);
                    w.opt_log_id(&v.last_log_id);
                }),
                Err(e) => error(e),
            }
        }
        KIND_APPEND => {
            let req = decode_append_request(&mut r).map_err(invalid)?;
            r.finish().map_err(invalid)?;
            match raft.append_entries(req).await {
                Ok(resp) => ok(|w| encode_append_response(w, &resp)),
                Err(e) => error(e),
            }
        }
        KIND_SNAPSHOT => {
            let vote = r.vote().map_err(invalid)?;
            let meta = r.snapshot_meta().map_err(invalid)?;
            let offset = r.u64().map_err(invalid)?;
            let data = r.bytes().map_err(invalid)?.to_vec();
            let done = r.bool().map_err(invalid)?;
            r.finish().map_err(invalid)?;
            let req = InstallSnapshotRequest {
                vote,
                meta,
                offset,
                data,
                done,
            };
            match raft.install_snapshot(req).await {
                Ok(resp) => ok(|w| w.vote(&resp.vote)),
                Err(e) => error(e),
            }
        }
        KIND_FORWARD => {
            let records = r.records().map_err(invalid)?;
            r.finish().map_err(invalid)?;
            if records.is_empty() {
                return Ok(error("an empty metadata change"));
            }
            match proposer.propose(records).await {
                Ok((index, _)) => ok(|w| w.u64(index)),
                Err(ProposeError::NotLeader(leader)) => not_leader(leader.map(|(id, _)| id)),
                Err(ProposeError::Rejected(e)) => {
                    let mut w = Writer::default();
                    w.u8(STATUS_REJECTED);
                    let (kind, message) = match e {
                        ControllerError::TopicExists(m) => (REJECTED_TOPIC_EXISTS, m),
                        e => (REJECTED_CONFLICT, e.to_string()),
                    };
                    w.u8(kind);
                    w.str(&message);
                    w.buf
                }
                Err(ProposeError::Raft(e)) => error(e),
            }
        }
        KIND_DESCRIBE => {
            r.finish().map_err(invalid)?;
            match describer.describe() {
                Ok(d) => ok(|w| d.encode(w)),
                Err(leader) => not_leader(leader),
            }
        }
        KIND_JOIN => {
            let node_id = r.u64().map_err(invalid)?;
            let addr = r.string().map_err(invalid)?;
            r.finish().map_err(invalid)?;
            join(raft, node_id, addr).await
        }
        k => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("request kind {k}"),
            ))
        }
    };
    Ok(answer)
}

/// Serves a Join on the leader: `node_id` becomes a learner at `addr`
/// (openraft's `add_learner`; a membership entry), or has its address
/// replaced when it is a learner elsewhere (a restart on another port).
/// A voter id is refused: a broker-only node must not take a voter's id.
async fn join(raft: &Raft, node_id: NodeId, addr: String) -> Vec<u8> {
    let (leading, known_leader, current) = {
        let m = raft.metrics();
        let m = m.borrow();
        (
            m.state == openraft::ServerState::Leader,
            m.current_leader,
            m.membership_config.membership().clone(),
        )
    };
    if !leading {
        return not_leader(known_leader);
    }
    if current.voter_ids().any(|v| v == node_id) {
        return error(format!(
            "node {node_id} is a voter of the metadata quorum: an observer (process.roles=broker) must not use a voter's node.id"
        ));
    }
    let node = BasicNode::new(addr.clone());
    let result = match current.get_node(&node_id) {
        Some(n) if n.addr == addr => return ok(|_| {}),
        Some(_) => {
            raft.change_membership(
                openraft::ChangeMembers::SetNodes([(node_id, node)].into_iter().collect()),
                true,
            )
            .await
        }
        None => raft.add_learner(node_id, node, false).await,
    };
    match result {
        Ok(_) => {
            tracing::info!(observer = node_id, %addr, "observer replicates the metadata log");
            ok(|_| {})
        }
        Err(RaftError::APIError(openraft::error::ClientWriteError::ForwardToLeader(f))) => {
            not_leader(f.leader_id)
        }
        Err(e) => error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_over_the_limit_and_cut_frames_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = listener.accept().await.expect("accept");
                out.push(read_frame(&mut s, 1024).await.map_err(|e| e.kind()));
            }
            out
        });
        // A frame claiming 2 GiB - 1, a negative size, then 10 bytes of a
        // claimed 100 and the connection closed.
        for bytes in [
            i32::MAX.to_be_bytes().to_vec(),
            (-5i32).to_be_bytes().to_vec(),
            [&100i32.to_be_bytes()[..], &[7u8; 10]].concat(),
        ] {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.write_all(&bytes).await.expect("write");
            drop(c);
        }
        let results = server.await.expect("server");
        assert_eq!(
            results,
            vec![
                Err(io::ErrorKind::InvalidData),
                Err(io::ErrorKind::InvalidData),
                Err(io::ErrorKind::UnexpectedEof)
            ]
        );
    }

    #[tokio::test]
    async fn truncated_and_unknown_requests_do_not_decode() {
        // What `handle` decodes before anything reaches Raft: an unknown
        // kind and truncated requests are errors (the connection closes).
        for frame in [
            vec![9u8],
            vec![KIND_VOTE, 1, 2],
            vec![KIND_APPEND, 0, 0, 0],
            vec![KIND_FORWARD, 0xff, 0xff, 0xff, 0xff],
            vec![KIND_JOIN, 0, 0, 0],
            vec![KIND_JOIN, 0, 0, 0, 0, 0, 0, 0, 4, 0, 9, b'a'],
        ] {
            let mut r = Reader::new(&frame[1..]);
            let decoded = match frame[0] {
                KIND_VOTE => r.vote().map(|_| ()),
                KIND_APPEND => decode_append_request(&mut r).map(|_| ()),
                KIND_FORWARD => r.records().map(|_| ()),
                KIND_JOIN => r.u64().and_then(|_| r.string()).map(|_| ()),
                _ => Err(CodecError("unknown kind".into())),
            };
            assert!(decoded.is_err(), "{frame:?}");
        }
    }
}
