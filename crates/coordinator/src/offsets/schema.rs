//! Record keys and values of `__consumer_offsets`, byte-compatible with
//! Kafka (group-coordinator `OffsetCommitKey`, `OffsetCommitValue`,
//! `GroupMetadataKey`, `GroupMetadataValue` message schemas), so Kafka
//! tooling can read what Sluice writes and Sluice can replay a topic Kafka
//! wrote.
//!
//! Layout: a key is an `int16` record type (historically the "key
//! version") followed by the key fields; a value is an `int16` schema
//! version followed by the fields of that version. A record with a null
//! value is a tombstone: it deletes the key.
//!
//! | key type | schema            | fields                     |
//! |----------|-------------------|----------------------------|
//! | 0, 1     | OffsetCommitKey   | group, topic, partition    |
//! | 2        | GroupMetadataKey  | group                      |
//! | 3..      | consumer/share/streams group records (KIP-848 and later), not used by classic groups: decoded as [`RecordKey::Other`] and skipped on replay |
//!
//! Versions written (as Kafka 4.x does, `MetadataVersion` >= 3.0): keys
//! type 1 and 2; `OffsetCommitValue` v3, or v1 when the commit carries an
//! explicit expire timestamp (OffsetCommit v2-v4 `retention_time_ms`);
//! `GroupMetadataValue` v3. Every version 0-4 of both values decodes,
//! including flexible v4 (compact strings, tagged fields skipped).

use crate::error::CoordinatorError;
use crate::offsets::wire::{Reader, Writer};

/// Key type of an offset commit written by Kafka before 0.10 (still read).
pub const OFFSET_COMMIT_KEY_V0: i16 = 0;
/// Key type of an offset commit (written).
pub const OFFSET_COMMIT_KEY: i16 = 1;
/// Key type of classic group metadata.
pub const GROUP_METADATA_KEY: i16 = 2;

/// `OffsetCommitValue` version written when there is no expire timestamp.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// `OffsetCommitValue` version written when an expire timestamp is set.
pub const OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE: i16 = 1;
/// Highest `OffsetCommitValue` version (first flexible one).
pub const OFFSET_COMMIT_VALUE_MAX_VERSION: i16 = 4;
/// `GroupMetadataValue` version written.
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;
/// Highest `GroupMetadataValue` version (first flexible one).
pub const GROUP_METADATA_VALUE_MAX_VERSION: i16 = 4;

/// Key of a committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffsetCommitKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

impl OffsetCommitKey {
    /// Encodes as key type 1.
    pub fn encode(&self) -> Result<Vec<u8>, CoordinatorError> {
        let mut w = Writer::new("OffsetCommitKey");
        w.i16(OFFSET_COMMIT_KEY);
        w.string(&self.group, false)?;
        w.string(&self.topic, false)?;
        w.i32(self.partition);
        Ok(w.buf)
    }
}

/// Key of a classic group's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupMetadataKey {
    pub group: String,
}

impl GroupMetadataKey {
    /// Encodes as key type 2.
    pub fn encode(&self) -> Result<Vec<u8>, CoordinatorError> {
        let mut w = Writer::new("GroupMetadataKey");
        w.i16(GROUP_METADATA_KEY);
        w.string(&self.group, false)?;
        Ok(w.buf)
    }
}

/// A decoded `__consumer_offsets` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    OffsetCommit(OffsetCommitKey),
    GroupMetadata(GroupMetadataKey),
    /// A record type this crate does not model (consumer-protocol,
    /// share or streams group records). Kafka's loader skips unknown types
    /// too; the payload is not parsed.
    Other(i16),
}

