//! Who is in the world: the server tells each client of every player joining and leaving
//! (`server.rs`), and the client keeps the list (`client.rs`), apart from the few players
//! its snapshots show.

pub(super) mod client;
#[cfg(feature = "server")]
pub(super) mod server;

pub use client::MAX_ROSTER;
