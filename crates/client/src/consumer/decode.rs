//! Decoding one partition's fetched record bytes into [`ConsumerRecord`]s
//! (run in the fetch task, so the records of one answer are decoded while
//! `poll` hands out those of another).
//!
//! Decoding follows the Java consumer: records before the fetch offset (a
//! compressed batch may start earlier) are skipped, control batches are
//! never returned, and under `read_committed` the records of aborted
//! transactions are dropped using the response's aborted-transaction list.
//! A malformed or corrupt batch ends the records: the ones before it are
//! handed out first, then its error, and the next fetch starts at it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use proto_kafka::messages::fetch_response::AbortedTransaction;
use sluice_protocol::record::batch::{validate_crc, BatchHeader, HEADER_LEN};
use sluice_protocol::record::codec::{decode_batch, for_each_record};
use sluice_protocol::record::{BatchIter, Compression, TimestampType};

use crate::admin::IsolationLevel;
use crate::consumer::ConsumerRecord;
use crate::error::{ClientError, Result};
use crate::TopicPartition;

/// Largest decompressed batch accepted (a guard against decompression
/// bombs; far above any `max.message.bytes`).
const MAX_DECOMPRESSED: usize = 1 << 30;
/// Control record type of an abort marker.
const ABORT_MARKER: i16 = 0;

/// One partition's visible records from one fetch answer, and the error of
/// the bad batch that ended them, if any.
#[derive(Debug, Default)]
pub(crate) struct FetchedRecords {
    records: VecDeque<ConsumerRecord>,
    error: Option<ClientError>,
}

