//! The client's state machine fed what a hostile server may send: a script of events
//! (control bytes, datagrams, time passing, the connection closing, round-trip estimates),
//! with or without the map at hand. Nothing may panic or overflow; the machine's outputs
//! and events are drained and its views read as a game would.
#![no_main]

use expel_core::MoveCommand;
use expel_fuzz::client;
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut now = Instant::now();
    let mut c = client(flags & 1 == 0, now);
    c.set_light(flags & 2 != 0);
    // Each event: [kind, a, b]; control bytes and datagrams are followed by `a b` (LE)
    // bytes of them, the others take `a` and `b` as their values.
    while let [kind, lo, hi, tail @ ..] = rest {
        let carries = matches!(kind % 6, 0..=2);
        let n = if carries {
            usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len())
        } else {
            0
        };
        let (bytes, next) = tail.split_at(n);
        rest = next;
        match kind % 6 {
            0 => c.handle_control(bytes, now),
            1 | 2 => c.handle_datagram(bytes, now),
            3 => {
                now += Duration::from_millis(u64::from(*lo) * 4);
                c.input(MoveCommand::new(1.0, 0.0, 0.0, f64::from(*hi), 0.0));
                c.handle_timeout(now);
            }
            4 => c.handle_closed(Some(u64::from(*lo)), "fuzz"),
            _ => c.set_rtt(Duration::from_micros(u64::from(u16::from_le_bytes([
                *lo, *hi,
            ])))),
        }
        while c.poll_output().is_some() {}
        while c.poll_event().is_some() {}
        let _ = (
            c.local_player(),
            c.display_origin(),
            c.predicted_tick(),
            c.poll_timeout(),
        );
        let _ = c.others(c.render_tick(now));
    }
    let _ = c.stats();
});
