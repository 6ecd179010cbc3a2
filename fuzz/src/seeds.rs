//! Writes the fuzz targets' seed corpora under the directory given (default
//! `fuzz/seeds`): traffic recorded from a server machine with two players walking (its
//! control frames and snapshot datagrams, their hellos and input datagrams), a script of
//! that traffic for the server target, a token and the arena's compiled model. `cargo run --release --bin seeds` in `fuzz/`.

use expel_core::{CollisionModel, MapData, MoveCommand, MoveConfig};
use expel_fuzz::{hello, recording_server, server, ARENA, SECRET, UNIX};
use expel_protocol::frame::encode_frame;
use expel_protocol::join::map_frames;
use expel_protocol::server::Output;
use expel_protocol::token::{self, Grant};
use expel_protocol::{encode, ClientDatagram, InputMsg, MovementAuthority};
use expel_protocol::{ServerControl, Welcome};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("make the corpus folder");
    std::fs::write(d.join(name), bytes).expect("write a seed");
}

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("seeds"), PathBuf::from);
    // Record: two players walking for two seconds of server time.
    let t0 = Instant::now();
    let mut s = server(MovementAuthority::Server, t0);
    let mut script = vec![0u8]; // authoritative mode
    let mut datagrams = Vec::new();
    let mut controls = Vec::new();
    // What player 1's client hears: the welcome, then each tick's time and snapshot.
    let welcome = |sending_map: bool| {
        encode_frame(&ServerControl::Welcome(Box::new(Welcome {
            player: expel_core::PlayerId(1),
            snapshot_rate: 30,
            input_rate: 60,
            config: MoveConfig::default(),
            map_name: "arena".into(),
            map_hash: *blake3::hash(ARENA).as_bytes(),
            map_size: ARENA.len() as u64,
            sending_map,
            server_tick: 0,
            movement: MovementAuthority::Server,
            states: Default::default(),
        })))
    };
    let event = |script: &mut Vec<u8>, kind: u8, bytes: &[u8]| {
        script.push(kind);
        script.extend((bytes.len() as u16).to_le_bytes());
        script.extend(bytes);
    };
    let mut heard = vec![0u8];
    event(&mut heard, 0, &welcome(false));
    for tick in 1..=120u64 {
        let now = t0 + Duration::from_millis(tick * 1000 / 60);
        for conn in 1..=2u64 {
            let msg = InputMsg {
                ack: tick.saturating_sub(3),
                first_tick: tick,
                commands: vec![MoveCommand::new(1.0, 0.0, 0.0, conn as f64 * 90.0, 0.0)],
                predicted: None,
                claims: Vec::new(),
                views: Vec::new(),
            };
            let bytes = encode(&ClientDatagram::Input(msg));
            if tick % 30 == 1 {
                datagrams.push(bytes.clone());
            }
            if bytes.len() < 256 && tick < 40 {
                script.extend([2, conn as u8, bytes.len() as u8]);
                script.extend(&bytes);
            }
            s.handle_datagram(conn, &bytes, now);
        }
        if tick < 40 {
            script.extend([5, 0, 4]); // 16 ms pass
        }
        s.handle_timeout(now);
        heard.extend([3, 4, 0]); // 16 ms pass
        while let Some(out) = s.poll_output() {
            if let Output::Datagram { conn: 1, bytes } = &out {
                event(&mut heard, 1, bytes);
            }
            match out {
                Output::Datagram { bytes, .. } if tick % 30 == 0 => datagrams.push(bytes),
                Output::Control { bytes, .. } => controls.push(bytes),
                _ => {}
            }
        }
    }
    for (i, d) in datagrams.iter().enumerate() {
        write(&dir, "datagrams", &format!("recorded-{i}"), d);
    }
    let mut frames = vec![vec![7u8], vec![200u8]];
    frames[0].extend(hello(1));
    frames[1].extend(hello(2));
    for c in controls.iter().take(4) {
        let mut f = vec![64u8];
        f.extend(c);
        frames.push(f);
    }
    for (i, f) in frames.iter().enumerate() {
        write(&dir, "frames", &format!("recorded-{i}"), f);
    }
    write(&dir, "server", "walking", &script);
    write(&dir, "client", "walking", &heard);
    let mut sent = vec![1u8];
    event(&mut sent, 0, &welcome(true));
    for f in map_frames(ARENA) {
        event(&mut sent, 0, &f);
    }
    write(&dir, "client", "map-sent", &sent);
    let mut trusted = script.clone();
    trusted[0] = 1;
    write(&dir, "server", "walking-trusted", &trusted);
    let grant = Grant {
        player: expel_core::PlayerId(9),
        expires: UNIX + 60,
        nonce: [3; 16],
        server: None,
    };
    write(
        &dir,
        "token",
        "good",
        token::mint(SECRET, &grant).as_bytes(),
    );
    // The arena's model as its cache payload (the map target reads the repository's
    // maps folder as a second corpus).
    let model = CollisionModel::build(&MapData::parse_any(ARENA).expect("the arena parses"));
    let file = model.to_cache_bytes(&[7; 32]);
    write(&dir, "cache", "arena", &file[76..]);
    write(&dir, "record", "shooting", &recording(t0));
    println!("seeds written under {}", dir.display());
}

/// A recording of two players under the fuzz rules for two seconds: they shoot, one is
/// refused now and then and leaves at the end.
fn recording(t0: Instant) -> Vec<u8> {
    let mut s = recording_server(t0);
    let mut bytes = Vec::new();
    for tick in 1..=120u64 {
        let now = t0 + Duration::from_millis(tick * 1000 / 60);
        for conn in 1..=2u64 {
            let mut actions = u16::from(tick % 7 == 0);
            if conn == 2 && tick % 20 == 0 {
                actions |= 2;
            }
            if conn == 2 && tick == 110 {
                actions |= 4;
            }
            let c = MoveCommand::new(1.0, 0.0, 0.0, tick as f64 * 3.0, 0.0);
            let msg = InputMsg {
                ack: tick.saturating_sub(3),
                first_tick: tick,
                commands: vec![c.with_actions(actions, 0)],
                predicted: None,
                claims: Vec::new(),
                views: Vec::new(),
            };
            s.handle_datagram(conn, &encode(&ClientDatagram::Input(msg)), now);
        }
        s.handle_timeout(now);
        while s.poll_output().is_some() {}
        while let Some(b) = s.poll_record() {
            bytes.extend(b);
        }
    }
    s.shutdown("the seed is made");
    while let Some(b) = s.poll_record() {
        bytes.extend(b);
    }
    bytes
}
