//! Shots judged as the shooter saw them. The client's half says what it drew when it
//! fired ([`client`]): the others where it drew them, its own player where it stood. The
//! server's half puts the world back to that view, within bounds a backtrack cannot
//! bend, and judges the shot there ([`server`]).

pub mod client;
#[cfg(feature = "server")]
pub mod server;
