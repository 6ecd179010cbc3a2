//! The game's own code in the server: its rules ([`GameRules`]), told of players joining
//! and leaving and run once a tick, and its messages both ways ([`Game`]). They run
//! inside the machine, at fixed points of the tick, in player order: the same inputs
//! give the same state and the same messages.

use super::{Output, Server};
use crate::collision::{Contents, TraceScratch};
use crate::movement::{flags, MoveMode, PlayerState};
use crate::protocol::channel::{
    decode_message, encode_message, Arrival, Channel, Mailbox, MessageError,
};
use crate::protocol::frame::encode_frame;
use crate::protocol::{encode, MovementAuthority, ServerControl, ServerDatagram};
use crate::sim::{in_range, PlayerId, WorldState};
use glam::DVec3;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

/// Messages from one player waiting for the game, at most: at the rate a client may send,
/// a game that takes them every tick never comes near it.
const PLAYER_QUEUE: usize = 64;
/// Why a client that abuses messages is kicked.
const ABUSE: &str = "kicked for abusing messages (too many, too large or malformed)";

/// A game's rules, run by the server's machine (see the module docs).
pub trait GameRules: Send + Sync {
    /// A player entered the world (its map has arrived).
    fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
        let _ = (game, player);
    }

    /// A player left the world (its reason given).
    fn left(&mut self, game: &mut Game<'_>, player: PlayerId, reason: &str) {
        let _ = (game, player, reason);
    }

    /// Once a tick, before the simulation steps it: take the players' messages, read the
    /// world, send messages.
    fn tick(&mut self, game: &mut Game<'_>);

    /// The game's state for operators (JSON), when it changed since the last call: the
    /// server shows it at `/game.json` and in the live view.
    fn summary(&mut self) -> Option<String> {
        None
    }
}

/// Why the rules could not do what they asked to a player.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The player is not in the world (it left, or never joined).
    #[error("player {0} is not in the world")]
    NotPlaying(PlayerId),
    /// The place asked for cannot hold the player.
    #[error("player {player} cannot stand at {at:?}: {why}")]
    Blocked {
        /// The player.
        player: PlayerId,
        /// The place asked for.
        at: [f64; 3],
        /// What is in the way.
        why: &'static str,
    },
}

/// What happened to players while the rules were busy, for them once they are free.
pub(super) enum Notice {
    Joined(PlayerId),
    Left(PlayerId, String),
}

/// The game's rules as the server holds them, and what waits for them.
#[derive(Default)]
pub(super) struct Hosted {
    rules: Option<Box<dyn GameRules>>,
    /// The rules are running (taken out of `rules`): notices wait for them to return.
    running: bool,
    notices: VecDeque<Notice>,
    /// Players with messages waiting for the game.
    pub(super) mail_waiting: BTreeSet<PlayerId>,
}

/// What the game's rules may do: the server, as the game sees it.
pub struct Game<'a> {
    server: &'a mut Server,
    now: Instant,
}

