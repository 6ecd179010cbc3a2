//! The game's own messages. The game types them (serde, encoded with postcard); the
//! protocol carries their bytes both ways on a reliable ordered channel (the control
//! stream) or an unreliable one (QUIC datagrams). Here is what both ends share: the size
//! limit, the unreliable channel's order (never twice, never older than one delivered),
//! the sender's rate limit, the strikes that end a client's abuse, and the counts; and
//! the server's fair share of each recipient's allowance among the senders
//! ([`outbox`]). The machines send and take them (`client/messages.rs`,
//! `server/messages.rs`).

#[cfg(feature = "server")]
pub mod outbox;

use crate::rate::TokenBucket;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest message, in bytes (its encoding): an unreliable one must fit one datagram of
/// the smallest path QUIC allows, with room for the headers.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Messages one end takes from the other per second, on both channels together, and the
/// burst above it.
pub const MESSAGE_RATE: f64 = 120.0;
const MESSAGE_BURST: f64 = 240.0;
/// Bytes of messages one end takes from the other per second, and the burst above it.
pub const MESSAGE_BYTE_RATE: f64 = 64.0 * 1024.0;
const MESSAGE_BYTE_BURST: f64 = 128.0 * 1024.0;
/// Received messages waiting for the game to take them, at most: past it, new ones are
/// dropped (and counted).
pub const MESSAGE_QUEUE: usize = 1024;
/// Strikes a client may gather (one per message refused for its rate, ten per one too
/// large or malformed) before it is kicked; they fade at [`STRIKES_FADE`] a second.
const STRIKES_KICK: f64 = 200.0;
/// Strikes forgiven per second.
pub const STRIKES_FADE: f64 = 20.0;
/// Strikes for a message that breaks the rules outright (too large, malformed), against
/// one for a message over the rate (an honest burst can meet that).
pub const STRIKES_BROKEN: f64 = 10.0;

/// Which channel a message travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Channel {
    /// Every message once, in the order sent (the control stream).
    Reliable,
    /// Each message at most once, and never after a newer one (datagrams): for what a
    /// newer message makes stale.
    Unreliable,
}

impl Channel {
    /// Both channels, in the order of the counts' arrays.
    pub const ALL: [Channel; 2] = [Channel::Reliable, Channel::Unreliable];

    /// As the metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Reliable => "reliable",
            Channel::Unreliable => "unreliable",
        }
    }

    /// The index of this channel's counts.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a message was not sent or not taken.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MessageError {
    /// Larger than [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes exceeds the limit of {MAX_MESSAGE_BYTES}")]
    TooLarge(usize),
    /// Over the rate the other end takes: try again later (backpressure).
    #[error("messages are being sent faster than the other end takes them")]
    OverRate,
    /// Not in the game (not yet joined, or gone).
    #[error("not in the game")]
    NotPlaying,
    /// The bytes are not a message of the game's type.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// One channel's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelCounts {
    /// Messages sent.
    pub sent: u64,
    /// Messages received and handed on (queued for the game).
    pub received: u64,
    /// Messages received and dropped: stale or repeated (unreliable), or the queue full.
    pub dropped: u64,
    /// Messages refused: too large, over the rate, or malformed.
    pub refused: u64,
}

/// Both channels' counts, by [`Channel::index`].
pub type MessageCounts = [ChannelCounts; 2];

/// Numbers the unreliable messages one end sends.
#[derive(Clone, Debug, Default)]
pub struct Sequencer {
    next: u64,
}

impl Sequencer {
    /// The next message's number.
    pub fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// Whether an unreliable message may be delivered: only one newer than every one
/// delivered before (so none twice, and none after a newer one).
#[derive(Clone, Debug, Default)]
pub struct Freshness {
    newest: u64,
}

impl Freshness {
    /// Takes message `seq` if it is fresh.
    pub fn fresh(&mut self, seq: u64) -> bool {
        if seq > self.newest {
            self.newest = seq;
            true
        } else {
            false
        }
    }
}

/// A sender's allowance: messages and bytes a second, with bursts.
#[derive(Clone, Debug)]
pub struct MessageGate {
    messages: TokenBucket,
    bytes: TokenBucket,
}

impl MessageGate {
    /// A full allowance at `now`.
    pub fn new(now: Instant) -> MessageGate {
        MessageGate {
            messages: TokenBucket::new(MESSAGE_RATE, MESSAGE_BURST, now),
            bytes: TokenBucket::new(MESSAGE_BYTE_RATE, MESSAGE_BYTE_BURST, now),
        }
    }

