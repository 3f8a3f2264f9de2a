//! Control records: the transaction markers a transaction coordinator
//! writes to every partition of a transaction (Kafka's
//! `EndTransactionMarker` and `ControlRecordType`).
//!
//! A marker is a batch of its own with the control (0x20) and
//! transactional (0x10) attribute bits, the producer id and epoch of the
//! transaction, base sequence -1, and exactly one record:
//!
//! | part  | fields (big-endian) |
//! |-------|---------------------|
//! | key   | version int16 (0), type int16 (0 = ABORT, 1 = COMMIT) |
//! | value | version int16 (0), coordinator epoch int32 |
//!
//! Readers accept any key or value version ≥ 0 and read the fields of
//! version 0 (Kafka logs newer versions and parses them as version 0);
//! negative versions, short fields and other control types are errors for
//! an end-transaction marker.

use crate::error::{ProtocolError, Result};
use crate::record::codec::{assemble, encode_record, BatchFields, ProducerInfo, Record};
use crate::record::Compression;

/// Control type of an abort marker.
pub const ABORT: i16 = 0;
/// Control type of a commit marker.
pub const COMMIT: i16 = 1;
/// Attribute bit of transactional batches.
pub const TRANSACTIONAL_FLAG: i16 = 0x10;
/// Attribute bit of control batches.
pub const CONTROL_FLAG: i16 = 0x20;

/// A COMMIT or ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub commit: bool,
    /// Epoch of the transaction coordinator (its `__transaction_state`
    /// partition's leader epoch) that wrote the marker.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// The control record key: version 0, then the type.
    pub fn key(&self) -> [u8; 4] {
        let t = if self.commit { COMMIT } else { ABORT };
        let mut k = [0u8; 4];
        k[2..].copy_from_slice(&t.to_be_bytes());
        k
    }

    /// The record value: version 0, then the coordinator epoch.
    pub fn value(&self) -> [u8; 6] {
        let mut v = [0u8; 6];
        v[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        v
    }

    /// Reads a marker from its control record's key and value (Kafka's
    /// `EndTransactionMarker.deserialize`).
    pub fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self> {
        let invalid = |m: String| Err(ProtocolError::InvalidRecord(m));
        let commit = match control_type(key)? {
            ABORT => false,
            COMMIT => true,
            t => {
                return invalid(format!(
                    "Invalid control record type {t} for end transaction marker"
                ))
            }
        };
        let Some(v) = value.filter(|v| v.len() >= 6) else {
            return invalid(format!(
                "Invalid value size found for end transaction marker. Must have at least 6 bytes, but found only {}",
                value.map_or(0, <[u8]>::len)
            ));
        };
        let version = i16::from_be_bytes([v[0], v[1]]);
        if version < 0 {
            return invalid(format!(
                "Invalid version found for end transaction marker: {version}. May indicate data corruption"
            ));
        }
        Ok(Self {
            commit,
            coordinator_epoch: i32::from_be_bytes([v[2], v[3], v[4], v[5]]),
        })
    }

    /// The whole marker batch (Kafka's `MemoryRecords.withEndTransactionMarker`):
    /// offset 0, no partition leader epoch (the log stamps both),
    /// CreateTime `timestamp`, uncompressed.
    pub fn batch(&self, producer_id: i64, producer_epoch: i16, timestamp: i64) -> Result<Vec<u8>> {
        let mut payload = Vec::with_capacity(24);
        let record = Record::new(
            Some(self.key().to_vec()),
            Some(self.value().to_vec()),
            timestamp,
        );
        encode_record(&mut payload, &record, 0, 0);
        let fields = BatchFields {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: TRANSACTIONAL_FLAG | CONTROL_FLAG,
            last_offset_delta: 0,
            base_timestamp: timestamp,
            max_timestamp: timestamp,
            producer: ProducerInfo {
                producer_id,
                producer_epoch,
                base_sequence: -1,
            },
            records_count: 1,
        };
        assemble(&fields, Compression::None, &payload)
    }
}

/// The type of a control record from its key (Kafka's
/// `ControlRecordType.parseTypeId`): at least 4 bytes, version ≥ 0.
pub fn control_type(key: Option<&[u8]>) -> Result<i16> {
    let Some(k) = key.filter(|k| k.len() >= 4) else {
        return Err(ProtocolError::InvalidRecord(format!(
            "Invalid value size found for end control record key. Must have at least 4 bytes, but found only {}",
            key.map_or(0, <[u8]>::len)
        )));
    };
    let version = i16::from_be_bytes([k[0], k[1]]);
    if version < 0 {
        return Err(ProtocolError::InvalidRecord(format!(
            "Invalid version found for control record: {version}. May indicate data corruption"
        )));
    }
    Ok(i16::from_be_bytes([k[2], k[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::batch::validate_crc;
    use crate::record::codec::decode_batch;

    #[test]
    fn marker_batch_has_kafkas_layout() {
        let m = EndTxnMarker {
            commit: false,
            coordinator_epoch: 7,
        };
        let b = m.batch(42, 3, 1_700_000_000_000).expect("batch");
        let h = validate_crc(&b).expect("crc");
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(h.attributes, 0x30);
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (42, 3, -1)
        );
        assert_eq!(
            (h.base_offset, h.last_offset_delta, h.records_count),
            (0, 0, 1)
        );
        assert_eq!(h.partition_leader_epoch, -1);
        assert_eq!(
            (h.base_timestamp, h.max_timestamp),
            (1_700_000_000_000, 1_700_000_000_000)
        );
        let d = decode_batch(&b, 1 << 20).expect("decode");
        let r = &d.records[0].record;
        assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
        assert_eq!(r.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
        assert_eq!(r.timestamp, 1_700_000_000_000);
        // Kafka's record: attributes 0, deltas 0, key 4 bytes, value 6
        // bytes, no headers: length 16 in a 17-byte frame.
        assert_eq!(b.len(), 61 + 17);
        assert_eq!(
            EndTxnMarker::parse(r.key.as_deref(), r.value.as_deref()).expect("parse"),
            m
        );
        let c = EndTxnMarker {
            commit: true,
            coordinator_epoch: -1,
        };
        assert_eq!(
            EndTxnMarker::parse(Some(&c.key()), Some(&c.value())).expect("parse"),
            c
        );
    }

    #[test]
    fn bad_markers_are_refused() {
        let value = [0u8, 0, 0, 0, 0, 1];
        assert!(EndTxnMarker::parse(Some(&[0, 0, 0]), Some(&value)).is_err());
        assert!(EndTxnMarker::parse(None, Some(&value)).is_err());
        assert!(EndTxnMarker::parse(Some(&[0xff, 0xff, 0, 1]), Some(&value)).is_err());
        // LEADER_CHANGE (2) is a control record but not a marker.
        assert!(EndTxnMarker::parse(Some(&[0, 0, 0, 2]), Some(&value)).is_err());
        assert!(EndTxnMarker::parse(Some(&[0, 0, 0, 1]), Some(&value[..5])).is_err());
        assert!(EndTxnMarker::parse(Some(&[0, 0, 0, 1]), Some(&[0xff, 0, 0, 0, 0, 1])).is_err());
        // Newer versions are read as version 0.
        let m =
            EndTxnMarker::parse(Some(&[0, 3, 0, 1]), Some(&[0, 1, 0, 0, 0, 9, 99])).expect("v1");
        assert_eq!(
            m,
            EndTxnMarker {
                commit: true,
                coordinator_epoch: 9
            }
        );
    }
}