impl RecordKey {
    /// Decodes a key. Trailing bytes after the fields are ignored, as
    /// Kafka's readers do.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoordinatorError> {
        let mut r = Reader::new(bytes, "key");
        let kind = r.i16()?;
        match kind {
            OFFSET_COMMIT_KEY_V0 | OFFSET_COMMIT_KEY => {
                let mut r = Reader::new(&bytes[2..], "OffsetCommitKey");
                Ok(Self::OffsetCommit(OffsetCommitKey {
                    group: r.string(false)?,
                    topic: r.string(false)?,
                    partition: r.i32()?,
                }))
            }
            GROUP_METADATA_KEY => {
                let mut r = Reader::new(&bytes[2..], "GroupMetadataKey");
                Ok(Self::GroupMetadata(GroupMetadataKey {
                    group: r.string(false)?,
                }))
            }
            other if other >= 0 => Ok(Self::Other(other)),
            _ => Err(r.malformed("negative record type")),
        }
    }
}

/// Value of a committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub offset: i64,
    /// Leader epoch of the last consumed record; -1 when unknown (and for
    /// versions before 3).
    pub leader_epoch: i32,
    /// Client metadata string (non-nullable on disk; a null in the
    /// request is stored as "").
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only in version 1; -1 means none.
    pub expire_timestamp: i64,
}

impl OffsetCommitValue {
    /// The version Kafka 4.x writes for this value.
    pub fn version_to_write(&self) -> i16 {
        if self.expire_timestamp != -1 {
            OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE
        } else {
            OFFSET_COMMIT_VALUE_VERSION
        }
    }

    /// Encodes with [`Self::version_to_write`].
    pub fn encode(&self) -> Result<Vec<u8>, CoordinatorError> {
        self.encode_version(self.version_to_write())
    }

    /// Encodes at an explicit version 0-4. Fields the version lacks are
    /// dropped (they are all "ignorable" in Kafka's schema).
    pub fn encode_version(&self, version: i16) -> Result<Vec<u8>, CoordinatorError> {
        check_version(
            "OffsetCommitValue",
            version,
            OFFSET_COMMIT_VALUE_MAX_VERSION,
        )?;
        let flexible = version >= 4;
        let mut w = Writer::new("OffsetCommitValue");
        w.i16(version);
        w.i64(self.offset);
        if version >= 3 {
            w.i32(self.leader_epoch);
        }
        w.string(&self.metadata, flexible)?;
        w.i64(self.commit_timestamp);
        if version == 1 {
            w.i64(self.expire_timestamp);
        }
        if flexible {
            w.no_tagged_fields();
        }
        Ok(w.buf)
    }

    /// Decodes any version 0-4.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoordinatorError> {
        let mut r = Reader::new(bytes, "OffsetCommitValue");
        let version = r.i16()?;
        check_version(
            "OffsetCommitValue",
            version,
            OFFSET_COMMIT_VALUE_MAX_VERSION,
        )?;
        let flexible = version >= 4;
        let offset = r.i64()?;
        let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
        let metadata = r.string(flexible)?;
        let commit_timestamp = r.i64()?;
        let expire_timestamp = if version == 1 { r.i64()? } else { -1 };
        if flexible {
            r.skip_tagged_fields()?;
        }
        Ok(Self {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp,
            expire_timestamp,
        })
    }
}

/// One member in a classic group's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadata {
    pub member_id: String,
    /// Static membership id (KIP-345); version 3+.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Version 1+; decodes as 0 from version 0, the schema's default.
    pub rebalance_timeout: i32,
    pub session_timeout: i32,
    /// The member's metadata for the selected protocol.
    pub subscription: Vec<u8>,
    /// The assignment the leader gave this member.
    pub assignment: Vec<u8>,
}

/// Value of a classic group's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupMetadataValue {
    /// "" for a group without protocol type (Kafka writes "" for None).
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// Version 2+; -1 when absent.
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

impl GroupMetadataValue {
    /// Encodes at [`GROUP_METADATA_VALUE_VERSION`], as Kafka 4.x does.
    pub fn encode(&self) -> Result<Vec<u8>, CoordinatorError> {
        self.encode_version(GROUP_METADATA_VALUE_VERSION)
    }

