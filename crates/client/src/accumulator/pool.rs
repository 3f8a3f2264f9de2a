//! Batch buffers recycled between batches (the free list of Java's
//! `BufferPool`).
//!
//! A drained batch's bytes are shared with the Produce requests that carry
//! them, so the batch's buffer is free only once the last of those
//! requests, and the sender, let go of it. [`BatchPool::seal`] wraps a
//! finished buffer so that this last drop hands it back; the next batch
//! then encodes into memory that is already mapped, instead of a fresh
//! `batch.size` allocation the kernel has to fault in page by page (with
//! 1 MiB batches, about 7 % of a 1 KiB producer's CPU went to those faults).
//! A compressed batch is written into a new buffer, so its record buffer
//! comes back as soon as the batch is compressed ([`BatchPool::give_back`]).
//!
//! Only buffers of exactly `batch.size` are kept (a batch opened for one
//! larger record is freed as usual), at most `buffer.memory / batch.size`
//! of them: the producer never holds more idle buffers than its busiest
//! moment had batches in memory.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;

/// The free buffers of one producer's accumulator.
#[derive(Debug)]
pub struct BatchPool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Capacity of a pooled buffer (`batch.size`).
    size: usize,
    /// Most buffers kept.
    max: usize,
    free: Mutex<Vec<Vec<u8>>>,
}

impl Shared {
    fn give_back(&self, buffer: Vec<u8>) {
        if buffer.capacity() != self.size {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < self.max {
            free.push(buffer);
        }
    }
}

impl BatchPool {
    /// A pool of `batch_size` buffers, at most `buffer_memory / batch_size`
    /// of them.
    pub fn new(batch_size: usize, buffer_memory: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                size: batch_size,
                max: buffer_memory / batch_size.max(1),
                free: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A buffer for a new batch of `capacity` bytes: a free one when
    /// `capacity` is the pooled size and one is free, else a new one.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity == self.shared.size {
            let recycled = self
                .shared
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            if let Some(buffer) = recycled {
                return buffer;
            }
        }
        Vec::with_capacity(capacity)
    }

    /// The finished batch `buffer` as shared bytes that give the buffer
    /// back to this pool when their last clone is dropped (a buffer of
    /// another size is not wrapped).
    pub fn seal(&self, buffer: Vec<u8>) -> Bytes {
        if buffer.capacity() != self.shared.size {
            return Bytes::from(buffer);
        }
        Bytes::from_owner(Pooled {
            buffer,
            pool: Arc::downgrade(&self.shared),
        })
    }

    /// Keeps `buffer` for a later batch, when it is a `batch.size` buffer
    /// and the pool is not full (a compressed batch's record buffer, free
    /// as soon as the batch is compressed).
    pub fn give_back(&self, buffer: Vec<u8>) {
        self.shared.give_back(buffer);
    }

    /// Buffers free now.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.shared
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A sealed batch buffer; dropping it gives the buffer back (unless the
/// producer is gone).
struct Pooled {
    buffer: Vec<u8>,
    pool: Weak<Shared>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(std::mem::take(&mut self.buffer));
        }
    }
}
