//! What a game writes against, in one `use expel::prelude::*;`: the ids and commands both
//! sides share; with `server`, the server, its map and the rules API; with `client`, the
//! session and how to join.

pub use expel_core::{EntityId, EntityState, Motion, MoveCommand, MoveMode, PlayerId, PlayerState};
pub use expel_protocol::game::state::{Replicated, StateError, StateTypes};
pub use expel_protocol::messages::Channel;
pub use expel_protocol::snapshot::Scope;
pub use glam::DVec3;
// The derives a game's messages and state use (with `#[serde(crate = "expel::serde")]`
// when serde is not its own dependency).
pub use serde::{Deserialize, Serialize};

#[cfg(feature = "server")]
pub use expel_server::{
    Game, GameRules, Map, RuleError, Sender, Server, ServerError, ServerSettings, SpawnError,
};

#[cfg(feature = "client")]
pub use expel_client::{
    connect, connect_blocking, ClientError, ClientEvent, Code, ConnectOptions, Delivered, Drawn,
    DrawnEntity, End, Launcher, Release, Session, Status, Trust,
};
