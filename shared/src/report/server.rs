//! What the server machine tells its shell: what to do ([`Output`]), what happened
//! ([`Event`]) and its counters ([`ServerStats`]).

use crate::code::Code;
use crate::input::InputStats;
use crate::predict::replay::ReplayCounts;
use expel_core::movement::PlayerState;
use expel_core::sim::PlayerId;
use expel_core::validate::ViolationKind;
use std::time::Duration;

/// A connection, as the shell numbers them (never reused while the machine knows it).
pub type ConnId = u64;

/// The refusals counted in [`ServerStats::refusals`], in its order; their
/// [`Code::label`]s are the metric's label values.
pub const REFUSALS: [Code; 11] = [
    Code::Version,
    Code::TokenMalformed,
    Code::TokenVersion,
    Code::TokenForged,
    Code::TokenWrongServer,
    Code::TokenExpired,
    Code::TokenReplayed,
    Code::Full,
    Code::FullLoad,
    Code::PlayerInUse,
    Code::HelloTimeout,
];

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Write these bytes (whole frames) on the connection's control stream, in order.
    Control {
        /// To whom.
        conn: ConnId,
        /// The frames.
        bytes: Vec<u8>,
    },
    /// Stream the map after what was written before: the frames of
    /// [`map_frames`](crate::join::map_frames).
    Map {
        /// To whom.
        conn: ConnId,
    },
    /// Send one datagram (dropping it is allowed: snapshots are not retransmitted).
    Datagram {
        /// To whom.
        conn: ConnId,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// Finish writing what is queued and then `last` (within the shell's write deadline),
    /// then close the connection with this application code and reason. The reason goes
    /// in the close frame whatever becomes of the write, so a peer that stops reading
    /// still learns it. The machine has already forgotten the player.
    Close {
        /// Whom.
        conn: ConnId,
        /// The last words on the control stream (a refusal, kick or shutdown notice;
        /// empty for none).
        last: Vec<u8>,
        /// Why, for programs: its number is the close frame's application error code.
        code: Code,
        /// Why, for the close frame.
        reason: String,
    },
}

impl Output {
    /// The connection it is for.
    pub fn conn(&self) -> ConnId {
        match self {
            Output::Control { conn, .. }
            | Output::Map { conn }
            | Output::Datagram { conn, .. }
            | Output::Close { conn, .. } => *conn,
        }
    }
}

/// What happened, for logs and per-player tables.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A player joined (it is in the world once its map has arrived).
    Joined {
        /// Its connection.
        conn: ConnId,
        /// Its player.
        player: PlayerId,
        /// Whether the map is being sent.
        sending_map: bool,
    },
    /// A player left the world, and why.
    Left {
        /// Its player.
        player: PlayerId,
        /// Why.
        reason: String,
    },
    /// A connection was refused before joining.
    Refused {
        /// Its connection.
        conn: ConnId,
        /// Why, for programs.
        code: Code,
        /// Why, for people.
        reason: String,
    },
    /// The server ran late and has caught up: ticks from `from` on, `ticks` of them, ran
    /// up to `behind` after they were due; the catch-up took `took`. (Ticks skipped are
    /// counted in [`ServerStats::ticks_skipped`].)
    CaughtUp {
        /// The first tick run late.
        from: u64,
        /// Ticks from it to the one now.
        ticks: u64,
        /// How late the first one ran.
        behind: Duration,
        /// From the first late tick to caught up.
        took: Duration,
    },
    /// Move validation found a violation.
    Violation {
        /// Who.
        player: PlayerId,
        /// What kind.
        kind: ViolationKind,
        /// What was seen.
        evidence: String,
    },
}

/// Why a game message was dropped (not refused: nothing the sender did wrong by itself),
/// in the order of [`ServerStats::message_drops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageDrop {
    /// Unreliable, and not newer than one delivered before.
    Stale,
    /// The sender's queue for the game was full.
    QueueFull,
    /// Sent before its player was in the world.
    NotPlaying,
    /// The server runs no game to take it.
    NoGame,
    /// Outgoing: a sender's messages for one recipient over its fair share of that
    /// recipient's allowance (see [`outbox`](crate::messages::outbox)).
    OverShare,
}

impl MessageDrop {
    /// Every reason, in the order of the counts.
    pub const ALL: [MessageDrop; 5] = [
        MessageDrop::Stale,
        MessageDrop::QueueFull,
        MessageDrop::NotPlaying,
        MessageDrop::NoGame,
        MessageDrop::OverShare,
    ];

    /// As the metrics label it.
    pub fn label(self) -> &'static str {
        match self {
            MessageDrop::Stale => "stale",
            MessageDrop::QueueFull => "queue_full",
            MessageDrop::NotPlaying => "not_playing",
            MessageDrop::NoGame => "no_game",
            MessageDrop::OverShare => "over_share",
        }
    }
}

