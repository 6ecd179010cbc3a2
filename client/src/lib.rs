//! Expel's client library: what a game loop calls each frame, a thin shell around the
//! protocol's client state machine ([`expel_protocol::client::ClientMachine`]) on the
//! hand-driven QUIC the server runs on ([`expel_quic`]).
//!
//! ```no_run
//! # async fn game(addr: std::net::SocketAddr, token: String, fingerprint: String) {
//! use expel_client::prelude::*;
//! use std::time::Instant;
//! let mut session = connect(addr, &ConnectOptions::new(token, Trust::Fingerprint(fingerprint)))
//!     .await
//!     .unwrap();
//! loop {
//!     // Each frame: this frame's input, then the update.
//!     let now = Instant::now();
//!     session.input(MoveCommand::new(1.0, 0.0, 0.0, 90.0, 0.0));
//!     session.update(now);
//!     let me: Option<DVec3> = session.display_origin(); // predicted, corrections smoothed
//!     let others = session.others_drawn(now); // the others, interpolated, facing their way
//!     let things = session.entities(now); // the game's entities, likewise
//!     while let Some(event) = session.poll_event() { /* joined, corrected, ended */ }
//!     if let Status::Ended(end) = session.status() {
//!         println!("ended: {} ({:?})", end.reason(), end.code());
//!         break;
//!     }
//! }
//! # }
//! ```
//!
//! [`connect`] (or [`connect_blocking`] for a loop without async) joins the server; the
//! [`Session`] then moves bytes between its socket and the machine whenever the game
//! calls [`Session::update`]. No task runs in the background: QUIC's own timers
//! (acknowledgements, keep-alives) run in the updates too, so a game calls it every frame
//! (an async one may [`Session::wait`] between). A
//! [`Impairment`] can add loss, delay, jitter and duplication to its datagrams, to
//! feel prediction under lag. (`expel_bots::run` is a headless player built on the same
//! API, for `expel connect`, the bots and the tests.)

mod join;
mod tls;
mod transport;

/// What a game uses each frame, in one import.
pub mod prelude {
    pub use crate::{
        connect, connect_blocking, Channel, ClientError, ClientEvent, Code, ConnectOptions,
        Delivered, Drawn, DrawnEntity, End, Joining, Release, Session, Status, Trust,
    };
    pub use expel_core::{EntityId, MoveCommand, MoveMode, PlayerId, PlayerState};
    pub use glam::DVec3;
}

pub use expel_protocol::backoff::Backoff;
pub use expel_protocol::client::{ClientEvent, ClientStats, End, Launcher, Release, Status};
pub use expel_protocol::conditioner::Impairment;
pub use expel_protocol::game::state::{Replicated, StateError, StateTypes};
pub use expel_protocol::messages::{Channel, MessageError, MAX_MESSAGE_BYTES};
pub use expel_protocol::predict::{PredictStats, Predictor};
pub use expel_protocol::snapshot::interp::{Drawn, DrawnEntity, Interpolator};
pub use expel_protocol::snapshot::{EntityView, Scope};
pub use expel_quic::{close_reason, TransportStats, REFUSED_AT_THE_DOOR};
pub use join::{connect, connect_blocking, reconnect, Joining, RECONNECT_CAP, RECONNECT_FIRST};
pub use tls::{client_config, Trust};

use bytes::Bytes;
use expel_core::mover::MoverState;
use expel_core::EntityId;
use expel_core::PlayerId;
use expel_core::{MoveCommand, PlayerState, Sim};
use expel_protocol::client::{ClientMachine, ClientOutput};
use expel_protocol::conditioner::Conditioner;
use expel_protocol::Welcome;
pub use expel_protocol::{Code, EndKind};
use expel_quic::LinkEvent;
use glam::DVec3;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use transport::Transport;

/// A message of the server's, as the game's own type.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered<T> {
    /// The channel it came on.
    pub channel: Channel,
    /// The server tick whose world the rules saw when they sent it (the tick of the
    /// snapshot that shows what they saw).
    pub tick: u64,
    /// The message.
    pub message: T,
}

