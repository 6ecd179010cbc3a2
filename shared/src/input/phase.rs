//! Which ticks a client's input datagrams go on, when it sends one every few ticks.
//!
//! Each side acknowledges the other's packets in its own next packet if that goes
//! within the acknowledgement delay (QUIC's, which quinn holds to 25 ms or the round
//! trip). Inputs and snapshots both go about 30 times a second; an input sent just after
//! a snapshot arrives acknowledges it at once but leaves the server a whole snapshot
//! period to acknowledge the input, and one sent just before the next snapshot the
//! reverse: past the delay, a bare ACK goes instead (about one packet in four each way,
//! measured on loopback). So the client sends its input halfway between the snapshots it
//! receives, rounded to a tick, which keeps both waits under 25 ms at a 60 Hz tick.

use crate::time::Instant;

/// How much each newer arrival's vote outweighs the one before (the votes of the last
/// ten or so arrivals count).
const KEEP: f64 = 0.9;
/// How far another tick must lead in the votes before the inputs move to it: a snapshot
/// that comes a tick early or late now and then must not move them back and forth.
const MARGIN: f64 = 2.0;

/// The ticks (modulo `every`) a client's input datagrams go on.
#[derive(Clone, Debug)]
pub(crate) struct InputPhase {
    every: u64,
    /// The residue of the ticks inputs go on.
    residue: u64,
    /// Each residue's share of the recent arrivals' choices, the newest weighing most.
    votes: Vec<f64>,
}

impl InputPhase {
    /// Inputs every `every` ticks (one a tick: no choice to make).
    pub(crate) fn new(every: u64) -> InputPhase {
        let every = every.max(1);
        InputPhase {
            every,
            residue: 0,
            // At most the tick rate's worth (240): `every` is held to it by the welcome.
            votes: vec![0.0; usize::try_from(every).unwrap_or(1)],
        }
    }

    /// Whether tick `tick`'s input datagram goes now.
    pub(crate) fn sends(&self, tick: u64) -> bool {
        tick % self.every == self.residue
    }

    /// A snapshot arrived at `now`, with tick `next_tick` due at `next_at` and ticks
    /// `period` seconds apart: the tick nearest half an input period later gets a vote.
    pub(crate) fn heard(&mut self, now: Instant, next_tick: u64, next_at: Instant, period: f64) {
        if self.every == 1 || period.is_nan() || period <= 0.0 {
            return;
        }
        let half = 0.5 * self.every as f64 * period;
        let until_next = if next_at >= now {
            (next_at - now).as_secs_f64()
        } else {
            -(now - next_at).as_secs_f64()
        };
        // Ticks from the next one due to the target, at least none.
        let ahead = ((half - until_next) / period).round().max(0.0);
        // At most half an input period over a tick's length: within `every`.
        let ahead = (ahead as u64).min(self.every);
        let residue = next_tick.wrapping_add(ahead) % self.every;
        for v in &mut self.votes {
            *v *= KEEP;
        }
        let slot = usize::try_from(residue).unwrap_or(0);
        if let Some(v) = self.votes.get_mut(slot) {
            *v += 1.0;
        }
        let current = usize::try_from(self.residue).unwrap_or(0);
        let (now_votes, new_votes) = (self.votes[current], self.votes[slot]);
        if new_votes > now_votes + MARGIN {
            self.residue = residue;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const PERIOD: f64 = 1.0 / 60.0;

    /// The base of the tests' virtual time.
    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    /// Snapshots every other tick arriving `at` of a tick before the client's next tick:
    /// the residue the phase settles on.
    fn settles(at: f64) -> u64 {
        let mut p = InputPhase::new(2);
        let t0 = t0();
        for k in 0..40u64 {
            let next_tick = 100 + 2 * k;
            let next_at = t0 + Duration::from_secs_f64(next_tick as f64 * PERIOD);
            let now = next_at - Duration::from_secs_f64(at * PERIOD);
            p.heard(now, next_tick, next_at, PERIOD);
        }
        p.residue
    }

    #[test]
    fn inputs_go_about_half_an_input_period_after_each_snapshot() {
        // Arriving just before a tick: that tick is too soon (the server's wait would be
        // near a whole period), the one after about half way.
        assert_eq!(settles(0.1), 1);
        // Arriving most of a tick before: the next tick is about half way.
        assert_eq!(settles(0.9), 0);
    }

    #[test]
    fn a_stray_arrival_does_not_move_the_inputs() {
        let mut p = InputPhase::new(2);
        let t0 = t0();
        let at = |tick: u64, before: f64| {
            let next_at = t0 + Duration::from_secs_f64(tick as f64 * PERIOD);
            (next_at - Duration::from_secs_f64(before * PERIOD), next_at)
        };
        for k in 0..20u64 {
            let (now, next_at) = at(100 + 2 * k, 0.9);
            p.heard(now, 100 + 2 * k, next_at, PERIOD);
        }
        assert_eq!(p.residue, 0);
        // One arrival a tick off votes for the odd ticks: it does not move the inputs.
        let (now, next_at) = at(141, 0.9);
        p.heard(now, 141, next_at, PERIOD);
        assert_eq!(p.residue, 0);
        assert!(p.sends(142) && !p.sends(143));
    }

    #[test]
    fn one_a_tick_sends_every_tick() {
        let mut p = InputPhase::new(1);
        let t0 = t0();
        p.heard(t0, 7, t0, PERIOD);
        assert!((0..5).all(|t| p.sends(t)));
    }
}
