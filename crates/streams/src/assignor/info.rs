//! The streams assignor's user data: [`SubscriptionInfo`] (what each member
//! tells the leader) and [`AssignmentInfo`] (what the leader hands back),
//! in our own versioned big-endian encoding modelled on Kafka's
//! `SubscriptionInfo` / `AssignmentInfo`.
//!
//! Both start with `version: i32` and `latest_supported_version: i32`, so a
//! newer member can tell an older leader what it understands. Tasks are
//! `(subtopology: i32, partition: i32)`; strings are `i16` length + UTF-8
//! (`-1` for none).
//!
//! ```text
//! SubscriptionInfo v1:
//!   version i32, latest_supported_version i32, process_id [16]u8,
//!   prev_active_tasks  i32 count, task*
//!   standby_tasks      i32 count, task*
//!   task_offset_sums   i32 count, (task, offset_sum i64)*
//!   num_threads i32, user_endpoint string?, error_code i32
//! AssignmentInfo v1:
//!   version i32, latest_supported_version i32,
//!   active_tasks       i32 count, task*   (one per assigned partition, same order)
//!   standby_tasks      i32 count, task*
//!   partitions_by_host i32 count, (host string, port i32, i32 count, (topic string, partition i32)*)*
//!   error_code i32
//! ```

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use sluice_client::TopicPartition;
use uuid::Uuid;

use crate::error::{Result, StreamsError};
use crate::task_id::TaskId;

/// The encoding version this library writes.
pub const LATEST_SUPPORTED_VERSION: i32 = 1;

/// The error code asking every instance of the application to shut down
/// (Kafka's `AssignorError.SHUTDOWN_REQUESTED`).
pub const SHUTDOWN_REQUESTED: i32 = 2;

/// Offset sum Kafka reports for a task the member runs as active right now
/// (`Task.LATEST_OFFSET`): its state is fully caught up.
pub const LATEST_OFFSET: i64 = -2;

/// A `host:port` where an instance serves interactive queries
/// (`application.server`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostInfo {
    /// Host name.
    pub host: String,
    /// Port.
    pub port: i32,
}

impl HostInfo {
    /// Parses `host:port`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || StreamsError::Config(format!("application.server {s:?} is not host:port"));
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        Ok(Self {
            host: host.to_string(),
            port: port.parse().map_err(|_| bad())?,
        })
    }
}

/// What one member (stream thread) tells the group leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionInfo {
    /// Encoding version.
    pub version: i32,
    /// Newest version the member understands.
    pub latest_supported_version: i32,
    /// The instance (Kafka's "client"): every thread of one `KafkaStreams`
    /// shares it; stable across restarts (kept in the state directory).
    pub process_id: Uuid,
    /// Tasks this thread ran as active in the previous generation.
    pub prev_active_tasks: Vec<TaskId>,
    /// Standby tasks this thread ran.
    pub standby_tasks: Vec<TaskId>,
    /// For every task with state on this instance: the sum of its
    /// changelog offsets ([`LATEST_OFFSET`] for running active tasks); the
    /// leader derives lags from them.
    pub task_offset_sums: BTreeMap<TaskId, i64>,
    /// `num.stream.threads` of the instance: its capacity.
    pub num_threads: i32,
    /// `application.server`, if set.
    pub user_endpoint: Option<HostInfo>,
    /// Non-zero asks the group to shut down (Kafka's `AssignorError`).
    pub error_code: i32,
}

impl SubscriptionInfo {
    /// A v1 subscription for `process_id` with nothing else.
    pub fn new(process_id: Uuid, num_threads: i32) -> Self {
        Self {
            version: LATEST_SUPPORTED_VERSION,
            latest_supported_version: LATEST_SUPPORTED_VERSION,
            process_id,
            prev_active_tasks: Vec::new(),
            standby_tasks: Vec::new(),
            task_offset_sums: BTreeMap::new(),
            num_threads,
            user_endpoint: None,
            error_code: 0,
        }
    }

