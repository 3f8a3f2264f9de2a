//! Where a follower truncates when it starts following a leader (Kafka's
//! `AbstractFetcherThread.getOffsetTruncationState`, KIP-101 and
//! KIP-279): it asks the leader, with OffsetForLeaderEpoch (or learns from
//! a Fetch's diverging epoch), for the end offset of its own latest epoch,
//! and the answer decides the truncation point, round after round, until
//! both logs agree on the epoch of their last common records.

use sluice_storage::epoch::LeaderEpochCache;

/// One round's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// Truncate the log to this offset (it may equal the log end).
    pub offset: i64,
    /// `false`: ask again with the latest epoch left after truncating.
    pub complete: bool,
}

/// The epoch to ask the leader about: the follower's latest.
pub(crate) fn epoch_to_ask(cache: &LeaderEpochCache) -> Option<i32> {
    cache.latest_epoch()
}

/// The truncation for the leader's answer `(leader_epoch, leader_end)` to
/// OffsetForLeaderEpoch: the largest epoch the leader knows that is not
/// above the follower's, and where it ends on the leader. `leader_epoch <
/// 0` means the leader knows no such epoch: the follower keeps only what
/// is below its high watermark (Kafka's fallback).
pub(crate) fn truncation(
    cache: &LeaderEpochCache,
    log_end: i64,
    high_watermark: i64,
    leader_epoch: i32,
    leader_end: i64,
) -> Truncation {
    if leader_epoch < 0 || leader_end < 0 {
        return Truncation {
            offset: high_watermark.min(log_end),
            complete: true,
        };
    }
    match cache.end_offset_for(leader_epoch, log_end) {
        // The follower knows no epoch that old: keep what the leader has.
        None => Truncation {
            offset: leader_end.min(log_end),
            complete: true,
        },
        // The follower never saw the leader's epoch: its own last epoch
        // below it ends where the follower's history must stop; ask again.
        Some((epoch, end)) if epoch != leader_epoch => Truncation {
            offset: end.min(log_end),
            complete: false,
        },
        Some((_, end)) => Truncation {
            offset: end.min(leader_end).min(log_end),
            complete: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::in_memory();
        for &(e, o) in entries {
            c.assign(e, o);
        }
        c
    }

    #[test]
    fn same_epoch_truncates_to_the_shorter_end() {
        let c = cache(&[(0, 0), (2, 10)]);
        // The leader's epoch 2 ended at 15; the follower has up to 20.
        assert_eq!(
            truncation(&c, 20, 5, 2, 15),
            Truncation {
                offset: 15,
                complete: true
            }
        );
        // The leader has more: nothing to drop.
        assert_eq!(
            truncation(&c, 20, 5, 2, 30),
            Truncation {
                offset: 20,
                complete: true
            }
        );
    }

    #[test]
    fn an_epoch_the_leader_never_had_is_dropped_and_asked_again() {
        // Follower wrote epoch 3 (from 12) as a deposed leader; the new
        // leader knows epochs 0 and 2 only, and answers 2 ending at 14.
        let c = cache(&[(0, 0), (2, 10), (3, 12)]);
        assert_eq!(
            truncation(&c, 18, 5, 2, 14),
            Truncation {
                offset: 12,
                complete: true
            }
        );
        // The leader knows only epoch 1 (the follower never saw it): the
        // follower's epoch 0 ends at 10, so it keeps 10 and asks again.
        assert_eq!(
            truncation(&c, 18, 5, 1, 11),
            Truncation {
                offset: 10,
                complete: false
            }
        );
    }

    #[test]
    fn unknown_answers_fall_back_to_the_high_watermark() {
        let c = cache(&[(4, 0)]);
        assert_eq!(
            truncation(&c, 9, 6, -1, -1),
            Truncation {
                offset: 6,
                complete: true
            }
        );
        assert_eq!(
            truncation(&c, 9, 6, 2, 3),
            Truncation {
                offset: 3,
                complete: true
            }
        );
    }
}
