//! The client's side of the protocol as a state machine: no sockets, no clock, no async.
//!
//! A shell (the `expel-client` crate over quinn, or a test's simulated network) feeds it
//! the control stream's bytes ([`ClientMachine::handle_control`]), datagrams
//! ([`ClientMachine::handle_datagram`]) and the passing of time ([`ClientMachine::handle_timeout`], due at
//! [`ClientMachine::poll_timeout`]); the game gives it this frame's input ([`ClientMachine::input`]). It
//! says hello, takes the welcome and the map (building the [`Sim`] from it), keeps its tick
//! ahead of the server's by the path's delay plus a small buffer (steering its tick period,
//! never stepping back), sends each tick's command with the previous few, predicts its own
//! player ([`Predictor`]), reconciles each snapshot and interpolates the others
//! ([`Interpolator`]). What to send comes out of [`ClientMachine::poll_output`], what happened
//! out of [`ClientMachine::poll_event`].

mod draw;
mod game;
mod messages;
mod shots;

pub use messages::Release;

pub use super::game::launched::{DrawnLaunch, LaunchStats, Launcher, CORRECTION_STEP, MAX_FLIGHTS};
pub use super::report::client::{
    ClientEvent, ClientOutput, ClientStats, End, EndCounts, Releases, Status, EVENTS_KEPT,
};
pub use super::roster::MAX_ROSTER;

use super::game::{launched::Launched, things::Things};
use super::input::clock::{Clock, MAX_CATCH_UP};
use super::input::phase::InputPhase;
use super::join::client::{build_sim, Joining};
use super::report::client::push_event;
use super::roster::client::Roster;

use crate::code::Code;
use crate::codec::{decode, encode, INPUT_REDUNDANCY, MAX_INPUT_COMMANDS, VERSION};
use crate::frame::{encode_frame, FrameDecoder};
use crate::game::state::StateTypes;
use crate::messages::{Channel, Mailbox, MESSAGE_QUEUE};
use crate::predict::Predictor;
use crate::snapshot::interp::Interpolator;
use crate::snapshot::SnapshotDecoder;
use crate::time::Instant;
use crate::wire::{
    ClientControl, ClientDatagram, InputMsg, MovementAuthority, ServerControl, ServerDatagram,
    ViewClaim, Welcome,
};
use expel_core::movement::{MoveCommand, PlayerState};
use expel_core::sim::{PlayerId, ShotView, Sim};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Round trip assumed before any is measured.
const FIRST_RTT: f64 = 0.05;
/// Send instants remembered per command tick, for the round-trip estimate.
const SENT_KEPT: usize = 256;
/// Silence from the server (no datagram while playing) after which it is taken as gone.
pub const SERVER_SILENCE: Duration = Duration::from_secs(5);

/// How a client plays.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// The connect token.
    pub token: String,
    /// A map the client already has (the server sends its map otherwise).
    pub have_map: Option<Arc<Vec<u8>>>,
    /// A simulation of `have_map` to reuse (many bots in one process share one), used
    /// when the server's map and movement settings match it.
    pub sim: Option<Arc<Sim>>,
    /// Ticks the client stays ahead of the server beyond the path's delay.
    pub buffer_ticks: f64,
    /// Ticks behind the newest snapshot that other players are drawn.
    pub interpolation_ticks: f64,
    /// How long a correction of our own player takes to fade to 1/e of itself on screen
    /// (a teleport is drawn at once).
    pub smoothing: Duration,
    /// Light: no prediction (see [`Predictor::set_light`]), for load tests whose clients
    /// must cost far less than the server. Commands go out as ever, snapshots are decoded
    /// and acknowledged, and our player is where the newest snapshot shows it; nobody is
    /// interpolated ([`ClientMachine::others`] stays empty). For an
    /// authoritative server only: a trusted client must claim predicted states.
    pub light: bool,
    /// The game's own state types this client reads: a server whose welcome names
    /// others ends the session at once ([`End::OtherGame`]). None: any will do.
    pub states: StateTypes,
}

