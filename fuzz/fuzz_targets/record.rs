//! A recording's bytes replayed (`expel replay`): truncated, corrupted or foreign, it
//! gives an error with its byte offset; nothing may panic, and memory and work stay
//! bounded by what the file holds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    expel_fuzz::replay(data, 100_000);
});
