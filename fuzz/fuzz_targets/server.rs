//! The server's state machine fed whole byte sequences: the input is a script of events
//! (a connection arriving or closing, control bytes, a datagram, time passing) from
//! strangers and from two joined players, in either movement mode. Nothing may panic;
//! the machine's outputs are drained as a shell would.
#![no_main]

use expel_fuzz::server;
use expel_protocol::MovementAuthority;
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let movement = if mode & 1 == 0 {
        MovementAuthority::Server
    } else {
        MovementAuthority::Client
    };
    let mut now = Instant::now();
    let mut s = server(movement, now);
    // Each event: [kind, connection, length] then `length` bytes.
    while let [kind, conn, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        let conn = u64::from(conn % 6);
        match kind % 6 {
            0 => s.connected(conn, now),
            1 => s.handle_control(conn, bytes, now),
            2 | 3 => s.handle_datagram(conn, bytes, now),
            4 => s.handle_closed(conn, "fuzz"),
            _ => {
                now += Duration::from_millis(u64::from(*len) * 4);
                s.handle_timeout(now);
            }
        }
        while s.poll_output().is_some() {}
        while s.poll_event().is_some() {}
    }
    let _ = s.stats();
});
