//! Feeds arbitrary bytes to the produce path's record walker: as the
//! uncompressed records of a batch claiming a count taken from the input,
//! as the compressed body of a batch in the codec the first byte names
//! (through the bounded streaming decompressor), and as whole batches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::record::walk::{walk_records, SliceSource};
use sluice_protocol::record::{batch, walk_batch, BatchIter};

/// Decompressed bytes a fuzzed batch may produce.
const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let codec = data[0] % 5;
    let count = i32::from_be_bytes([data[1], data[2], data[3], data[4]]);
    let payload = &data[5..];
    if let Ok(count) = usize::try_from(count) {
        let _ = walk_records(&mut SliceSource::new(payload), count, |_| ());
    }
    // A batch header around the payload, so `walk_batch` decompresses it.
    let mut b = vec![0u8; batch::HEADER_LEN];
    b.extend_from_slice(payload);
    let len = (b.len() - batch::LOG_OVERHEAD) as i32;
    b[batch::LENGTH_OFFSET..batch::LENGTH_OFFSET + 4].copy_from_slice(&len.to_be_bytes());
    b[batch::MAGIC_OFFSET] = 2;
    b[batch::ATTRIBUTES_OFFSET + 1] = codec;
    b[batch::LAST_OFFSET_DELTA_OFFSET..batch::LAST_OFFSET_DELTA_OFFSET + 4]
        .copy_from_slice(&count.wrapping_sub(1).to_be_bytes());
    b[batch::RECORDS_COUNT_OFFSET..batch::RECORDS_COUNT_OFFSET + 4]
        .copy_from_slice(&count.to_be_bytes());
    if let Ok(h) = batch::BatchHeader::parse(&b) {
        let _ = walk_batch(&b, &h, LIMIT, |_| ());
    }
    for item in BatchIter::new(data) {
        let Ok((_, h, raw)) = item else { break };
        let _ = walk_batch(raw, &h, LIMIT, |_| ());
    }
});
