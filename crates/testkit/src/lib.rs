//! Helpers shared by Sluice's tests (a dev-dependency only).
//!
//! Owns how tests pick ports for the servers they start: [`free_port`]
//! hands out ports below the kernel's ephemeral range, so an outgoing
//! connection can never take one as its local port while the server that
//! owns it is down (a node restarted on its old port found it in use in
//! CI when ports came from the ephemeral range).

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many ports below the ephemeral range are handed out.
const SPAN: u16 = 10_000;

/// Ports below the ephemeral range (`ip_local_port_range`), or `None`
/// when that range leaves no room below it.
fn span() -> Option<(u16, u16)> {
    static SPAN_RANGE: OnceLock<Option<(u16, u16)>> = OnceLock::new();
    *SPAN_RANGE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
        let low: u16 = text.split_whitespace().next()?.parse().ok()?;
        (low >= SPAN + 2_000).then(|| (low - SPAN, low))
    })
}

/// A port on 127.0.0.1 that nothing listens on now and that this process
/// has not handed out before (until it has gone through all of them).
/// Different processes start at different places in the range.
pub fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(usize::MAX);
    let Some((low, high)) = span() else {
        return kernel_port();
    };
    let len = usize::from(high - low);
    let _ = NEXT.compare_exchange(
        usize::MAX,
        (std::process::id() as usize).wrapping_mul(7_919) % len,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..len {
        let i = NEXT.fetch_add(1, Ordering::Relaxed) % len;
        let port = low + i as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    kernel_port()
}

/// A port the kernel picks (from the ephemeral range).
fn kernel_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind 127.0.0.1:0: {e}"));
    l.local_addr()
        .unwrap_or_else(|e| panic!("local address: {e}"))
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        for p in &ports {
            TcpListener::bind(("127.0.0.1", *p)).expect("bindable");
            if let Some((low, high)) = span() {
                assert!((low..high).contains(p), "{p} outside {low}..{high}");
            }
        }
    }
}
