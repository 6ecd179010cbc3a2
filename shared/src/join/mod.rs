//! Joining: the client's hello (the protocol version, its connect token, the map it
//! already has), the server's welcome or refusal, the map's transfer on the control
//! stream, and the player's entry into the world. The client's part (`Joining`: the
//! welcome, the map checked against its hash, where the clock starts) is in `client.rs`;
//! the server's (the door a hello meets, the map's frames) in `server.rs`. The machines
//! run the way in with them.

pub(super) mod client;
#[cfg(feature = "server")]
pub(super) mod server;

#[cfg(feature = "server")]
pub use server::{map_frame, map_frames};
