//! The game's messages on the client's side: sent, taken, and told of as events.

use super::push_event;
use super::{ClientEvent, ClientMachine, ClientOutput, Status};
use crate::codec::encode;
use crate::frame::encode_frame;
use crate::messages::{Arrival, Channel, Letter, MessageError};
use crate::time::Instant;
use crate::wire::{ClientControl, ClientDatagram};

/// The work of [`ClientMachine::send_message`].
pub(super) fn send_message(
    client: &mut ClientMachine,
    channel: Channel,
    bytes: &[u8],
    now: Instant,
) -> Result<(), MessageError> {
    if client.status != Status::Playing {
        return Err(MessageError::NotPlaying);
    }
    let seq = client
        .mail
        .send(channel, bytes, now, &mut client.stats.messages)?;
    let bytes = bytes.to_vec();
    client.outputs.push_back(match channel {
        Channel::Reliable => ClientOutput::Control(encode_frame(&ClientControl::Message { bytes })),
        Channel::Unreliable => {
            ClientOutput::Datagram(encode(&ClientDatagram::Message { seq, bytes }))
        }
    });
    Ok(())
}

/// The work of [`ClientMachine::poll_message`].
pub(super) fn poll_message(client: &mut ClientMachine) -> Option<Letter> {
    let (release, drawn) = (client.release, client.drawn_tick);
    let stats = &mut client.stats.releases;
    client.mail.take_if(|m| {
        let due = release[m.channel.index()] == Release::AtOnce || drawn >= m.tick as f64;
        if due && release[m.channel.index()] == Release::Drawn {
            stats.record(m.tick, drawn);
        }
        due
    })
}

/// The work of [`ClientMachine::set_release`].
pub(super) fn set_release(client: &mut ClientMachine, channel: Channel, release: Release) {
    client.release[channel.index()] = release;
}

/// The work of [`ClientMachine::message_malformed`].
pub(super) fn message_malformed(client: &mut ClientMachine, channel: Channel, now: Instant) {
    let _ = client
        .mail
        .malformed(channel, now, &mut client.stats.messages);
}

/// The tick a message of the server's is released at: its own, unless it lies more
/// than a second past the newest tick this client knows (counted, released at once).
pub(super) fn message_tick(client: &mut ClientMachine, tick: u64) -> u64 {
    let Some(p) = client.play.as_ref() else {
        return 0;
    };
    let known = p.newest.map_or(0, |(t, _)| t).max(p.clock.tick);
    if tick > known.saturating_add(u64::from(p.welcome.tick_rate())) {
        client.stats.releases.future += 1;
        return 0;
    }
    // Older than any snapshot still held: its moment was drawn long ago.
    if tick.saturating_add(PAST_TICKS) < known {
        client.stats.releases.past += 1;
    }
    tick
}

/// A message from the server reached the mailbox: an event says so (the game takes it
/// with `poll_message`).
pub(super) fn message_arrived(client: &mut ClientMachine, channel: Channel, arrival: Arrival) {
    if arrival == Arrival::Taken {
        push_event(&mut client.events, ClientEvent::Message { channel });
    }
}

/// Ticks back past which a message's tick is older than any snapshot kept.
const PAST_TICKS: u64 = 2 * crate::snapshot::HISTORY as u64;

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
