//! Plain Kafka connections from this broker to another one (follower
//! fetches, transaction markers): the other broker's listener named like
//! the one this node serves (inter-broker traffic shares the client
//! listener, as `inter.broker.listener.name` defaults to), one request at
//! a time, every wait bounded.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::{ApiKey, RequestHeader, ResponseHeader};
use proto_kafka::protocol::{Decodable, Encodable, StrBytes};
use sluice_controller::MetadataImage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::broker::Broker;

/// Largest response frame read from another broker.
const MAX_FRAME: usize = 256 << 20;

/// A plain Kafka connection to another broker: one request at a time.
pub(crate) struct Conn {
    stream: TcpStream,
    correlation: i32,
    client_id: String,
}

impl Conn {
    /// Connects to broker `leader`'s listener named like this node's;
    /// `purpose` names the connection in the other broker's logs.
    pub(crate) async fn connect(
        b: &Broker,
        image: &MetadataImage,
        leader: i32,
        purpose: &str,
    ) -> Result<Self, String> {
        let reg = image
            .broker(leader)
            .ok_or_else(|| format!("broker {leader} is not registered"))?;
        let e = reg
            .endpoints
            .iter()
            .find(|e| e.name == b.advertised.name)
            .or_else(|| reg.endpoints.first())
            .ok_or_else(|| format!("broker {leader} has no endpoint"))?;
        let addr = format!("{}:{}", e.host, e.port);
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr))
            .await
            .map_err(|_| format!("connecting to {addr} timed out"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            correlation: 0,
            client_id: format!("broker-{}-{purpose}-{leader}", b.node_id),
        })
    }

    /// Sends one request and reads its response (30 s at most).
    pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        body: &Req,
    ) -> Result<Resp, String> {
        self.call_unless(key, version, body, std::future::pending())
            .await?
            .ok_or_else(|| "request given up".to_string())
    }

    /// [`Self::call`], given up (`Ok(None)`) when `interrupt` resolves
    /// before the response starts to arrive. A response that started is
    /// always read whole. After `Ok(None)` the connection must be dropped:
    /// the response may still come on it.
    pub(crate) async fn call_unless<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        body: &Req,
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Result<Option<Resp>, String> {
        self.correlation = self.correlation.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_string(self.client_id.clone()));
        let hv = key.request_header_version(version);
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header
            .encode(&mut frame, hv)
            .map_err(|e| format!("encoding a request header: {e}"))?;
        body.encode(&mut frame, version)
            .map_err(|e| format!("encoding a request: {e}"))?;
        let size = (frame.len() - 4) as i32;
        frame[0..4].copy_from_slice(&size.to_be_bytes());
        let io = async {
            self.stream.write_all(&frame).await?;
            let len = tokio::select! {
                r = self.stream.read_i32() => r?,
                () = interrupt => return Ok(None),
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_FRAME)
                .ok_or_else(|| std::io::Error::other(format!("bad response size {len}")))?;
            let mut buf = vec![0u8; len];
            self.stream.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(Some(buf))
        };
        let Some(buf) = tokio::time::timeout(Duration::from_secs(30), io)
            .await
            .map_err(|_| "request timed out".to_string())?
            .map_err(|e| format!("connection: {e}"))?
        else {
            return Ok(None);
        };
        let mut body = Bytes::from(buf);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| format!("decoding a response header: {e}"))?;
        if header.correlation_id != self.correlation {
            return Err(format!(
                "response with correlation id {}, expected {}",
                header.correlation_id, self.correlation
            ));
        }
        Resp::decode(&mut body, version)
            .map(Some)
            .map_err(|e| format!("decoding a response: {e}"))
    }
}
