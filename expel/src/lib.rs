//! Expel: an authoritative multiplayer game server whose player movement never tunnels
//! through walls, at any speed, on either side of the wire. This is the one crate a game
//! depends on, and its [`prelude`] is where a game starts: `use expel::prelude::*;` brings
//! what a game writes against:
//!
//! ```no_run
//! use expel::prelude::*;
//!
//! /// Says hello to everyone who joins.
//! struct Greeter;
//!
//! impl GameRules for Greeter {
//!     fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
//!         let _ = game.broadcast(Channel::Reliable, &format!("welcome, player {player}"));
//!     }
//!     fn tick(&mut self, _game: &mut Game<'_>) {}
//! }
//!
//! # async fn run() -> Result<(), ServerError> {
//! let server = Server::builder(Map::arena()?).rules(Greeter).max_players(16).start().await?;
//! let token = server.token(PlayerId(7), std::time::Duration::from_secs(3600)); // for player 7
//! let options = ConnectOptions::new(token, Trust::Fingerprint(server.fingerprint.clone()));
//! let mut session = connect(server.addr, &options).await.expect("joined");
//! session.input(MoveCommand::new(1.0, 0.0, 0.0, 90.0, 0.0));
//! # Ok(()) }
//! ```
//!
//! Features: `server` (the server as a library and the rules API) and `client` (the
//! session a game embeds each frame), both on by default; `bevy` (the Bevy plugin).
//!
//! The crates under it stay for those who want one part alone, and are here under short
//! names (not listed below, so the [`prelude`] stands first): `expel::core` (`expel-core`:
//! collision, movement, the simulation; deterministic, no I/O), `expel::protocol`
//! (`expel-protocol`: the wire and both ends as state machines over bytes and instants),
//! `expel::server`, `expel::client` and `expel::bevy` (with its feature). The versions of
//! `glam`, `serde` and `tokio` that Expel's API names are re-exported too (`expel::glam`,
//! `expel::serde`, `expel::tokio`), so a game's match Expel's: a game that depends on this
//! crate alone derives with `#[serde(crate = "expel::serde")]` and starts with
//! `#[expel::tokio::main(crate = "expel::tokio")]`.

pub mod prelude;

// The parts, each under its short name; hidden from the listing, which starts with the
// prelude (the crate docs above name them).
#[doc(hidden)]
pub use expel_core as core;
#[doc(hidden)]
pub use expel_protocol as protocol;
#[doc(hidden)]
pub use glam;

#[cfg(feature = "bevy")]
#[doc(hidden)]
pub use expel_bevy as bevy;
#[cfg(feature = "client")]
#[doc(hidden)]
pub use expel_client as client;
#[cfg(feature = "server")]
#[doc(hidden)]
pub use expel_server as server;
#[doc(hidden)]
pub use serde;
#[cfg(any(feature = "server", feature = "client"))]
#[doc(hidden)]
pub use tokio;

/// The README's examples, compiled with the rest (they may not go stale); the suite
/// builds this crate with `bevy` (the workspace's dev-dependency turns it on).
#[doc = include_str!("../../README.md")]
#[cfg(all(doctest, feature = "bevy"))]
pub struct ReadmeExamples;