    /// Whether a message of `len` bytes fits the allowance now (taking it if so).
    pub fn admit(&mut self, len: usize, now: Instant) -> bool {
        let len = len as f64;
        let fits = self.messages.holds(1.0, now) && self.bytes.holds(len, now);
        fits && self.messages.take_n(1.0, now) && self.bytes.take_n(len, now)
    }
}

/// A client's strikes for messages refused: they fade, and past a limit the client is
/// kicked (an honest client meets the limits seldom, an abusive one constantly).
#[derive(Clone, Debug)]
pub struct Strikes {
    count: f64,
    at: Instant,
}

impl Strikes {
    /// None, at `now`.
    pub fn new(now: Instant) -> Strikes {
        Strikes {
            count: 0.0,
            at: now,
        }
    }

    /// Adds `n` strikes at `now`; true when they reach the limit.
    pub fn strike(&mut self, n: f64, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.count = (self.count - dt * STRIKES_FADE).max(0.0) + n;
        self.count >= STRIKES_KICK
    }
}

/// What became of a message that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Queued for the game.
    Taken,
    /// Unreliable, and not newer than one delivered before (stale or repeated).
    Stale,
    /// The queue for the game is full.
    Full,
    /// Too large or over the rate; `kick` when the sender's strikes reached the limit.
    Refused {
        /// The sender is to be kicked.
        kick: bool,
    },
}

/// A message that arrived: its channel, the server tick it was sent at (0 for a
/// client's), and the game's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Letter {
    /// The channel it came on.
    pub channel: Channel,
    /// The server tick whose world the rules saw when they sent it (see
    /// [`Game::tick`](crate::server::Game)): a client may deliver it when its
    /// drawn view reaches that tick. 0 for a client's message.
    pub tick: u64,
    /// The game's encoding of it.
    pub bytes: Vec<u8>,
}

/// One end's messages with one peer: what it sends (numbered, within the rate the peer
/// takes), what arrives (judged for size, rate and freshness, then queued for the game),
/// and the peer's strikes.
#[derive(Clone, Debug)]
pub struct Mailbox {
    sequence: Sequencer,
    fresh: Freshness,
    gate_in: MessageGate,
    gate_out: MessageGate,
    strikes: Strikes,
    queue: std::collections::VecDeque<Letter>,
    most_queued: usize,
}

impl Mailbox {
    /// An empty mailbox at `now` whose queue holds at most `most_queued` messages.
    pub fn new(now: Instant, most_queued: usize) -> Mailbox {
        Mailbox {
            sequence: Sequencer::default(),
            fresh: Freshness::default(),
            gate_in: MessageGate::new(now),
            gate_out: MessageGate::new(now),
            strikes: Strikes::new(now),
            queue: Default::default(),
            most_queued,
        }
    }

    /// A message arrived on `channel` (`seq`: an unreliable one's number; 0 for a
    /// reliable one; `tick`: the server tick it was sent at, 0 for a client's), counted in
    /// `counts`.
    pub fn receive(
        &mut self,
        channel: Channel,
        (seq, tick): (u64, u64),
        bytes: Vec<u8>,
        now: Instant,
        counts: &mut MessageCounts,
    ) -> Arrival {
        let c = &mut counts[channel.index()];
        let strikes = if check_size(&bytes).is_err() {
            STRIKES_BROKEN
        } else if !self.gate_in.admit(bytes.len(), now) {
            1.0
        } else {
            let fresh = channel == Channel::Reliable || self.fresh.fresh(seq);
            if !fresh || self.queue.len() >= self.most_queued {
                c.dropped += 1;
                return if fresh { Arrival::Full } else { Arrival::Stale };
            }
            self.queue.push_back(Letter {
                channel,
                tick,
                bytes,
            });
            c.received += 1;
            return Arrival::Taken;
        };
        c.refused += 1;
        Arrival::Refused {
            kick: self.strikes.strike(strikes, now),
        }
    }

    /// A message taken from the queue was not the game's type: counted as refused; true
    /// when the sender's strikes reached the limit.
    pub fn malformed(
        &mut self,
        channel: Channel,
        now: Instant,
        counts: &mut MessageCounts,
    ) -> bool {
        counts[channel.index()].refused += 1;
        self.strikes.strike(STRIKES_BROKEN, now)
    }

