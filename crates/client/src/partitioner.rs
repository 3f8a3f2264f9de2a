//! Choosing a partition for a produced record, exactly as the Java client does.
//!
//! This module owns:
//! - [`murmur2`] and [`to_positive`]: ports of `org.apache.kafka.common.utils.
//!   Utils.murmur2` / `toPositive`, so a key lands on the same partition as with
//!   the Java client, librdkafka's `murmur2_random` and kafka-python's default
//!   partitioner;
//! - [`partition_for_key`]: `toPositive(murmur2(key)) % numPartitions`;
//! - [`Partitioner`]: the producer's built-in partitioner: an explicit
//!   partition wins, then the key hash, and records without key use the
//!   uniform sticky partitioner of KIP-794 (Java's `BuiltInPartitioner`): all
//!   keyless records of a topic go to one partition until `batch.size` bytes
//!   were produced to it, then a new partition is picked.
//!
//! Simplification: Java's `partitioner.adaptive.partitioning.enable` weighs
//! the next sticky partition by broker queue sizes; here the next partition is
//! chosen uniformly at random among the available partitions (or among all
//! when none is available), which is Java's behaviour when adaptive
//! partitioning is disabled or no load statistics exist yet. Pure code: no
//! network, no clock.

use rustc_hash::FxHashMap;
use std::hash::{BuildHasher, Hasher};

/// Kafka's murmur2 (32-bit MurmurHash2, seed `0x9747b28c`) of `data`, as the
/// Java client computes it (a signed `int`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    // Java: `seed ^ length` with an int length; lengths beyond i32 wrap.
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Java's `Utils.toPositive`: clears the sign bit (not `abs`, so
/// `i32::MIN` maps to 0).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record: `toPositive(murmur2(key)) % num_partitions`.
///
/// # Panics
/// Never; `num_partitions` of 0 yields partition 0 (callers reject topics
/// without partitions before).
pub fn partition_for_key(key: &[u8], num_partitions: u32) -> i32 {
    if num_partitions == 0 {
        return 0;
    }
    (to_positive(murmur2(key)) as u32 % num_partitions) as i32
}

/// Where a record goes and whether the choice was sticky (keyless), so the
/// caller reports appended bytes back with [`Partitioner::record_appended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionChoice {
    /// The chosen partition.
    pub partition: i32,
    /// True when chosen by the sticky partitioner (no key, no explicit
    /// partition).
    pub sticky: bool,
}

/// Per-topic sticky state (Java's `StickyPartitionInfo`).
#[derive(Debug, Clone, Copy)]
struct Sticky {
    partition: i32,
    produced_bytes: usize,
}

/// The producer's built-in partitioner (explicit, murmur2 key hash, uniform
/// sticky for keyless records).
#[derive(Debug)]
pub struct Partitioner {
    batch_size: usize,
    sticky: FxHashMap<String, Sticky>,
    rng: u64,
}

impl Partitioner {
    /// A partitioner switching sticky partitions after `batch_size` bytes,
    /// seeded from the process' random hasher keys.
    pub fn new(batch_size: usize) -> Self {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self::with_seed(batch_size, seed)
    }