/// Most datagrams one [`Session::update`] reads: a flood costs each update a bounded
/// amount of work, and what waits past it stays in the kernel's bounded socket buffer.
pub const MOST_DATAGRAMS_PER_UPDATE: usize = transport::MOST_READ;

/// How long a QUIC handshake may take before the attempt fails.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a client could not connect or play.
#[derive(Debug, Error)]
pub enum ClientError {
    /// TLS configuration: what was being done, and what failed.
    #[error("tls: {what}")]
    Tls {
        /// What was being done.
        what: &'static str,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The QUIC connection failed.
    #[error("connecting to {addr}: {detail}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// The server refused the hello (or ended the session before it joined).
    #[error("refused by the server ({code}): {detail}")]
    Refused {
        /// Why, for programs.
        code: Code,
        /// Why, for people.
        detail: String,
    },
    /// The server broke the protocol (or sent a map that cannot be used).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server plays a game whose state types this client does not read
    /// ([`ConnectOptions::states`]).
    #[error("another game: {0}")]
    OtherGame(String),
}

impl ClientError {
    /// Whether trying again later may work: the server could not be reached, or refused
    /// for now ([`Code::is_transient`]: full, shutting down, this player's previous
    /// connection not yet gone). A code this build does not know is final.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connect { .. } => true,
            ClientError::Refused { code, .. } => code.is_transient(),
            ClientError::Tls { .. } | ClientError::Protocol(_) | ClientError::OtherGame(_) => false,
        }
    }

    /// Why joining `addr` failed, from how the session ended before it joined.
    pub fn joining(end: &End, addr: SocketAddr) -> ClientError {
        match end {
            End::Refused { code, detail } | End::Kicked { code, detail } => ClientError::Refused {
                code: *code,
                detail: detail.clone(),
            },
            End::Shutdown(detail) => ClientError::Refused {
                code: Code::Shutdown,
                detail: detail.clone(),
            },
            End::Disconnected(detail) => ClientError::Connect {
                addr,
                detail: detail.clone(),
            },
            End::Left(r) | End::Protocol(r) => ClientError::Protocol(r.clone()),
            End::OtherGame(r) => ClientError::OtherGame(r.clone()),
        }
    }

    /// The server's code, for a refusal.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Connect token.
    pub token: String,
    /// How to trust the server.
    pub trust: Trust,
    /// A map the client already has (the server sends its map otherwise).
    pub have_map: Option<Arc<Vec<u8>>>,
    /// A simulation of `have_map` to reuse (many bots in one process share one), used
    /// when the server's map and movement settings match it.
    pub sim: Option<Arc<Sim>>,
    /// The name the server's certificate must carry under [`Trust::Authority`] (a DNS
    /// name or an address); `localhost` when unset. A pinned fingerprint ignores it.
    pub server_name: Option<String>,
    /// The game's own state types this client reads (the server's rules register them:
    /// `GameRules::states`). A server whose game names others refuses nothing, but the
    /// session ends at its welcome with [`ClientError::OtherGame`], both names given.
    /// Empty (the default): any will do, and reads check each type's name.
    pub states: StateTypes,
}

impl ConnectOptions {
    /// Options with a token and a way to trust the server, and no map of its own.
    pub fn new(token: String, trust: Trust) -> Self {
        ConnectOptions {
            token,
            trust,
            have_map: None,
            sim: None,
            server_name: None,
            states: StateTypes::new(),
        }
    }

    /// These options, reading the game's state types `states`
    /// ([`ConnectOptions::states`]).
    pub fn with_states(mut self, states: StateTypes) -> Self {
        self.states = states;
        self
    }
}

/// What a session measured: [`Session::diagnostics`].
#[derive(Clone, Debug)]
pub struct Diagnostics<'a> {
    /// The protocol machine's figures (prediction, snapshots, messages).
    pub stats: &'a ClientStats,
    /// The transport's (bytes both ways, round trip).
    pub transport: TransportStats,
    /// Datagrams the last [`Session::update`] read from the socket: at most
    /// [`MOST_DATAGRAMS_PER_UPDATE`]; the rest wait in the kernel's buffer for the next.
    pub datagrams_read: usize,
}

