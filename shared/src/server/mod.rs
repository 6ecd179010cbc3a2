//! The server's side of the protocol as a state machine: no sockets, no clock, no async.
//!
//! A shell (the `expel-server` crate over quinn, or a test's simulated network) tells it
//! what happened and when: a connection arrived ([`ServerMachine::connected`]), bytes arrived on
//! a connection's control stream ([`ServerMachine::handle_control`]) or as a datagram
//! ([`ServerMachine::handle_datagram`]), the map finished sending ([`ServerMachine::handle_map_sent`]),
//! a connection went away ([`ServerMachine::handle_closed`]), time passed
//! ([`ServerMachine::handle_timeout`], due at [`ServerMachine::poll_timeout`]). It reads out what to do
//! ([`ServerMachine::poll_output`]: control bytes and datagrams to send, the map to stream,
//! connections to close) and what happened ([`ServerMachine::poll_event`]: joins, leaves,
//! violations). Every figure an operator watches is in [`ServerMachine::stats`].
//!
//! Each tick drains nothing: inputs are judged as they arrive, against the tick the
//! server will step next and the wall-clock tick `now` gives, and buffered per client
//! ([`InputBuffer`]); the tick steps the [`Sim`] once and encodes each due client's
//! snapshot within its byte budget.

use super::frame::{encode_frame, FrameDecoder, MAX_CLIENT_FRAME};
use super::headroom::{Load, Window};
use super::input::{InputBuffer, InputStats};
use super::messages::{Channel, Mailbox, MessageError};
use super::rate::InputGate;
use super::snapshot::{Crowd, Feedback, SnapshotEncoder};
use crate::code::Code;
use crate::time::Instant;
use crate::wire::ServerControl;
use expel_core::movement::PlayerState;
use expel_core::sim::{History, PlayerId, Sim, SimScratch, WorldState};
use expel_core::validate::{SeenWorld, Validator, Violation, ViolationKind};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

mod control;
mod game;
mod intake;
mod log;
mod messages;
mod pace;
mod replaying;
pub(super) mod settings;
mod shot;
mod tick;
pub(super) mod wall;

use pace::Pace;

use super::join::server::Door;
use super::messages::outbox::Outbox;
use super::predict::replay::{CommandLog, Replayer};
use super::roster::server::Roster;
use super::shots::server::{Aim, Rewind};
use game::{Hosted, Notice};
use tick::add_inputs;

/// Seconds between the re-runs of one client's reports that the server's state does not
/// bear out (a loss makes a round trip's worth of them in a row).
const REPLAY_SPACING: f64 = 0.1;

pub use super::messages::outbox::Sender;
pub use super::report::server::{ConnId, Event, MessageDrop, Output, ServerStats, REFUSALS};
pub use super::shots::server::{
    SeenShot, ShotError, DEFAULT_INTERPOLATION_TICKS, MAX_INTERPOLATION_TICKS, MAX_SHOTS_PER_TICK,
    SHOOTER_REACH, SHOOTER_SLACK,
};
pub use crate::game::state::{Replicated, StateError, StateTypes};
pub use game::{Game, GameRules, RuleError, SpawnError, MAX_ENTITIES};
pub(crate) use log::Log;
pub use log::RecordingError;
pub use settings::{ServerSettings, SettingsError, DEFAULT_CLIENT_BUDGET, MIN_CLIENT_BUDGET};

/// Predictions (or claims) remembered per client until the server reaches their tick.
const CLAIMS: usize = 256;
/// Ticks stepped at most in one [`ServerMachine::handle_timeout`]: a server further behind
/// catches up over several calls, and the shell reads what arrived in between.
const MAX_CATCH_UP: u64 = 64;
/// How far behind the server may fall and still run every tick it owes (catching up on
/// movement alone). Past it (a process paused for longer, or a load no core can carry)
/// the oldest ticks are skipped: the players stand still through them and are corrected,
/// never flagged.
const MAX_BACKLOG: Duration = Duration::from_secs(5);
/// Datagram size assumed until the shell says otherwise (QUIC's minimum, less headers).
const DEFAULT_DATAGRAM: usize = 1200;

