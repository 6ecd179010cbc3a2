//! Connect-token text: verified against a secret at a fixed time.
#![no_main]

use expel_protocol::token::verify;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = verify(b"fuzz secret", &text, 1_800_000_000, None);
    if let Ok(id) = expel_protocol::token::ServerId::new("fuzz") {
        let _ = verify(b"fuzz secret", &text, 1_800_000_000, Some(&id));
    }
});