    /// Encodes at an explicit version 0-4; fields the version lacks are
    /// dropped.
    pub fn encode_version(&self, version: i16) -> Result<Vec<u8>, CoordinatorError> {
        check_version(
            "GroupMetadataValue",
            version,
            GROUP_METADATA_VALUE_MAX_VERSION,
        )?;
        let flexible = version >= 4;
        let mut w = Writer::new("GroupMetadataValue");
        w.i16(version);
        w.string(&self.protocol_type, flexible)?;
        w.i32(self.generation);
        w.nullable_string(self.protocol.as_deref(), flexible)?;
        w.nullable_string(self.leader.as_deref(), flexible)?;
        if version >= 2 {
            w.i64(self.current_state_timestamp);
        }
        w.array_len(self.members.len(), flexible)?;
        for m in &self.members {
            w.string(&m.member_id, flexible)?;
            if version >= 3 {
                w.nullable_string(m.group_instance_id.as_deref(), flexible)?;
            }
            w.string(&m.client_id, flexible)?;
            w.string(&m.client_host, flexible)?;
            if version >= 1 {
                w.i32(m.rebalance_timeout);
            }
            w.i32(m.session_timeout);
            w.bytes(&m.subscription, flexible)?;
            w.bytes(&m.assignment, flexible)?;
            if flexible {
                w.no_tagged_fields();
            }
        }
        if flexible {
            w.no_tagged_fields();
        }
        Ok(w.buf)
    }

    /// Decodes any version 0-4.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoordinatorError> {
        let mut r = Reader::new(bytes, "GroupMetadataValue");
        let version = r.i16()?;
        check_version(
            "GroupMetadataValue",
            version,
            GROUP_METADATA_VALUE_MAX_VERSION,
        )?;
        let flexible = version >= 4;
        let protocol_type = r.string(flexible)?;
        let generation = r.i32()?;
        let protocol = r.nullable_string(flexible)?;
        let leader = r.nullable_string(flexible)?;
        let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
        let count = r.array_len(flexible)?;
        let mut members = Vec::with_capacity(count);
        for _ in 0..count {
            let member_id = r.string(flexible)?;
            let group_instance_id = if version >= 3 {
                r.nullable_string(flexible)?
            } else {
                None
            };
            let client_id = r.string(flexible)?;
            let client_host = r.string(flexible)?;
            let rebalance_timeout = if version >= 1 { r.i32()? } else { 0 };
            let session_timeout = r.i32()?;
            let subscription = r.bytes(flexible)?;
            let assignment = r.bytes(flexible)?;
            if flexible {
                r.skip_tagged_fields()?;
            }
            members.push(MemberMetadata {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            });
        }
        if flexible {
            r.skip_tagged_fields()?;
        }
        Ok(Self {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp,
            members,
        })
    }
}

fn check_version(record: &'static str, version: i16, max: i16) -> Result<(), CoordinatorError> {
    if (0..=max).contains(&version) {
        Ok(())
    } else {
        Err(CoordinatorError::UnsupportedRecordVersion { record, version })
    }
}

/// A record to append to `__consumer_offsets`: key bytes and value bytes,
/// `None` for a tombstone. This is what the coordinators hand to the
/// broker; the broker batches them into one record batch per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

impl Record {
    /// An offset commit.
    pub fn offset_commit(
        key: &OffsetCommitKey,
        value: &OffsetCommitValue,
    ) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: key.encode()?,
            value: Some(value.encode()?),
        })
    }

    /// Deletes a committed offset.
    pub fn offset_commit_tombstone(key: &OffsetCommitKey) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: key.encode()?,
            value: None,
        })
    }

    /// A classic group's metadata.
    pub fn group_metadata(
        group: &str,
        value: &GroupMetadataValue,
    ) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: GroupMetadataKey {
                group: group.to_owned(),
            }
            .encode()?,
            value: Some(value.encode()?),
        })
    }

    /// Deletes a classic group's metadata (DeleteGroups, or a dead group).
    pub fn group_metadata_tombstone(group: &str) -> Result<Self, CoordinatorError> {
        Ok(Self {
            key: GroupMetadataKey {
                group: group.to_owned(),
            }
            .encode()?,
            value: None,
        })
    }

    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
