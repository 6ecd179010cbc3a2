//! The server's state machine fed garbage: random byte strings on the control stream and as
//! datagrams, and well-formed messages with absurd values (ticks near 2^63 and 2^64, acks
//! from the future, extreme states, every field at its limits), from joined players and
//! strangers, with time jumping. In a debug build (overflow checks on): nothing may panic,
//! and each bad message is counted or refused. `EXPEL_FUZZ_ITERATIONS` runs it longer.

use expel_core::movement::MoveMode;
use expel_core::PlayerId;
use expel_core::{CollisionModel, MapData, MoveCommand, MoveConfig, PlayerState, Sim};
use expel_protocol::frame::encode_frame;
use expel_protocol::server::{ConnId, Event, Output, ServerMachine, ServerSettings};
use expel_protocol::token::{self, Grant};
use expel_protocol::{
    encode, ClientControl, ClientDatagram, InputMsg, MovementAuthority, ViewClaim, VERSION,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"fuzz secret";
const UNIX: u64 = 1_800_000_000;

fn server(movement: MovementAuthority, now: Instant) -> ServerMachine {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let map = MapData::parse_any(&bytes).unwrap();
    let model = Arc::new(CollisionModel::build(&map));
    let sim = Sim::from_map(model, &map, MoveConfig::default().validate().unwrap()).0;
    let settings = ServerSettings {
        max_players: 8,
        client_budget: 64 * 1024,
        input_timeout: Duration::from_secs(5),
        movement,
        ..ServerSettings::new("arena", Arc::new(bytes), SECRET.to_vec())
    };
    ServerMachine::new(Arc::new(sim), settings, now, UNIX).unwrap()
}

fn hello(player: u32, nonce: u32) -> Vec<u8> {
    let mut n = [0u8; 16];
    n[..4].copy_from_slice(&nonce.to_le_bytes());
    let grant = Grant {
        player: PlayerId(player),
        expires: UNIX + 1_000_000_000,
        nonce: n,
        server: None,
    };
    encode_frame(&ClientControl::Hello {
        version: VERSION,
        token: token::mint(SECRET, &grant),
        have_map: None,
    })
}

/// A tick anywhere, with the edges and the server's present (`base`) over-represented.
fn tick(r: &mut impl Rng, base: u64) -> u64 {
    match r.gen_range(0..8) {
        6 | 7 => (base + r.gen_range(0..12)).saturating_sub(4),
        0 => r.gen(),
        1 => u64::MAX - r.gen_range(0..64),
        2 => (1u64 << 63) - r.gen_range(0..64),
        3 => (1u64 << 63) + r.gen_range(0..64),
        4 => 0,
        _ => r.gen_range(0..2000),
    }
}

fn state(r: &mut impl Rng) -> PlayerState {
    let big = |r: &mut ChaCha8Rng| match r.gen_range(0..3) {
        0 => i32::MAX - r.gen_range(0..3),
        1 => i32::MIN + r.gen_range(0..3),
        _ => r.gen_range(-300_000..300_000),
    };
    let mut r2 = ChaCha8Rng::seed_from_u64(r.gen());
    PlayerState {
        origin: [big(&mut r2), big(&mut r2), big(&mut r2)],
        velocity: [big(&mut r2), big(&mut r2), big(&mut r2)],
        flags: r.gen(),
        mode: [MoveMode::Walk, MoveMode::Spectator, MoveMode::Noclip][r.gen_range(0..3)],
    }
}

fn command(r: &mut impl Rng) -> MoveCommand {
    MoveCommand {
        forward: r.gen(),
        side: r.gen(),
        up: r.gen(),
        yaw: r.gen(),
        pitch: r.gen(),
        buttons: r.gen(),
        actions: r.gen(),
        weapon: r.gen(),
    }
}

/// A well-formed input message with absurd values.
fn absurd_input(r: &mut impl Rng, base: u64) -> Vec<u8> {
    let n = match r.gen_range(0..8) {
        0 => 0,
        1 => r.gen_range(33..200),
        _ => r.gen_range(1..33),
    };
    let sane = r.gen_bool(0.5);
    let commands: Vec<MoveCommand> = (0..n)
        .map(|_| {
            if sane {
                MoveCommand::new(1.0, 0.0, 0.0, r.gen_range(0.0..360.0), 0.0)
            } else {
                command(r)
            }
        })
        .collect();
    let claims = if r.gen_bool(0.5) {
        (0..if r.gen_bool(0.8) {
            n
        } else {
            r.gen_range(0..40)
        })
            .map(|_| state(r))
            .collect()
    } else {
        Vec::new()
    };
    let msg = InputMsg {
        ack: tick(r, base),
        first_tick: tick(r, base),
        commands,
        predicted: r.gen_bool(0.5).then(|| state(r)),
        claims,
        // Views of any shape: in range, far back, a span past the command, none.
        views: if r.gen_bool(0.5) {
            (0..if r.gen_bool(0.8) {
                n
            } else {
                r.gen_range(0..40)
            })
                .map(|_| ViewClaim {
                    back: r.gen(),
                    span: r.gen(),
                    k: r.gen(),
                })
                .collect()
        } else {
            Vec::new()
        },
    };
    encode(&ClientDatagram::Input(msg))
}

fn garbage(r: &mut impl Rng) -> Vec<u8> {
    let n = match r.gen_range(0..100) {
        0 => r.gen_range(0..70_000),
        _ => r.gen_range(0..64),
    };
    let mut v: Vec<u8> = (0..n).map(|_| r.gen()).collect();
    // Sometimes a plausible frame length or enum tag up front.
    if !v.is_empty() && r.gen_bool(0.3) {
        v[0] = r.gen_range(0..3);
    }
    v
}

fn fuzz(movement: MovementAuthority, seed: u64, iterations: u64) {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    #[allow(clippy::disallowed_methods)] // the base of virtual time, or a wall-time figure
    let t0 = Instant::now();
    let mut now = t0;
    let mut s = server(movement, now);
    let mut next_conn: ConnId = 1;
    let mut live: Vec<ConnId> = Vec::new();
    let mut nonce = 0u32;
    let mut datagrams_sent = 0u64;
    for _ in 0..iterations {
        match r.gen_range(0..100) {
            // A new connection, half of them joining with a good token.
            0..3 => {
                let c = next_conn;
                next_conn += 1;
                s.connected(c, now);
                live.push(c);
                if r.gen_bool(0.5) {
                    nonce = nonce.wrapping_add(1);
                    s.handle_control(c, &hello(r.gen_range(1..12), nonce), now);
                    s.handle_map_sent(c, now);
                }
            }
            3..5 => {
                if let Some(&c) = live.get(r.gen_range(0..live.len().max(1))) {
                    s.handle_closed(c, "fuzz");
                }
            }
            5..20 => {
                let c = pick(&mut r, &live, next_conn);
                s.handle_control(c, &garbage(&mut r), now);
            }
            20..50 => {
                let c = pick(&mut r, &live, next_conn);
                datagrams_sent += 1;
                s.handle_datagram(c, &garbage(&mut r), now);
            }
            50..90 => {
                let c = pick(&mut r, &live, next_conn);
                datagrams_sent += 1;
                let base = s.world().tick;
                s.handle_datagram(c, &absurd_input(&mut r, base), now);
            }
            90..97 => {
                now += Duration::from_millis(r.gen_range(0..40));
                s.handle_timeout(now);
            }
            97 if r.gen_bool(0.1) => {
                // A stalled process: time leaps.
                now += Duration::from_secs(r.gen_range(1..100_000));
                s.handle_timeout(now);
            }
            _ => {
                let c = pick(&mut r, &live, next_conn);
                s.set_max_datagram(c, [0, 1, 20, 1200, usize::MAX][r.gen_range(0..5)]);
            }
        }
        while let Some(o) = s.poll_output() {
            if let Output::Close { conn, .. } = o {
                live.retain(|c| *c != conn);
                s.handle_closed(conn, "closed");
            }
        }
        while let Some(e) = s.poll_event() {
            if let Event::Violation { evidence, .. } = e {
                assert!(!evidence.is_empty());
            }
        }
    }
    let st = s.stats().clone();
    assert_eq!(st.datagrams_in, datagrams_sent, "every datagram counted");
    assert!(
        st.malformed_datagrams > 0 && st.malformed_control > 0,
        "{st:?}"
    );
    assert!(
        st.violations.iter().sum::<u64>() > 0,
        "absurd inputs refused: {st:?}"
    );
    assert!(st.clients <= 8, "{st:?}");
    assert!(
        st.inputs.received > 0,
        "some inputs were good enough to buffer: {st:?}"
    );
    println!("{movement:?} {iterations} iterations: {st:?}");
}

fn pick(r: &mut impl Rng, live: &[ConnId], next: ConnId) -> ConnId {
    if live.is_empty() || r.gen_bool(0.05) {
        r.gen_range(0..next + 3)
    } else {
        live[r.gen_range(0..live.len())]
    }
}

fn iterations() -> u64 {
    std::env::var("EXPEL_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

#[test]
fn authoritative_server_survives_garbage_and_absurd_values() {
    fuzz(MovementAuthority::Server, 1, iterations());
}

#[test]
fn trusted_client_server_survives_garbage_and_absurd_values() {
    fuzz(MovementAuthority::Client, 2, iterations());
}
