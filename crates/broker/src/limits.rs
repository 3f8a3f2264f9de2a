//! Limits a client could otherwise push without bound, checked before
//! anything is allocated for it (design 007):
//!
//! - [`RequestMemory`]: bytes held by requests being read and handled,
//!   across all connections (`queued.max.request.bytes`). A connection
//!   takes budget as its frame's buffer grows and gives it back when the
//!   request has been answered; when the budget is spent it stops reading
//!   until budget comes back, or until it gets the single overdraft that
//!   lets one frame at a time finish regardless (Kafka's non-strict
//!   `SimpleMemoryPool`: at most the budget plus one frame is held).
//! - Counts in admin requests: [`MAX_PARTITIONS_PER_REQUEST`] and
//!   [`MAX_RECORDS_PER_REQUEST`] (KRaft's controller limits), checked by
//!   the CreateTopics and CreatePartitions handlers before anything is
//!   built from the client's numbers.
//! - [`ConnectionLimits`]: connections broker-wide (`max.connections`: the
//!   accept loop waits for a slot, as Kafka's acceptor does) and per client
//!   address (`max.connections.per.ip` and its overrides: a connection over
//!   the limit is accepted and closed at once with a log line, as Kafka's
//!   `ConnectionQuotas`).

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

#[cfg(test)]
use crate::config::BrokerConfig;
use crate::config::Settings;
use crate::error::{BrokerError, Result};

/// Most partitions one CreateTopics or CreatePartitions may create
/// (KRaft's `ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`).
pub(crate) const MAX_PARTITIONS_PER_REQUEST: i64 = 10_000;

/// Most metadata records one request may produce (KRaft's
/// `QuorumController.MAX_RECORDS_PER_USER_OP`): a topic is one record,
/// plus one per config and one per partition.
pub(crate) const MAX_RECORDS_PER_REQUEST: usize = 10_000;

/// KRaft's message when [`MAX_PARTITIONS_PER_REQUEST`] is exceeded.
pub(crate) const TOO_MANY_PARTITIONS: &str = "Excessively large number of partitions per request.";

/// KRaft's message when [`MAX_RECORDS_PER_REQUEST`] is exceeded.
pub(crate) const TOO_MANY_RECORDS: &str = "Unable to perform excessively large batch operation.";

/// The budget Sluice uses when `queued.max.request.bytes` is not positive
/// (Kafka's default -1 means unbounded there): 512 MiB, or one
/// `socket.request.max.bytes` frame if that is larger.
pub(crate) const DEFAULT_QUEUED_BYTES: u64 = 512 << 20;

/// Bytes held by requests being read or handled, bounded broker-wide.
#[derive(Debug)]
pub(crate) struct RequestMemory {
    limit: usize,
    free: Arc<Semaphore>,
    overdraft: Arc<Semaphore>,
    held: AtomicUsize,
}

impl RequestMemory {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            free: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            overdraft: Arc::new(Semaphore::new(1)),
            held: AtomicUsize::new(0),
        })
    }

    /// The budget from `queued.max.request.bytes` (see
    /// [`DEFAULT_QUEUED_BYTES`]).
    pub(crate) fn from_settings(settings: &Settings) -> Arc<Self> {
        let max_frame = settings.socket_request_max_bytes.max(1) as u64;
        let queued = settings.queued_max_request_bytes;
        let limit = if queued > 0 {
            queued as u64
        } else {
            DEFAULT_QUEUED_BYTES.max(max_frame)
        };
        Self::new(usize::try_from(limit).unwrap_or(usize::MAX))
    }

    /// The budget in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held right now (the overdraft included).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// A claim on nothing yet, to grow as a frame arrives.
    pub(crate) fn claim(self: &Arc<Self>) -> Claim {
        Claim {
            memory: Arc::clone(self),
            permits: None,
            overdraft: None,
            bytes: 0,
        }
    }
}