impl ClientSettings {
    /// Settings for `token`, with no map of its own.
    pub fn new(token: impl Into<String>) -> Self {
        ClientSettings {
            token: token.into(),
            have_map: None,
            sim: None,
            buffer_ticks: 2.0,
            interpolation_ticks: 4.0,
            smoothing: crate::predict::SMOOTHING,
            light: false,
            states: StateTypes::new(),
        }
    }
}

/// A test's way to make a client misbehave, for proving that a server catches it: it may
/// rewrite each input message before it is sent, and override the tick period. A game's
/// client never sets one.
pub trait Tamper: Send + Sync {
    /// Rewrites `msg`, made at `tick` from `predictor`'s honest predictions.
    fn input(&mut self, sim: &Sim, predictor: &Predictor, tick: u64, msg: &mut InputMsg);
    /// The tick period (seconds) to use instead of the steered `period`.
    fn period(&mut self, period: f64) -> f64 {
        period
    }
}

/// The welcomed session: the map, the simulation, prediction and the clock.
pub(super) struct Play {
    welcome: Welcome,
    sim: Arc<Sim>,
    map: Arc<Vec<u8>>,
    predictor: Predictor,
    snapshots: SnapshotDecoder,
    interp: Interpolator,
    /// The newest tick predicted and sent, when the next is due, and what steers it.
    clock: Clock,
    /// Which ticks the input datagrams go on, when not every one.
    phase: InputPhase,
    /// Whether a tick has run yet. Until then `clock.tick` is provisional: building the map's
    /// model can take most of a second that the `now` it was started at cannot know of,
    /// so the clock is set again from the first tick's `now`.
    running: bool,
    /// The first tick sent.
    first_tick: u64,
    /// The newest snapshot's tick and when it arrived.
    newest: Option<(u64, Instant)>,
    /// The clock the others are drawn by.
    view: draw::ViewClock,
    /// First and last snapshot tick seen.
    span: Option<(u64, u64)>,
    seen_correction: u64,
    /// The view the others were drawn at when each recent command was made, and our
    /// player as predicted after the tick before, as reported to the server with it
    /// (what the server lets a shot of that command leave from).
    views: BTreeMap<u64, (ShotView, PlayerState)>,
    /// Our player as predicted after the last tick run.
    last_predicted: Option<PlayerState>,
    /// The simulation's working memory for the queries a game makes (see `shots.rs`).
    scratch: expel_core::SimScratch,
    /// The other players the newest snapshot showed.
    in_view: BTreeSet<PlayerId>,
    /// The game's things as the newest snapshot showed them.
    game: Things,
    /// When a datagram last came from the server.
    heard_at: Instant,
}

/// The ticks of lead the clock keeps beyond the path's delay and jitter: the buffer
/// asked for, and twice the ticks a command may wait for its datagram. The server reports
/// the lead of each datagram's newest command; the oldest new one in it waited
/// `input_every - 1` ticks more to go, and when that datagram is lost, its next carrier
/// goes `input_every` ticks later, not one: a buffer that covered a loss at one datagram
/// a tick covers it at one every few ticks with this much more.
fn lead_buffer(settings: &ClientSettings, welcome: &Welcome) -> f64 {
    settings.buffer_ticks + 2.0 * (welcome.input_every() - 1) as f64
}

/// The client's protocol state machine.
pub struct ClientMachine {
    settings: ClientSettings,
    status: Status,
    dec: FrameDecoder,
    /// The way in: the welcome, and the map as it arrives.
    join: Joining,
    play: Option<Play>,
    input: MoveCommand,
    outputs: VecDeque<ClientOutput>,
    events: VecDeque<ClientEvent>,
    stats: ClientStats,
    transport_rtt: Option<f64>,
    tamper: Option<Box<dyn Tamper>>,
    /// The game's messages both ways.
    mail: Mailbox,
    /// Our own projectiles, predicted.
    launched: Launched,
    /// The other players in the world.
    roster: Roster,
    /// When each channel's messages go to the game (by [`Channel::index`]).
    release: [Release; 2],
    /// The tick the others were drawn at by the last [`ClientMachine::handle_timeout`].
    drawn_tick: f64,
}

