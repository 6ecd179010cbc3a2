//! A player's commands, from the client's clock to the server's tick. The client's half
//! steers its clock ahead of the server's (`clock.rs`) and sends each tick's command with
//! the previous few; the server's half takes the datagrams in (`intake.rs`) and buffers
//! each player's commands by tick ([`InputBuffer`]). The gate on a connection's datagram
//! rate is in [`rate`](super::rate).

#[cfg(feature = "server")]
mod buffer;
pub(super) mod clock;

#[cfg(feature = "server")]
pub use buffer::{Claimed, InputBuffer, InputStats};