    /// Readies a message of `bytes` to send on `channel` at `now`: its number (0 for a
    /// reliable one), or why it may not go (too large; over the rate the peer takes, to
    /// try again later).
    pub fn send(
        &mut self,
        channel: Channel,
        bytes: &[u8],
        now: Instant,
        counts: &mut MessageCounts,
    ) -> Result<u64, MessageError> {
        check_size(bytes)?;
        if !self.gate_out.admit(bytes.len(), now) {
            return Err(MessageError::OverRate);
        }
        counts[channel.index()].sent += 1;
        Ok(match channel {
            Channel::Reliable => 0,
            Channel::Unreliable => self.sequence.number(),
        })
    }

    /// The oldest message waiting for the game.
    pub fn take(&mut self) -> Option<Letter> {
        self.queue.pop_front()
    }

    /// The oldest message waiting for the game, if `due` says it may go now (messages
    /// go in order: one held holds those after it).
    pub fn take_if(&mut self, due: impl FnOnce(&Letter) -> bool) -> Option<Letter> {
        if due(self.queue.front()?) {
            self.queue.pop_front()
        } else {
            None
        }
    }

    /// Messages waiting for the game.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// Checks a message's size before it is sent or taken.
pub fn check_size(bytes: &[u8]) -> Result<(), MessageError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::TooLarge(bytes.len()));
    }
    Ok(())
}

/// The game's message as bytes (postcard).
pub fn encode_message<T: Serialize>(msg: &T) -> Result<Vec<u8>, MessageError> {
    let bytes = postcard::to_allocvec(msg).map_err(|e| MessageError::Malformed(e.to_string()))?;
    check_size(&bytes)?;
    Ok(bytes)
}

/// The game's message from bytes (postcard; trailing bytes are malformed).
pub fn decode_message<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, MessageError> {
    crate::codec::decode::<T>("message", bytes).map_err(|e| MessageError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fresh_takes_only_what_is_newer_than_all_delivered() {
        let mut f = Freshness::default();
        let got: Vec<u64> = [1, 3, 2, 3, 5, 4, 6]
            .into_iter()
            .filter(|s| f.fresh(*s))
            .collect();
        assert_eq!(got, [1, 3, 5, 6]);
    }

    #[test]
    fn the_gate_takes_the_rate_and_its_burst_and_no_more() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let mut g = MessageGate::new(t0);
        let burst = (0..1000).filter(|_| g.admit(10, t0)).count();
        assert_eq!(burst, MESSAGE_BURST as usize);
        // One second later: one second's worth.
        let t1 = t0 + Duration::from_secs(1);
        let more = (0..1000).filter(|_| g.admit(10, t1)).count();
        assert_eq!(more, MESSAGE_RATE as usize);
        // Bytes bound it too: large messages run out of bytes first.
        let mut g = MessageGate::new(t0);
        let big = (0..1000).filter(|_| g.admit(MAX_MESSAGE_BYTES, t0)).count();
        assert_eq!(
            big,
            (MESSAGE_BYTE_BURST / MAX_MESSAGE_BYTES as f64) as usize
        );
    }

    #[test]
    fn strikes_fade_so_only_sustained_abuse_reaches_the_limit() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let mut s = Strikes::new(t0);
        // An honest burst over the rate now and then: never the limit.
        for k in 0..100u64 {
            let at = t0 + Duration::from_secs(k);
            assert!((0..19).all(|_| !s.strike(1.0, at)));
        }
        // A flood: the limit within a second.
        let mut s = Strikes::new(t0);
        let hit = (0..1000u64).position(|i| s.strike(1.0, t0 + Duration::from_millis(i)));
        assert!(hit.is_some_and(|i| i < 1000), "{hit:?}");
        // Malformed messages: twenty in a row.
        let mut s = Strikes::new(t0);
        assert!((0..19).all(|_| !s.strike(STRIKES_BROKEN, t0)));
        assert!(s.strike(STRIKES_BROKEN, t0));
    }

    #[test]
    fn a_message_over_the_limit_is_refused_both_ways() {
        let ok = vec![7u8; MAX_MESSAGE_BYTES - 2];
        let bytes = encode_message(&ok).unwrap();
        assert_eq!(decode_message::<Vec<u8>>(&bytes).unwrap(), ok);
        let big = vec![7u8; MAX_MESSAGE_BYTES];
        assert!(matches!(
            encode_message(&big),
            Err(MessageError::TooLarge(_))
        ));
        assert!(matches!(
            decode_message::<(u32, String)>(&[0xff; 3]),
            Err(MessageError::Malformed(_))
        ));
    }
}