/// A joined session: the protocol machine and its connection.
pub struct Session {
    /// What the server said.
    pub welcome: Welcome,
    /// The map's bytes.
    pub map: Arc<Vec<u8>>,
    /// The simulation, as the server runs it.
    pub sim: Arc<Sim>,
    machine: ClientMachine,
    transport: Transport,
    /// Conditioned datagrams, when a conditioner is set: (out, in).
    link: Option<(Conditioner<Bytes>, Conditioner<Bytes>)>,
    /// The runtime of a blocking session (its I/O driver notices the socket's readiness
    /// between the game's updates).
    runtime: Option<tokio::runtime::Runtime>,
    /// The `now` of the last update: what arrived by then is read as of then.
    last_update: Instant,
}

/// The address a client socket binds to reach `server`: any of this host's, of the
/// server's family, on a free port.
pub fn bind_address(server: SocketAddr) -> SocketAddr {
    if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    }
}

impl Session {
    /// Gives the machine everything that arrived, runs the ticks due by `now` and sends
    /// what they made. Call it every frame (or when [`Session::next_wake`] says).
    pub fn update(&mut self, now: Instant) {
        self.update_with(now, &mut |_, _| None);
    }

    /// [`Session::update`], asking `command` for each tick's command as it runs (see
    /// [`ClientMachine::handle_timeout_with`]).
    pub fn update_with(
        &mut self,
        now: Instant,
        command: &mut dyn FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    ) {
        self.last_update = now;
        let (machine, link) = (&mut self.machine, &mut self.link);
        self.transport.pump(now, |e| match e {
            LinkEvent::Control(b) => machine.handle_control(&b, now),
            LinkEvent::Datagram(b) => match link.as_mut() {
                Some((_, down)) => down.push(b, now),
                None => machine.handle_datagram(&b, now),
            },
            LinkEvent::Lost(code, why) => machine.handle_closed(code, &why),
            LinkEvent::Connected => {}
        });
        if let Some((_, down)) = self.link.as_mut() {
            while let Some(b) = down.pop(now) {
                self.machine.handle_datagram(&b, now);
            }
        }
        self.machine.set_rtt(self.transport.stats().rtt);
        self.machine.handle_timeout_with(now, command);
        self.flush(now);
    }

    fn flush(&mut self, now: Instant) {
        while let Some(out) = self.machine.poll_output() {
            match out {
                ClientOutput::Control(b) => self.transport.send_control(&b),
                ClientOutput::Datagram(b) => match self.link.as_mut() {
                    Some((up, _)) => up.push(Bytes::from(b), now),
                    None => self.transport.send_datagram(Bytes::from(b)),
                },
            }
        }
        if let Some((up, _)) = self.link.as_mut() {
            while let Some(b) = up.pop(now) {
                self.transport.send_datagram(b);
            }
        }
        self.transport.flush(now);
    }

    /// Waits until `until`, until QUIC's next timer, or until something arrives from the
    /// server (then [`Session::update`] has work).
    pub async fn wait(&mut self, until: Instant) {
        self.transport.wait(until).await;
    }

