//! Joining: the client's hello (the protocol version, its connect token, the map it
//! already has), the server's welcome or refusal, the map's transfer on the control
//! stream, and the player's entry into the world. The server's half is in `server.rs`,
//! the client's in `client.rs`.

pub(super) mod client;
#[cfg(feature = "server")]
pub(super) mod server;

#[cfg(feature = "server")]
pub use server::{map_frame, map_frames};
