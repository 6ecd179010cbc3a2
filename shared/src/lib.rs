//! Expel's wire protocol as pure state machines over bytes, ticks and instants
//! ([`protocol`]) and text made safe to show ([`text`]), over the deterministic core (`expel-core`, re-exported here
//! whole, so `expel_shared::sim::Sim` and `expel_core::sim::Sim` are one type).
//!
//! Nothing here does I/O or async work: the shells in `expel-server` and `expel-client`
//! move the bytes and fire the timers.

#![warn(missing_docs)]

pub use expel_core::*;

pub mod protocol;
pub mod text;
