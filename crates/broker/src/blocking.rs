//! Running work that may wait on the disk from async code without stalling
//! the other tasks of an async worker thread.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f` in place, first handing this worker's other tasks to another
/// thread when called on a multi-threaded runtime's worker (tokio's
/// `block_in_place`). On a current-thread runtime, or outside a runtime,
/// it just runs `f`. For synchronous code paths (a coordinator holding its
/// shard) that cannot await `spawn_blocking`.
pub(crate) fn in_place<T>(f: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Runs `f` on the blocking pool and waits for it; a panic in `f` is
/// resumed here (it is a bug, as it would be inline).
pub(crate) async fn on_pool<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("blocking task cancelled: {e}"),
    }
}