    /// Encodes as described in the module docs.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i32(self.version);
        b.put_i32(self.latest_supported_version);
        b.put_slice(self.process_id.as_bytes());
        put_tasks(&mut b, &self.prev_active_tasks);
        put_tasks(&mut b, &self.standby_tasks);
        b.put_i32(len_i32(self.task_offset_sums.len()));
        for (t, sum) in &self.task_offset_sums {
            put_task(&mut b, *t);
            b.put_i64(*sum);
        }
        b.put_i32(self.num_threads);
        match &self.user_endpoint {
            Some(h) => {
                put_str(&mut b, Some(&h.host));
                b.put_i32(h.port);
            }
            None => put_str(&mut b, None),
        }
        b.put_i32(self.error_code);
        b.freeze()
    }

    /// Decodes [`encode`](Self::encode)'s output; versions above ours are
    /// read as far as we understand them (the v1 fields come first).
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data, "subscription info");
        let version = r.i32()?;
        if version < 1 {
            return Err(r.bad(&format!("unknown version {version}")));
        }
        let latest_supported_version = r.i32()?;
        let mut id = [0u8; 16];
        r.need(16)?;
        r.buf.copy_to_slice(&mut id);
        let prev_active_tasks = r.tasks()?;
        let standby_tasks = r.tasks()?;
        let n = r.count()?;
        let mut task_offset_sums = BTreeMap::new();
        for _ in 0..n {
            let t = r.task()?;
            task_offset_sums.insert(t, r.i64()?);
        }
        let num_threads = r.i32()?;
        let user_endpoint = match r.string()? {
            Some(host) => Some(HostInfo {
                host,
                port: r.i32()?,
            }),
            None => None,
        };
        let error_code = r.i32()?;
        Ok(Self {
            version,
            latest_supported_version,
            process_id: Uuid::from_bytes(id),
            prev_active_tasks,
            standby_tasks,
            task_offset_sums,
            num_threads,
            user_endpoint,
            error_code,
        })
    }
}

/// What the leader hands one member along with its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssignmentInfo {
    /// Encoding version.
    pub version: i32,
    /// Newest version the leader understands.
    pub latest_supported_version: i32,
    /// One task per assigned partition, in the assignment's partition order.
    pub active_tasks: Vec<TaskId>,
    /// Standby tasks of this member.
    pub standby_tasks: Vec<TaskId>,
    /// Which instance endpoint owns which partitions (only instances that
    /// set `application.server`).
    pub partitions_by_host: BTreeMap<HostInfo, Vec<TopicPartition>>,
    /// Non-zero asks the member to shut down.
    pub error_code: i32,
}

impl AssignmentInfo {
    /// Encodes as described in the module docs.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i32(self.version.max(1));
        b.put_i32(self.latest_supported_version.max(1));
        put_tasks(&mut b, &self.active_tasks);
        put_tasks(&mut b, &self.standby_tasks);
        b.put_i32(len_i32(self.partitions_by_host.len()));
        for (h, tps) in &self.partitions_by_host {
            put_str(&mut b, Some(&h.host));
            b.put_i32(h.port);
            b.put_i32(len_i32(tps.len()));
            for tp in tps {
                put_str(&mut b, Some(&tp.topic));
                b.put_i32(tp.partition);
            }
        }
        b.put_i32(self.error_code);
        b.freeze()
    }

    /// Decodes [`encode`](Self::encode)'s output.
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data, "assignment info");
        let version = r.i32()?;
        if version < 1 {
            return Err(r.bad(&format!("unknown version {version}")));
        }
        let latest_supported_version = r.i32()?;
        let active_tasks = r.tasks()?;
        let standby_tasks = r.tasks()?;
        let hosts = r.count()?;
        let mut partitions_by_host = BTreeMap::new();
        for _ in 0..hosts {
            let host = r.string()?.unwrap_or_default();
            let port = r.i32()?;
            let n = r.count()?;
            let mut tps = Vec::with_capacity(n);
            for _ in 0..n {
                let topic = r.string()?.unwrap_or_default();
                tps.push(TopicPartition::new(&topic, r.i32()?));
            }
            partitions_by_host.insert(HostInfo { host, port }, tps);
        }
        let error_code = r.i32()?;
        Ok(Self {
            version,
            latest_supported_version,
            active_tasks,
            standby_tasks,
            partitions_by_host,
            error_code,
        })
    }

    /// Pairs `partitions` (the assignment, in order) with
    /// [`active_tasks`](Self::active_tasks): task → its partitions.
    pub fn tasks_to_partitions(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TaskId, Vec<TopicPartition>>> {
        if partitions.len() != self.active_tasks.len() {
            return Err(StreamsError::Assignment(format!(
                "{} partitions assigned but {} active task ids",
                partitions.len(),
                self.active_tasks.len()
            )));
        }
        let mut out: BTreeMap<TaskId, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, t) in partitions.iter().zip(&self.active_tasks) {
            out.entry(*t).or_default().push(tp.clone());
        }
        Ok(out)
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn put_task(b: &mut BytesMut, t: TaskId) {
    b.put_i32(i32::try_from(t.subtopology).unwrap_or(i32::MAX));
    b.put_i32(t.partition);
}

fn put_tasks(b: &mut BytesMut, tasks: &[TaskId]) {
    b.put_i32(len_i32(tasks.len()));
    for t in tasks {
        put_task(b, *t);
    }
}

fn put_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            b.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
            b.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
        }
        None => b.put_i16(-1),
    }
}