/// Where a connection stands.
#[derive(Debug)]
pub(super) enum Stage {
    /// Connected; its hello must come before the deadline.
    Hello { deadline: Instant },
    /// Welcomed; the map is on its way; the player enters the world once it has arrived.
    Map { player: PlayerId },
    /// In the world.
    Playing { player: PlayerId },
    /// Told to close; whatever it still sends is ignored.
    Closing,
}

#[derive(Debug)]
pub(super) struct Conn {
    stage: Stage,
    dec: FrameDecoder,
    max_datagram: usize,
    /// Its datagrams' allowance until its player enters the world, which takes it over
    /// (so a player's inputs pass theirs where they are judged, on any worker).
    gate: InputGate,
}

/// Per-player state of the tick.
#[derive(Debug)]
pub(super) struct Player {
    conn: ConnId,
    inputs: InputBuffer,
    /// What `inputs.stats` held when last added to the totals.
    counted: InputStats,
    /// `counted.late` at the last load report.
    late_reported: u64,
    snapshots: SnapshotEncoder,
    /// The commands as they arrived, to re-run the client's prediction from.
    commands: CommandLog,
    /// The first tick whose report the server may re-run when its state does not bear
    /// it out (one in [`REPLAY_SPACING`] seconds: the next one seldom tells more).
    replay_at: u64,
    /// States the client predicted (authoritative mode) or claims (trusted-client mode),
    /// by tick, to compare or judge once the server steps that tick.
    expected: BTreeMap<u64, (PlayerState, u64)>,
    /// Snapshot bytes this client may still receive (a token bucket).
    budget: f64,
    validator: Validator,
    /// Trusted-client mode: ticks since the last claim was judged.
    unjudged: u32,
    /// What each snapshot tells the client about its commands.
    feedback: Feedback,
    /// Trusted-client mode: a claim was rejected and no snapshot has told the client yet.
    correcting: bool,
    /// Trusted-client mode: the first snapshot that told the client of its newest
    /// correction. Claims sent before the client saw it were made from a state that no
    /// longer stands: they are dropped, not judged.
    correction_snapshot: u64,
    /// The tick it entered the world at: what a client that has acknowledged no snapshot
    /// yet has seen.
    entered: u64,
    last_input: Instant,
    /// Its inputs' allowance (its connection's until it entered the world).
    gate: InputGate,
    /// The game's messages with this player.
    mail: Mailbox,
    /// The game's messages waiting for this player's allowance, by sender.
    outbox: Outbox,
    /// Its shots as judged: their views' checks, its trips.
    aim: Aim,
    /// Its teleports, as its snapshots and everyone's count them.
    leaps: Leaps,
}

