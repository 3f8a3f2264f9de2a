//! Which `__consumer_offsets` partition coordinates a group: Kafka's
//! `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, with
//! Java's `String.hashCode` over UTF-16 code units, so a Sluice broker and
//! Kafka tooling agree on where a group's records live.

/// Default `offsets.topic.num.partitions`.
pub const DEFAULT_OFFSETS_TOPIC_PARTITIONS: i32 = 50;

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16
/// code units, in wrapping 32-bit arithmetic.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `Utils.abs`: like `abs`, but `i32::MIN` maps to 0 instead of
/// staying negative.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The coordinator partition of `group_id` among `partitions` partitions
/// of `__consumer_offsets`. `partitions` below 1 is treated as 1 (the
/// config is validated elsewhere; this never panics).
pub fn coordinator_partition(group_id: &str, partitions: i32) -> i32 {
    kafka_abs(java_string_hash(group_id)) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected hashes computed from the formula by hand / outside Rust
    // (UTF-16 code units, wrapping at 32 bits).
    #[test]
    fn java_hash_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("ab"), 97 * 31 + 98);
        assert_eq!(java_string_hash("group-1"), 293_427_299);
        assert_eq!(java_string_hash("my-group"), -1_906_497_762);
        assert_eq!(java_string_hash("groupé"), -1_237_460_406);
        assert_eq!(java_string_hash("消费者组"), 871_131_088);
        // U+1F600 is two UTF-16 units: 0xD83D * 31 + 0xDE00
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
        // the classic string whose hashCode is Integer.MIN_VALUE
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn partitions_with_default_count() {
        let p = |g| coordinator_partition(g, DEFAULT_OFFSETS_TOPIC_PARTITIONS);
        assert_eq!(p(""), 0);
        assert_eq!(p("a"), 47);
        assert_eq!(p("group-1"), 49);
        assert_eq!(p("my-group"), 12); // negative hash: abs first
        assert_eq!(p("groupé"), 6);
        assert_eq!(p("消费者组"), 38);
        assert_eq!(p("😀"), 49);
        assert_eq!(p("polygenelubricants"), 0); // Utils.abs(MIN) == 0
        assert_eq!(p("console-consumer-12345"), 6);
    }

    #[test]
    fn degenerate_partition_counts_do_not_panic() {
        assert_eq!(coordinator_partition("x", 0), 0);
        assert_eq!(coordinator_partition("x", -5), 0);
        assert_eq!(coordinator_partition("x", 1), 0);
    }
}
