//! What the client's machine reports: what to send, what happened, how the session
//! stands and ended, and what it measured.

use crate::code::{Code, Kind};
use crate::messages::MessageCounts;
use crate::predict::PredictStats;
use expel_core::movement::PlayerState;
use expel_core::sim::PlayerId;
use std::collections::VecDeque;

/// What the shell must send.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientOutput {
    /// Bytes for the control stream.
    Control(Vec<u8>),
    /// One datagram.
    Datagram(Vec<u8>),
}

/// What happened.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientEvent {
    /// The server accepted us; the map follows when `sending_map`.
    Welcomed {
        /// Our player.
        player: PlayerId,
        /// Whether the map is coming.
        sending_map: bool,
    },
    /// The map is here and the simulation built: we are playing.
    Joined {
        /// Our player.
        player: PlayerId,
    },
    /// Another player entered the world (the server's roster, in view or not).
    PlayerJoined {
        /// The player.
        player: PlayerId,
    },
    /// Another player left the world.
    PlayerLeft {
        /// The player.
        player: PlayerId,
    },
    /// A game message arrived on `channel`:
    /// [`ClientMachine::poll_message`](crate::client::ClientMachine::poll_message) has it.
    Message {
        /// Its channel.
        channel: crate::messages::Channel,
    },
    /// Another player came into our view: the snapshots show it from now on (it joined
    /// near us, or came near enough to be among the nearest shown).
    EnteredView {
        /// The player.
        player: PlayerId,
    },
    /// Another player left our view (it went away, or left the server).
    LeftView {
        /// The player.
        player: PlayerId,
    },
    /// A game entity came into our view: the server spawned it, or it came near enough
    /// to be shown (see [`Scope`](crate::snapshot::Scope)).
    EntitySpawned {
        /// The entity.
        id: expel_core::sim::EntityId,
        /// As the snapshot shows it.
        entity: crate::snapshot::EntityView,
    },
    /// A game entity in view changed other than by moving: its kind, owner, whether it
    /// is at rest or moves, or the game's state of it.
    EntityChanged {
        /// The entity.
        id: expel_core::sim::EntityId,
        /// As the snapshot shows it now.
        entity: crate::snapshot::EntityView,
    },
    /// The game's own state of a player changed (or came into view):
    /// [`ClientMachine::player_state`](crate::client::ClientMachine::player_state) has it.
    PlayerStateChanged {
        /// The player.
        player: PlayerId,
    },
    /// A game entity left our view: it went out of scope, or the server removed it
    /// without an end to tell (one that ended is [`ClientEvent::EntityEnded`]).
    EntityDespawned {
        /// The entity.
        id: expel_core::sim::EntityId,
    },
    /// A game entity in view ended: where, when and why, as the server had it. One that
    /// started and ended between two of our snapshots comes as
    /// [`ClientEvent::EntitySpawned`] (from its start) and then this.
    EntityEnded {
        /// The end.
        end: crate::game::ends::EntityEnd,
    },
    /// Our command launched a projectile, predicted at once
    /// ([`ClientMachine::launched`](crate::client::ClientMachine::launched)).
    Launched {
        /// The client's own number for it.
        local: u32,
    },
    /// The server's entity `id` is our predicted projectile `local`.
    LaunchMatched {
        /// The client's own number for it.
        local: u32,
        /// The server's entity.
        id: expel_core::sim::EntityId,
    },
    /// The server never launched our predicted projectile `local`: no entity of ours of
    /// its kind spawned for its tick came, nor the end of one (the rules refused it). It
    /// vanishes where it was drawn.
    LaunchMissed {
        /// The client's own number for it.
        local: u32,
    },
    /// A snapshot differed from our prediction for its tick.
    Corrected {
        /// The snapshot's tick.
        tick: u64,
        /// How far off we were, in units.
        distance: f64,
    },
    /// The session ended.
    Ended(End),
}

/// How a session ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// The server refused the hello.
    Refused {
        /// Why, for programs.
        code: Code,
        /// Why, for people.
        detail: String,
    },
    /// The server removed us (cheating, silence, a bad message, the game's rules).
    Kicked {
        /// Why, for programs.
        code: Code,
        /// Why, for people.
        detail: String,
    },
    /// The server is shutting down.
    Shutdown(String),
    /// We said goodbye.
    Left(String),
    /// The server broke the protocol (or sent a map we cannot use).
    Protocol(String),
    /// The server plays a game whose state types are not the ones this client reads
    /// (both names given).
    OtherGame(String),
    /// The transport went away.
    Disconnected(String),
}

impl End {
    /// The server's last words as they came: their code's kind says which end it was
    /// (a code this build does not know keeps its number; one that ends a player before
    /// it joined is a refusal).
    pub fn from_server(code: Code, detail: String, joined: bool) -> End {
        match code.kind() {
            Kind::Shutdown => End::Shutdown(detail),
            Kind::Refused => End::Refused { code, detail },
            Kind::Kicked | Kind::Left if !joined => End::Refused { code, detail },
            Kind::Kicked => End::Kicked { code, detail },
            Kind::Left => End::Disconnected(detail),
        }
    }