impl Player {
    /// What the client expected of tick `t`, forgetting it and every earlier tick's (a
    /// tick already stepped can never be checked). In place: the tree is not rebuilt
    /// every tick.
    fn take_expected(&mut self, t: u64) -> Option<(PlayerState, u64)> {
        while let Some(e) = self.expected.first_entry() {
            match e.key().cmp(&t) {
                std::cmp::Ordering::Less => {
                    e.remove();
                }
                std::cmp::Ordering::Equal => return Some(e.remove()),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

/// A player's moves that no movement makes in a tick: a respawn, a place by the rules, a
/// jump past what its speed and a mover's could cover. Snapshots carry the count (its
/// low byte), and a client that sees it change draws the player there at once, its own
/// or another, rather than sliding it across the map.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Leaps {
    count: u8,
    /// Where the last tick left it (none before its first).
    from: Option<[i32; 3]>,
    /// The rules moved it this tick.
    moved: bool,
}

impl Leaps {
    /// The tick left it at `to`, no farther than `limit` units a tick by its movement:
    /// counted if the rules moved it or it went farther.
    fn stepped(&mut self, to: [i32; 3], limit: f64) {
        let grid = |o| expel_core::movement::from_grid(o, expel_core::movement::POSITION_SCALE);
        let far = self
            .from
            .is_some_and(|f| grid(f).distance(grid(to)) > limit);
        if self.moved || far {
            self.count = self.count.wrapping_add(1);
        }
        self.from = Some(to);
        self.moved = false;
    }
}

/// The server's protocol state machine.
pub struct ServerMachine {
    sim: Arc<Sim>,
    settings: ServerSettings,
    map_hash: [u8; 32],
    world: WorldState,
    scratch: SimScratch,
    /// Re-runs clients' reported predictions.
    replayer: Replayer,
    /// The players for the snapshots of a tick, renewed in place tick after tick.
    crowd: Option<Crowd>,
    /// The players and movers after recent ticks (trusted mode: what claims were made
    /// against).
    seen: SeenWorld,
    /// Every player's recent past, for shots judged as their shooters saw them.
    history: History,
    /// A shot's scratch: the players shown, their boxes, the movers' poses.
    rewind: Rewind,
    conns: BTreeMap<ConnId, Conn>,
    players: BTreeMap<PlayerId, Player>,
    /// The game's rules, and what waits for them.
    game: Hosted,
    /// Who entered and left the world, for every client.
    roster: Roster,
    /// Who may come in: tokens, slots and the load's headroom.
    door: Door,
    /// When tick 0 was, and the shell's calls.
    wall: wall::Wall,
    /// The tick due, a catch-up under way, snapshots' and deadlines' turns.
    pace: Pace,
    outputs: VecDeque<Output>,
    events: VecDeque<Event>,
    stats: ServerStats,
    shut: bool,
    /// The match's recording, or the recording it replays.
    pub(crate) log: Log,
}

impl ServerMachine {
    /// A server whose tick 0 is `now`, which is `unix_now` in Unix seconds (token expiry
    /// is judged on that clock).
    pub fn new(
        sim: Arc<Sim>,
        settings: ServerSettings,
        now: Instant,
        unix_now: u64,
    ) -> Result<ServerMachine, SettingsError> {
        let rate = sim.config().tick_rate;
        if settings.snapshot_rate == 0 || settings.snapshot_rate > rate {
            return Err(SettingsError(format!(
                "snapshot rate {} must be 1 to the tick rate {rate}",
                settings.snapshot_rate
            )));
        }
        if settings.input_rate.is_some_and(|r| r == 0 || r > rate) {
            return Err(SettingsError(format!(
                "input rate {} must be 1 to the tick rate {rate}",
                settings.input_rate.unwrap_or_default()
            )));
        }
        if settings.client_budget < MIN_CLIENT_BUDGET {
            return Err(SettingsError(format!(
                "client budget {} B/s must be at least {MIN_CLIENT_BUDGET}",
                settings.client_budget
            )));
        }
        if settings.max_players == 0 || settings.secret.is_empty() {
            return Err(SettingsError(
                "max players and the secret must not be empty".into(),
            ));
        }
        let scratch = SimScratch::with_threads(settings.threads)
            .map_err(|e| SettingsError(format!("{} worker threads: {e}", settings.threads)))?;
        Ok(ServerMachine {
            world: sim.new_state(),
            map_hash: *blake3::hash(&settings.map_bytes).as_bytes(),
            sim,
            settings,
            scratch,
            replayer: Replayer::new(rate),
            crowd: None,
            seen: SeenWorld::default(),
            history: History::for_rate(rate),
            rewind: Rewind::default(),
            conns: BTreeMap::new(),
            players: BTreeMap::new(),
            game: Hosted::default(),
            roster: Roster::default(),
            door: Door::default(),
            wall: wall::Wall::new(now, unix_now, rate),
            pace: Pace::new(now),
            outputs: VecDeque::new(),
            events: VecDeque::new(),
            stats: ServerStats::default(),
            shut: false,
            log: Log::Off,
        })
    }

    /// The simulation.
    pub fn sim(&self) -> &Arc<Sim> {
        &self.sim
    }

    /// The world after the last tick.
    pub fn world(&self) -> &WorldState {
        &self.world
    }

    /// The settings.
    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// BLAKE3 of the map's bytes.
    pub fn map_hash(&self) -> [u8; 32] {
        self.map_hash
    }

    /// The counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// Takes the load the shell measured over a window (a quarter second or so): with
    /// what this machine saw in it (ticks run late, commands that came after their tick),
    /// that sets how many players it admits (see
    /// [`Headroom`](super::headroom::Headroom)). Joins past it are refused for load ("full_load").
    pub fn handle_load(&mut self, load: Load) {
        let mut late_players = 0;
        for p in self.players.values_mut() {
            late_players += usize::from(p.counted.late > p.late_reported);
            p.late_reported = p.counted.late;
        }
        let s = &self.stats;
        let totals = Window {
            players: s.clients as usize,
            ticks: s.ticks,
            late_ticks: s.ticks_late,
            joins: 0,
            commands: s.inputs.applied,
            late_commands: s.inputs.late,
            late_players,
        };
        self.stats.capacity = self.door.report_load(load, totals).map(|c| c as u64);
    }

    /// The next instant [`ServerMachine::handle_timeout`] has work (the next tick).
    pub fn poll_timeout(&self) -> Instant {
        self.wall.tick_at(self.world.tick + 1)
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The next thing that happened, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn rate(&self) -> u32 {
        self.sim.config().tick_rate
    }

    /// Input datagrams a second a client sends.
    fn input_rate(&self) -> u32 {
        (self.settings.input_rate).unwrap_or(crate::codec::DEFAULT_INPUT_RATE.min(self.rate()))
    }

    /// Ticks between a client's input datagrams.
    fn input_every(&self) -> u64 {
        crate::codec::input_every(self.rate(), self.input_rate())
    }

    /// A connection finished its transport handshake; its hello is due within the hello
    /// timeout. After [`ServerMachine::shutdown`] it is closed at once.
    pub fn connected(&mut self, conn: ConnId, now: Instant) {
        if self.shut {
            self.close(
                conn,
                Vec::new(),
                Code::Shutdown,
                "server shutting down".into(),
            );
            return;
        }
        let deadline = now + self.settings.hello_timeout;
        self.conns.insert(
            conn,
            Conn {
                stage: Stage::Hello { deadline },
                dec: FrameDecoder::with_limit(MAX_CLIENT_FRAME),
                max_datagram: DEFAULT_DATAGRAM,
                gate: InputGate::new(self.input_rate(), now),
            },
        );
        self.count_pending();
    }

    /// The largest datagram the connection can carry now (QUIC discovers the path's MTU).
    pub fn set_max_datagram(&mut self, conn: ConnId, bytes: usize) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.max_datagram = bytes;
        }
    }

    /// The connection went away (closed by the peer, lost, or closed after an
    /// [`Output::Close`]); its player leaves the world.
    pub fn handle_closed(&mut self, conn: ConnId, reason: &str) {
        if let Some(c) = self.conns.remove(&conn) {
            if let Stage::Map { player } | Stage::Playing { player } = c.stage {
                self.leave(player, reason.to_string());
            }
        }
        self.count_pending();
    }

    /// The threads a tick's per-player work runs on, if more than one. A shell that runs
    /// the machine on a thread of its own keeps that thread to the serial part (its
    /// per-thread CPU then tells the serial part apart); one that runs it inside them
    /// (`install`) has its thread share the per-player work.
    pub fn workers(&self) -> Option<std::sync::Arc<rayon::ThreadPool>> {
        self.scratch.pool().cloned()
    }

    /// Counts a violation and, past the threshold, kicks the player with the reason.
    fn violation(&mut self, id: PlayerId, v: &Violation) {
        // A replay counts the recorded violation (and its kick) instead.
        if log::reproduced(self, id, v) {
            return;
        }
        self.count_violation(id, v);
        let Some(s) = self.players.get_mut(&id) else {
            return;
        };
        if s.validator.record(v) {
            let conn = s.conn;
            self.kick(conn, Code::Violation(v.kind), kick_reason(v));
        }
    }

    /// Counts a violation and tells the shell of it (whatever the player's record says).
    fn count_violation(&mut self, id: PlayerId, v: &Violation) {
        log::violation(self, id, v);
        if let Some(i) = ViolationKind::ALL.iter().position(|k| *k == v.kind) {
            self.stats.violations[i] += 1;
        }
        self.events.push_back(Event::Violation {
            player: id,
            kind: v.kind,
            evidence: v.evidence.clone(),
        });
    }

    /// Tells every connection the server is shutting down and closes it; later
    /// connections are closed at once.
    pub fn shutdown(&mut self, reason: &str) {
        self.shut = true;
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in conns {
            let joined = self
                .conns
                .get(&conn)
                .is_some_and(|c| matches!(c.stage, Stage::Map { .. } | Stage::Playing { .. }));
            let last = if joined {
                encode_frame(&ServerControl::Ended {
                    code: Code::Shutdown,
                    detail: reason.to_string(),
                })
            } else {
                Vec::new()
            };
            self.close(conn, last, Code::Shutdown, format!("shutdown: {reason}"));
        }
        if let Log::Recording(r) = &mut self.log {
            r.end(reason);
        }
    }

    /// Refuses a connection before it joined: the code and reason on the control stream
    /// and in the close frame (a code of [`REFUSALS`] is counted under it).
    fn refuse(&mut self, conn: ConnId, code: Code, reason: String) {
        if let Some(i) = REFUSALS.iter().position(|r| *r == code) {
            self.stats.refusals[i] += 1;
        }
        let last = encode_frame(&ServerControl::Ended {
            code,
            detail: reason.clone(),
        });
        self.events.push_back(Event::Refused {
            conn,
            code,
            reason: reason.clone(),
        });
        self.close(conn, last, code, reason);
    }

    /// Removes a joined client: the code and reason on the control stream and in the
    /// close frame.
    fn kick(&mut self, conn: ConnId, code: Code, reason: String) {
        self.stats.kicks += 1;
        let last = encode_frame(&ServerControl::Ended {
            code,
            detail: reason.clone(),
        });
        self.close(conn, last, code, reason);
    }

    /// Forgets the connection's player and tells the shell to close it after `last`.
    fn close(&mut self, conn: ConnId, last: Vec<u8>, code: Code, reason: String) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let stage = std::mem::replace(&mut c.stage, Stage::Closing);
            if let Stage::Map { player } | Stage::Playing { player } = stage {
                self.leave(player, reason.clone());
            }
        }
        self.outputs.push_back(Output::Close {
            conn,
            last,
            code,
            reason,
        });
        self.count_pending();
    }

