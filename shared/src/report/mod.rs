//! What each machine reports: the client's outputs to send, its events for the game, its
//! end and its figures (`client.rs`); the server's outputs, its events for the shell and
//! the operator, and its counters (`server.rs`). The machines re-export them:
//! [`ClientMachine`](super::client::ClientMachine)'s in [`client`](super::client),
//! [`Server`](super::server::Server)'s in [`server`](super::server).

pub(super) mod client;
#[cfg(feature = "server")]
pub(super) mod server;