    /// The reason, whatever the kind.
    pub fn reason(&self) -> &str {
        match self {
            End::Refused { detail: r, .. }
            | End::Kicked { detail: r, .. }
            | End::Shutdown(r)
            | End::Left(r)
            | End::Protocol(r)
            | End::OtherGame(r)
            | End::Disconnected(r) => r,
        }
    }

    /// The server's code, where the server ended it (or [`Code::Left`] for our goodbye).
    pub fn code(&self) -> Option<Code> {
        match self {
            End::Refused { code, .. } | End::Kicked { code, .. } => Some(*code),
            End::Shutdown(_) => Some(Code::Shutdown),
            End::Left(_) => Some(Code::Left),
            End::Protocol(_) | End::OtherGame(_) | End::Disconnected(_) => None,
        }
    }

    /// Whether the server ended it (a refusal, kick or shutdown).
    pub fn by_server(&self) -> bool {
        matches!(
            self,
            End::Refused { .. } | End::Kicked { .. } | End::Shutdown(_)
        )
    }

    /// Whether connecting again may work: the server went away or is restarting (a kick,
    /// a refusal, a broken protocol or our own goodbye are final).
    pub fn worth_reconnecting(&self) -> bool {
        matches!(self, End::Disconnected(_) | End::Shutdown(_))
    }
}

/// Where the session stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Hello sent; waiting for the welcome.
    Connecting,
    /// Welcomed; the map is arriving.
    ReceivingMap,
    /// In the world.
    Playing,
    /// Over.
    Ended(End),
}

/// What the session measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientStats {
    /// Ticks predicted and sent.
    pub ticks: u64,
    /// Prediction: snapshots, corrections, the largest correction.
    pub predict: PredictStats,
    /// Corrections that neither the server's contact with another player, nor a command
    /// it lacked, nor our own contact with one explains: the prediction itself was wrong.
    pub unexplained_corrections: u64,
    /// Snapshots that never arrived (gaps in the server's snapshot ticks).
    pub snapshots_lost: u64,
    /// Longest stretch of server ticks between two snapshots received.
    pub max_snapshot_gap: u64,
    /// Whether the last snapshot matched the prediction for its tick exactly.
    pub final_match: bool,
    /// The last snapshot's state of our player.
    pub final_state: Option<PlayerState>,
    /// The newest tick on which the server's move of our player touched another player
    /// (0: never).
    pub last_contact: u64,
    /// The newest tick on which the game's rules moved our player (a respawn; 0: never).
    pub last_moved: u64,
    /// Ticks the server had no command (or claim) from us, as it last said.
    pub inputs_missed: u64,
    /// The farthest east (largest x) the server ever held our player.
    pub max_server_x: Option<f64>,
    /// The round trip, seconds (the transport's, or measured from our commands' echo).
    pub rtt: f64,
    /// How early our commands reach the server, in ticks (the newest snapshot's word).
    pub input_lead: Option<i32>,
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Datagram bytes received.
    pub bytes_in: u64,
    /// Datagram bytes sent.
    pub bytes_out: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// The game's messages, per channel
    /// ([`Channel::index`](crate::messages::Channel::index)).
    pub messages: MessageCounts,
    /// The messages released with the drawn view, and how late.
    pub releases: Releases,
    /// The game's entities' ends taken, and those refused.
    pub ends: EndCounts,
    /// Teleports taken from the snapshots (our own player's and others').
    pub teleports: u64,
    /// The game's states, new or changed, that did not decode as the type this client
    /// registered for them ([`ClientSettings::states`](crate::client::ClientSettings::states)).
    pub states_undecodable: u64,
}

/// The entities' ends a client took from its snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndCounts {
    /// Ends told to the game.
    pub taken: u64,
    /// Of those, ends of entities no snapshot of ours had shown (their start came with
    /// the end).
    pub brief: u64,
    /// Ends repeated by later snapshots (an unacknowledged one is sent again).
    pub repeated: u64,
    /// Ends of entities never started (no start with them, none shown): refused.
    pub unknown: u64,
}

/// Events kept for the game to take; past it the oldest go.
pub const EVENTS_KEPT: usize = 4096;

/// Queues `e`, dropping the oldest past [`EVENTS_KEPT`] (the newest, such as the end,
/// stay).
pub(crate) fn push_event(events: &mut VecDeque<ClientEvent>, e: ClientEvent) {
    if events.len() >= EVENTS_KEPT {
        events.pop_front();
    }
    events.push_back(e);
}

/// How the messages released with the drawn view
/// ([`Release::Drawn`](crate::client::Release::Drawn)) met it: a message is due when the drawn
/// tick reaches its own, and a client that polls late hands it over past that.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Releases {
    /// Messages released with the drawn view.
    pub released: u64,
    /// The most ticks the drawn view had passed a message's tick when it was handed over
    /// (a game that polls once a frame sees up to a frame's worth).
    pub max_late_ticks: f64,
    /// Messages whose tick was beyond the newest snapshot's by more than a second when
    /// they arrived (a server's clock gone wrong): handed over at once, counted.
    pub future: u64,
    /// Messages whose tick lay further back than the snapshots a client keeps (a server
    /// that held them, or one gone wrong): due at once, counted.
    pub past: u64,
}

impl Releases {
    pub(crate) fn record(&mut self, tick: u64, drawn: f64) {
        self.released += 1;
        self.max_late_ticks = self.max_late_ticks.max(drawn - tick as f64);
    }
}
