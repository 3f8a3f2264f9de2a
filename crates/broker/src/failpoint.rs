//! Failpoints for crash tests: named places in the broker where a test can
//! make the process stop making progress, so that it can be SIGKILLed in a
//! precise state (for example after a transaction's PrepareCommit is
//! durable and before its markers are written).
//!
//! The environment variable `SLUICE_FAILPOINTS` names the armed points,
//! comma-separated; it is read once. An armed point logs
//! `failpoint <name> reached` and parks the task that reached it forever.
//! With the variable unset (every deployment), [`pause`] is one load of a
//! `OnceLock` and returns at once.
//!
//! | name | where |
//! |---|---|
//! | `txn.before.markers` | the transaction coordinator's marker task, before a marker is written |

use std::collections::BTreeSet;
use std::sync::OnceLock;

fn armed() -> &'static BTreeSet<String> {
    static ARMED: OnceLock<BTreeSet<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var("SLUICE_FAILPOINTS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// Parks forever if failpoint `name` is armed; returns at once otherwise.
pub(crate) async fn pause(name: &str) {
    if armed().contains(name) {
        tracing::warn!(failpoint = name, "failpoint {name} reached");
        std::future::pending::<()>().await;
    }
}
