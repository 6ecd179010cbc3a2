//! One recipient's outgoing game messages, shared fairly among whoever they come from.
//!
//! A client takes [`MESSAGE_RATE`](crate::messages::MESSAGE_RATE) messages a
//! second from the server, on both channels together. Messages the rules send on a
//! player's behalf (a chat line passed on:
//! [`Game::send_from`](crate::server::Game::send_from))
//! and the game's own (a score) wait here in one queue per sender, and the recipient's
//! allowance is handed out round robin over the senders with something waiting: however
//! fast one sender talks, whatever its id, every other sender, and the game itself, gets
//! its turn. A sender's queue holds [`SHARE_QUEUE`] messages; what does not fit is
//! dropped (the oldest of that sender's first) and counted as over its share.

use crate::messages::Channel;
use expel_core::sim::PlayerId;
use std::collections::{BTreeMap, VecDeque};

/// Messages one sender may have waiting for one recipient: about a second of a fair
/// share with a dozen senders talking at once.
pub const SHARE_QUEUE: usize = 16;

/// Whose message it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sender {
    /// The game's own (the rules' [`Game::send`](crate::server::Game::send)).
    Game,
    /// Passed on for a player.
    Player(PlayerId),
}

/// One recipient's waiting messages (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Outbox {
    /// Each message with the tick it was sent at.
    queues: BTreeMap<Sender, VecDeque<(Channel, u64, Vec<u8>)>>,
    /// The sender served last: the next turn goes to the one after it.
    last: Option<Sender>,
}

impl Outbox {
    /// Queues a message from `from`, sent at `tick`; returns whether an older one of that
    /// sender's was dropped to make room.
    pub(crate) fn push(
        &mut self,
        from: Sender,
        channel: Channel,
        tick: u64,
        bytes: Vec<u8>,
    ) -> bool {
        let q = self.queues.entry(from).or_default();
        let dropped = q.len() >= SHARE_QUEUE && q.pop_front().is_some();
        q.push_back((channel, tick, bytes));
        dropped
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The next sender's turn, if `admit` takes its message (it answers with what sending
    /// it needs: the number of an unreliable one): whose it is, the message (its
    /// channel, tick and bytes) and that. `None` when nothing waits or the allowance is
    /// spent.
    pub(crate) fn next<T>(
        &mut self,
        mut admit: impl FnMut(Channel, &[u8]) -> Option<T>,
    ) -> Option<(Sender, Channel, u64, Vec<u8>, T)> {
        let from = match self.last {
            Some(l) => self
                .queues
                .range((std::ops::Bound::Excluded(l), std::ops::Bound::Unbounded))
                .next()
                .or_else(|| self.queues.iter().next()),
            None => self.queues.iter().next(),
        }
        .map(|(s, _)| *s)?;
        let q = self.queues.get_mut(&from)?;
        let (channel, _, bytes) = q.front()?;
        let token = admit(*channel, bytes)?;
        let (channel, tick, bytes) = q.pop_front()?;
        if q.is_empty() {
            self.queues.remove(&from);
        }
        self.last = Some(from);
        Some((from, channel, tick, bytes, token))
    }

    /// Messages waiting, all told.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(o: &mut Outbox, n: usize) -> Vec<Sender> {
        let mut left = n;
        std::iter::from_fn(|| {
            o.next(|_, _| {
                let ok = left > 0;
                left = left.saturating_sub(1);
                ok.then_some(())
            })
        })
        .map(|m| m.0)
        .collect()
    }

    #[test]
    fn turns_go_round_the_senders_whatever_their_ids_and_rates() {
        let mut o = Outbox::default();
        for _ in 0..100 {
            o.push(Sender::Player(PlayerId(0)), Channel::Reliable, 0, vec![0]);
            o.push(Sender::Player(PlayerId(1)), Channel::Reliable, 0, vec![1]);
        }
        o.push(Sender::Player(PlayerId(9)), Channel::Reliable, 0, vec![9]);
        o.push(Sender::Game, Channel::Reliable, 0, vec![7]);
        // The two floods were cut to their share of the queue.
        assert_eq!(o.len(), 2 * SHARE_QUEUE + 2);
        // Four turns: each sender one, in order from the game.
        let first = drain(&mut o, 4);
        assert_eq!(
            first,
            [
                Sender::Game,
                Sender::Player(PlayerId(0)),
                Sender::Player(PlayerId(1)),
                Sender::Player(PlayerId(9))
            ]
        );
        // Then the floods alternate, the allowance a message at a time.
        let next = drain(&mut o, 4);
        assert_eq!(
            next,
            [
                Sender::Player(PlayerId(0)),
                Sender::Player(PlayerId(1)),
                Sender::Player(PlayerId(0)),
                Sender::Player(PlayerId(1))
            ]
        );
        // A newcomer waits at most one round.
        o.push(Sender::Player(PlayerId(5)), Channel::Reliable, 0, vec![5]);
        let round = drain(&mut o, 3);
        assert!(round.contains(&Sender::Player(PlayerId(5))), "{round:?}");
    }

    #[test]
    fn a_spent_allowance_keeps_the_turn_and_the_message() {
        let mut o = Outbox::default();
        o.push(
            Sender::Player(PlayerId(3)),
            Channel::Unreliable,
            4,
            vec![1, 2, 3],
        );
        assert!(o.next(|_, _| None::<()>).is_none());
        assert_eq!(o.len(), 1);
        let (s, c, t, b, n) = o.next(|_, b| (b.len() == 3).then_some(7)).unwrap();
        assert_eq!(
            (s, c, t, b, n),
            (
                Sender::Player(PlayerId(3)),
                Channel::Unreliable,
                4,
                vec![1, 2, 3],
                7
            )
        );
        assert!(o.is_empty());
    }
}
