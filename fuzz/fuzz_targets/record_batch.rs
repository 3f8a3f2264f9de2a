//! Feeds arbitrary bytes to the record-batch decoders: header view, CRC
//! check, per-record decoding with decompression.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::record::{batch, codec, BatchIter};

fuzz_target!(|data: &[u8]| {
    for b in BatchIter::new(data) {
        let Ok((_, _, raw)) = b else { break };
        let _ = batch::validate_crc(raw);
        let _ = codec::decode_batch(raw, 1 << 20);
    }
});
