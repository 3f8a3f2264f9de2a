//! The allocator `sluice server` runs with (design 007): the system
//! allocator, except that blocks of 1 GiB or more are anonymous mappings
//! made with `MAP_NORESERVE`.
//!
//! Why: the request decoder (proto-kafka) refuses an array whose claimed
//! element count exceeds the bytes left in the frame, then reserves room
//! for that many elements at once. A decoded element is up to ~120 bytes,
//! so a 100 MiB frame (the default `socket.request.max.bytes`) claiming
//! 100 million elements reserves ~12 GB of address space before decoding
//! fails at the first missing element. The pages are never touched, but
//! Linux's default overcommit heuristic refuses a single reservation larger
//! than RAM plus swap, and Rust aborts the process when an allocation
//! fails: one request could stop the broker. `MAP_NORESERVE` mappings are
//! not charged against that heuristic; memory is committed only as it is
//! touched, exactly as for smaller blocks. (With `vm.overcommit_memory=2`
//! the kernel still refuses them.)
//!
//! Register it in a binary with
//! `#[global_allocator] static A: sluice_broker::ServerAllocator = sluice_broker::ServerAllocator;`.

use std::alloc::{GlobalAlloc, Layout, System};

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct ServerAllocator;

/// Blocks at least this large are mapped with `MAP_NORESERVE`.
#[cfg(target_os = "linux")]
const HUGE: usize = 1 << 30;

/// mmap returns page-aligned memory; larger alignments go to the system.
#[cfg(target_os = "linux")]
const MAP_ALIGN: usize = 4096;

#[cfg(target_os = "linux")]
fn is_huge(layout: Layout) -> bool {
    layout.size() >= HUGE && layout.align() <= MAP_ALIGN
}

#[cfg(target_os = "linux")]
unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no address hint; the
    // arguments cannot alias existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

#[cfg(target_os = "linux")]
// SAFETY: every block is either the system allocator's (small or
// over-aligned layouts) or a mapping of exactly `layout.size()` bytes (huge
// layouts); `is_huge` of the layout Rust hands back on dealloc and realloc
// tells which, because Rust passes the layout the block was allocated (or
// last reallocated) with.
unsafe impl GlobalAlloc for ServerAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout) {
            // SAFETY: see `map`.
            unsafe { map(layout.size()) }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout) {
            // Fresh anonymous mappings read as zeros.
            // SAFETY: see `map`.
            unsafe { map(layout.size()) }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by
            // `map` (or grown by `mremap` below) and not yet unmapped.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: a system block with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to the
        // alignment, does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_huge(layout), is_huge(new_layout)) {
            // SAFETY: forwarded with the caller's guarantees.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                // SAFETY: `ptr` is a live mapping of `layout.size()` bytes;
                // MREMAP_MAYMOVE keeps its contents and flags.
                let p = unsafe {
                    libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE)
                };
                if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            _ => {
                // SAFETY: `new_layout` is valid (see above).
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks are live, distinct, and at least
                    // the copied length long.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
// SAFETY: forwards everything to the system allocator.
unsafe impl GlobalAlloc for ServerAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// Total RAM plus swap, from /proc/meminfo.
    fn ram_and_swap() -> usize {
        let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
        let kib = |key: &str| -> usize {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (kib("MemTotal:") + kib("SwapTotal:")) * 1024
    }

    /// A reservation larger than RAM plus swap (which the system allocator
    /// is refused, aborting the process) succeeds and costs nothing until
    /// touched. The lib's tests run with this allocator (see lib.rs).
    #[test]
    fn reservations_beyond_ram_and_swap_do_not_abort() {
        let bytes = ram_and_swap() * 2 + (1 << 30);
        let mut v: Vec<[u8; 120]> = Vec::with_capacity(bytes / 120);
        assert!(v.capacity() >= bytes / 120);
        v.push([7; 120]);
        v.push([9; 120]);
        assert_eq!(v[1][119], 9);
        drop(v);
    }

    #[test]
    fn blocks_move_across_the_threshold_keeping_their_bytes() {
        let mut v: Vec<u8> = Vec::with_capacity(1024);
        v.extend_from_slice(b"kept");
        v.reserve_exact(2 << 30); // system block -> mapping
        assert_eq!(&v[..], b"kept");
        v.reserve_exact(6 << 30); // mapping grows (mremap)
        assert_eq!(&v[..], b"kept");
        v.shrink_to_fit(); // mapping -> system block
        assert_eq!(&v[..], b"kept");
        let z: Vec<u64> = vec![0; (1 << 30) / 8 + 1]; // zeroed mapping
        assert!(z[..4096].iter().all(|&x| x == 0));
        assert_eq!(z[z.len() - 1], 0);
    }
}
