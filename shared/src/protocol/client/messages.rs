//! The game's messages on the client's side: sent, taken, and told of as events.

use super::push_event;
use super::{Client, ClientEvent, ClientOutput, Status};
use crate::protocol::frame::encode_frame;
use crate::protocol::messages::{Arrival, Channel, MessageError};
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

    /// The oldest of the server's messages not yet taken: its channel and bytes.
    pub fn poll_message(&mut self) -> Option<(Channel, Vec<u8>)> {
        self.mail.take()
    }

    /// A message taken was not of the game's type: counted as refused.
    pub fn message_malformed(&mut self, channel: Channel, now: Instant) {
        let _ = self.mail.malformed(channel, now, &mut self.stats.messages);
    }

    /// A message from the server reached the mailbox: an event says so (the game takes it
    /// with `poll_message`).
    pub(super) fn message_arrived(&mut self, channel: Channel, arrival: Arrival) {
        if arrival == Arrival::Taken {
            push_event(&mut self.events, ClientEvent::Message { channel });
        }
    }
}