    fn leave(&mut self, player: PlayerId, reason: String) {
        let in_world = self.players.remove(&player).inspect(|s| {
            add_inputs(&mut self.stats.inputs, &s.inputs.stats, &s.counted);
        });
        self.world.remove_player(player);
        self.game.mail_waiting.remove(&player);
        self.game.player_states.remove(&player);
        self.stats.clients = self.stats.clients.saturating_sub(1);
        // A player still receiving the map never entered: nobody heard of it.
        if in_world.is_some() {
            log::left(self, player, &reason);
            self.roster.left(player);
            game::notify(self, Notice::Left(player, reason.clone()));
        }
        self.events.push_back(Event::Left { player, reason });
    }

    fn count_pending(&mut self) {
        self.stats.awaiting_hello = self
            .conns
            .values()
            .filter(|c| matches!(c.stage, Stage::Hello { .. }))
            .count() as u64;
    }

    /// The player enters the world on `conn` (a replay's players have no connection).
    fn enter(&mut self, conn: ConnId, id: PlayerId, now: Instant) {
        let spawn = (self.sim).join_state(&self.world, id, expel_core::movement::MoveMode::Walk);
        if self.sim.add_player(&mut self.world, id, spawn).is_err() {
            self.kick(conn, Code::NoRoom, "no room in the world".into());
            return;
        }
        log::joined(self, id);
        let input_rate = self.input_rate();
        let gate = match self.conns.get_mut(&conn) {
            Some(c) => {
                c.stage = Stage::Playing { player: id };
                std::mem::replace(&mut c.gate, InputGate::new(input_rate, now))
            }
            None => InputGate::new(input_rate, now),
        };
        let rate = self.rate();
        self.players.insert(
            id,
            Player {
                conn,
                inputs: InputBuffer::new(),
                counted: InputStats::default(),
                late_reported: 0,
                snapshots: SnapshotEncoder::new(),
                commands: CommandLog::new(
                    crate::predict::replay::REPLAY_SECONDS as usize * rate as usize,
                ),
                replay_at: 0,
                expected: BTreeMap::new(),
                budget: self.settings.client_budget as f64 / 4.0,
                validator: Validator::new(expel_core::validate::ValidationConfig::for_tick_rate(
                    rate,
                )),
                unjudged: 0,
                feedback: Feedback::default(),
                correcting: false,
                correction_snapshot: 0,
                entered: self.world.tick,
                last_input: now,
                gate,
                mail: messages::mailbox(now),
                outbox: Default::default(),
                aim: Default::default(),
                leaps: Default::default(),
            },
        );
        (self.roster).entered(conn, id, self.players.keys().copied(), &mut self.outputs);
        game::notify(self, Notice::Joined(id));
    }

