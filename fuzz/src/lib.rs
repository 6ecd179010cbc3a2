//! What the fuzz targets and the seed generator share: a server machine on the arena with
//! two players already joined (a fuzzer cannot forge a token's MAC, so the harness joins
//! them), and the hello that joins a player.

use expel_core::{CollisionModel, MapData, MoveConfig, Sim};
use expel_protocol::frame::encode_frame;
use expel_protocol::server::{ServerMachine, ServerSettings};
use expel_protocol::token::{self, Grant};
use expel_protocol::{ClientControl, MovementAuthority, VERSION};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The connect-token secret of the fuzzed server.
pub const SECRET: &[u8] = b"fuzz secret";
/// The server's wall clock (Unix seconds).
pub const UNIX: u64 = 1_800_000_000;
/// The arena map, as the repository ships it.
pub const ARENA: &[u8] = include_bytes!("../../maps/arena.map");

fn sim() -> Arc<Sim> {
    static SIM: OnceLock<Arc<Sim>> = OnceLock::new();
    SIM.get_or_init(|| {
        let map = MapData::parse_any(ARENA).expect("the arena parses");
        let model = Arc::new(CollisionModel::build(&map));
        let movement = MoveConfig::default()
            .validate()
            .expect("defaults are valid");
        Arc::new(Sim::from_map(model, &map, movement).0)
    })
    .clone()
}

/// The hello frame of player `id`, with a good token.
pub fn hello(id: u32) -> Vec<u8> {
    let mut nonce = [0u8; 16];
    nonce[..4].copy_from_slice(&id.to_le_bytes());
    let grant = Grant {
        player: expel_core::PlayerId(id),
        expires: UNIX + 3600,
        nonce,
        server: None,
    };
    encode_frame(&ClientControl::Hello {
        version: VERSION,
        token: token::mint(SECRET, &grant),
        have_map: Some(*blake3::hash(ARENA).as_bytes()),
    })
}

/// A server in `movement` mode at `now`, with connections 1 and 2 joined as players 1
/// and 2 (their map taken as sent).
pub fn server(movement: MovementAuthority, now: Instant) -> ServerMachine {
    joined(movement, now, false)
}

/// [`server`] with [`Rules`], recording the match (for the record target's seeds).
pub fn recording_server(now: Instant) -> ServerMachine {
    joined(MovementAuthority::Server, now, true)
}

fn joined(movement: MovementAuthority, now: Instant, record: bool) -> ServerMachine {
    let settings = ServerSettings {
        max_players: 8,
        client_budget: 64 * 1024,
        input_timeout: Duration::from_secs(5),
        movement,
        ..ServerSettings::new("arena", Arc::new(ARENA.to_vec()), SECRET.to_vec())
    };
    let mut s = ServerMachine::new(sim(), settings, now, UNIX).expect("settings are valid");
    if record {
        s.set_rules(Box::new(Rules));
        s.start_recording("fuzz", UNIX)
            .expect("a fresh machine records");
    }
    for id in 1..=2 {
        s.connected(id, now);
        s.handle_control(id, &hello(id as u32), now);
        s.handle_map_sent(id, now);
    }
    while s.poll_output().is_some() {}
    while s.poll_event().is_some() {}
    s
}

/// A client of the arena at `now` that has said hello, with the map (`have_map`) or
/// without it (the server must send it).
pub fn client(have_map: bool, now: Instant) -> expel_protocol::client::ClientMachine {
    use expel_protocol::client::{ClientMachine, ClientSettings};
    let settings = ClientSettings {
        have_map: have_map.then(|| Arc::new(ARENA.to_vec())),
        sim: have_map.then(sim),
        ..ClientSettings::new("00")
    };
    let mut c = ClientMachine::new(settings, now);
    while c.poll_output().is_some() {}
    c
}

/// Rules that use every call a recording keeps: they read the players' messages (a byte
/// each), and for a command's game buttons shoot (1), are refused (2) or leave (4).
pub struct Rules;

impl expel_protocol::server::GameRules for Rules {
    fn tick(&mut self, game: &mut expel_protocol::server::Game<'_>) {
        while game.poll::<u8>().is_some() {}
        let players: Vec<_> = game.players().collect();
        for p in players {
            let (Some(c), Some(me)) = (game.command(p), game.world().player(p).copied()) else {
                continue;
            };
            if c.actions & 1 != 0 {
                let from = me.origin();
                let hull = expel_core::Hull::point();
                let _ = game.shot_as_seen(p, &hull, from, from + glam::DVec3::X * 512.0);
            }
            if c.actions & 2 != 0 {
                game.refuse(p);
            }
            if c.actions & 4 != 0 {
                let _ = game.remove(p, "asked to leave");
            }
        }
    }
}

/// Replays a recording of the arena with [`Rules`] as far as it goes, at most `ticks`
/// ticks: an error or the end, never a panic.
pub fn replay(data: &[u8], ticks: usize) {
    use expel_protocol::record::{Replay, Replayed};
    let Ok(opened) = Replay::open(data) else {
        return;
    };
    let map = Arc::new(ARENA.to_vec());
    let Ok(mut r) = Replay::new(opened, sim(), map, Some(Box::new(Rules)), Instant::now()) else {
        return;
    };
    for _ in 0..ticks {
        match r.step() {
            Ok(Replayed::Tick(_)) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_seed_recording_replays_to_its_end() {
        use expel_protocol::record::{Replay, Replayed};
        let data = std::fs::read("seeds/record/shooting").expect("the seed");
        let opened = Replay::open(&data[..]).expect("opens");
        let map = super::Arc::new(super::ARENA.to_vec());
        let rules = Some(Box::new(super::Rules) as Box<dyn expel_protocol::server::GameRules>);
        let mut r = Replay::new(opened, super::sim(), map, rules, super::Instant::now()).unwrap();
        let end = loop {
            match r.step().unwrap() {
                // Player 2 asked to leave at tick 110.
                Replayed::Tick(115) => assert_eq!(r.machine().world().players.len(), 1),
                Replayed::Tick(_) => {}
                other => break other,
            }
        };
        assert!(matches!(end, Replayed::End(_)), "{end:?}");
        assert_eq!(r.hashes().0, 120);
        assert!(r.machine().stats().rule_refusals > 0);
    }
}
