//! The game's own things in the protocol. The server's half hosts the game's rules and
//! their messages, entities and state ([`server`]); the client's half keeps the game's
//! things as the snapshots show them (`things.rs`) and predicts the player's own
//! projectiles ([`launched`]).

pub mod launched;
#[cfg(feature = "server")]
pub mod server;
pub(super) mod things;
