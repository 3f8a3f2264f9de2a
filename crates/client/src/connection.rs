//! One TCP connection to one broker: size-prefixed frames, request and
//! response headers (versions chosen per [`ApiKey`]), correlation ids,
//! request timeouts and `ApiVersions` negotiation on connect.
//!
//! Requests are sent one at a time (no pipelining yet): [`Connection::send`]
//! takes `&mut self`, writes one frame and waits for its response. Callers
//! that share a connection wrap it in a mutex (see [`crate::cluster`]).
//! After a timeout or an I/O error the connection is marked broken because a
//! late response would desynchronise the stream; it must be replaced.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use proto_kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use proto_kafka::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    /// Time allowed for a request to get its response.
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

/// A negotiated connection to one broker.
#[derive(Debug)]
pub struct Connection {
    addr: String,
    stream: TcpStream,
    config: ConnectionConfig,
    correlation: i32,
    broken: bool,
    /// Broker-supported (min, max) version per API key.
    versions: HashMap<i16, (i16, i16)>,
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
        let mut conn = Connection {
            addr: addr.to_string(),
            stream,
            config,
            correlation: 0,
            broken: false,
            versions: HashMap::new(),
        };
        conn.negotiate().await?;
        Ok(conn)
    }

    /// The broker address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether a timeout or I/O error made this connection unusable.
    pub fn is_broken(&self) -> bool {
        self.broken
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
        &mut self,
        req: &ApiVersionsRequest,
        version: i16,
    ) -> Result<ApiVersionsResponse> {
        let body = self.round_trip(ApiKey::ApiVersions, version, req).await?;
        // A broker that rejects our version replies in the v0 layout.
        match ApiVersionsResponse::decode(&mut body.clone(), version) {
            Ok(r) if r.error_code != UNSUPPORTED_VERSION => Ok(r),
            _ => Ok(ApiVersionsResponse::decode(&mut body.clone(), 0)?),
        }
    }

    /// Sends `req` at `version` and decodes the response.
    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let mut body = self.round_trip(key, version, req).await?;
        Ok(R::Response::decode(&mut body, version)?)
    }

    /// Sends `req` at the highest version both sides support (capped at
    /// `our_max`) and returns the response with the version used.
    pub async fn send_negotiated<R: Request>(
        &mut self,
        req: &R,
        our_max: i16,
    ) -> Result<(R::Response, i16)> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let version = self.version_for(key, our_max)?;
        Ok((self.send(req, version).await?, version))
    }

    /// Sends `req` at `version` without waiting for a response (Produce with
    /// `acks=0`, which the broker never answers).
    pub async fn send_oneway<R: Request>(&mut self, req: &R, version: i16) -> Result<()> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let (frame, _) = self.frame(key, version, req)?;
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, self.stream.write_all(&frame)).await {
            Err(_) => {
                self.broken = true;
                Err(ClientError::Timeout {
                    api: format!("{key:?}"),
                    addr: self.addr.clone(),
                    timeout,
                })
            }
            Ok(Err(source)) => {
                self.broken = true;
                Err(ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                })
            }
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Encodes one request frame (length prefix, header, body) with the next
    /// correlation id; returns the frame and that id.
    fn frame<E: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        body: &E,
    ) -> Result<(BytesMut, i32)> {
        if self.broken {
            return Err(ClientError::Io {
                addr: self.addr.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "connection broken by an earlier failure",
                ),
            });
        }
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = correlation;
        header.client_id = Some(StrBytes::from_string(self.config.client_id.clone()));
        let hv = key.request_header_version(version);
        let size = header.compute_size(hv)? + body.compute_size(version)?;
        let len = i32::try_from(size)
            .map_err(|_| ClientError::InvalidArgument(format!("request of {size} bytes")))?;
        let mut frame = BytesMut::with_capacity(4 + size);
        frame.put_i32(len);
        header.encode(&mut frame, hv)?;
        body.encode(&mut frame, version)?;
        Ok((frame, correlation))
    }

    /// Writes one request frame and returns the response body (after the
    /// response header).
    async fn round_trip<E: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        body: &E,
    ) -> Result<Bytes> {
        let (frame, correlation) = self.frame(key, version, body)?;
        let timeout = self.config.request_timeout;
        let result = tokio::time::timeout(timeout, self.exchange(&frame)).await;
        let mut resp = match result {
            Err(_) => {
                self.broken = true;
                return Err(ClientError::Timeout {
                    api: format!("{key:?}"),
                    addr: self.addr.clone(),
                    timeout,
                });
            }
            Ok(Err(source)) => {
                self.broken = true;
                return Err(ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                });
            }
            Ok(Ok(b)) => b,
        };
        let rh = ResponseHeader::decode(&mut resp, key.response_header_version(version))?;
        if rh.correlation_id != correlation {
            self.broken = true;
            return Err(ClientError::Protocol(format!(
                "correlation id mismatch from {}: sent {correlation}, got {}",
                self.addr, rh.correlation_id
            )));
        }
        Ok(resp)
    }

    async fn exchange(&mut self, frame: &[u8]) -> std::io::Result<Bytes> {
        self.stream.write_all(frame).await?;
        let len = self.stream.read_i32().await?;
        let len = usize::try_from(len)
            .ok()
            .filter(|l| *l <= MAX_RESPONSE_SIZE)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad response size {len}"),
                )
            })?;
        let mut buf = vec![0u8; len];
        self.stream.read_exact(&mut buf).await?;
        Ok(Bytes::from(buf))
    }
}