/// A bounds-checked big-endian reader.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    fn bad(&self, why: &str) -> StreamsError {
        StreamsError::Assignment(format!("malformed {}: {why}", self.what))
    }

    fn need(&self, n: usize) -> Result<()> {
        if self.buf.remaining() < n {
            return Err(self.bad("truncated"));
        }
        Ok(())
    }

    fn i32(&mut self) -> Result<i32> {
        self.need(4)?;
        Ok(self.buf.get_i32())
    }

    fn i64(&mut self) -> Result<i64> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    fn count(&mut self) -> Result<usize> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| self.bad("negative count"))?;
        // Every element is at least 4 bytes: reject absurd counts early.
        if n > self.buf.remaining() / 4 + 1 {
            return Err(self.bad("count larger than the data"));
        }
        Ok(n)
    }

    fn task(&mut self) -> Result<TaskId> {
        let sub = self.i32()?;
        let partition = self.i32()?;
        let sub = u32::try_from(sub).map_err(|_| self.bad("negative sub-topology"))?;
        Ok(TaskId::new(sub, partition))
    }

    fn tasks(&mut self) -> Result<Vec<TaskId>> {
        let n = self.count()?;
        (0..n).map(|_| self.task()).collect()
    }

    fn string(&mut self) -> Result<Option<String>> {
        self.need(2)?;
        let n = self.buf.get_i16();
        if n < 0 {
            return Ok(None);
        }
        let n = n as usize;
        self.need(n)?;
        let s = std::str::from_utf8(&self.buf[..n])
            .map_err(|_| self.bad("string is not UTF-8"))?
            .to_string();
        self.buf.advance(n);
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_info_round_trips() {
        let mut s = SubscriptionInfo::new(Uuid::new_v4(), 3);
        s.prev_active_tasks = vec![TaskId::new(0, 1), TaskId::new(1, 0)];
        s.standby_tasks = vec![TaskId::new(0, 2)];
        s.task_offset_sums.insert(TaskId::new(0, 1), LATEST_OFFSET);
        s.task_offset_sums.insert(TaskId::new(0, 2), 1234);
        s.user_endpoint = Some(HostInfo::parse("host-a:8080").expect("endpoint"));
        let decoded = SubscriptionInfo::decode(&s.encode()).expect("decode");
        assert_eq!(decoded, s);
        // Without an endpoint too.
        let plain = SubscriptionInfo::new(Uuid::new_v4(), 1);
        assert_eq!(
            SubscriptionInfo::decode(&plain.encode()).expect("decode"),
            plain
        );
    }

    #[test]
    fn assignment_info_round_trips() {
        let mut a = AssignmentInfo {
            version: 1,
            latest_supported_version: 1,
            active_tasks: vec![TaskId::new(0, 0), TaskId::new(0, 0), TaskId::new(1, 3)],
            standby_tasks: vec![TaskId::new(2, 2)],
            ..AssignmentInfo::default()
        };
        a.partitions_by_host.insert(
            HostInfo::parse("h:1").expect("endpoint"),
            vec![TopicPartition::new("t", 0), TopicPartition::new("u", 3)],
        );
        assert_eq!(AssignmentInfo::decode(&a.encode()).expect("decode"), a);
        let parts = vec![
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
            TopicPartition::new("c", 3),
        ];
        let by_task = a.tasks_to_partitions(&parts).expect("pairs");
        assert_eq!(by_task[&TaskId::new(0, 0)].len(), 2);
        assert_eq!(
            by_task[&TaskId::new(1, 3)],
            vec![TopicPartition::new("c", 3)]
        );
        assert!(a.tasks_to_partitions(&parts[..1]).is_err());
    }

    #[test]
    fn truncated_and_garbage_are_errors() {
        let s = SubscriptionInfo::new(Uuid::new_v4(), 2).encode();
        for cut in 0..s.len() {
            assert!(SubscriptionInfo::decode(&s[..cut]).is_err(), "cut at {cut}");
        }
        assert!(AssignmentInfo::decode(&[0, 0, 0, 0]).is_err());
        assert!(AssignmentInfo::decode(&[0xff; 12]).is_err());
    }
}
