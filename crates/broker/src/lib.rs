//! The Kafka-compatible broker.
//!
//! - [`config`]: `server.properties` keys, defaults, layering.
//! - [`broker`]: shared state (logs, metadata image) and topic changes.
//! - [`server`]: the listener, start-up and graceful shutdown.
//! - `connection`: framing, request header, in-order dispatch per
//!   connection, limits (`socket.request.max.bytes`, idle timeout, body
//!   deadline).
//! - `limits`: bytes held by requests across connections
//!   (`queued.max.request.bytes`), `max.connections`,
//!   `max.connections.per.ip`.
//! - `handlers`: one file per Kafka API (decode, delegate, respond), each
//!   declaring the versions it implements; `handlers::errors` maps storage
//!   and broker errors to Kafka error codes in one place.

pub mod broker;
pub mod config;
mod connection;
pub mod error;
mod fetch_session;
mod groups;
mod handlers;
mod limits;
pub mod server;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::{BrokerError, Result};
pub use handlers::decode_request;
pub use server::Server;
