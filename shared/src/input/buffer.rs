//! The server's per-client input buffer: commands by tick, told apart as applied, missing
//! (the tick passed without one: the simulation repeats the last command), late (arrived
//! after its tick passed), duplicate (the redundant copies every input datagram carries)
//! and too far ahead (refused, so a client cannot make the buffer grow).

use crate::wire::InputMsg;
use expel_core::movement::MoveCommand;
use expel_core::sim::ShotView;
use expel_core::validate::MAX_AHEAD;
use std::collections::{BTreeSet, VecDeque};

/// Missing ticks remembered, to tell a late command from a duplicate.
const MISSING_MEMORY: usize = 256;
/// How far behind the newest command a message's own newest may be and still count for
/// the lead: a message overtaken on a jittery path counts (what it carries may still be
/// needed on time), one held back for longer in a queue that has since drained does not.
const OVERTAKEN: u64 = 8;

/// Counts of what the buffer saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputStats {
    /// Commands accepted into the buffer.
    pub received: u64,
    /// Commands applied on their tick.
    pub applied: u64,
    /// Ticks that passed without their command (the last one was repeated).
    pub missing: u64,
    /// Of those, ticks whose command never came though later ones had: each datagram
    /// carries the last few ticks' commands, so an honest client's is missing only when
    /// every copy was lost; one that leaves ticks out on purpose (to be judged by looser
    /// rules where its commands are missing) shows here.
    pub skipped: u64,
    /// Commands that arrived after their tick had passed.
    pub late: u64,
    /// Copies of commands already held or applied.
    pub duplicate: u64,
    /// Commands stamped too far ahead, refused.
    pub too_far_ahead: u64,
}

/// The view a command was made at and the tick due when it arrived (what its shot is
/// judged by).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    /// The view claimed (none: the client sent none).
    pub view: Option<ShotView>,
    /// The server tick due when the command first arrived.
    pub arrived: u64,
    /// The newest snapshot the client had then, by its acknowledgement.
    pub ack: u64,
}

/// Commands of one client by tick.
#[derive(Debug, Default)]
pub struct InputBuffer {
    /// Commands waiting for their tick, in tick order, each tick once. A queue, not a
    /// map: commands arrive nearly in order (each joins at the back) and leave from the
    /// front, a tick at a time, every tick for every player, without an allocation.
    pending: VecDeque<(u64, MoveCommand, Claimed)>,
    /// What the command last taken claimed.
    taken: Option<Claimed>,
    /// The last tick taken (applied or missing).
    consumed: u64,
    /// The last tick whose command was applied (0: none yet).
    last_applied: u64,
    missed: BTreeSet<u64>,
    /// The earliest tick a command was received for: ticks before it are not missing,
    /// the client had not started.
    first: Option<u64>,
    /// Smallest lead (command tick minus server tick) seen since [`InputBuffer::take_lead`].
    lead: Option<i64>,
    /// The newest command tick any message has brought.
    frontier: u64,
    /// What the buffer saw.
    pub stats: InputStats,
}

