//! Incremental fetch sessions (KIP-227), after Kafka's `FetchSession.scala`.
//!
//! A full fetch (epoch 0) creates a session holding the requested
//! partitions and answers with its id. Later requests name the session and
//! the next epoch, list only partitions that were added or changed, and
//! `forgotten_topics_data` for removals; the answer holds only partitions
//! with something new (records, a high watermark or log start offset
//! change, an error). Epoch -1 (`FINAL_EPOCH`) closes a session; a full
//! request naming a session replaces it.
//!
//! The cache holds at most `max.incremental.fetch.session.cache.slots`
//! sessions. When full, a new session may evict (Kafka's `tryEvict`):
//! the least recently used session if it has been idle longer than the
//! eviction time; otherwise the lowest of the evictable sessions ordered by
//! `(privileged, partition count, id)`, when the new session ranks at least
//! as high. Sessions of followers are privileged and may evict any
//! consumer session; a consumer session may only evict sessions older than
//! the eviction time with fewer partitions than its own. Which sessions
//! count as evictable is decided when a session is used, as in Kafka.
//!
//! Locking: the cache lock is taken before a session's lock, never the
//! other way round.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use proto_kafka::ResponseError;
use uuid::Uuid;

/// "Not part of a session".
pub(crate) const INVALID_SESSION_ID: i32 = 0;
/// The epoch of a full request that creates a session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full request that closes (or does not want) a session.
pub(crate) const FINAL_EPOCH: i32 = -1;
/// Kafka's `min.incremental.fetch.session.eviction.ms` default: a session
/// idle this long may be evicted by anyone, and a session younger than
/// this is safe from eviction by larger consumer sessions.
pub(crate) const EVICTION_MS: u64 = 120_000;
/// First fetch version that names topics by id (then sessions do too).
pub(crate) const TOPIC_ID_VERSION: i16 = 13;
/// First fetch version with sessions.
const SESSION_VERSION: i16 = 7;

/// The epoch after `epoch` (wrapping to 1; negative stays final).
pub(crate) fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// How a request names a topic: by name before v13, by id from v13.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum TopicKey {
    Name(String),
    Id(Uuid),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PartitionKey {
    pub topic: TopicKey,
    pub partition: i32,
}

/// What a fetch asks of one partition, from the request or the session.
#[derive(Debug, Clone)]
pub(crate) struct PartitionRequest {
    pub key: PartitionKey,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the fetcher believes current (v9+; -1: not given).
    pub current_leader_epoch: i32,
    /// The epoch of the last record the fetcher has before `fetch_offset`
    /// (v12+; -1: not given), checked for a diverging epoch.
    pub last_fetched_epoch: i32,
}

/// What a read of one partition found, as far as the session cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionOutcome {
    pub has_records: bool,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub error: bool,
    /// The answer names a diverging epoch: the fetcher must see it.
    pub diverging: bool,
}

#[derive(Debug)]
struct CachedPartition {
    req: PartitionRequest,
    high_watermark: i64,
    local_log_start_offset: i64,
}

impl CachedPartition {
    /// Kafka's `maybeUpdateResponseData`: whether the partition belongs in
    /// an incremental response, remembering what was sent.
    fn must_respond(&mut self, o: &PartitionOutcome) -> bool {
        let mut respond = o.has_records || o.diverging;
        if self.high_watermark != o.high_watermark {
            respond = true;
            self.high_watermark = o.high_watermark;
        }
        if self.local_log_start_offset != o.log_start_offset {
            respond = true;
            self.local_log_start_offset = o.log_start_offset;
        }
        if o.error {
            // Forget the high watermark so the partition is sent again once
            // the error is gone.
            self.high_watermark = -1;
            respond = true;
        }
        respond
    }
}

/// One session: its partitions in fetch order (partitions that returned
/// records move to the back, so a size-limited response rotates through
/// them) and its epoch.
#[derive(Debug)]
pub(crate) struct FetchSession {
    id: i32,
    uses_topic_ids: bool,
    epoch: i32,
    order: BTreeMap<u64, PartitionKey>,
    partitions: HashMap<PartitionKey, (u64, CachedPartition)>,
    next_seq: u64,
}

impl FetchSession {
    fn new(id: i32, uses_topic_ids: bool) -> Self {
        Self {
            id,
            uses_topic_ids,
            epoch: next_epoch(INITIAL_EPOCH),
            order: BTreeMap::new(),
            partitions: HashMap::new(),
            next_seq: 0,
        }
    }

    fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Adds or replaces a partition; a new one goes to the back.
    fn upsert(&mut self, req: PartitionRequest, high_watermark: i64, log_start: i64) {
        if let Some((_, cached)) = self.partitions.get_mut(&req.key) {
            cached.req = req;
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, req.key.clone());
        self.partitions.insert(
            req.key.clone(),
            (
                seq,
                CachedPartition {
                    req,
                    high_watermark,
                    local_log_start_offset: log_start,
                },
            ),
        );
    }

    fn remove(&mut self, key: &PartitionKey) -> bool {
        match self.partitions.remove(key) {
            Some((seq, _)) => {
                self.order.remove(&seq);
                true
            }
            None => false,
        }
    }

    fn move_to_back(&mut self, key: &PartitionKey) {
        if let Some((seq, _)) = self.partitions.get_mut(key) {
            self.order.remove(seq);
            *seq = self.next_seq;
            self.order.insert(self.next_seq, key.clone());
            self.next_seq += 1;
        }
    }

    /// Kafka's `update`: request parameters of listed partitions replace
    /// the cached ones (new partitions are added), then forgotten ones go.
    fn update(&mut self, parts: &[PartitionRequest], forgotten: &[PartitionKey]) {
        for p in parts {
            self.upsert(p.clone(), -1, -1);
        }
        for k in forgotten {
            self.remove(k);
        }
    }

    /// The partitions to read, in session order.
    fn requests(&self) -> Vec<PartitionRequest> {
        self.order
            .values()
            .filter_map(|k| self.partitions.get(k).map(|(_, c)| c.req.clone()))
            .collect()
    }
}

/// How one fetch request relates to the session cache (Kafka's
/// `FetchContext` variants), decided before any partition is read.
#[derive(Debug)]
pub(crate) enum FetchContext {
    /// The session named in the request cannot be used: answer only the
    /// error.
    SessionError(ResponseError),
    /// No session: read and answer exactly the requested partitions.
    Sessionless(Vec<PartitionRequest>),
    /// A full request that should create a session when answered.
    Full {
        parts: Vec<PartitionRequest>,
        privileged: bool,
        uses_topic_ids: bool,
    },
    /// An incremental request: read every partition of the session, answer
    /// the changed ones.
    Incremental {
        session: Arc<Mutex<FetchSession>>,
        id: i32,
        expected_epoch: i32,
        parts: Vec<PartitionRequest>,
    },
}

impl FetchContext {
    /// The partitions to read, in response order.
    pub(crate) fn partitions(&self) -> &[PartitionRequest] {
        match self {
            Self::SessionError(_) => &[],
            Self::Sessionless(parts)
            | Self::Full { parts, .. }
            | Self::Incremental { parts, .. } => parts,
        }
    }
}

/// The top level of the answer, and which of the read partitions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Completion {
    pub error: Option<ResponseError>,
    pub session_id: i32,
    /// One flag per partition of [`FetchContext::partitions`].
    pub include: Vec<bool>,
}

type EvictableKey = (bool, usize, i32);

#[derive(Debug)]
struct Entry {
    session: Arc<Mutex<FetchSession>>,
    privileged: bool,
    creation_ms: u64,
    last_used_ms: u64,
    /// Partition count when last used (`None` until first touched).
    cached_size: Option<usize>,
}

impl Entry {
    fn evictable_key(&self, id: i32) -> Option<EvictableKey> {
        self.cached_size.map(|s| (self.privileged, s, id))
    }
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Entry>,
    last_used: BTreeSet<(u64, i32)>,
    evictable_by_all: BTreeSet<EvictableKey>,
    evictable_by_privileged: BTreeSet<EvictableKey>,
    num_partitions: usize,
}

impl Inner {
    fn remove(&mut self, id: i32) -> bool {
        let Some(e) = self.sessions.remove(&id) else {
            return false;
        };
        self.last_used.remove(&(e.last_used_ms, id));
        if let Some(k) = e.evictable_key(id) {
            self.evictable_by_all.remove(&k);
            self.evictable_by_privileged.remove(&k);
            self.num_partitions -= k.1;
        }
        true
    }

