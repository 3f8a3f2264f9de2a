//! Feeds arbitrary frames to the broker's request parsing (header, API and
//! version checks, body decoding): it must return an error, never panic or
//! allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice_broker::decode_request(data);
});