impl ClientMachine {
    /// A client that says hello at `now` (the hello is the first output).
    pub fn new(settings: ClientSettings, now: Instant) -> ClientMachine {
        let have_map = settings
            .have_map
            .as_ref()
            .map(|m| *blake3::hash(m).as_bytes());
        let hello = ClientControl::Hello {
            version: VERSION,
            token: settings.token.clone(),
            have_map,
        };
        let mut outputs = VecDeque::new();
        outputs.push_back(ClientOutput::Control(encode_frame(&hello)));
        ClientMachine {
            settings,
            status: Status::Connecting,
            dec: FrameDecoder::new(),
            join: Joining::new(now),
            play: None,
            input: MoveCommand::default(),
            outputs,
            events: VecDeque::new(),
            stats: ClientStats {
                rtt: FIRST_RTT,
                ..ClientStats::default()
            },
            transport_rtt: None,
            tamper: None,
            mail: Mailbox::new(now, MESSAGE_QUEUE),
            launched: Launched::default(),
            roster: Roster::default(),
            release: [Release::AtOnce; 2],
            drawn_tick: 0.0,
        }
    }

    /// Makes this client misbehave (tests of a server's validation only).
    pub fn set_tamper(&mut self, tamper: Box<dyn Tamper>) {
        self.tamper = Some(tamper);
    }

    /// Where the session stands.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The welcome, once it came.
    pub fn welcome(&self) -> Option<&Welcome> {
        self.join.welcome()
    }

    /// While the map arrives: bytes received and the map's size.
    pub fn map_progress(&self) -> Option<(u64, u64)> {
        self.join.progress(&self.status)
    }

    /// The other players in the world (whether or not our snapshots show them).
    pub fn roster(&self) -> &BTreeSet<PlayerId> {
        self.roster.players()
    }

    /// The simulation, once the map is here.
    pub fn sim(&self) -> Option<&Arc<Sim>> {
        self.play.as_ref().map(|p| &p.sim)
    }

    /// The map's bytes, once here.
    pub fn map(&self) -> Option<&Arc<Vec<u8>>> {
        self.play.as_ref().map(|p| &p.map)
    }

    /// What the session measured.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// The predictor (our player's predicted states), once playing.
    pub fn predictor(&self) -> Option<&Predictor> {
        self.play.as_ref().map(|p| &p.predictor)
    }

    /// The newest tick predicted.
    pub fn predicted_tick(&self) -> u64 {
        self.play.as_ref().map_or(0, |p| p.clock.tick)
    }

    /// Whether the server has reported a command of ours arriving in time: from then on
    /// the clock no longer jumps, and the commands the server steps are this client's,
    /// tick for tick (before, some it made were for ticks already gone, and a game's
    /// triggers pulled by them fired on the client alone).
    pub fn settled(&self) -> bool {
        self.play.as_ref().is_some_and(|p| p.clock.settled)
    }