    /// Records a use of the session: last-used time, size, and whether it
    /// may be evicted by consumers and by followers.
    fn touch(&mut self, id: i32, size: usize, now: u64, eviction_ms: u64) {
        let Some(e) = self.sessions.get_mut(&id) else {
            return;
        };
        self.last_used.remove(&(e.last_used_ms, id));
        e.last_used_ms = now;
        self.last_used.insert((now, id));
        if let Some(k) = e.evictable_key(id) {
            self.evictable_by_all.remove(&k);
            self.evictable_by_privileged.remove(&k);
            self.num_partitions -= k.1;
        }
        e.cached_size = Some(size);
        let key = (e.privileged, size, id);
        let old = now.saturating_sub(e.creation_ms) > eviction_ms;
        if !e.privileged || old {
            self.evictable_by_privileged.insert(key);
        }
        if old {
            self.evictable_by_all.insert(key);
        }
        self.num_partitions += size;
    }

    /// Kafka's `tryEvict`: a stale session first, else the least valuable
    /// evictable one if it ranks no higher than the new session.
    fn try_evict(&mut self, privileged: bool, size: usize, now: u64, eviction_ms: u64) -> bool {
        let Some(&(last_used, id)) = self.last_used.first() else {
            return false;
        };
        if now.saturating_sub(last_used) > eviction_ms {
            tracing::debug!(session = id, "evicting stale fetch session");
            return self.remove(id);
        }
        let candidates = if privileged {
            &self.evictable_by_privileged
        } else {
            &self.evictable_by_all
        };
        let Some(&first) = candidates.first() else {
            return false;
        };
        if (privileged, size, 0) < first {
            return false;
        }
        tracing::debug!(session = first.2, size = first.1, "evicting fetch session");
        self.remove(first.2)
    }
}

/// The broker's fetch sessions.
#[derive(Debug)]
pub struct FetchSessionCache {
    max_entries: usize,
    eviction_ms: u64,
    start: Instant,
    inner: Mutex<Inner>,
}

