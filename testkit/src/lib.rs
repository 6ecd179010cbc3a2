//! What tests and load tests drive Expel's protocol with, free of I/O (no runtime, no
//! sockets), so the protocol's own tests need nothing heavier:
//!
//! * [`cheats`]: what a cheating client does to its own protocol machine (a fast clock,
//!   states no honest movement reaches, shots at views it never had). `expel bots` runs
//!   them against real servers; the simulated network's tests run them on virtual time.
//! * [`network`]: the simulated network's standard setup (the arena, a secret, tokens
//!   for it, N clients connected).
//! * `process` and `desktop` (feature `desktop`): for tests that run processes, a child
//!   killed when its guard drops; for windowed examples' tests, a headless X display, the
//!   example's binary and its screenshot (these do I/O: processes and files).

#![warn(missing_docs)]

pub mod cheats;
#[cfg(feature = "desktop")]
pub mod desktop;
pub mod network;
#[cfg(feature = "desktop")]
pub mod process;
