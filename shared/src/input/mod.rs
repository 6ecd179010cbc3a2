//! A player's commands, from the client's clock to the server's tick. The client's part
//! is its clock, steered ahead of the server's (`clock.rs`); the client machine sends
//! each tick's command with the previous few. The server's part buffers each player's
//! commands by tick ([`InputBuffer`]); the server machine takes the datagrams in
//! (`server/intake.rs`). The gate on a connection's datagram rate is in
//! [`rate`](super::rate).

#[cfg(feature = "server")]
mod buffer;
pub(super) mod clock;
pub(super) mod phase;

#[cfg(feature = "server")]
pub use buffer::{Claimed, InputBuffer, InputStats};