    /// Records the match from now on: what each tick takes from outside the simulation,
    /// for [`crate::record::Replay`]. `rules` names the rules as a replay will find
    /// them (`"none"` without); `unix_now` stamps it. The bytes come out through
    /// [`ServerMachine::poll_record`].
    pub fn start_recording(&mut self, rules: &str, unix_now: u64) -> Result<(), RecordingError> {
        log::start(self, rules, unix_now)
    }

    /// The recording's next bytes to write, in order (none when not recording).
    pub fn poll_record(&mut self) -> Option<Vec<u8>> {
        self.log.recorder()?.take()
    }

    /// Why the recording stopped, if it did (the shell took too little of it).
    pub fn recording_failed(&self) -> Option<&str> {
        match &self.log {
            Log::Recording(r) => r.failed(),
            _ => None,
        }
    }

    /// Stops recording (a full disk): the match plays on.
    pub fn stop_recording(&mut self) {
        if matches!(self.log, Log::Recording(_)) {
            self.log = Log::Off;
        }
    }

    /// Replaying: applies what the network decided before the next tick.
    pub(crate) fn replay_between(&mut self) {
        replaying::drain(self);
    }

    /// Replaying: steps tick `tick` from the recording, at the time it was due.
    pub(crate) fn replay_tick(&mut self, tick: u64) {
        let at = self.wall.tick_at(tick);
        self.wall.called(at);
        self.step(false);
        self.outputs.clear();
    }

