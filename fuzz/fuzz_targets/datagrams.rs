//! Datagram bytes: decoded as either side's datagram, and twice through one snapshot
//! decoder (the second may name the first as its baseline).
#![no_main]

use expel_protocol::snapshot::SnapshotDecoder;
use expel_protocol::{decode, ClientDatagram, ServerDatagram};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode::<ClientDatagram>("datagram", data);
    let _ = decode::<ServerDatagram>("datagram", data);
    let mut s = SnapshotDecoder::new();
    let (a, b) = data.split_at(data.len() / 2);
    for bytes in [a, b, data] {
        let _ = s.decode(bytes);
    }
});
