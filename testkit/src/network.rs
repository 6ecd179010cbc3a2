//! The simulated network's standard setup: the arena map, the test secret, tokens for
//! it, and a network of clients connected to a server on virtual time.

use expel_core::PlayerId;
use expel_core::{CollisionModel, MapData, MoveConfig, Sim};
use expel_protocol::client::ClientSettings;
use expel_protocol::conditioner::Impairment;
use expel_protocol::server::{ServerMachine, ServerSettings};
use expel_protocol::simnet::{NetSettings, SimNet};
use expel_protocol::token::{mint, Grant};
use expel_protocol::MovementAuthority;
use std::sync::Arc;
use std::time::Duration;

/// The secret tests' servers sign and check tokens with.
pub const SECRET: &[u8] = b"test-secret";

/// The arena map the repository ships.
pub const ARENA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map");

/// Unix seconds on the simulated network's clock.
pub const UNIX: u64 = 1_800_000_000;

/// The arena's simulation and its map file's bytes.
///
/// # Panics
/// If the repository's arena is missing or does not load (a broken checkout).
pub fn arena() -> (Arc<Sim>, Arc<Vec<u8>>) {
    let bytes = std::fs::read(ARENA).expect("the repository's arena map");
    let map = MapData::parse_any(&bytes).expect("the arena parses");
    let movement = MoveConfig::default()
        .validate()
        .expect("the default movement is valid");
    let (sim, _) = Sim::from_map(Arc::new(CollisionModel::build(&map)), &map, movement);
    (Arc::new(sim), Arc::new(bytes))
}

/// A token for player `id`, signed with `secret`, good until `expires` (Unix seconds),
/// its nonce made from `id` and `n`, for a server with no id.
pub fn token_with(secret: &[u8], id: u32, expires: u64, n: u8) -> String {
    let mut nonce = [n; 16];
    nonce[..4].copy_from_slice(&id.to_le_bytes());
    mint(
        secret,
        &Grant {
            player: PlayerId(id),
            expires,
            nonce,
            server: None,
        },
    )
}

/// A token for `player` that the simulated network's server takes.
pub fn token(player: u32) -> String {
    token_with(SECRET, player, UNIX + 3600, 0)
}

/// A simulated network of `n` clients on the arena, all connected (half already hold
/// the map).
pub fn network(n: u32, movement: MovementAuthority, link: Impairment, seed: u64) -> SimNet {
    network_with(n, link, seed, |s| s.movement = movement)
}

/// [`network`] with the server's settings edited by `edit`.
///
/// # Panics
/// If the edited settings do not make a server.
pub fn network_with(
    n: u32,
    link: Impairment,
    seed: u64,
    edit: impl FnOnce(&mut ServerSettings),
) -> SimNet {
    let (sim, map) = arena();
    let mut settings = ServerSettings {
        max_players: 128,
        client_budget: 64 * 1024,
        input_timeout: Duration::from_secs(5),
        ..ServerSettings::new("arena", map.clone(), SECRET.to_vec())
    };
    edit(&mut settings);
    #[allow(clippy::disallowed_methods)] // the base of virtual time
    let t0 = std::time::Instant::now();
    let server = ServerMachine::new(sim.clone(), settings, t0, UNIX).expect("a test server");
    let net = NetSettings {
        up: link,
        down: link,
        seed,
        step: Duration::from_millis(1),
    };
    let mut net = SimNet::new(server, t0, net);
    for id in 1..=n {
        let mut c = ClientSettings::new(token(id));
        if id % 2 == 0 {
            c.have_map = Some(map.clone());
            c.sim = Some(sim.clone());
        }
        net.connect(c);
    }
    net
}