    /// Bytes arrived on the connection's control stream.
    pub fn handle_control(&mut self, conn: ConnId, bytes: &[u8], now: Instant) {
        control::handle_control(self, conn, bytes, now)
    }

    /// The map finished sending: the player enters the world, and its input clock starts.
    pub fn handle_map_sent(&mut self, conn: ConnId, now: Instant) {
        control::handle_map_sent(self, conn, now)
    }

    /// A datagram arrived on the connection. Past the connection's allowance an input is
    /// dropped undecoded; a connection that keeps sending past it is flagged for flooding.
    pub fn handle_datagram(&mut self, conn: ConnId, bytes: &[u8], now: Instant) {
        intake::handle_datagram(self, conn, bytes, now)
    }

    /// Datagrams that arrived, in the order they did (each as [`ServerMachine::handle_datagram`]).
    /// A shell that gathers them between ticks hands them over at once: each player's are
    /// then judged apart, over the tick's workers.
    pub fn handle_datagrams<'b>(
        &mut self,
        batch: impl IntoIterator<Item = (ConnId, &'b [u8], Instant)>,
    ) {
        intake::handle_datagrams(self, batch)
    }

    /// Sends the game's own message (its bytes) to `player` on `channel`.
    pub fn send_message(
        &mut self,
        player: PlayerId,
        channel: Channel,
        bytes: &[u8],
    ) -> Result<(), MessageError> {
        self.send_from(Sender::Game, player, channel, bytes)
    }

    /// Queues a message (its bytes) from `from` for `player` on `channel`: it leaves with
    /// the player's next snapshot, as far as its allowance goes.
    pub fn send_from(
        &mut self,
        from: Sender,
        player: PlayerId,
        channel: Channel,
        bytes: &[u8],
    ) -> Result<(), MessageError> {
        messages::send_from(self, from, player, channel, bytes)
    }

    /// The rules' summary for operators, when it changed since the last call.
    pub fn game_summary(&mut self) -> Option<String> {
        game::game_summary(self)
    }

    /// Installs the game's rules (replacing any before).
    pub fn set_rules(&mut self, rules: Box<dyn GameRules>) {
        game::set_rules(self, rules)
    }
}

/// Why a player whose record of violations passed the threshold is kicked.
fn kick_reason(v: &Violation) -> String {
    format!("kicked for cheating ({}: {})", v.kind.name(), v.evidence)
}
