//! The game's messages on the client's side: sent, taken, and told of as events.

use super::push_event;
use super::{Client, ClientEvent, ClientOutput, Status};
use crate::protocol::frame::encode_frame;
use crate::protocol::messages::{Arrival, Channel, Letter, MessageError};
use crate::protocol::{encode, ClientControl, ClientDatagram};
use std::time::Instant;

impl Client {
    /// Sends the game's message (its bytes) on `channel` at `now`: refused when too
    /// large, while not playing, or over the rate the server takes (try again later).
    pub fn send_message(
        &mut self,
        channel: Channel,
        bytes: &[u8],
        now: Instant,
    ) -> Result<(), MessageError> {
        if self.status != Status::Playing {
            return Err(MessageError::NotPlaying);
        }
        let seq = self
            .mail
            .send(channel, bytes, now, &mut self.stats.messages)?;
        let bytes = bytes.to_vec();
        self.outputs.push_back(match channel {
            Channel::Reliable => {
                ClientOutput::Control(encode_frame(&ClientControl::Message { bytes }))
            }
            Channel::Unreliable => {
                ClientOutput::Datagram(encode(&ClientDatagram::Message { seq, bytes }))
            }
        });
        Ok(())
    }

    /// The oldest of the server's messages not yet taken that is due: its channel, the
    /// tick it was sent at and its bytes. On a channel released at once (the default)
    /// every message is due as it arrives; on one released with the drawn view
    /// ([`Release::Drawn`]), when the view drawn at the last [`Client::handle_timeout`]
    /// reached the message's tick: a frag told as the victim sees the rocket reach it.
    /// Messages of a channel go in order, one held holding those after it.
    pub fn poll_message(&mut self) -> Option<Letter> {
        let (release, drawn) = (self.release, self.drawn_tick);
        let stats = &mut self.stats.releases;
        self.mail.take_if(|m| {
            let due = release[m.channel.index()] == Release::AtOnce || drawn >= m.tick as f64;
            if due && release[m.channel.index()] == Release::Drawn {
                stats.record(m.tick, drawn);
            }
            due
        })
    }

    /// When the game is handed the server's messages on `channel` (see
    /// [`Client::poll_message`]).
    pub fn set_release(&mut self, channel: Channel, release: Release) {
        self.release[channel.index()] = release;
    }

    /// A message taken was not of the game's type: counted as refused.
    pub fn message_malformed(&mut self, channel: Channel, now: Instant) {
        let _ = self.mail.malformed(channel, now, &mut self.stats.messages);
    }

    /// The tick a message of the server's is released at: its own, unless it lies more
    /// than a second past the newest tick this client knows (counted, released at once).
    pub(super) fn message_tick(&mut self, tick: u64) -> u64 {
        let Some(p) = self.play.as_ref() else {
            return 0;
        };
        let known = p.newest.map_or(0, |(t, _)| t).max(p.clock.tick);
        if tick > known.saturating_add(u64::from(p.welcome.tick_rate())) {
            self.stats.releases.future += 1;
            return 0;
        }
        // Older than any snapshot still held: its moment was drawn long ago.
        if tick.saturating_add(PAST_TICKS) < known {
            self.stats.releases.past += 1;
        }
        tick
    }

    /// A message from the server reached the mailbox: an event says so (the game takes it
    /// with `poll_message`).
    pub(super) fn message_arrived(&mut self, channel: Channel, arrival: Arrival) {
        if arrival == Arrival::Taken {
            push_event(&mut self.events, ClientEvent::Message { channel });
        }
    }
}

/// Ticks back past which a message's tick is older than any snapshot kept.
const PAST_TICKS: u64 = 2 * crate::protocol::snapshot::HISTORY as u64;

/// When a client hands the server's messages of a channel to the game.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Release {
    /// As they arrive (chat: nobody waits for the picture to catch up).
    #[default]
    AtOnce,
    /// When the others' drawn view reaches the tick they were sent at (the game's events:
    /// a hit, a frag, a pickup, told as the player sees it happen). The server's snapshots
    /// run ahead of what is drawn by the interpolation delay, and its messages with them.
    Drawn,
}