    /// The next output to send, if any.
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        self.outputs.pop_front()
    }

    /// The next event, if any (at most [`EVENTS_KEPT`] wait: a game that never asks
    /// loses the oldest, never memory).
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// When [`ClientMachine::handle_timeout`] next has work (the next tick), while playing.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.status {
            Status::Playing => self.play.as_ref().map(|p| p.clock.next_at),
            _ => None,
        }
    }

    /// This frame's input: the command for every tick from the next one until another
    /// is given.
    pub fn input(&mut self, cmd: MoveCommand) {
        self.input = cmd;
    }

    /// Ticks to stay ahead of the server beyond the path's delay.
    pub fn set_buffer_ticks(&mut self, ticks: f64) {
        self.settings.buffer_ticks = ticks;
    }

    /// Plays light (see [`ClientSettings::light`]).
    pub fn set_light(&mut self, light: bool) {
        self.settings.light = light;
        if let Some(p) = self.play.as_mut() {
            p.predictor.set_light(light);
            p.snapshots.set_others(!light);
        }
    }

    /// The transport's round-trip estimate, when it has one (QUIC's is better than ours).
    pub fn set_rtt(&mut self, rtt: Duration) {
        self.transport_rtt = Some(rtt.as_secs_f64());
        self.stats.rtt = rtt.as_secs_f64();
    }

    /// Says goodbye on the control stream; the session is over.
    pub fn leave(&mut self, reason: &str) {
        if matches!(self.status, Status::Ended(_)) {
            return;
        }
        let bye = ClientControl::Bye {
            reason: reason.to_string(),
        };
        self.outputs
            .push_back(ClientOutput::Control(encode_frame(&bye)));
        self.end(End::Left(reason.to_string()));
    }

    /// The transport closed: the application error code (a [`Code`]'s number) and
    /// reason from the peer's close frame, if it sent one.
    pub fn handle_closed(&mut self, code: Option<u64>, reason: &str) {
        if matches!(self.status, Status::Ended(_)) {
            return;
        }
        let end = match code {
            Some(c) => End::from_server(Code::from_close(c), reason.to_string(), self.joined()),
            None => End::Disconnected(reason.to_string()),
        };
        self.end(end);
    }

    /// Whether the server welcomed us.
    fn joined(&self) -> bool {
        !matches!(self.status, Status::Connecting)
    }

    fn end(&mut self, end: End) {
        self.status = Status::Ended(end.clone());
        push_event(&mut self.events, ClientEvent::Ended(end));
    }

    /// Bytes arrived on the control stream.
    pub fn handle_control(&mut self, bytes: &[u8], now: Instant) {
        if matches!(self.status, Status::Ended(_)) {
            return;
        }
        self.dec.push(bytes);
        loop {
            if matches!(self.status, Status::Ended(_)) {
                return;
            }
            let msg = match self.dec.next_frame() {
                Ok(Some(f)) => decode::<ServerControl>("control", &f),
                Ok(None) => return,
                Err(e) => Err(e),
            };
            match msg {
                Ok(m) => self.control(m, now),
                Err(e) => self.end(End::Protocol(e.to_string())),
            }
        }
    }

    fn control(&mut self, msg: ServerControl, now: Instant) {
        match (msg, &self.status) {
            (ServerControl::Welcome(w), Status::Connecting) => self.welcomed(*w, now),
            (ServerControl::MapData { offset, bytes }, Status::ReceivingMap) => {
                self.map_chunk(offset, &bytes, now)
            }
            (ServerControl::Ended { code, detail }, _) => {
                let end = End::from_server(code, detail, self.joined());
                self.end(end)
            }
            (ServerControl::Roster { changes }, Status::ReceivingMap | Status::Playing) => {
                // A light client (a load-test bot) keeps no roster.
                if !self.settings.light {
                    let me = self.join.welcome().map(|w| w.player);
                    if let Err(end) = self.roster.apply(me, changes, &mut self.events) {
                        self.end(end);
                    }
                }
            }
            (ServerControl::Message { tick, bytes }, Status::Playing) => {
                // A server over the rate or the size is its own problem: refused, counted.
                let tick = messages::message_tick(self, tick);
                let counts = &mut self.stats.messages;
                let a = (self.mail).receive(Channel::Reliable, (0, tick), bytes, now, counts);
                messages::message_arrived(self, Channel::Reliable, a);
            }
            (other, _) => self.end(End::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn welcomed(&mut self, w: Welcome, now: Instant) {
        if let Err(e) = w.validate() {
            return self.end(End::Protocol(e.to_string()));
        }
        if let Some(why) = self.settings.states.mismatch(&w.states) {
            return self.end(End::OtherGame(why));
        }
        let event = ClientEvent::Welcomed {
            player: w.player,
            sending_map: w.sending_map,
        };
        let sending_map = w.sending_map;
        let ready = self.join.welcomed(w, self.settings.have_map.clone(), now);
        if self.transport_rtt.is_none() {
            self.stats.rtt = self.join.first_rtt();
        }
        push_event(&mut self.events, event);
        if sending_map {
            self.status = Status::ReceivingMap;
        }
        self.joined_with(ready, now);
    }

    fn map_chunk(&mut self, offset: u64, bytes: &[u8], now: Instant) {
        let ready = self.join.map_chunk(offset, bytes);
        self.joined_with(ready, now);
    }

    /// Plays on the map once it is here; a way in that failed ends the session.
    fn joined_with(&mut self, ready: Result<Option<Arc<Vec<u8>>>, End>, now: Instant) {
        match ready {
            Ok(Some(map)) => self.start(map, now),
            Ok(None) => {}
            Err(end) => self.end(end),
        }
    }

    /// Builds (or reuses) the simulation and starts the clock.
    fn start(&mut self, map: Arc<Vec<u8>>, now: Instant) {
        let Some(welcome) = self.join.welcome().cloned() else {
            return;
        };
        let reuse = self
            .settings
            .sim
            .clone()
            .filter(|s| !welcome.sending_map && *s.config() == welcome.config);
        let sim = match reuse {
            Some(s) => s,
            None => match build_sim(&map, &welcome) {
                Ok(s) => s,
                Err(e) => return self.end(End::Protocol(e)),
            },
        };
        let tick = self.opening_tick(&welcome, now);
        let player = welcome.player;
        let mut predictor = Predictor::new(sim.clone(), player);
        predictor.set_light(self.settings.light);
        let mut snapshots = SnapshotDecoder::new();
        snapshots.set_others(!self.settings.light);
        self.play = Some(Play {
            predictor,
            sim,
            map,
            snapshots,
            interp: Interpolator::new(),
            clock: Clock::new(welcome.tick_rate(), tick, now),
            phase: InputPhase::new(welcome.input_every()),
            running: false,
            first_tick: tick + 1,
            heard_at: now,
            newest: None,
            view: Default::default(),
            span: None,
            seen_correction: 0,
            views: BTreeMap::new(),
            last_predicted: None,
            scratch: expel_core::SimScratch::new(),
            in_view: BTreeSet::new(),
            game: Default::default(),
            welcome,
        });
        self.status = Status::Playing;
        push_event(&mut self.events, ClientEvent::Joined { player });
    }

    /// Where the clock starts at `now` (see [`Joining::opening_tick`]).
    fn opening_tick(&self, welcome: &Welcome, now: Instant) -> u64 {
        let buffer = lead_buffer(&self.settings, welcome);
        (self.join).opening_tick(welcome, self.stats.rtt, buffer, now)
    }

    /// Runs the ticks due by `now`: each predicts this tick's command and sends it with
    /// the previous few.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_with(now, &mut |_, _| None);
    }

    /// [`ClientMachine::handle_timeout`], asking `command` for each tick's command just before
    /// that tick runs (given the tick and our player as predicted so far; `None` keeps the
    /// held command). Several ticks can fall due at once after a stall, and a script must
    /// still give each its own command.
    pub fn handle_timeout_with(
        &mut self,
        now: Instant,
        command: &mut dyn FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    ) {
        if self.status != Status::Playing {
            return;
        }
        if let Some(w) = self
            .play
            .as_ref()
            .filter(|p| !p.running)
            .map(|p| &p.welcome)
        {
            let tick = self.opening_tick(w, now);
            if let Some(p) = self.play.as_mut() {
                p.running = true;
                p.clock.tick = p.clock.tick.max(tick);
                p.first_tick = p.clock.tick + 1;
                p.clock.next_at = now;
            }
        }
        let drawn_at = self.render_tick(now);
        self.drawn_tick = drawn_at;
        let Some(p) = self.play.as_mut() else {
            return;
        };
        // A server that sends nothing for this long is gone (killed, or the path cut): a
        // QUIC idle timeout would take many seconds longer, and a restarted server cannot
        // reset a connection it never knew.
        if now.saturating_duration_since(p.heard_at) > SERVER_SILENCE {
            let why = format!("no word from the server for {} s", SERVER_SILENCE.as_secs());
            self.end(End::Disconnected(why));
            return;
        }
        let mut n = 0;
        while p.clock.next_at <= now {
            n += 1;
            if n > MAX_CATCH_UP {
                p.clock.next_at = now + Duration::from_secs_f64(p.clock.period);
                break;
            }
            p.clock.next_at += Duration::from_secs_f64(p.clock.period);
            p.clock.tick += 1;
            let tick = p.clock.tick;
            let before = p.predictor.state();
            if let Some(c) = command(tick, before.as_ref()) {
                self.input = c;
            }
            let cmd = self.input;
            let predicted = p.predictor.command(tick, cmd);
            let from = p.last_predicted.or(before);
            p.last_predicted = predicted;
            let view = p.interp.view(drawn_at);
            if let (Some(v), Some(b)) = (view, from) {
                p.views.insert(tick, (v, b));
            }
            // Our projectiles meet the others where we draw them.
            let boxes = match view {
                Some(v) if self.launched.predicts() => shots::boxes_drawn(&p.sim, &p.interp, &v),
                _ => Vec::new(),
            };
            let (launched, events) = (&mut self.launched, &mut self.events);
            let (sim, pred) = (&p.sim, &p.predictor);
            launched.tick(sim, pred, tick, before.as_ref(), &cmd, &boxes, events);
            let elapsed = Duration::from_secs_f64(p.clock.period);
            p.predictor.frame(elapsed, self.settings.smoothing);
            self.stats.ticks += 1;
            // One datagram every `every` ticks (see `InputPhase` for which): the commands
            // since the last, and the few datagrams' worth before them again, none from
            // before the first.
            let every = p.welcome.input_every();
            if !p.phase.sends(tick) {
                continue;
            }
            let carried = (INPUT_REDUNDANCY as u64 * every).min(MAX_INPUT_COMMANDS as u64);
            let first = tick.saturating_sub(carried - 1).max(p.first_tick);
            // Trusted-client mode: the state reached after each command, as claimed.
            let claims = if p.welcome.movement == MovementAuthority::Client {
                p.predictor.states_between(first, tick).unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut msg = InputMsg {
                ack: p.snapshots.newest(),
                first_tick: first,
                commands: p.predictor.commands_between(first, tick),
                predicted,
                claims,
                views: Vec::new(),
            };
            let commands = &msg.commands;
            if commands.iter().any(|c| c.actions != 0) {
                let view = |t: u64| ViewClaim::of(t, p.views.get(&t).map(|v| &v.0));
                msg.views = (first..=tick).map(view).collect();
                // A shot leaves from where we had ourselves after the tick before: with
                // one datagram every few ticks, only the newest state would be reported
                // otherwise, and a shot of the next tick would leave from a guess.
                if msg.claims.is_empty() && every > 1 {
                    msg.claims = p.predictor.states_between(first, tick).unwrap_or_default();
                }
            }
            if let Some(t) = self.tamper.as_mut() {
                t.input(&p.sim, &p.predictor, tick, &mut msg);
            }
            let bytes = encode(&ClientDatagram::Input(msg));
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += bytes.len() as u64;
            self.outputs.push_back(ClientOutput::Datagram(bytes));
            p.clock.sent_at.entry(tick).or_insert(now);
            while p.clock.sent_at.len() > SENT_KEPT {
                p.clock.sent_at.pop_first();
            }
            while p.views.len() > SENT_KEPT {
                p.views.pop_first();
            }
        }
    }

    /// A datagram arrived.
    pub fn handle_datagram(&mut self, bytes: &[u8], now: Instant) {
        if self.status != Status::Playing {
            return;
        }
        let Some(p) = self.play.as_mut() else {
            return;
        };
        p.heard_at = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += bytes.len() as u64;
        if bytes.first() == Some(&ServerDatagram::MESSAGE_TAG) {
            match decode::<ServerDatagram>("message", bytes) {
                Ok(ServerDatagram::Message { seq, tick, bytes }) => {
                    let tick = messages::message_tick(self, tick);
                    let counts = &mut self.stats.messages;
                    let a =
                        (self.mail).receive(Channel::Unreliable, (seq, tick), bytes, now, counts);
                    messages::message_arrived(self, Channel::Unreliable, a);
                }
                _ => self.stats.malformed += 1,
            }
            return;
        }
        let mut snap = match p.snapshots.decode(bytes) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let (next_tick, period) = (p.clock.tick + 1, p.clock.period);
        p.phase.heard(now, next_tick, p.clock.next_at, period);
        let st = &mut self.stats;
        let x = snap.own.origin().x;
        st.max_server_x = Some(st.max_server_x.map_or(x, |m| m.max(x)));
        // A trusted client's own path stands unless the server rejected a claim: a state
        // the server holds while claims are in flight is no correction. A snapshot past
        // every tick we predicted (our host froze while the server went on) has no claims
        // in flight: the state the server held is where we stand.
        let trusted = p.welcome.movement == MovementAuthority::Client;
        let own_path = trusted
            && snap.feedback.corrected <= p.seen_correction
            && p.predictor.ready()
            && p.predictor.predicted_at(snap.tick).is_some();
        p.seen_correction = p.seen_correction.max(snap.feedback.corrected);
        if let Some((_, last)) = p.span {
            st.max_snapshot_gap = st.max_snapshot_gap.max(snap.tick - last);
        }
        p.span = Some(
            p.span
                .map_or((snap.tick, snap.tick), |(a, _)| (a, snap.tick)),
        );
        // A correction is explained when the server's move met another player, the server
        // lacked our command, the game's rules moved us, or our prediction met a player
        // where the last snapshot showed it; any other is the prediction's own error.
        let before = p.predictor.base_tick();
        let met = p.predictor.touched_player(before, snap.tick);
        let correction = if own_path {
            p.predictor.observe(&snap);
            if let Some(s) = p.predictor.predicted_at(snap.tick) {
                snap.own = s;
            }
            None
        } else {
            p.predictor.snapshot(&snap)
        };
        if let Some(distance) = correction {
            let told = [
                snap.feedback.contact,
                snap.feedback.missed,
                snap.feedback.moved,
            ];
            if told.iter().all(|t| *t <= before) && !met {
                st.unexplained_corrections += 1;
            }
            push_event(
                &mut self.events,
                ClientEvent::Corrected {
                    tick: snap.tick,
                    distance,
                },
            );
        }
        st.predict = p.predictor.stats;
        st.teleports = p.predictor.teleports;
        st.final_match = correction.is_none();
        st.final_state = Some(snap.own);
        st.input_lead = snap.feedback.input_lead;
        st.last_contact = st.last_contact.max(snap.feedback.contact);
        st.last_moved = st.last_moved.max(snap.feedback.moved);
        st.inputs_missed = st.inputs_missed.max(snap.feedback.missed_total);
        let every = u64::from((p.welcome.tick_rate() / p.welcome.snapshot_rate.max(1)).max(1));
        if let Some((a, b)) = p.span {
            st.snapshots_lost = ((b - a) / every + 1).saturating_sub(st.predict.snapshots);
        }
        st.states_undecodable += p.game.undecodable(&snap, &self.settings.states);
        p.game.take(&snap, &mut self.events, &mut st.ends);
        let me = p.welcome.player;
        (self.launched).snapshot(&p.sim, &p.predictor, me, &snap, &mut self.events);
        // A light client draws nothing.
        if !self.settings.light {
            p.interp.push(&snap);
            let now_in: BTreeSet<PlayerId> = snap.players.keys().copied().collect();
            for &player in now_in.difference(&p.in_view) {
                push_event(&mut self.events, ClientEvent::EnteredView { player });
            }
            for &player in p.in_view.difference(&now_in) {
                push_event(&mut self.events, ClientEvent::LeftView { player });
            }
            p.in_view = now_in;
        }
        // The view as drawn until now, then steered to this snapshot.
        let delay = self.settings.interpolation_ticks;
        let shown = (p.newest).map(|(t, _)| p.view.shown(now, p.clock.period, t as f64 - delay));
        let target = snap.tick as f64 - delay;
        p.view.steer(now, shown, target);
        p.newest = Some((snap.tick, now));
        // Our own round-trip estimate, when the transport gives none: from sending the
        // command the server last applied to seeing it applied.
        if self.transport_rtt.is_none() {
            if let Some(sent) = p.clock.sent_at.get(&snap.feedback.last_command) {
                let sample = now.saturating_duration_since(*sent).as_secs_f64();
                st.rtt += (sample - st.rtt) * 0.125;
            }
        }
        if p.running {
            let buffer = lead_buffer(&self.settings, &p.welcome);
            (p.clock).steer(&snap, st.rtt, buffer, now);
        }
        if let Some(t) = self.tamper.as_mut() {
            p.clock.period = t.period(p.clock.period);
        }
    }
}
