//! The game's own code in the server: its rules ([`GameRules`]), told of players joining
//! and leaving and run once a tick, and its messages both ways ([`Game`]). They run
//! inside the machine, at fixed points of the tick, in player order: the same inputs
//! give the same state and the same messages.

use super::{Output, Server};
use crate::protocol::channel::{
    decode_message, encode_message, Arrival, Channel, Mailbox, MessageError,
};
use crate::protocol::frame::encode_frame;
use crate::protocol::{encode, ServerControl, ServerDatagram};
use crate::sim::{PlayerId, WorldState};
use serde::de::DeserializeOwned;
use serde::Serialize;
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

    /// The players in the world, in id order.
    pub fn players(&self) -> impl Iterator<Item = PlayerId> + '_ {
        self.server.sessions.keys().copied()
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
        self.rules.as_mut()?.summary()
    }

    /// Installs the game's rules (replacing any before).
    pub fn set_rules(&mut self, rules: Box<dyn GameRules>) {
        self.rules = Some(rules);
    }

    /// Runs `f` on the rules with the game's view of the server (nothing when there are
    /// no rules).
    pub(super) fn with_rules(
        &mut self,
        now: Instant,
        f: impl FnOnce(&mut dyn GameRules, &mut Game<'_>),
    ) {
        if let Some(mut rules) = self.rules.take() {
            f(rules.as_mut(), &mut Game { server: self, now });
            if self.rules.is_none() {
                self.rules = Some(rules);
            }
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
        let Some(s) = self.sessions.get_mut(&player) else {
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
        let Some(s) = self.sessions.get_mut(&player) else {
            return;
        };
        if self.rules.is_none() {
            counts[channel.index()].dropped += 1;
            return;
        }
        match s.mail.receive(channel, seq, bytes, now, counts) {
            Arrival::Taken => {
                self.mail_waiting.insert(player);
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
        while let Some(&id) = self.mail_waiting.first() {
            let mut s = self.sessions.get_mut(&id);
            let m = s.as_mut().and_then(|s| s.mail.take());
            if s.is_none_or(|s| s.mail.waiting() == 0) {
                self.mail_waiting.remove(&id);
            }
            if let Some((c, b)) = m {
                return Some((id, c, b));
            }
        }
        None
    }

    fn message_malformed(&mut self, player: PlayerId, channel: Channel, now: Instant) {
        let Some(s) = self.sessions.get_mut(&player) else {
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