impl Game<'_> {
    /// The tick about to be stepped.
    pub fn tick(&self) -> u64 {
        self.server.world.tick + 1
    }

    /// The world as the last tick left it (players and movers).
    pub fn world(&self) -> &WorldState {
        &self.server.world
    }

    /// The simulation: the map, its spawn points, the movement.
    pub fn sim(&self) -> &crate::Sim {
        &self.server.sim
    }

    /// The players in the world, in id order.
    pub fn players(&self) -> impl Iterator<Item = PlayerId> + '_ {
        self.server.players.keys().copied()
    }

    /// Sends `msg` to `player` on `channel`.
    pub fn send<T: Serialize>(
        &mut self,
        player: PlayerId,
        channel: Channel,
        msg: &T,
    ) -> Result<(), MessageError> {
        let bytes = encode_message(msg)?;
        self.server.send_message(player, channel, &bytes, self.now)
    }

    /// Sends `msg` to every player in the world on `channel`: how many it went to (a
    /// player over its rate misses it; on the reliable channel that is worth knowing).
    pub fn broadcast<T: Serialize>(
        &mut self,
        channel: Channel,
        msg: &T,
    ) -> Result<usize, MessageError> {
        let bytes = encode_message(msg)?;
        let players: Vec<PlayerId> = self.players().collect();
        Ok(players
            .into_iter()
            .filter(|p| (self.server.send_message(*p, channel, &bytes, self.now)).is_ok())
            .count())
    }

    /// Puts `player` at rest at `origin` (its mode and crouch kept). Refused where its box
    /// would meet solid or another player (the two would be pushed apart by a move no
    /// prediction makes), or lie outside the map. Its client is corrected to it, and
    /// neither validation mode holds its reports from before against it.
    pub fn place(&mut self, player: PlayerId, origin: DVec3) -> Result<(), RuleError> {
        let now = self.state(player)?;
        let mut to = PlayerState::at(origin);
        to.mode = now.mode;
        to.flags = now.flags & flags::CROUCHED;
        let blocked = |why| RuleError::Blocked {
            player,
            at: origin.to_array(),
            why,
        };
        let sim = &self.server.sim;
        if !in_range(origin) || !sim.in_arena(origin) {
            return Err(blocked("outside the map"));
        }
        let hull = sim.movement().hull(&to);
        let walks = sim.player_box(player, &to).is_some();
        let mut scratch = TraceScratch::new();
        if walks
            && sim
                .map()
                .position_solid(hull, to.origin(), Contents::PLAYER, &mut scratch)
        {
            return Err(blocked("solid"));
        }
        let mine = sim.movement().player_box(&to);
        let world = &self.server.world;
        let met = walks
            && world.players.iter().any(|(id, o)| {
                *id != player
                    && sim
                        .player_box(*id, &o.state)
                        .is_some_and(|b| b.bounds.overlaps(&mine))
            });
        if met {
            return Err(blocked("another player"));
        }
        self.set_state(player, to);
        Ok(())
    }

    /// Puts `player` back at a spawn point where nobody stands, at rest, as a player
    /// joining would be.
    pub fn respawn(&mut self, player: PlayerId) -> Result<(), RuleError> {
        let mode = self.state(player)?.mode;
        let to = self.server.sim.join_state(&self.server.world, player, mode);
        self.set_state(player, to);
        Ok(())
    }

    /// Sets `player`'s movement mode: [`MoveMode::Frozen`] holds it where it is, at rest,
    /// until the rules set another. Its client predicts it in the new mode at once.
    pub fn set_mode(&mut self, player: PlayerId, mode: MoveMode) -> Result<(), RuleError> {
        let mut to = self.state(player)?;
        if to.mode == mode {
            return Ok(());
        }
        to.mode = mode;
        if mode == MoveMode::Frozen {
            to.velocity = [0; 3];
        }
        self.set_state(player, to);
        Ok(())
    }

    /// Takes `player` out of the game: its connection is closed with `reason` (a kick),
    /// and the rules hear of it through [`GameRules::left`].
    pub fn remove(&mut self, player: PlayerId, reason: &str) -> Result<(), RuleError> {
        let conn = self
            .server
            .players
            .get(&player)
            .ok_or(RuleError::NotPlaying(player))?
            .conn;
        self.server.kick(conn, reason.to_string());
        Ok(())
    }

    fn state(&self, player: PlayerId) -> Result<PlayerState, RuleError> {
        let playing = self.server.players.contains_key(&player);
        match self.server.world.player(player) {
            Some(p) if playing => Ok(*p),
            _ => Err(RuleError::NotPlaying(player)),
        }
    }

    /// Sets a player's state by the rules: the next tick steps it from there, and its
    /// client is corrected to it (see [`Server::moved_by_rules`]).
    fn set_state(&mut self, player: PlayerId, to: PlayerState) {
        if let Some(slot) = self.server.world.players.get_mut(&player) {
            slot.state = to;
        }
        self.server.moved_by_rules(player);
    }

    /// The next message from a player, in player order and then as they came. One that
    /// is not a `T` is counted as refused (a client that keeps sending such is kicked)
    /// and passed over.
    pub fn poll<T: DeserializeOwned>(&mut self) -> Option<(PlayerId, Channel, T)> {
        loop {
            let (player, channel, bytes) = self.server.take_message()?;
            match decode_message::<T>(&bytes) {
                Ok(m) => return Some((player, channel, m)),
                Err(_) => self.server.message_malformed(player, channel, self.now),
            }
        }
    }
}

impl Server {
    /// The rules' summary for operators, when it changed since the last call.
    pub fn game_summary(&mut self) -> Option<String> {
        self.game.rules.as_mut()?.summary()
    }

    /// Installs the game's rules (replacing any before).
    pub fn set_rules(&mut self, rules: Box<dyn GameRules>) {
        self.game.rules = Some(rules);
    }

