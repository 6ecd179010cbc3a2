//! The game's own things as the client has them: as the snapshots show them
//! (`things.rs`), and its player's own projectiles, predicted ([`launched`]); and the
//! game's own state types of players and entities, which both ends register ([`state`]). The server's
//! side is the game's rules, hosted in the server machine
//! ([`GameRules`](super::server::GameRules), [`Game`](super::server::Game)).

pub mod ends;
pub mod launched;
pub mod state;
pub(super) mod things;