impl InputBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the commands of an input message received when `server_tick` is due.
    /// `timely`: it was read as it arrived; one that waited unread (the server away or
    /// catching up) does not count for the lead, which would then be the server's delay.
    pub fn receive(&mut self, msg: &InputMsg, server_tick: u64, timely: bool) {
        // How far ahead the newest command came: what the client's clock steers by. A
        // message far behind the newest command already here (held in a queue that has
        // since drained) is as old as its commands: it says nothing of the path now, and
        // would steer the client on ahead of a path that is fast again until it reads as
        // a fast clock.
        // In i128: ticks from a client can be anything up to 2^64 - 1.
        let newest = msg.batch().newest_tick();
        self.frontier = self.frontier.max(newest);
        if timely && newest.saturating_add(OVERTAKEN) >= self.frontier {
            let lead = (i128::from(newest) - i128::from(server_tick))
                .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            self.lead = Some(self.lead.map_or(lead, |l| l.min(lead)));
        }
        for (i, (t, c)) in msg.ticked().enumerate() {
            let claimed = Claimed {
                view: msg.views.get(i).and_then(|v| v.view(t)),
                arrived: server_tick,
                ack: msg.ack,
            };
            if t <= self.consumed {
                if self.missed.remove(&t) {
                    self.stats.late += 1;
                } else {
                    self.stats.duplicate += 1;
                }
            } else if t > server_tick.saturating_add(MAX_AHEAD) {
                self.stats.too_far_ahead += 1;
            } else {
                let at = self.pending.partition_point(|e| e.0 < t);
                if self.pending.get(at).is_some_and(|e| e.0 == t) {
                    // The first copy stands: its arrival is the command's.
                    self.stats.duplicate += 1;
                } else {
                    self.pending.insert(at, (t, c, claimed));
                    self.stats.received += 1;
                    self.first = Some(self.first.map_or(t, |f| f.min(t)));
                }
            }
        }
    }

    /// The command for `tick`, if it arrived in time. A tick without one counts as missing
    /// from the client's first command on (before that it is simply idle).
    pub fn take(&mut self, tick: u64) -> Option<MoveCommand> {
        // Anything older than this tick can no longer be applied.
        while self.pending.front().is_some_and(|e| e.0 < tick) {
            self.pending.pop_front();
            self.stats.late += 1;
        }
        self.consumed = self.consumed.max(tick);
        self.taken = None;
        let due = self.pending.front().is_some_and(|e| e.0 == tick);
        match due.then(|| self.pending.pop_front()).flatten() {
            Some((_, c, claimed)) => {
                self.last_applied = tick;
                self.stats.applied += 1;
                self.taken = Some(claimed);
                Some(c)
            }
            None => {
                if self.first.is_some_and(|f| f <= tick) {
                    self.stats.missing += 1;
                    self.stats.skipped += u64::from(self.frontier > tick);
                    self.missed.insert(tick);
                    while self.missed.len() > MISSING_MEMORY {
                        self.missed.pop_first();
                    }
                }
                None
            }
        }
    }

    /// What the command [`InputBuffer::take`] last returned claimed.
    pub fn claimed(&self) -> Option<Claimed> {
        self.taken
    }

    /// The smallest lead seen since the last call (clamped to `i32`), then forgets it.
    pub fn take_lead(&mut self) -> Option<i32> {
        self.lead
            .take()
            .map(|l| l.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
    }

    /// The last tick whose command was applied (0: none yet).
    pub fn last_applied(&self) -> u64 {
        self.last_applied
    }

    /// Commands waiting for their tick.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(first: u64, n: usize) -> InputMsg {
        InputMsg {
            ack: 0,
            first_tick: first,
            commands: (0..n)
                .map(|i| MoveCommand::new(1.0, 0.0, 0.0, i as f64, 0.0))
                .collect(),
            predicted: None,
            claims: Vec::new(),
            views: Vec::new(),
        }
    }

    /// The lead reported is the smallest of the messages that say where the client's
    /// clock is now: one overtaken by a little counts, one held back far behind the newest
    /// command does not.
    #[test]
    fn the_lead_leaves_out_messages_long_overtaken() {
        let mut b = InputBuffer::new();
        b.receive(&msg(100, 3), 95, true); // newest 102: 7 ahead
        b.receive(&msg(96, 3), 95, true); // newest 98, 4 behind: 3 ahead
        assert_eq!(b.take_lead(), Some(3));
        b.receive(&msg(110, 3), 100, true); // newest 112: 12 ahead
        b.receive(&msg(90, 3), 100, true); // newest 92, 20 behind the newest: left out
        assert_eq!(b.take_lead(), Some(12));
        b.receive(&msg(60, 3), 100, true); // only a long-held one since: nothing to report
        assert_eq!(b.take_lead(), None);
    }

    #[test]
    fn tells_applied_missing_late_duplicate_and_too_far() {
        let mut b = InputBuffer::new();
        assert_eq!(b.take(1), None);
        assert_eq!(b.stats.missing, 0, "idle before the first command");
        b.receive(&msg(3, 3), 1, true); // ticks 3, 4, 5
        b.receive(&msg(4, 3), 1, true); // 4 and 5 again, 6 new
        assert_eq!(b.stats.received, 4);
        assert_eq!(b.stats.duplicate, 2);
        assert_eq!(b.take(2), None);
        assert_eq!(
            b.stats.missing, 0,
            "tick 2 is before the client's first command"
        );
        for t in 3..=6 {
            assert!(b.take(t).is_some());
        }
        assert_eq!(b.take(7), None);
        assert_eq!(b.stats.missing, 1);
        b.receive(&msg(7, 1), 7, true); // tick 7 already passed: late
        b.receive(&msg(5, 1), 7, true); // applied long ago: a redundant copy
        assert_eq!(b.stats.late, 1);
        assert_eq!(b.stats.duplicate, 3);
        b.receive(&msg(7 + MAX_AHEAD + 1, 1), 7, true);
        assert_eq!(b.stats.too_far_ahead, 1);
        assert_eq!(b.pending(), 0);
        assert_eq!(b.last_applied(), 6);
    }

    /// Commands that arrive out of order are taken in tick order, each copy after the
    /// first counted as a duplicate and the first copy's command kept.
    #[test]
    fn commands_out_of_order_are_taken_in_tick_order() {
        let mut b = InputBuffer::new();
        b.receive(&msg(10, 1), 5, true); // tick 10: command 0
        b.receive(&msg(8, 1), 5, true); // tick 8: command 0
        b.receive(&msg(8, 3), 5, true); // 8 and 10 again, 9 new: command 1
        assert_eq!((b.stats.received, b.stats.duplicate), (3, 2));
        assert_eq!(b.pending(), 3);
        let first = msg(8, 3).commands;
        assert_eq!(b.take(8), Some(first[0]));
        assert_eq!(b.take(9), Some(first[1]));
        assert_eq!(b.take(10), Some(first[0]), "tick 10's first copy stands");
        assert_eq!(b.pending(), 0);
        // One left behind by a skipped tick is late when a later tick is taken.
        b.receive(&msg(12, 2), 10, true);
        assert_eq!(b.take(13), Some(first[1]));
        assert_eq!(b.stats.late, 1);
    }
}
