//! Shared by the broker's TCP integration tests: an in-process server on a
//! free 127.0.0.1 port with its data in a temporary folder, and a raw Kafka
//! client that encodes requests and decodes responses with proto-kafka.
#![allow(dead_code)]

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use proto_kafka::messages::{ApiKey, RequestHeader, ResponseHeader};
use proto_kafka::protocol::{Decodable, Encodable, StrBytes};
use sluice_broker::{BrokerConfig, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

pub async fn start(overrides: &[(&str, &str)]) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = BrokerConfig::default();
    c.set("log.dirs", &dir.path().join("data").display().to_string())
        .expect("log.dirs");
    c.set("listeners", "PLAINTEXT://127.0.0.1:0")
        .expect("listeners");
    for (k, v) in overrides {
        c.set(k, v).expect("override");
    }
    let server = Server::bind(c).await.expect("bind");
    let addr = server.local_addr().expect("addr");
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
        addr,
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

impl TestServer {
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.expect("server task");
    }

    pub async fn client(&self) -> Client {
        Client {
            stream: TcpStream::connect(self.addr).await.expect("connect"),
            correlation: 0,
            client_id: "broker-test",
        }
    }
}

pub struct Client {
    pub stream: TcpStream,
    pub correlation: i32,
    /// The client id sent in every request header.
    pub client_id: &'static str,
}

impl Client {
    /// Sends a request and returns the raw response frame (size prefix
    /// included).
    pub async fn call_raw<Req: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Bytes {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str(self.client_id));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .expect("encode header");
        req.encode(&mut buf, version).expect("encode request");
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).await.expect("send");
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .await
            .expect("response size");
        let size = i32::from_be_bytes(len) as usize;
        let mut frame = BytesMut::with_capacity(4 + size);
        frame.extend_from_slice(&len);
        frame.resize(4 + size, 0);
        self.stream
            .read_exact(&mut frame[4..])
            .await
            .expect("response body");
        frame.freeze()
    }

    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        let frame = self.call_raw(key, version, req).await;
        decode_response(key, version, self.correlation, frame)
    }
}

pub fn decode_response<Resp: Decodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    frame: Bytes,
) -> Resp {
    let mut body = frame.slice(4..);
    let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
        .expect("response header");
    assert_eq!(header.correlation_id, correlation);
    let resp = Resp::decode(&mut body, version).expect("response body");
    assert!(
        !body.has_remaining(),
        "trailing bytes in {key:?} v{version}"
    );
    resp
}