impl FetchedRecords {
    /// Decodes `records` (fetched from `fetch_offset`). Returns the records
    /// and the offset the next fetch starts from: past the last complete
    /// batch, or at the first bad one.
    pub(crate) fn decode(
        tp: &TopicPartition,
        fetch_offset: i64,
        records: Option<&Bytes>,
        aborted: &[AbortedTransaction],
        isolation: IsolationLevel,
        check_crcs: bool,
    ) -> (Self, i64) {
        let read_committed = isolation == IsolationLevel::ReadCommitted;
        let mut decoder = Decoder {
            topic: Arc::from(tp.topic.as_str()),
            partition: tp.partition,
            fetch_offset,
            read_committed,
            check_crcs,
            pending_aborts: if read_committed {
                aborted
                    .iter()
                    .map(|a| Reverse((a.first_offset, a.producer_id.0)))
                    .collect()
            } else {
                BinaryHeap::new()
            },
            aborted_producers: HashSet::new(),
            out: VecDeque::new(),
        };
        let mut next_offset = fetch_offset;
        let mut error = None;
        if let Some(bytes) = records {
            for item in BatchIter::new(bytes) {
                let decoded =
                    item.map_err(|e| decoder.bad(e.to_string()))
                        .and_then(|(_, header, raw)| {
                            decoder.batch(bytes, &header, raw).map(|()| header)
                        });
                match decoded {
                    Ok(header) => {
                        if header.last_offset() >= fetch_offset {
                            next_offset = next_offset.max(header.last_offset() + 1);
                        }
                    }
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
        }
        let fetched = Self {
            records: decoder.out,
            error,
        };
        (fetched, next_offset)
    }

    /// Records left.
    pub(crate) fn remaining(&self) -> usize {
        self.records.len()
    }

    /// Nothing left to take and no error to report.
    pub(crate) fn is_done(&self) -> bool {
        self.records.is_empty() && self.error.is_none()
    }

    /// The next visible record; `Ok(None)` when none is left, or the error
    /// of a bad batch once the records before it were taken.
    pub(crate) fn next_record(&mut self) -> Result<Option<ConsumerRecord>> {
        if let Some(r) = self.records.pop_front() {
            return Ok(Some(r));
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

/// The state of decoding one partition's batches in order.
struct Decoder {
    topic: Arc<str>,
    partition: i32,
    fetch_offset: i64,
    read_committed: bool,
    check_crcs: bool,
    /// Aborted transactions not reached yet, by first offset.
    pending_aborts: BinaryHeap<Reverse<(i64, i64)>>,
    /// Producers inside an aborted transaction at the current batch.
    aborted_producers: HashSet<i64>,
    out: VecDeque<ConsumerRecord>,
}

impl Decoder {
    fn bad(&self, what: String) -> ClientError {
        ClientError::Protocol(format!(
            "{}-{} at {}: {what}",
            self.topic, self.partition, self.fetch_offset
        ))
    }

    /// Decodes one batch (`raw`, a slice of `bytes`) into `out`; none of a
    /// bad batch's records is kept. (`BatchIter` yields only magic 2
    /// headers: `BatchHeader::parse` refuses the others.)
    fn batch(&mut self, bytes: &Bytes, header: &BatchHeader, raw: &[u8]) -> Result<()> {
        if header.last_offset() < self.fetch_offset {
            return Ok(());
        }
        if self.check_crcs {
            validate_crc(raw).map_err(|e| self.bad(e.to_string()))?;
        }
        if self.read_committed && header.is_transactional() {
            while let Some(Reverse((first, pid))) = self.pending_aborts.peek().copied() {
                if first > header.last_offset() {
                    break;
                }
                self.pending_aborts.pop();
                self.aborted_producers.insert(pid);
            }
        }
        if header.is_control() {
            let decoded =
                decode_batch(raw, MAX_DECOMPRESSED).map_err(|e| self.bad(e.to_string()))?;
            if self.read_committed {
                let abort = decoded
                    .records
                    .first()
                    .and_then(|r| r.record.key.as_deref())
                    .is_some_and(|k| {
                        k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == ABORT_MARKER
                    });
                if abort {
                    self.aborted_producers.remove(&header.producer_id);
                }
            }
            return Ok(());
        }
        if self.read_committed
            && header.is_transactional()
            && self.aborted_producers.contains(&header.producer_id)
        {
            return Ok(());
        }
        // Keys, values and header values are slices of the response frame
        // (of the decompressed payload for a compressed batch): no copy.
        let body = raw
            .get(HEADER_LEN..)
            .ok_or_else(|| self.bad("record batch shorter than its header".into()))?;
        let payload = match header.compression().map_err(|e| self.bad(e.to_string()))? {
            Compression::None => bytes.slice_ref(body),
            c => Bytes::from(
                c.decompress(body, MAX_DECOMPRESSED)
                    .map_err(|e| self.bad(e.to_string()))?,
            ),
        };
        let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
        let slice = |b: &[u8]| payload.slice_ref(b);
        let (topic, partition, fetch_offset) = (&self.topic, self.partition, self.fetch_offset);
        let before = self.out.len();
        let out = &mut self.out;
        let result = for_each_record(header, &payload, |r| {
            if r.offset < fetch_offset {
                return;
            }
            out.push_back(ConsumerRecord {
                topic: Arc::clone(topic),
                partition,
                offset: r.offset,
                timestamp: r.timestamp,
                log_append_time: log_append,
                leader_epoch: header.partition_leader_epoch,
                key: r.key.map(slice),
                value: r.value.map(slice),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.map(slice)))
                    .collect(),
            });
        });
        if let Err(e) = result {
            self.out.truncate(before);
            return Err(self.bad(e.to_string()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::record::codec::{assemble, encode_record, BatchFields, ProducerInfo};
    use sluice_protocol::record::{BatchBuilder, Compression, Record};

    fn batch(base: i64, n: usize, compression: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(compression, 1_000);
        for i in 0..n {
            b.push(Record::new(
                Some(format!("k{i}").into_bytes()),
                Some(format!("v{}", base + i as i64).into_bytes()),
                1_000 + i as i64,
            ));
        }
        b.build(base).unwrap_or_else(|e| panic!("build: {e}"))
    }

    /// Scans and takes every record; returns the offsets taken, the next
    /// fetch offset and the error that ended the records, if any.
    fn take_all(
        bytes: Vec<u8>,
        fetch_offset: i64,
        aborted: &[AbortedTransaction],
        isolation: IsolationLevel,
    ) -> (Vec<ConsumerRecord>, i64, Option<ClientError>) {
        let tp = TopicPartition::new("t", 0);
        let bytes = Bytes::from(bytes);
        let (mut fetched, next) =
            FetchedRecords::decode(&tp, fetch_offset, Some(&bytes), aborted, isolation, true);
        let mut out = Vec::new();
        loop {
            match fetched.next_record() {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, next, None),
                Err(e) => return (out, next, Some(e)),
            }
        }
    }

    #[test]
    fn skips_records_before_the_fetch_offset_and_moves_past_the_last_batch() {
        let mut bytes = batch(0, 5, Compression::Gzip);
        bytes.extend(batch(5, 5, Compression::None));
        let tp = TopicPartition::new("t", 0);
        let shared = Bytes::from(bytes.clone());
        let (fetched, _) = FetchedRecords::decode(
            &tp,
            3,
            Some(&shared),
            &[],
            IsolationLevel::ReadUncommitted,
            true,
        );
        assert_eq!(fetched.remaining(), 7);
        let (recs, next, err) = take_all(bytes, 3, &[], IsolationLevel::ReadUncommitted);
        assert!(err.is_none());
        let offsets: Vec<i64> = recs.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(next, 10);
        assert_eq!(recs[0].value.as_deref(), Some(&b"v3"[..]));
    }

    #[test]
    fn a_partial_trailing_batch_is_ignored() {
        let mut bytes = batch(0, 2, Compression::None);
        let second = batch(2, 2, Compression::None);
        bytes.extend(&second[..second.len() - 3]);
        let (recs, next, err) = take_all(bytes, 0, &[], IsolationLevel::ReadUncommitted);
        assert!(err.is_none());
        assert_eq!(recs.len(), 2);
        assert_eq!(next, 2);
    }

    fn txn_batch(base: i64, pid: i64, n: usize) -> Vec<u8> {
        let info = ProducerInfo {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let mut b = BatchBuilder::new(Compression::None, 1_000).producer(info, true);
        for i in 0..n {
            b.push(Record::new(
                None,
                Some(format!("p{pid}-{i}").into_bytes()),
                1_000,
            ));
        }
        b.build(base).unwrap_or_else(|e| panic!("build: {e}"))
    }

    /// A control batch (commit or abort marker) for `pid` at `offset`.
    fn marker(offset: i64, pid: i64, abort: bool) -> Vec<u8> {
        let mut key = vec![0, 0, 0, if abort { 0 } else { 1 }];
        let mut payload = Vec::new();
        let rec = Record::new(
            Some(std::mem::take(&mut key)),
            Some(vec![0, 0, 0, 0, 0, 0]),
            1_000,
        );
        encode_record(&mut payload, &rec, 0, 0);
        assemble(
            &BatchFields {
                base_offset: offset,
                partition_leader_epoch: 0,
                attributes: 0x10 | 0x20,
                last_offset_delta: 0,
                base_timestamp: 1_000,
                max_timestamp: 1_000,
                producer: ProducerInfo {
                    producer_id: pid,
                    producer_epoch: 0,
                    base_sequence: -1,
                },
                records_count: 1,
            },
            Compression::None,
            &payload,
        )
        .unwrap_or_else(|e| panic!("assemble: {e}"))
    }

    #[test]
    fn read_committed_drops_aborted_transactions_and_markers() {
        // pid 7 commits offsets 0-2 (marker 3); pid 8 aborts 4-5 (marker 6).
        let mut bytes = txn_batch(0, 7, 3);
        bytes.extend(marker(3, 7, false));
        bytes.extend(txn_batch(4, 8, 2));
        bytes.extend(marker(6, 8, true));
        bytes.extend(batch(7, 1, Compression::None));
        let mut aborted = AbortedTransaction::default();
        aborted.producer_id = proto_kafka::messages::ProducerId(8);
        aborted.first_offset = 4;
        let (committed, next, err) = take_all(
            bytes.clone(),
            0,
            &[aborted.clone()],
            IsolationLevel::ReadCommitted,
        );
        assert!(err.is_none());
        let offsets: Vec<i64> = committed.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2, 7]);
        assert_eq!(next, 8);
        let (uncommitted, _, _) = take_all(bytes, 0, &[aborted], IsolationLevel::ReadUncommitted);
        let offsets: Vec<i64> = uncommitted.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            vec![0, 1, 2, 4, 5, 7],
            "markers are never returned"
        );
    }

    #[test]
    fn a_corrupt_batch_is_an_error_after_the_records_before_it() {
        let mut bytes = batch(0, 2, Compression::None);
        let mut corrupt = batch(2, 2, Compression::None);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        bytes.extend(corrupt);
        bytes.extend(batch(4, 2, Compression::None));
        let (recs, next, err) = take_all(bytes, 0, &[], IsolationLevel::ReadUncommitted);
        let offsets: Vec<i64> = recs.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1], "nothing of or after the bad batch");
        assert_eq!(next, 2, "the next fetch starts at the bad batch");
        let err = err.unwrap_or_else(|| panic!("the corrupt batch is reported"));
        assert!(err.to_string().contains("t-0 at 0"), "{err}");
    }

    #[test]
    fn a_malformed_header_ends_the_scan_and_is_reported_after_the_records_before_it() {
        let mut bytes = batch(0, 3, Compression::None);
        let mut old = batch(3, 1, Compression::None);
        old[16] = 1; // magic v1
        bytes.extend(old);
        let (recs, next, err) = take_all(bytes, 0, &[], IsolationLevel::ReadUncommitted);
        assert_eq!(recs.len(), 3);
        assert_eq!(next, 3, "the next fetch starts at the bad batch");
        assert!(err.is_some());
    }
}