/// Counts of everything the machine saw and did: plain numbers, copied out by the shell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerStats {
    /// Ticks stepped.
    pub ticks: u64,
    /// The game's messages, per channel
    /// ([`Channel::index`](crate::messages::Channel::index)).
    pub messages: crate::messages::MessageCounts,
    /// Commands or messages the game's rules refused by their own checks
    /// ([`Game::refuse`](crate::server::Game::refuse)).
    pub rule_refusals: u64,
    /// Shots the rules judged as their shooters saw them
    /// ([`Game::shot_as_seen`](crate::server::Game::shot_as_seen)).
    pub shots_judged: u64,
    /// Of those, shots whose claimed view was clamped to one the client could have had.
    pub shot_views_clamped: u64,
    /// Of those, shots aimed through a player the client was never shown.
    pub shots_unseen: u64,
    /// Shots aimed at a player the shooter was shown, standing behind the wall the shot
    /// met (counted toward `unseen_target` like `shots_unseen`).
    pub shots_behind_walls: u64,
    /// Shots past a player's budget for a tick, refused.
    pub shots_over_budget: u64,
    /// Shots that left from where the shooter's client had itself, farther than
    /// [`SHOOTER_SLACK`](crate::server::SHOOTER_SLACK) from the server's place,
    /// because a re-run of its own prediction made that place.
    pub shot_places_replayed: u64,
    /// Shots whose client had itself farther than the slack from the server's place
    /// where no re-run bore it out (or none could be made): they left from the server's.
    pub shot_places_refused: u64,
    /// The game's messages dropped, by reason, in [`MessageDrop::ALL`] order.
    pub message_drops: [u64; MessageDrop::ALL.len()],
    /// Ticks stepped a period or more after they were due (caught up on).
    pub ticks_late: u64,
    /// Ticks skipped: the server was further behind than it catches up on.
    pub ticks_skipped: u64,
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagram bytes received.
    pub bytes_in: u64,
    /// Snapshot datagrams handed out to send.
    pub datagrams_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Snapshots not sent (no room within the size or byte budget).
    pub snapshot_drops: u64,
    /// Far players held where their clients' baselines carry them instead of sent.
    pub players_held: u64,
    /// Snapshots that held far players past their turn to fit their clients' bytes.
    pub snapshots_squeezed: u64,
    /// Entities' ends never told: left out of a client's snapshot past
    /// [`ENDS_PER_SNAPSHOT`](crate::snapshot::ENDS_PER_SNAPSHOT), or dropped from
    /// the server's log past [`ENDS_KEPT`](crate::snapshot::ENDS_KEPT).
    pub entity_ends_cut: u64,
    /// Ends of far entities a client never held (rockets that flew and ended beyond its
    /// exact reach), left out of its snapshot to fit its bytes.
    pub entity_ends_left: u64,
    /// What the input buffers saw, summed over every client that ever joined.
    pub inputs: InputStats,
    /// Predictions that differed from the server's state, and rejected claims.
    pub corrections: u64,
    /// Reported predictions the server re-ran from the client's snapshot and commands
    /// (those its own state did not bear out, and jumps).
    pub replays: u64,
    /// Of those, the ones it could not re-run (a command never arrived, the snapshot
    /// was too old).
    pub replays_unknown: u64,
    /// Of those, the ones whose report differed from the re-run (no unmodified client
    /// reports that).
    pub replays_apart: u64,
    /// Trusted-client claims accepted.
    pub claims_accepted: u64,
    /// Trusted-client claims rejected.
    pub claims_rejected: u64,
    /// Trusted-client ticks without a claim.
    pub claims_missing: u64,
    /// Datagrams that did not decode (or came before the player was in the world).
    pub malformed_datagrams: u64,
    /// Datagrams dropped undecoded: over their connection's allowance (a few times the
    /// input rate).
    pub datagrams_over_rate: u64,
    /// Control messages that did not decode or came out of turn.
    pub malformed_control: u64,
    /// Clients kicked.
    pub kicks: u64,
    /// Refusals by reason, in [`REFUSALS`] order.
    pub refusals: [u64; REFUSALS.len()],
    /// Violations by kind, in [`ViolationKind::ALL`] order.
    pub violations: [u64; ViolationKind::ALL.len()],
    /// Player slots held (welcomed, in the world or receiving the map).
    pub clients: u64,
    /// Connections that have not said hello yet.
    pub awaiting_hello: u64,
    /// The players the load allows now (`None`: no limit known; see
    /// [`ServerMachine::handle_load`](crate::server::ServerMachine::handle_load)).
    pub capacity: Option<u64>,
}

impl ReplayCounts for ServerStats {
    fn replayed(&mut self, own: Option<&PlayerState>, reported: &PlayerState) {
        self.replays += 1;
        match own {
            None => self.replays_unknown += 1,
            Some(o) if o != reported => self.replays_apart += 1,
            Some(_) => {}
        }
    }
}
