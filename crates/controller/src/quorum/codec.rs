//! The binary encoding of the quorum's RPCs and of the Raft values kept in
//! files (`quorum-state`, `<stem>.quorum`): big-endian integers, a presence
//! byte before optional values, `u32` counts and lengths. Decoding is for
//! bytes from the network: every count and length is checked against the
//! bytes left before anything is allocated (design 007's hostile-client
//! rule), and anything malformed is an error, never a panic.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{
    BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership,
    Vote,
};

use super::{Entry, MetadataChange, NodeId};
use crate::records::MetadataRecord;

/// A decoding failure: what was being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed quorum message: {0}")]
pub struct CodecError(pub String);

type R<T> = Result<T, CodecError>;

fn bad(what: impl Into<String>) -> CodecError {
    CodecError(what.into())
}

/// Appends values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    /// Length-prefixed bytes (lengths over `u32` cannot be framed anyway:
    /// frames are bounded far below).
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(b);
    }
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    pub fn log_id(&mut self, id: &LogId<NodeId>) {
        self.u64(id.leader_id.term);
        self.u64(id.index);
    }
    pub fn opt_log_id(&mut self, id: &Option<LogId<NodeId>>) {
        match id {
            Some(id) => {
                self.u8(1);
                self.log_id(id);
            }
            None => self.u8(0),
        }
    }
    pub fn vote(&mut self, v: &Vote<NodeId>) {
        self.u64(v.leader_id.term);
        match v.leader_id.voted_for {
            Some(n) => {
                self.u8(1);
                self.u64(n);
            }
            None => self.u8(0),
        }
        self.bool(v.committed);
    }
    pub fn membership(&mut self, m: &Membership<NodeId, BasicNode>) {
        let configs = m.get_joint_config();
        self.count(configs.len());
        for c in configs {
            self.count(c.len());
            for id in c {
                self.u64(*id);
            }
        }
        let nodes: Vec<_> = m.nodes().collect();
        self.count(nodes.len());
        for (id, n) in nodes {
            self.u64(*id);
            self.str(&n.addr);
        }
    }
    pub fn stored_membership(&mut self, m: &StoredMembership<NodeId, BasicNode>) {
        self.opt_log_id(m.log_id());
        self.membership(m.membership());
    }
    pub fn records(&mut self, records: &[MetadataRecord]) {
        self.count(records.len());
        for r in records {
            self.bytes(&r.encode());
        }
    }
    pub fn entry(&mut self, e: &Entry) {
        self.log_id(&e.log_id);
        match &e.payload {
            EntryPayload::Blank => self.u8(0),
            EntryPayload::Normal(c) => {
                self.u8(1);
                self.records(&c.records);
            }
            EntryPayload::Membership(m) => {
                self.u8(2);
                self.membership(m);
            }
        }
    }
    pub fn snapshot_meta(&mut self, m: &SnapshotMeta<NodeId, BasicNode>) {
        self.opt_log_id(&m.last_log_id);
        self.stored_membership(&m.last_membership);
        self.str(&m.snapshot_id);
    }
}

