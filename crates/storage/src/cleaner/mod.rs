//! Log compaction (placeholder until the cleaner lands).