/// Budget held for one request; given back when dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    memory: Arc<RequestMemory>,
    permits: Option<OwnedSemaphorePermit>,
    overdraft: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Claim {
    /// Takes `extra` more bytes, waiting while the budget is spent (the
    /// caller stops reading meanwhile).
    pub(crate) async fn grow(&mut self, extra: usize) {
        if extra == 0 {
            return;
        }
        if self.overdraft.is_none() {
            // `acquire_many` counts in u32; a frame is at most i32::MAX.
            let n = u32::try_from(extra).unwrap_or(u32::MAX);
            let free = Arc::clone(&self.memory.free);
            let got = match free.clone().try_acquire_many_owned(n) {
                Ok(p) => Some(p),
                Err(TryAcquireError::NoPermits) => {
                    let overdraft = Arc::clone(&self.memory.overdraft);
                    tokio::select! {
                        p = free.acquire_many_owned(n) => p.ok(),
                        o = overdraft.acquire_owned() => {
                            self.overdraft = o.ok();
                            None
                        }
                    }
                }
                Err(TryAcquireError::Closed) => None,
            };
            if let Some(p) = got {
                match &mut self.permits {
                    Some(held) => held.merge(p),
                    None => self.permits = Some(p),
                }
            } else if self.overdraft.is_none() {
                // The semaphores are never closed; should they be, count
                // the bytes without a limit rather than fail the request.
                tracing::warn!("request memory budget closed");
            }
        }
        self.bytes += extra;
        self.memory.held.fetch_add(extra, Ordering::AcqRel);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.memory.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// `max.connections` and `max.connections.per.ip` (+ overrides).
#[derive(Debug)]
pub(crate) struct ConnectionLimits {
    max_total: usize,
    slots: Arc<Semaphore>,
    per_ip: u32,
    overrides: HashMap<IpAddr, u32>,
    counts: Mutex<HashMap<IpAddr, u32>>,
}

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyConnections {
    pub ip: IpAddr,
    pub max: u32,
}

impl ConnectionLimits {
    pub(crate) fn from_settings(settings: &Settings) -> Result<Arc<Self>> {
        let overrides = parse_overrides(&settings.max_connections_per_ip_overrides)?;
        Ok(Self::new(
            settings.max_connections.max(0) as usize,
            settings.max_connections_per_ip.max(0) as u32,
            overrides,
        ))
    }

    pub(crate) fn new(max_total: usize, per_ip: u32, overrides: HashMap<IpAddr, u32>) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            slots: Arc::new(Semaphore::new(max_total.min(Semaphore::MAX_PERMITS))),
            per_ip,
            overrides,
            counts: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn max_total(&self) -> usize {
        self.max_total
    }

    /// A broker-wide slot, if one is free now.
    pub(crate) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Waits for a broker-wide slot.
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    /// Counts a connection from `ip` holding `slot`; refuses it when the
    /// address already has its maximum.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        slot: OwnedSemaphorePermit,
    ) -> std::result::Result<Connection, TooManyConnections> {
        let ip = ip.to_canonical();
        let max = self.overrides.get(&ip).copied().unwrap_or(self.per_ip);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= max {
            if *count == 0 {
                counts.remove(&ip);
            }
            return Err(TooManyConnections { ip, max });
        }
        *count += 1;
        Ok(Connection {
            limits: Arc::clone(self),
            ip,
            _slot: slot,
        })
    }

    /// Open connections from `ip`.
    #[cfg(test)]
    pub(crate) fn count(&self, ip: IpAddr) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

/// An admitted connection; its counts go down when dropped.
#[derive(Debug)]
pub(crate) struct Connection {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut counts = self.limits.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = counts.get_mut(&self.ip) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> BrokerError {
    BrokerError::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `host:count,host:count` (Kafka's `parseCsvMap`: split at the last
/// colon). A host name stands for every address it resolves to at start.
fn parse_overrides(text: &str) -> Result<HashMap<IpAddr, u32>> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let mut out = HashMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((host, count)) = entry.rsplit_once(':') else {
            return Err(invalid(KEY, text, format!("'{entry}' is not host:count")));
        };
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let count: u32 = count.trim().parse().map_err(|_| {
            invalid(
                KEY,
                text,
                format!("'{entry}': count is not a number 0-2147483647"),
            )
        })?;
        if count > i32::MAX as u32 {
            return Err(invalid(
                KEY,
                text,
                format!("'{entry}': count over 2147483647"),
            ));
        }
        let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .map_err(|e| invalid(KEY, text, format!("'{host}' does not resolve: {e}")))?
                .map(|a| a.ip())
                .collect(),
        };
        if addrs.is_empty() {
            return Err(invalid(
                KEY,
                text,
                format!("'{host}' resolves to no address"),
            ));
        }
        for ip in addrs {
            out.insert(ip.to_canonical(), count);
        }
    }
    Ok(out)
}

/// Checks the limit keys together (Kafka's `KafkaConfig` requirements).
pub(crate) fn validate(settings: &Settings) -> Result<()> {
    let queued = settings.queued_max_request_bytes;
    let max_frame = i64::from(settings.socket_request_max_bytes);
    if queued > 0 && queued < max_frame {
        return Err(invalid(
            "queued.max.request.bytes",
            &queued.to_string(),
            "must be larger or equal to socket.request.max.bytes (or -1)",
        ));
    }
    for (key, value) in [
        ("max.connections", settings.max_connections),
        ("max.connections.per.ip", settings.max_connections_per_ip),
    ] {
        if value < 0 {
            return Err(invalid(key, &value.to_string(), "must be at least 0"));
        }
    }
    let parsed = parse_overrides(&settings.max_connections_per_ip_overrides)?;
    if settings.max_connections_per_ip == 0 && parsed.is_empty() {
        return Err(invalid(
            "max.connections.per.ip",
            "0",
            "can be set to zero only if max.connections.per.ip.overrides is set",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn budget_pauses_past_the_limit_and_one_overdraft_finishes() {
        let mem = RequestMemory::new(1000);
        let mut a = mem.claim();
        a.grow(600).await;
        let mut b = mem.claim();
        b.grow(400).await;
        assert_eq!(mem.held(), 1000);
        // The budget is spent: the next claim takes the overdraft and may
        // grow past the limit by one frame.
        let mut c = mem.claim();
        c.grow(300).await;
        c.grow(5000).await;
        assert_eq!(mem.held(), 6300);
        // A fourth waits: no budget, overdraft taken.
        let mut d = mem.claim();
        let waiting = tokio::time::timeout(Duration::from_millis(50), d.grow(10)).await;
        assert!(waiting.is_err(), "grew past the budget and the overdraft");
        // Answering c gives the overdraft back.
        drop(c);
        assert_eq!(mem.held(), 1000);
        let mut d = mem.claim();
        tokio::time::timeout(Duration::from_secs(5), d.grow(10))
            .await
            .expect("overdraft free again");
        drop(d);
        // Budget comes back when requests are answered.
        drop(a);
        let mut e = mem.claim();
        e.grow(600).await;
        assert_eq!(mem.held(), 1000);
        drop(b);
        drop(e);
        assert_eq!(mem.held(), 0);
    }

    #[test]
    fn queued_bytes_default_is_bounded() {
        let c = BrokerConfig::default();
        assert_eq!(c.long("queued.max.request.bytes"), -1);
        assert_eq!(
            RequestMemory::from_settings(&Settings::from_config(&c).expect("settings")).limit(),
            512 << 20
        );
        let mut c = BrokerConfig::default();
        c.set("socket.request.max.bytes", "1073741824")
            .expect("set");
        assert_eq!(
            RequestMemory::from_settings(&Settings::from_config(&c).expect("settings")).limit(),
            1 << 30
        );
        let mut c = BrokerConfig::default();
        c.set("queued.max.request.bytes", "209715200").expect("set");
        assert_eq!(
            RequestMemory::from_settings(&Settings::from_config(&c).expect("settings")).limit(),
            200 << 20
        );
    }

    #[test]
    fn limit_keys_are_checked_as_kafka_does() {
        let mut c = BrokerConfig::default();
        c.set("queued.max.request.bytes", "1000").expect("set");
        let e = c.validate().expect_err("below a frame");
        assert!(e.to_string().contains("queued.max.request.bytes"), "{e}");
        let mut c = BrokerConfig::default();
        c.set("max.connections.per.ip", "0").expect("set");
        let e = c.validate().expect_err("zero without overrides");
        assert!(e.to_string().contains("max.connections.per.ip"), "{e}");
        c.set("max.connections.per.ip.overrides", "127.0.0.1:5")
            .expect("set");
        c.validate().expect("zero with overrides");
        for bad in [
            "127.0.0.1",
            "127.0.0.1:x",
            "127.0.0.1:-1",
            "no-such-host.invalid:3",
        ] {
            let mut c = BrokerConfig::default();
            // Refused when set (the key table's check) or at validation.
            let e = match c.set("max.connections.per.ip.overrides", bad) {
                Err(e) => e,
                Ok(()) => c.validate().expect_err(bad),
            };
            assert!(
                e.to_string().contains("max.connections.per.ip.overrides"),
                "{e}"
            );
        }
        let mut c = BrokerConfig::default();
        assert!(c.set("max.connections", "-1").is_err() || c.validate().is_err());
    }

    #[test]
    fn per_ip_limits_and_overrides() {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let overrides = parse_overrides("10.0.0.1:3, [::1]:0").expect("parse");
        assert_eq!(overrides.len(), 2);
        let limits = ConnectionLimits::new(100, 2, overrides);
        let slot = || limits.try_slot().expect("slot");
        let a = limits.admit(local, slot()).expect("first");
        let _b = limits.admit(local, slot()).expect("second");
        assert_eq!(
            limits.admit(local, slot()).map(|_| ()),
            Err(TooManyConnections { ip: local, max: 2 })
        );
        assert_eq!(limits.count(local), 2);
        // An IPv4-mapped IPv6 peer counts as its IPv4 address.
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("ip");
        assert!(limits.admit(mapped, slot()).is_err());
        drop(a);
        assert_eq!(limits.count(local), 1);
        let _c = limits.admit(mapped, slot()).expect("room again");
        let held: Vec<_> = (0..3)
            .map(|_| limits.admit(other, slot()).expect("override 3"))
            .collect();
        assert!(limits.admit(other, slot()).is_err());
        assert_eq!(held.len(), 3);
        assert!(limits.admit("::1".parse().expect("ip"), slot()).is_err());
    }

    #[test]
    fn broker_wide_slots_run_out() {
        let limits = ConnectionLimits::new(2, 100, HashMap::new());
        let a = limits.try_slot().expect("one");
        let _b = limits.try_slot().expect("two");
        assert!(limits.try_slot().is_none());
        drop(a);
        assert!(limits.try_slot().is_some());
    }
}
