//! One client connection: read a size-prefixed frame (refusing sizes over
//! `socket.request.max.bytes` before allocating), handle it, write the
//! response, next. Requests on one connection are handled one at a time, so
//! pipelined requests get their responses in order, as in Kafka. Anything
//! malformed closes this connection with one log line; others are
//! unaffected.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::broker::Broker;

pub(crate) async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let max = broker.config.int("socket.request.max.bytes").max(1) as usize;
    let idle = Duration::from_millis(broker.config.long("connections.max.idle.ms").max(1) as u64);
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
        let mut frame = BytesMut::zeroed(size as usize);
        if let Err(e) = rd.read_exact(&mut frame).await {
            tracing::warn!(%peer, error = %e, "truncated request; closing connection");
            return;
        }
        match crate::handlers::handle(&broker, frame.freeze()).await {
            Ok(Some(response)) => {
                if let Err(e) = wr.write_all(&response).await {
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
    }
}
