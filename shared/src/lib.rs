//! Expel's wire protocol, free of I/O, over the deterministic core (`expel-core`): the
//! messages and their codecs, and both ends as state machines over bytes and instants
//! passed in. The server and client crates are async shells that move these bytes over
//! QUIC and fire timers; tests drive everything here with bytes and virtual time
//! ([`simnet`]). [`text`] makes players' text safe to show.
//!
//! * [`server::ServerMachine`] (feature `server`): hellos, tokens ([`token`]), player slots, the
//!   inputs ([`input`]), validation, the tick and each client's snapshot ([`snapshot`]).
//! * [`client::ClientMachine`]: hello, welcome and map, clock steering, inputs, prediction and
//!   reconciliation ([`predict`]), interpolation of the others ([`snapshot::interp`]).
//! * [`conditioner`]: loss, delay, jitter and duplication as a seeded queue.
//!
//! The modules follow the protocol's concerns, each holding its parts as owned types,
//! the client's and the server's side by side: joining ([`join`]), connect tokens
//! ([`token`]), commands ([`input`]), prediction and its re-run on the server
//! ([`predict`]), snapshots and interpolation ([`snapshot`]), the roster ([`roster`]),
//! the game's messages ([`messages`]), its things ([`game`]) and its shots ([`shots`]).
//! The two machines, [`client`] and [`server`], own those parts, hold their own methods,
//! and re-export what they report.
//!
//! * Reliable control stream (one bidirectional QUIC stream, opened by the client):
//!   length-prefixed frames ([`frame`]) carrying [`ClientControl`] and [`ServerControl`]:
//!   hello (version, token, the map the client has), welcome (player id, rates, the
//!   [`MoveConfig`](expel_core::MoveConfig), map name and hash, server tick), map transfer,
//!   and the server's last words: a refusal, a removal or a shutdown, each a [`Code`]
//!   with words for people.
//! * Input datagrams ([`InputMsg`]): the last few tick-stamped commands, so one lost
//!   datagram costs nothing, and the newest snapshot received (the delta baseline). Under
//!   [`MovementAuthority::Client`] each command comes with the state the client claims it
//!   reached, which the server validates instead of simulating.
//! * Game messages ([`messages`]): the game's own, typed by it, on the control stream
//!   (reliable, ordered) or as datagrams (unreliable, never twice, never stale).
//! * Snapshot datagrams ([`SnapshotMsg`]): the client's own state in full, the other
//!   players and the movers near it as per-entity deltas with changed-field masks against
//!   the newest snapshot the client acknowledged ([`snapshot`]).

#![warn(missing_docs)]

pub mod text;
pub mod time;
// The map from above, for whoever draws it.
pub mod plan;

// The wire: the version and limits, the messages, their framing and the codes that end a
// session.
pub mod code;
mod codec;
pub mod frame;
mod wire;

// The protocol by concern, each with its client's and its server's half side by side.
pub mod game;
pub mod input;
pub mod join;
pub mod messages;
pub mod predict;
mod report;
pub mod roster;
pub mod shots;
pub mod snapshot;
#[cfg(feature = "server")]
pub mod token;

// The two machines, made of those halves.
pub mod client;
#[cfg(feature = "server")]
pub mod server;
// Matches kept and played again (the server's machine records them).
#[cfg(feature = "server")]
pub mod record;

// What both machines and their shells use: pacing, limits, test links.
pub mod backoff;
pub mod conditioner;
#[cfg(feature = "server")]
pub mod headroom;
pub mod rate;
#[cfg(feature = "server")]
pub mod simnet;

pub use code::{Code, Kind as EndKind};
pub use codec::{
    decode, encode, ProtocolError, ALPN, DEFAULT_INPUT_RATE, DEFAULT_INTEREST, INPUT_REDUNDANCY,
    MAP_CHUNK, MAX_INPUT_COMMANDS, MAX_MAP_BYTES, MOVER_INTEREST_RADIUS, VERSION,
};
pub use wire::{
    ClientControl, ClientDatagram, EntityDelta, Feedback, FieldValues, GameLists, InputMsg,
    MovementAuthority, RosterChange, ServerControl, ServerDatagram, SnapshotMsg, ViewClaim,
    Welcome, MAX_TICK,
};
