//! Producer ids for InitProducerId (Kafka's `ProducerIdManager`): the
//! broker holds one block of ids in memory and claims ids from it in
//! order; when the block runs out it asks the controller (on a single node
//! the local [`MetadataStore`]) for the next one, which records the block
//! in the metadata log and fsyncs it before any id of it is handed out. So
//! an id is never given out twice, also after a restart or a SIGKILL: the
//! rest of a block in use when the process stops is simply never used.

use std::sync::{Mutex, PoisonError};

use sluice_controller::{MetadataStore, ProducerIdsBlock};

/// The block in use and the next id to claim from it.
#[derive(Debug, Clone, Copy)]
struct Current {
    block: ProducerIdsBlock,
    next: i64,
}

/// Hands out producer ids (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ProducerIds {
    current: Mutex<Option<Current>>,
}

impl ProducerIds {
    /// The next unused producer id; allocates a new block through `store`
    /// when the current one is used up (or none was allocated since
    /// start). Concurrent callers wait while a block is allocated.
    pub(crate) fn next(
        &self,
        store: &MetadataStore,
        broker_id: i32,
    ) -> sluice_controller::Result<i64> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = current.as_mut().filter(|c| c.next <= c.block.last_id()) {
            let id = c.next;
            c.next += 1;
            return Ok(id);
        }
        // Broker epoch -1: a single node has no broker registration.
        let block = store.allocate_producer_ids(broker_id, -1)?;
        *current = Some(Current {
            block,
            next: block.first_id + 1,
        });
        Ok(block.first_id)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use sluice_controller::producer_ids::BLOCK_SIZE;
    use sluice_controller::MetadataLogConfig;
    use sluice_storage::SystemClock;

    use super::*;

    fn store(dir: &std::path::Path) -> MetadataStore {
        MetadataStore::open(dir, MetadataLogConfig::default(), Arc::new(SystemClock))
            .expect("store")
    }

    #[test]
    fn ids_are_claimed_in_order_and_blocks_are_fetched_when_used_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(dir.path());
        let ids = ProducerIds::default();
        let got: Vec<i64> = (0..2 * BLOCK_SIZE + 5)
            .map(|_| ids.next(&s, 1).expect("id"))
            .collect();
        assert_eq!(got, (0..2 * BLOCK_SIZE + 5).collect::<Vec<_>>());
        assert_eq!(s.image().next_producer_id(), 3 * BLOCK_SIZE);
        drop(s);
        // A new process starts with the block after the last one recorded,
        // whatever of the old one was used.
        let s = store(dir.path());
        let ids = ProducerIds::default();
        assert_eq!(ids.next(&s, 1).expect("id"), 3 * BLOCK_SIZE);
    }

    #[test]
    fn concurrent_callers_never_get_the_same_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Arc::new(store(dir.path()));
        let ids = Arc::new(ProducerIds::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (s, ids) = (s.clone(), ids.clone());
                std::thread::spawn(move || {
                    (0..700)
                        .map(|_| ids.next(&s, 1).expect("id"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in threads {
            for id in t.join().expect("thread") {
                assert!(all.insert(id), "id {id} handed out twice");
            }
        }
        assert_eq!(all.len(), 2800);
    }
}
