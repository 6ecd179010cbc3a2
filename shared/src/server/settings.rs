//! What the server machine is made with: its settings, and the error for one out of range.

use crate::token::ServerId;
use crate::wire::MovementAuthority;
use std::sync::Arc;
use std::time::Duration;

/// How the server plays (the transport's own limits are the shell's).
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// Snapshots per second (1 to the tick rate).
    pub snapshot_rate: u32,
    /// Input datagrams per second clients send at most (1 to the tick rate; `None`:
    /// [`crate::codec::DEFAULT_INPUT_RATE`], or the tick rate where that is lower).
    pub input_rate: Option<u32>,
    /// Most players at once.
    pub max_players: usize,
    /// Connect-token secret.
    pub secret: Vec<u8>,
    /// This server's id: it accepts only tokens minted for it (`None`: only tokens minted
    /// for no server).
    pub server_id: Option<ServerId>,
    /// Other players per snapshot (the nearest).
    pub interest: usize,
    /// Snapshot bytes per second each client may receive (at least
    /// [`MIN_CLIENT_BUDGET`]). A snapshot over what is left of it holds far players where
    /// the client's baseline carries them, those the client would notice last first (the
    /// farthest, those behind it; those aiming at it last; none it aims at). Players
    /// within its exact reach are never held nor left out for it: a brawl spends the
    /// budget ahead, and the snapshots after it hold more. Only a snapshot over the
    /// path's datagram leaves players out.
    pub client_budget: usize,
    /// The map's name, as clients see it.
    pub map_name: String,
    /// The map file's bytes (sent to clients that lack it).
    pub map_bytes: Arc<Vec<u8>>,
    /// How long a new connection may take to say hello.
    pub hello_timeout: Duration,
    /// How long a joined client may go without sending input.
    pub input_timeout: Duration,
    /// Who moves the players.
    pub movement: MovementAuthority,
    /// Threads a tick's per-player work runs on (the players' moves and their snapshots;
    /// one: the caller's). The results are the same bits on any number.
    pub threads: usize,
}

impl ServerSettings {
    /// `expel serve`'s defaults for a map and a secret: 30 snapshots a second, 64
    /// players, the nearest [`crate::codec::DEFAULT_INTEREST`] in each snapshot (and any
    /// more within the exact reach), [`DEFAULT_CLIENT_BUDGET`] of snapshots per client,
    /// 5 s to say hello, 10 s without input, the server moving every player.
    pub fn new(map_name: impl Into<String>, map_bytes: Arc<Vec<u8>>, secret: Vec<u8>) -> Self {
        ServerSettings {
            snapshot_rate: 30,
            input_rate: None,
            max_players: 64,
            secret,
            server_id: None,
            interest: crate::codec::DEFAULT_INTEREST,
            client_budget: DEFAULT_CLIENT_BUDGET,
            map_name: map_name.into(),
            map_bytes,
            hello_timeout: Duration::from_secs(5),
            input_timeout: Duration::from_secs(10),
            movement: MovementAuthority::Server,
            threads: 1,
        }
    }
}

/// Snapshot bytes a second each client may receive by default: about 6 KB/s down with
/// QUIC's own bytes at 30 snapshots a second in a crowded deathmatch. Players within the
/// client's exact reach are always sent as they stand; the budget decides how often the
/// far ones are (see [`ServerSettings::client_budget`]).
pub const DEFAULT_CLIENT_BUDGET: usize = 4096;

/// The least [`ServerSettings::client_budget`]: a few small snapshots a second.
pub const MIN_CLIENT_BUDGET: usize = 2048;

/// A setting out of range.
#[derive(Debug, thiserror::Error)]
#[error("server settings: {0}")]
pub struct SettingsError(pub(super) String);
