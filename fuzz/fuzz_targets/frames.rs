//! Control-stream bytes, cut into pushes where the input says, through the frame decoder
//! (with the server's client-frame limit); each frame decoded as every control message.
#![no_main]

use expel_protocol::frame::{FrameDecoder, MAX_CLIENT_FRAME};
use expel_protocol::{decode, ClientControl, ServerControl};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut d = FrameDecoder::with_limit(MAX_CLIENT_FRAME);
    for chunk in rest.chunks(usize::from(cut).max(1)) {
        d.push(chunk);
        loop {
            match d.next_frame() {
                Ok(Some(f)) => {
                    let _ = decode::<ClientControl>("control", &f);
                    let _ = decode::<ServerControl>("control", &f);
                }
                Ok(None) => break,
                Err(_) => return, // the connection would close
            }
        }
        assert!(
            d.pending() <= MAX_CLIENT_FRAME + 8,
            "buffered {}",
            d.pending()
        );
    }
});