    /// When the next tick is due (or a conditioned datagram, or QUIC's next timer),
    /// while playing.
    pub fn next_wake(&mut self) -> Option<Instant> {
        let link = self
            .link
            .as_ref()
            .and_then(|(u, d)| match (u.next_due(), d.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            });
        [
            self.machine.poll_timeout(),
            link,
            self.transport.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Conditions for this session's datagrams, both ways (loss, delay, jitter,
    /// duplication), with the seed of their randomness: to feel prediction under lag.
    pub fn set_link(&mut self, link: Impairment, seed: u64) {
        self.link = link.active().then(|| {
            (
                Conditioner::new(link, seed),
                Conditioner::new(link, seed ^ 0x5eed),
            )
        });
    }

    /// Ticks to stay ahead of the server beyond the path's delay (2 by default).
    pub fn set_buffer_ticks(&mut self, ticks: f64) {
        self.machine.set_buffer_ticks(ticks);
    }

    /// Plays light: no prediction (see [`ClientSettings::light`](expel_protocol::client::ClientSettings::light)).
    pub fn set_light(&mut self, light: bool) {
        self.machine.set_light(light);
    }

    /// This frame's input: the command for every tick from the next one on.
    pub fn input(&mut self, cmd: MoveCommand) {
        self.machine.input(cmd);
    }

    /// The newest tick predicted (the next one gets the input given now): a tick
    /// numbers the server's steps, the same numbers as [`Delivered::tick`] and the
    /// rules' `Game::tick`.
    pub fn predicted_tick(&self) -> u64 {
        self.machine.predicted_tick()
    }

    /// Our player, predicted at the newest tick.
    pub fn local_player(&self) -> Option<PlayerState> {
        self.machine.local_player()
    }

    /// Where to draw our player: the prediction, with the last correction fading.
    pub fn display_origin(&self) -> Option<DVec3> {
        self.machine.display_origin()
    }

    /// The other players, interpolated for drawing at `now`.
    pub fn others(&self, now: Instant) -> BTreeMap<PlayerId, DVec3> {
        self.machine.others(self.machine.render_tick(now))
    }

    /// The other players as a game draws them at `now`: interpolated, facing their way
    /// (angles the short way round), crouched or not; a teleport is not swept across.
    pub fn others_drawn(&self, now: Instant) -> BTreeMap<PlayerId, Drawn> {
        self.machine.others_drawn(self.machine.render_tick(now))
    }

    /// The game's entities as a game draws them at `now`: interpolated like the other
    /// players (their kind, owner and flags from the nearer snapshot); our own
    /// projectiles where their prediction has them (see [`Session::launched`]).
    pub fn entities(&self, now: Instant) -> BTreeMap<EntityId, DrawnEntity> {
        self.machine.entities_drawn(self.machine.render_tick(now))
    }

    /// Predicts the projectiles our own commands launch with `launcher`, the same launch
    /// function the server's rules use (deathmatch's:
    /// `expel_modes::deathmatch::RocketLauncher`).
    pub fn set_launcher(&mut self, launcher: Box<dyn expel_protocol::client::Launcher>) {
        self.machine.set_launcher(launcher);
    }

    /// Our own projectiles, predicted, where to draw them now: from the tick their
    /// trigger was pulled, before the server's twin arrives, and while it lives (it is
    /// drawn at the same place in [`Session::entities`]).
    pub fn launched(&self) -> Vec<expel_protocol::client::DrawnLaunch> {
        self.machine.launched()
    }

    /// The game's own state of `player` (the type the server's rules registered), as the
    /// newest snapshot showed it: `Ok(None)` when not shown, an error when `T` is not the
    /// server's type or its bytes do not decode as one.
    pub fn player_state<T: Replicated>(&self, player: PlayerId) -> Result<Option<T>, StateError> {
        self.machine.player_state::<T>(player)
    }

    /// Every player's state the newest snapshot showed (the type the server's rules
    /// registered), in id order.
    pub fn player_states<T: Replicated>(&self) -> Result<BTreeMap<PlayerId, T>, StateError> {
        self.machine.player_states::<T>()
    }

    /// The game's own state of entity `id` (the type the server's rules registered), as
    /// the newest snapshot showed it; like [`Session::player_state`].
    pub fn entity_state<T: Replicated>(&self, id: EntityId) -> Result<Option<T>, StateError> {
        self.machine.entity_state::<T>(id)
    }

    /// The movers as predicted.
    pub fn movers(&self) -> &[MoverState] {
        self.machine.movers()
    }

    /// Sends the game's message on `channel` now. Refused when larger than
    /// [`MAX_MESSAGE_BYTES`] encoded, when not playing, or over the rate the server takes
    /// ([`MessageError::OverRate`]: try again later).
    pub fn send<T: serde::Serialize>(
        &mut self,
        channel: Channel,
        msg: &T,
        now: Instant,
    ) -> Result<(), MessageError> {
        let bytes = expel_protocol::messages::encode_message(msg)?;
        self.machine.send_message(channel, &bytes, now)?;
        self.flush(now);
        Ok(())
    }

    /// The server's next message that arrived and is due by the last
    /// [`Session::update`], with its channel and tick. A channel's messages are due as
    /// they arrive, or when the others' drawn view reaches their tick
    /// ([`Session::set_release`]). One that is not a `T` is counted (the stats'
    /// `messages`) and passed over.
    pub fn poll_message<T: serde::de::DeserializeOwned>(&mut self) -> Option<Delivered<T>> {
        loop {
            let m = self.machine.poll_message()?;
            match expel_protocol::messages::decode_message(&m.bytes) {
                Ok(message) => {
                    return Some(Delivered {
                        channel: m.channel,
                        tick: m.tick,
                        message,
                    })
                }
                Err(_) => self.machine.message_malformed(m.channel, self.last_update),
            }
        }
    }

    /// When the server's messages on `channel` are handed to the game: as they arrive
    /// (chat; the default), or when the drawn view reaches the tick they were sent at
    /// (the game's events: a frag told as the rocket is seen to reach its victim).
    pub fn set_release(&mut self, channel: Channel, release: Release) {
        self.machine.set_release(channel, release);
    }

    /// The next event (welcomed, joined, corrected, ended with the reason).
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.machine.poll_event()
    }

    /// Where the session stands.
    pub fn status(&self) -> &Status {
        self.machine.status()
    }

    /// What the session and its transport measured so far.
    pub fn diagnostics(&self) -> Diagnostics<'_> {
        Diagnostics {
            stats: self.machine.stats(),
            transport: self.transport.stats(),
            datagrams_read: self.transport.read(),
        }
    }

