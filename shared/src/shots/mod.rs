//! Shots judged as the shooter saw them. The client says what it drew when it fired: the
//! others where it drew them, its own player where it stood (the client machine's
//! [`view_of`](super::client::ClientMachine::view_of) and its trace of the same shot). The
//! server's half puts the world back to that view, within bounds a backtrack cannot
//! bend, and judges the shot there ([`server`]).

#[cfg(feature = "server")]
pub mod server;
