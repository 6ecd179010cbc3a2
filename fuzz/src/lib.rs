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
    let settings = ServerSettings {
        max_players: 8,
        client_budget: 64 * 1024,
        input_timeout: Duration::from_secs(5),
        movement,
        ..ServerSettings::new("arena", Arc::new(ARENA.to_vec()), SECRET.to_vec())
    };
    let mut s = ServerMachine::new(sim(), settings, now, UNIX).expect("settings are valid");
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