    /// The protocol machine underneath, for what this shell does not wrap (a shot's
    /// trace as this client drew it: `trace_seen`; diagnostics).
    pub fn machine(&self) -> &ClientMachine {
        &self.machine
    }

    /// The protocol machine underneath, to change what this shell does not wrap.
    pub fn machine_mut(&mut self) -> &mut ClientMachine {
        &mut self.machine
    }

    /// Makes this client misbehave (the bots' cheaters, to test a server's validation;
    /// only with the `cheats` feature, never in a game's build).
    #[cfg(feature = "cheats")]
    pub fn set_tamper(&mut self, t: Box<dyn expel_protocol::client::Tamper>) {
        self.machine.set_tamper(t);
    }

    /// Says goodbye (unless the server ended the session) and closes, waiting a moment
    /// for the server to read it.
    pub async fn close(mut self, reason: &str) {
        let by_server = matches!(self.machine.status(), Status::Ended(e) if e.by_server());
        if !by_server && !self.transport.is_lost() {
            self.machine.leave(reason);
            self.flush(Instant::now());
            // The server closes once it has read the goodbye; closing first could drop it.
            self.transport
                .settle(Duration::from_secs(1), Transport::is_lost)
                .await;
        }
        self.transport.close(Instant::now(), reason.as_bytes());
        // QUIC repeats the close while the server may still send; not for long.
        (self.transport)
            .settle(Duration::from_secs(1), Transport::is_drained)
            .await;
    }
}

impl Session {
    /// [`Session::close`] for a session from [`connect_blocking`].
    pub fn close_blocking(mut self, reason: &str) {
        if let Some(rt) = self.runtime.take() {
            rt.block_on(self.close(reason));
            rt.shutdown_background();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped without a close: tell the server at once rather than leave it to time
        // the connection out (one try; nothing waits).
        if !self.transport.is_lost() {
            self.transport.close(Instant::now(), b"dropped");
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A game keeps its session in a plain resource, shared by reference across threads.
    #[test]
    fn a_session_is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<Session>();
        shared::<Joining>();
    }
    use quinn_proto::{ConnectionClose, ConnectionError, TransportErrorCode};

    fn closed(code: TransportErrorCode) -> ConnectionError {
        ConnectionError::ConnectionClosed(ConnectionClose {
            error_code: code,
            frame_type: None,
            reason: bytes::Bytes::new(),
        })
    }

    #[test]
    fn a_refusal_at_the_door_reads_as_full_for_load_and_is_worth_another_try() {
        let (code, why) = close_reason(&closed(TransportErrorCode::CONNECTION_REFUSED));
        assert_eq!((code, why.as_str()), (None, REFUSED_AT_THE_DOOR));
        let e = ClientError::Refused {
            code: Code::FullLoad,
            detail: why,
        };
        assert!(e.is_transient());
        let (_, other) = close_reason(&closed(TransportErrorCode::PROTOCOL_VIOLATION));
        assert!(!other.contains("full"), "{other}");
    }
}