    /// Runs `f` on the rules with the game's view of the server (nothing when there are
    /// no rules), then tells them of players who joined or left meanwhile (a player the
    /// rules kicked, say), in order.
    pub(super) fn with_rules(
        &mut self,
        now: Instant,
        f: impl FnOnce(&mut dyn GameRules, &mut Game<'_>),
    ) {
        let Some(mut rules) = self.game.rules.take() else {
            return;
        };
        self.game.running = true;
        let mut game = Game { server: self, now };
        f(rules.as_mut(), &mut game);
        while let Some(n) = game.server.game.notices.pop_front() {
            match n {
                Notice::Joined(p) => rules.joined(&mut game, p),
                Notice::Left(p, reason) => rules.left(&mut game, p, &reason),
            }
        }
        self.game.running = false;
        self.game.rules.get_or_insert(rules);
    }

    /// Tells the rules (if any) that a player joined or left: now, or when they return
    /// if they are running.
    pub(super) fn notify(&mut self, notice: Notice) {
        if self.game.rules.is_none() && !self.game.running {
            return;
        }
        self.game.notices.push_back(notice);
        if !self.game.running {
            self.with_rules(self.last_call, |_, _| {});
        }
    }

    /// The rules set `player`'s state: its client learns it from the next snapshot like a
    /// correction, and nothing it reported or claimed from before counts against it.
    fn moved_by_rules(&mut self, player: PlayerId) {
        let tick = self.world.tick + 1;
        let trusted = self.settings.movement == MovementAuthority::Client;
        let Some(s) = self.players.get_mut(&player) else {
            return;
        };
        s.validator.moved_by_server(tick);
        if trusted {
            s.correcting = true;
            s.feedback.corrected = tick;
            s.expected.clear();
        }
    }

    /// Sends the game's message (its bytes) to `player` on `channel`.
    pub fn send_message(
        &mut self,
        player: PlayerId,
        channel: Channel,
        bytes: &[u8],
        now: Instant,
    ) -> Result<(), MessageError> {
        let Some(s) = self.players.get_mut(&player) else {
            return Err(MessageError::NotPlaying);
        };
        let seq = s.mail.send(channel, bytes, now, &mut self.stats.messages)?;
        let (conn, bytes) = (s.conn, bytes.to_vec());
        self.outputs.push_back(match channel {
            Channel::Reliable => Output::Control {
                conn,
                bytes: encode_frame(&ServerControl::Message { bytes }),
            },
            Channel::Unreliable => Output::Datagram {
                conn,
                bytes: encode(&ServerDatagram::Message { seq, bytes }),
            },
        });
        Ok(())
    }

    /// A message from `player` arrived (`seq`: an unreliable one's number). Without
    /// rules to take it, it is dropped.
    pub(super) fn message_in(
        &mut self,
        player: PlayerId,
        channel: Channel,
        seq: u64,
        bytes: Vec<u8>,
        now: Instant,
    ) {
        let counts = &mut self.stats.messages;
        let Some(s) = self.players.get_mut(&player) else {
            return;
        };
        if self.game.rules.is_none() {
            counts[channel.index()].dropped += 1;
            return;
        }
        match s.mail.receive(channel, seq, bytes, now, counts) {
            Arrival::Taken => {
                self.game.mail_waiting.insert(player);
            }
            Arrival::Refused { kick: true } => {
                let conn = s.conn;
                self.kick(conn, ABUSE.into());
            }
            Arrival::Refused { kick: false } | Arrival::Dropped => {}
        }
    }

    /// The oldest message of the lowest player id that has one.
    fn take_message(&mut self) -> Option<(PlayerId, Channel, Vec<u8>)> {
        while let Some(&id) = self.game.mail_waiting.first() {
            let mut s = self.players.get_mut(&id);
            let m = s.as_mut().and_then(|s| s.mail.take());
            if s.is_none_or(|s| s.mail.waiting() == 0) {
                self.game.mail_waiting.remove(&id);
            }
            if let Some((c, b)) = m {
                return Some((id, c, b));
            }
        }
        None
    }

    fn message_malformed(&mut self, player: PlayerId, channel: Channel, now: Instant) {
        let Some(s) = self.players.get_mut(&player) else {
            return;
        };
        if s.mail.malformed(channel, now, &mut self.stats.messages) {
            let conn = s.conn;
            self.kick(conn, ABUSE.into());
        }
    }

    /// A fresh mailbox for a player entering at `now`.
    pub(super) fn mailbox(now: Instant) -> Mailbox {
        Mailbox::new(now, PLAYER_QUEUE)
    }
}
