//! The game's messages, the server's half: what the game sends each player shared out
//! by its allowance (see [`outbox`](crate::messages::outbox)), what players send
//! taken in turn for the rules, and what is dropped or abused counted.

use super::{MessageDrop, Output, ServerMachine};
use crate::code::Code;
use crate::codec::encode;
use crate::frame::encode_frame;
use crate::messages::outbox::Sender;
use crate::messages::{check_size, Arrival, Channel, Mailbox, MessageError};
use crate::record::Call;
use crate::time::Instant;
use crate::wire::{ServerControl, ServerDatagram};
use expel_core::sim::PlayerId;

/// Messages from one player waiting for the game, at most: at the rate a client may send,
/// a game that takes them every tick never comes near it.
const PLAYER_QUEUE: usize = 64;
/// Why a client that abuses messages is kicked.
const ABUSE: &str = "kicked for abusing messages (too many, too large or malformed)";

/// The work of [`ServerMachine::send_from`].
pub(super) fn send_from(
    server: &mut ServerMachine,
    from: Sender,
    player: PlayerId,
    channel: Channel,
    bytes: &[u8],
) -> Result<(), MessageError> {
    check_size(bytes)?;
    let Some(s) = server.players.get_mut(&player) else {
        return Err(MessageError::NotPlaying);
    };
    // Stamped with the world the rules see: the snapshot of this tick shows what they
    // saw when they sent it.
    if s.outbox
        .push(from, channel, server.world.tick, bytes.to_vec())
    {
        message_dropped(server, channel, MessageDrop::OverShare);
    }
    Ok(())
}

/// Sends what waits for `player`, in turns, while its allowance lasts.
fn flush_outbox(server: &mut ServerMachine, player: PlayerId, now: Instant) {
    let Some(s) = server.players.get_mut(&player) else {
        return;
    };
    let (mail, counts, conn) = (&mut s.mail, &mut server.stats.messages, s.conn);
    while let Some((_, channel, tick, bytes, seq)) = s
        .outbox
        .next(|channel, bytes| mail.send(channel, bytes, now, counts).ok())
    {
        server.outputs.push_back(match channel {
            Channel::Reliable => Output::Control {
                conn,
                bytes: encode_frame(&ServerControl::Message { tick, bytes }),
            },
            Channel::Unreliable => Output::Datagram {
                conn,
                bytes: encode(&ServerDatagram::Message { seq, tick, bytes }),
            },
        });
    }
}

/// Sends what waits for each player whose snapshot is `due` this tick, as far as its
/// allowance goes (allowances refill with time). A player's messages leave with its
/// snapshot rather than in a packet of their own: QUIC puts both in one, where a
/// message sent on the tick between (at 60 Hz, half of them) took a packet of its own,
/// 35 bytes of headers and acknowledgement more (a crowd's kill feed and score table,
/// several a second). They are stamped with their tick all the same.
pub(super) fn flush_outboxes(
    server: &mut ServerMachine,
    now: Instant,
    due: impl Fn(PlayerId) -> bool,
) {
    let waiting: Vec<PlayerId> = server
        .players
        .iter()
        .filter(|(id, s)| !s.outbox.is_empty() && due(**id))
        .map(|(id, _)| *id)
        .collect();
    for p in waiting {
        flush_outbox(server, p, now);
    }
}

/// Counts a game message dropped on `channel` for `why`.
pub(super) fn message_dropped(server: &mut ServerMachine, channel: Channel, why: MessageDrop) {
    server.stats.messages[channel.index()].dropped += 1;
    let i = MessageDrop::ALL.iter().position(|r| *r == why).unwrap_or(0);
    server.stats.message_drops[i] += 1;
}

/// A message from `player` arrived (`seq`: an unreliable one's number). Without
/// rules to take it, it is dropped.
pub(super) fn message_in(
    server: &mut ServerMachine,
    player: PlayerId,
    channel: Channel,
    seq: u64,
    bytes: Vec<u8>,
    now: Instant,
) {
    if server.game.rules.is_none() {
        if server.players.contains_key(&player) {
            message_dropped(server, channel, MessageDrop::NoGame);
        }
        return;
    }
    let counts = &mut server.stats.messages;
    let Some(s) = server.players.get_mut(&player) else {
        return;
    };
    let drops = &mut server.stats.message_drops;
    let mut drop = |why: MessageDrop| {
        drops[MessageDrop::ALL.iter().position(|r| *r == why).unwrap_or(0)] += 1;
    };
    match s.mail.receive(channel, (seq, 0), bytes, now, counts) {
        Arrival::Taken => {
            server.game.mail_waiting.insert(player);
        }
        Arrival::Refused { kick: true } => {
            let conn = s.conn;
            server.kick(conn, Code::MessageAbuse, ABUSE.into());
        }
        Arrival::Stale => drop(MessageDrop::Stale),
        Arrival::Full => drop(MessageDrop::QueueFull),
        Arrival::Refused { kick: false } => {}
    }
}

/// The oldest message of the next player after the one taken last (in id order,
/// round) that has one.
pub(super) fn take_message(server: &mut ServerMachine) -> Option<(PlayerId, Channel, Vec<u8>)> {
    if server.log.replaying() {
        return super::replaying::replay_message(server);
    }
    super::log::recorded_call(server, take_waiting, |m| {
        m.as_ref().map(|(player, channel, bytes)| Call::Message {
            player: player.0,
            channel: *channel,
            bytes: bytes.clone(),
        })
    })
}

/// The work of [`take_message`].
fn take_waiting(server: &mut ServerMachine) -> Option<(PlayerId, Channel, Vec<u8>)> {
    use std::ops::Bound::{Excluded, Unbounded};
    loop {
        let waiting = &server.game.mail_waiting;
        let next = match server.game.last_taken {
            Some(l) => waiting.range((Excluded(l), Unbounded)).next(),
            None => None,
        }
        .or_else(|| waiting.first());
        let id = *next?;
        let mut s = server.players.get_mut(&id);
        let m = s.as_mut().and_then(|s| s.mail.take());
        if s.is_none_or(|s| s.mail.waiting() == 0) {
            server.game.mail_waiting.remove(&id);
        }
        if let Some(m) = m {
            server.game.last_taken = Some(id);
            return Some((id, m.channel, m.bytes));
        }
    }
}

pub(super) fn message_malformed(
    server: &mut ServerMachine,
    player: PlayerId,
    channel: Channel,
    now: Instant,
) {
    if !server.players.contains_key(&player) {
        return;
    }
    let body = |server: &mut ServerMachine| {
        let Some(s) = server.players.get_mut(&player) else {
            return;
        };
        if s.mail.malformed(channel, now, &mut server.stats.messages) {
            let conn = s.conn;
            server.kick(conn, Code::MessageAbuse, ABUSE.into());
        }
    };
    let called = Call::Malformed { player: player.0 };
    super::replaying::call(server, "a malformed message", called, body);
}

/// A fresh mailbox for a player entering at `now`.
pub(super) fn mailbox(now: Instant) -> Mailbox {
    Mailbox::new(now, PLAYER_QUEUE)
}