/// Reads values from a buffer, checking every length against what is left.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Fails unless everything was read.
    pub fn finish(&self) -> R<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(bad(format!("{} bytes after the end", self.buf.len())))
        }
    }
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.buf.len() {
            return Err(bad(format!("needs {n} bytes, {} left", self.buf.len())));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    pub fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> R<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    pub fn i64(&mut self) -> R<i64> {
        Ok(self.u64()? as i64)
    }
    pub fn bool(&mut self) -> R<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(bad(format!("boolean byte {b}"))),
        }
    }
    pub fn bytes(&mut self) -> R<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn string(&mut self) -> R<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| bad("string is not UTF-8"))
    }
    /// A count of items each at least `min_size` bytes long: refused if
    /// the bytes left cannot hold them, so no allocation follows a lie.
    pub fn count(&mut self, min_size: usize) -> R<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() {
            return Err(bad(format!(
                "count {n} cannot fit in {} bytes",
                self.buf.len()
            )));
        }
        Ok(n)
    }

    pub fn log_id(&mut self) -> R<LogId<NodeId>> {
        let term = self.u64()?;
        let index = self.u64()?;
        Ok(LogId::new(CommittedLeaderId::new(term, 0), index))
    }
    pub fn opt_log_id(&mut self) -> R<Option<LogId<NodeId>>> {
        Ok(if self.bool()? {
            Some(self.log_id()?)
        } else {
            None
        })
    }
    pub fn vote(&mut self) -> R<Vote<NodeId>> {
        let term = self.u64()?;
        let voted_for = if self.bool()? {
            Some(self.u64()?)
        } else {
            None
        };
        let committed = self.bool()?;
        let mut v = Vote::default();
        v.leader_id.term = term;
        v.leader_id.voted_for = voted_for;
        v.committed = committed;
        Ok(v)
    }
    pub fn membership(&mut self) -> R<Membership<NodeId, BasicNode>> {
        let n = self.count(4)?;
        let mut configs = Vec::with_capacity(n);
        for _ in 0..n {
            let m = self.count(8)?;
            let mut set = BTreeSet::new();
            for _ in 0..m {
                set.insert(self.u64()?);
            }
            configs.push(set);
        }
        let n = self.count(12)?;
        let mut nodes = BTreeMap::new();
        for _ in 0..n {
            let id = self.u64()?;
            nodes.insert(id, BasicNode::new(self.string()?));
        }
        for id in configs.iter().flatten() {
            if !nodes.contains_key(id) {
                return Err(bad(format!("voter {id} has no address")));
            }
        }
        Ok(Membership::new(configs, nodes))
    }
    pub fn stored_membership(&mut self) -> R<StoredMembership<NodeId, BasicNode>> {
        let log_id = self.opt_log_id()?;
        Ok(StoredMembership::new(log_id, self.membership()?))
    }
    pub fn records(&mut self) -> R<Vec<MetadataRecord>> {
        let n = self.count(4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.bytes()?;
            out.push(MetadataRecord::decode(b).map_err(|e| bad(e.to_string()))?);
        }
        Ok(out)
    }
    pub fn entry(&mut self) -> R<Entry> {
        let log_id = self.log_id()?;
        let payload = match self.u8()? {
            0 => EntryPayload::Blank,
            1 => EntryPayload::Normal(MetadataChange {
                records: self.records()?,
            }),
            2 => EntryPayload::Membership(self.membership()?),
            k => return Err(bad(format!("entry kind {k}"))),
        };
        Ok(Entry { log_id, payload })
    }
    pub fn snapshot_meta(&mut self) -> R<SnapshotMeta<NodeId, BasicNode>> {
        Ok(SnapshotMeta {
            last_log_id: self.opt_log_id()?,
            last_membership: self.stored_membership()?,
            snapshot_id: self.string()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn members() -> Membership<NodeId, BasicNode> {
        let nodes: BTreeMap<NodeId, BasicNode> = (1..=3)
            .map(|i| (i, BasicNode::new(format!("127.0.0.1:{}", 9000 + i))))
            .collect();
        Membership::new(vec![nodes.keys().copied().collect()], nodes)
    }

    #[test]
    fn entries_roundtrip() {
        let id = LogId::new(CommittedLeaderId::new(7, 0), 42);
        let entries = [
            Entry {
                log_id: id,
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: id,
                payload: EntryPayload::Normal(MetadataChange {
                    records: vec![MetadataRecord::Topic {
                        name: "t".into(),
                        topic_id: Uuid::new_v4(),
                    }],
                }),
            },
            Entry {
                log_id: id,
                payload: EntryPayload::Membership(members()),
            },
        ];
        for e in &entries {
            let mut w = Writer::default();
            w.entry(e);
            let mut r = Reader::new(&w.buf);
            let back = r.entry().expect("decodes");
            r.finish().expect("all read");
            assert_eq!(format!("{back:?}"), format!("{e:?}"));
        }
    }

    #[test]
    fn lying_counts_and_truncation_are_refused() {
        // A membership claiming 2^32-1 configs in 4 bytes.
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(r.membership().is_err());
        // Every prefix of a valid entry fails cleanly.
        let mut w = Writer::default();
        w.entry(&Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 0), 1),
            payload: EntryPayload::Membership(members()),
        });
        for n in 0..w.buf.len() {
            assert!(Reader::new(&w.buf[..n]).entry().is_err(), "prefix {n}");
        }
    }
}