impl FetchSessionCache {
    pub(crate) fn new(max_entries: usize, eviction_ms: u64) -> Self {
        Self {
            max_entries,
            eviction_ms,
            start: Instant::now(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Sized by `max.incremental.fetch.session.cache.slots`.
    pub(crate) fn from_settings(settings: &crate::config::Settings) -> Self {
        Self::new(
            settings.fetch_session_cache_slots.max(0) as usize,
            EVICTION_MS,
        )
    }

    /// Milliseconds on the cache's monotonic clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of sessions.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Partitions held by all sessions.
    #[cfg(test)]
    fn total_partitions(&self) -> usize {
        self.lock().num_partitions
    }

    /// Kafka's `FetchManager.newContext`: checks the session named by
    /// `(session_id, epoch)`, applies an incremental request's additions,
    /// changes and removals, and advances its epoch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_context(
        &self,
        version: i16,
        session_id: i32,
        epoch: i32,
        privileged: bool,
        parts: Vec<PartitionRequest>,
        forgotten: &[PartitionKey],
        now: u64,
    ) -> FetchContext {
        if version < SESSION_VERSION {
            return FetchContext::Sessionless(parts);
        }
        let uses_topic_ids = version >= TOPIC_ID_VERSION;
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if session_id != INVALID_SESSION_ID && self.lock().remove(session_id) {
                tracing::debug!(
                    session = session_id,
                    "full fetch request closed its session"
                );
            }
            return if epoch == FINAL_EPOCH {
                FetchContext::Sessionless(parts)
            } else {
                FetchContext::Full {
                    parts,
                    privileged,
                    uses_topic_ids,
                }
            };
        }
        let mut inner = self.lock();
        let Some(entry) = inner.sessions.get(&session_id) else {
            tracing::debug!(session = session_id, "fetch session not found");
            return FetchContext::SessionError(ResponseError::FetchSessionIdNotFound);
        };
        let arc = Arc::clone(&entry.session);
        let mut session = arc.lock().unwrap_or_else(|p| p.into_inner());
        if session.epoch != epoch {
            tracing::debug!(
                session = session_id,
                expected = session.epoch,
                got = epoch,
                "fetch session epoch mismatch"
            );
            return FetchContext::SessionError(ResponseError::InvalidFetchSessionEpoch);
        }
        if session.uses_topic_ids != uses_topic_ids {
            return FetchContext::SessionError(ResponseError::FetchSessionTopicIdError);
        }
        session.update(&parts, forgotten);
        if session.len() == 0 {
            drop(session);
            inner.remove(session_id);
            return FetchContext::Sessionless(parts);
        }
        let size = session.len();
        session.epoch = next_epoch(session.epoch);
        let expected_epoch = session.epoch;
        let snapshot = session.requests();
        drop(session);
        inner.touch(session_id, size, now, self.eviction_ms);
        FetchContext::Incremental {
            session: arc,
            id: session_id,
            expected_epoch,
            parts: snapshot,
        }
    }

    /// Kafka's `updateAndGenerateResponseData`: with the read `outcomes`
    /// (one per partition of the context), creates the session of a full
    /// request or prunes an incremental answer to the changed partitions.
    pub(crate) fn complete(
        &self,
        ctx: &FetchContext,
        outcomes: &[PartitionOutcome],
        now: u64,
    ) -> Completion {
        let all = |session_id| Completion {
            error: None,
            session_id,
            include: vec![true; outcomes.len()],
        };
        match ctx {
            FetchContext::SessionError(e) => Completion {
                error: Some(*e),
                session_id: INVALID_SESSION_ID,
                include: Vec::new(),
            },
            FetchContext::Sessionless(_) => all(INVALID_SESSION_ID),
            FetchContext::Full {
                parts,
                privileged,
                uses_topic_ids,
            } => all(self.maybe_create_session(parts, outcomes, *privileged, *uses_topic_ids, now)),
            FetchContext::Incremental {
                session,
                id,
                expected_epoch,
                parts,
            } => {
                let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
                if s.epoch != *expected_epoch {
                    tracing::info!(
                        session = id,
                        expected = expected_epoch,
                        now = s.epoch,
                        "fetch session moved on while reading (duplicate request?)"
                    );
                    return Completion {
                        error: Some(ResponseError::InvalidFetchSessionEpoch),
                        session_id: *id,
                        include: vec![false; outcomes.len()],
                    };
                }
                let include = parts
                    .iter()
                    .zip(outcomes)
                    .map(|(p, o)| {
                        let respond = match s.partitions.get_mut(&p.key) {
                            Some((_, cached)) => cached.must_respond(o),
                            None => true,
                        };
                        if respond && o.has_records {
                            s.move_to_back(&p.key);
                        }
                        respond
                    })
                    .collect();
                Completion {
                    error: None,
                    session_id: *id,
                    include,
                }
            }
        }
    }

    /// Kafka's `maybeCreateSession`: the new session's id, or
    /// [`INVALID_SESSION_ID`] when the cache is full and nothing may be
    /// evicted for it.
    fn maybe_create_session(
        &self,
        parts: &[PartitionRequest],
        outcomes: &[PartitionOutcome],
        privileged: bool,
        uses_topic_ids: bool,
        now: u64,
    ) -> i32 {
        let mut inner = self.lock();
        let mut session = FetchSession::new(INVALID_SESSION_ID, uses_topic_ids);
        for (p, o) in parts.iter().zip(outcomes) {
            session.upsert(p.clone(), o.high_watermark, o.log_start_offset);
        }
        let size = session.len();
        if inner.sessions.len() >= self.max_entries
            && !inner.try_evict(privileged, size, now, self.eviction_ms)
        {
            tracing::debug!(privileged, size, "no fetch session slot");
            return INVALID_SESSION_ID;
        }
        let id = new_session_id(&inner.sessions);
        session.id = id;
        inner.sessions.insert(
            id,
            Entry {
                session: Arc::new(Mutex::new(session)),
                privileged,
                creation_ms: now,
                last_used_ms: now,
                cached_size: None,
            },
        );
        inner.last_used.insert((now, id));
        inner.touch(id, size, now, self.eviction_ms);
        tracing::debug!(session = id, privileged, size, "created fetch session");
        id
    }
}

/// A random positive id no session has.
fn new_session_id(sessions: &HashMap<i32, Entry>) -> i32 {
    loop {
        let b = *Uuid::new_v4().as_bytes();
        let id = (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff) as i32;
        if id != INVALID_SESSION_ID && !sessions.contains_key(&id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(topic: &str, partition: i32, offset: i64) -> PartitionRequest {
        PartitionRequest {
            key: PartitionKey {
                topic: TopicKey::Name(topic.into()),
                partition,
            },
            fetch_offset: offset,
            max_bytes: 1 << 20,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
        }
    }

    fn quiet(hw: i64) -> PartitionOutcome {
        PartitionOutcome {
            has_records: false,
            high_watermark: hw,
            log_start_offset: 0,
            error: false,
            diverging: false,
        }
    }

    /// A full fetch of `n` partitions of `topic` at `now`; the session id.
    fn create(cache: &FetchSessionCache, topic: &str, n: i32, privileged: bool, now: u64) -> i32 {
        let parts: Vec<_> = (0..n).map(|p| req(topic, p, 0)).collect();
        let ctx = cache.new_context(12, 0, INITIAL_EPOCH, privileged, parts, &[], now);
        assert!(matches!(ctx, FetchContext::Full { .. }));
        let outcomes = vec![quiet(0); n as usize];
        cache.complete(&ctx, &outcomes, now).session_id
    }

    /// An empty incremental request; the context's error if any.
    fn poll(cache: &FetchSessionCache, id: i32, epoch: i32, now: u64) -> Option<ResponseError> {
        match cache.new_context(12, id, epoch, false, vec![], &[], now) {
            FetchContext::SessionError(e) => Some(e),
            _ => None,
        }
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(-1), -1);
    }

    #[test]
    fn incremental_answers_only_changes_and_rotates() {
        let cache = FetchSessionCache::new(10, EVICTION_MS);
        let id = create(&cache, "t", 3, false, 0);
        assert_ne!(id, INVALID_SESSION_ID);
        assert_eq!(cache.total_partitions(), 3);
        let ctx = cache.new_context(12, id, 1, false, vec![], &[], 1);
        assert_eq!(ctx.partitions().len(), 3);
        let mut outcomes = vec![quiet(0); 3];
        outcomes[1] = PartitionOutcome {
            has_records: true,
            high_watermark: 5,
            ..quiet(0)
        };
        let done = cache.complete(&ctx, &outcomes, 1);
        assert_eq!(done.include, vec![false, true, false]);
        assert_eq!(done.session_id, id);
        // Partition 1 returned records: it moves to the back.
        let ctx = cache.new_context(12, id, 2, false, vec![req("t", 1, 5)], &[], 2);
        let order: Vec<_> = ctx.partitions().iter().map(|p| p.key.partition).collect();
        assert_eq!(order, vec![0, 2, 1]);
        assert_eq!(ctx.partitions()[2].fetch_offset, 5);
        // Nothing new: an empty answer; an error is always answered.
        let mut outcomes = vec![quiet(0), quiet(0), quiet(5)];
        outcomes[0].error = true;
        let done = cache.complete(&ctx, &outcomes, 2);
        assert_eq!(done.include, vec![true, false, false]);
        // The error cleared the cached high watermark: sent again after.
        let ctx = cache.new_context(12, id, 3, false, vec![], &[], 3);
        let done = cache.complete(&ctx, &[quiet(0), quiet(0), quiet(5)], 3);
        assert_eq!(done.include, vec![true, false, false]);
    }

    #[test]
    fn session_errors() {
        let cache = FetchSessionCache::new(10, EVICTION_MS);
        let id = create(&cache, "t", 1, false, 0);
        assert_eq!(
            poll(&cache, id.wrapping_add(1), 1, 0),
            Some(ResponseError::FetchSessionIdNotFound)
        );
        assert_eq!(
            poll(&cache, id, 2, 0),
            Some(ResponseError::InvalidFetchSessionEpoch)
        );
        assert_eq!(poll(&cache, id, 1, 0), None);
        // The same epoch twice (a retry) is refused.
        assert_eq!(
            poll(&cache, id, 1, 0),
            Some(ResponseError::InvalidFetchSessionEpoch)
        );
        match cache.new_context(13, id, 2, false, vec![], &[], 0) {
            FetchContext::SessionError(e) => assert_eq!(e, ResponseError::FetchSessionTopicIdError),
            other => panic!("{other:?}"),
        }
        // FINAL_EPOCH closes the session.
        let ctx = cache.new_context(12, id, FINAL_EPOCH, false, vec![], &[], 0);
        assert!(matches!(ctx, FetchContext::Sessionless(_)));
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.total_partitions(), 0);
    }

    #[test]
    fn forgetting_every_partition_closes_the_session() {
        let cache = FetchSessionCache::new(10, EVICTION_MS);
        let id = create(&cache, "t", 2, false, 0);
        let forget = [req("t", 0, 0).key, req("t", 1, 0).key];
        let ctx = cache.new_context(12, id, 1, false, vec![], &forget, 0);
        assert!(matches!(ctx, FetchContext::Sessionless(_)));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn duplicate_in_flight_request_gets_epoch_error() {
        let cache = FetchSessionCache::new(10, EVICTION_MS);
        let id = create(&cache, "t", 1, false, 0);
        let first = cache.new_context(12, id, 1, false, vec![], &[], 0);
        let second = cache.new_context(12, id, 2, false, vec![], &[], 0);
        let done = cache.complete(&first, &[quiet(0)], 0);
        assert_eq!(done.error, Some(ResponseError::InvalidFetchSessionEpoch));
        assert_eq!(done.session_id, id);
        assert_eq!(cache.complete(&second, &[quiet(0)], 0).error, None);
    }

    #[test]
    fn full_cache_refuses_young_consumer_sessions() {
        let cache = FetchSessionCache::new(2, 100);
        let a = create(&cache, "a", 1, false, 0);
        let b = create(&cache, "b", 5, false, 0);
        assert!(a > 0 && b > 0);
        // Young sessions may not be evicted by consumers, even larger ones.
        assert_eq!(create(&cache, "c", 9, false, 10), INVALID_SESSION_ID);
        assert_eq!(cache.len(), 2);
        // A follower evicts the smallest consumer session.
        let f = create(&cache, "f", 1, true, 20);
        assert_ne!(f, INVALID_SESSION_ID);
        assert_eq!(
            poll(&cache, a, 1, 20),
            Some(ResponseError::FetchSessionIdNotFound)
        );
        assert_eq!(poll(&cache, b, 1, 20), None);
        // The remaining consumer session is fair game for a follower too;
        // young follower sessions are not.
        let g = create(&cache, "g", 1, true, 30);
        assert_ne!(g, INVALID_SESSION_ID);
        assert_eq!(
            poll(&cache, b, 2, 30),
            Some(ResponseError::FetchSessionIdNotFound)
        );
        assert_eq!(create(&cache, "h", 50, true, 40), INVALID_SESSION_ID);
    }

    #[test]
    fn larger_sessions_evict_old_smaller_ones() {
        let cache = FetchSessionCache::new(2, 100);
        let a = create(&cache, "a", 2, false, 0);
        let b = create(&cache, "b", 3, false, 0);
        // Both used after the eviction time: now evictable by anyone.
        assert_eq!(poll(&cache, a, 1, 150), None);
        assert_eq!(poll(&cache, b, 1, 160), None);
        // Same size as the smallest: not more valuable.
        assert_eq!(create(&cache, "c", 2, false, 170), INVALID_SESSION_ID);
        let c = create(&cache, "c", 3, false, 180);
        assert_ne!(c, INVALID_SESSION_ID);
        assert_eq!(
            poll(&cache, a, 2, 180),
            Some(ResponseError::FetchSessionIdNotFound)
        );
    }

    #[test]
    fn stale_sessions_are_evicted_least_recently_used_first() {
        let cache = FetchSessionCache::new(2, 100);
        let a = create(&cache, "a", 9, false, 0);
        let b = create(&cache, "b", 9, false, 10);
        assert_eq!(poll(&cache, a, 1, 20), None);
        // b was used least recently and is idle for more than 100 ms.
        let c = create(&cache, "c", 1, false, 111);
        assert_ne!(c, INVALID_SESSION_ID);
        assert_eq!(
            poll(&cache, b, 1, 111),
            Some(ResponseError::FetchSessionIdNotFound)
        );
        assert_eq!(poll(&cache, a, 2, 111), None);
        assert_eq!(cache.total_partitions(), 10);
    }

    #[test]
    fn zero_slots_means_no_sessions() {
        let cache = FetchSessionCache::new(0, 100);
        assert_eq!(create(&cache, "a", 1, true, 0), INVALID_SESSION_ID);
    }

    #[test]
    fn old_versions_have_no_sessions() {
        let cache = FetchSessionCache::new(10, 100);
        let ctx = cache.new_context(6, 0, 0, false, vec![req("t", 0, 0)], &[], 0);
        assert!(matches!(ctx, FetchContext::Sessionless(_)));
    }
}