    /// Like [`Partitioner::new`] with a fixed random seed (deterministic
    /// tests).
    pub fn with_seed(batch_size: usize, seed: u64) -> Self {
        Self {
            batch_size: batch_size.max(1),
            sticky: FxHashMap::default(),
            // xorshift must not start at 0.
            rng: seed | 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Picks a partition: `explicit` wins, then the key hash over all
    /// `num_partitions`, else the topic's sticky partition (picked among
    /// `available` — partitions with a leader — or all partitions when
    /// `available` is empty).
    pub fn partition(
        &mut self,
        topic: &str,
        explicit: Option<i32>,
        key: Option<&[u8]>,
        num_partitions: u32,
        available: &[i32],
    ) -> PartitionChoice {
        if let Some(p) = explicit {
            return PartitionChoice {
                partition: p,
                sticky: false,
            };
        }
        if let Some(k) = key {
            return PartitionChoice {
                partition: partition_for_key(k, num_partitions),
                sticky: false,
            };
        }
        let current = self.sticky.get(topic).map(|s| s.partition);
        let valid = current.filter(|&p| p >= 0 && (p as u32) < num_partitions.max(1));
        let partition = match valid {
            Some(p) => p,
            None => {
                let p = self.random_partition(num_partitions, available);
                self.sticky.insert(
                    topic.to_string(),
                    Sticky {
                        partition: p,
                        produced_bytes: 0,
                    },
                );
                p
            }
        };
        PartitionChoice {
            partition,
            sticky: true,
        }
    }

    fn random_partition(&mut self, num_partitions: u32, available: &[i32]) -> i32 {
        let r = self.next_random();
        if available.is_empty() {
            (r % u64::from(num_partitions.max(1))) as i32
        } else {
            available[(r % available.len() as u64) as usize]
        }
    }

    /// Reports `bytes` appended to a sticky choice of `topic`; after
    /// `batch.size` bytes the next keyless record goes to a newly picked
    /// partition (Java's `updatePartitionInfo`).
    pub fn record_appended(&mut self, topic: &str, partition: i32, bytes: usize) {
        let batch_size = self.batch_size;
        let switch = match self.sticky.get_mut(topic) {
            Some(s) if s.partition == partition => {
                s.produced_bytes += bytes;
                s.produced_bytes >= batch_size
            }
            _ => false,
        };
        if switch {
            self.sticky.remove(topic);
        }
    }

    /// The current sticky partition of `topic`, if one was picked.
    pub fn sticky_partition(&self, topic: &str) -> Option<i32> {
        self.sticky.get(topic).map(|s| s.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (key, murmur2 as u32, partitions for 1, 3, 7, 12 and 100 partitions),
    /// produced by kafka-python 's `kafka.partitioner.default` (`murmur2` and
    /// `DefaultPartitioner`), which ports the Java client.
    const VECTORS: &[(&[u8], u32, [i32; 5])] = &[
        (b"", 0x106e08d9, [0, 0, 2, 9, 81]),
        (b"a", 0xa2d0b27c, [0, 1, 5, 4, 24]),
        (b"ab", 0x12d8262a, [0, 2, 0, 2, 34]),
        (b"abc", 0x1c94221b, [0, 0, 4, 3, 7]),
        (b"abcd", 0xb11ab5f4, [0, 2, 5, 8, 0]),
        (b"abcde", 0x1b897edd, [0, 1, 4, 1, 41]),
        (b"hello", 0x7f1ddbbd, [0, 0, 4, 9, 29]),
        (b"kafka", 0xd067cf64, [0, 1, 3, 4, 80]),
        (b"key-0", 0x01bdb5b9, [0, 1, 0, 1, 41]),
        (b"key-1", 0x0b8601b8, [0, 0, 5, 0, 40]),
        (b"key-42", 0xf4d94947, [0, 0, 3, 3, 27]),
        (b"user-12345", 0xf17c9f13, [0, 1, 1, 7, 95]),
        (b"21", 0xc5f2f8ec, [0, 0, 3, 0, 40]),
        (b"foobar", 0xd0e47bbe, [0, 0, 0, 6, 66]),
        (
            b"The quick brown fox jumps over the lazy dog",
            0x1d84d036,
            [0, 0, 3, 6, 18],
        ),
        (
            b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f !\"#$",
            0x046929d3,
            [0, 1, 1, 7, 51],
        ),
        (b"\xff\xfe\xfd\x80\x00", 0x8714e3fd, [0, 0, 4, 9, 97]),
        (b"\x00", 0x166197bc, [0, 2, 0, 8, 88]),
        (b"sluice", 0x20f8b181, [0, 1, 0, 1, 81]),
        (b"order:9999", 0xdd1907f4, [0, 0, 2, 0, 24]),
    ];

    #[test]
    fn murmur2_matches_kafka_python_and_java() {
        for (key, hash, _) in VECTORS {
            assert_eq!(murmur2(key) as u32, *hash, "key {key:?}");
        }
        // Kafka's own UtilsTest: murmur2("21") == -973932308.
        assert_eq!(murmur2(b"21"), -973_932_308);
    }

    #[test]
    fn key_partitions_match_kafka_python() {
        for (key, _, parts) in VECTORS {
            for (n, want) in [1u32, 3, 7, 12, 100].iter().zip(parts) {
                assert_eq!(partition_for_key(key, *n), *want, "key {key:?} n {n}");
            }
        }
    }

    #[test]
    fn to_positive_clears_sign_bit() {
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(5), 5);
        assert_eq!(partition_for_key(b"x", 0), 0);
    }

    #[test]
    fn explicit_partition_wins_over_key() {
        let mut p = Partitioner::with_seed(100, 7);
        let c = p.partition("t", Some(5), Some(b"hello"), 12, &[]);
        assert_eq!(
            c,
            PartitionChoice {
                partition: 5,
                sticky: false
            }
        );
        let c = p.partition("t", None, Some(b"hello"), 12, &[]);
        assert_eq!(c.partition, 9);
        assert!(!c.sticky);
        assert_eq!(p.sticky_partition("t"), None);
    }

    #[test]
    fn keyless_records_stick_until_batch_size() {
        let mut p = Partitioner::with_seed(100, 42);
        let first = p.partition("t", None, None, 1000, &[]);
        assert!(first.sticky);
        for _ in 0..9 {
            let c = p.partition("t", None, None, 1000, &[]);
            assert_eq!(c.partition, first.partition);
            p.record_appended("t", c.partition, 10);
        }
        // 90 bytes: still sticky.
        let c = p.partition("t", None, None, 1000, &[]);
        assert_eq!(c.partition, first.partition);
        p.record_appended("t", c.partition, 10);
        // 100 bytes reached: a new partition is picked (1000 partitions, so
        // picking the same one again is very unlikely with this seed).
        let next = p.partition("t", None, None, 1000, &[]);
        assert_ne!(next.partition, first.partition);
        assert_eq!(p.sticky_partition("t"), Some(next.partition));
        // Other topics are independent.
        let other = p.partition("u", None, None, 1000, &[]);
        assert_eq!(p.sticky_partition("u"), Some(other.partition));
        assert_eq!(p.sticky_partition("t"), Some(next.partition));
    }

    #[test]
    fn sticky_picks_only_available_partitions() {
        let mut p = Partitioner::with_seed(1, 3);
        for _ in 0..200 {
            let c = p.partition("t", None, None, 10, &[2, 7]);
            assert!(c.partition == 2 || c.partition == 7);
            p.record_appended("t", c.partition, 1);
        }
    }

    #[test]
    fn sticky_is_roughly_uniform() {
        let mut p = Partitioner::with_seed(1, 99);
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            let c = p.partition("t", None, None, 4, &[]);
            counts[c.partition as usize] += 1;
            p.record_appended("t", c.partition, 1);
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn sticky_repicks_when_partition_count_shrinks() {
        let mut p = Partitioner::with_seed(1000, 5);
        let c = p.partition("t", None, None, 1000, &[]);
        let c2 = p.partition("t", None, None, 1, &[]);
        assert_eq!(c2.partition, 0);
        let _ = c;
        // Bytes appended to a partition that is no longer sticky are ignored.
        p.record_appended("t", 999_999, 10_000);
        assert_eq!(p.sticky_partition("t"), Some(0));
    }

    proptest! {
        #[test]
        fn hash_is_deterministic_and_in_range(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            n in 1u32..10_000,
        ) {
            prop_assert_eq!(murmur2(&key), murmur2(&key));
            let part = partition_for_key(&key, n);
            prop_assert!(part >= 0 && (part as u32) < n);
            prop_assert_eq!(part, (to_positive(murmur2(&key)) as u32 % n) as i32);
        }
    }
}
