//! The tick's pacing: the tick the clock has due, a catch-up under way (reported when it
//! ends), the tick snapshots were last encoded at, and when the connections' deadlines
//! are next looked at.

use super::Event;
use crate::time::Instant;
use std::time::Duration;

/// Deadlines are looked at every twentieth of the shorter timeout, at most this far apart.
const DEADLINE_LOOK: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub(super) struct Pace {
    /// The tick due on the clock at the present call of the machine's `handle_timeout`.
    due: u64,
    /// The first tick stepped late in the present catch-up, when, and how late.
    behind_since: Option<(u64, Instant, Duration)>,
    /// The tick snapshots were last encoded at.
    snapshots_at: u64,
    /// When the hello and input deadlines are next looked at.
    deadlines_at: Instant,
}

impl Pace {
    pub(super) fn new(now: Instant) -> Pace {
        Pace {
            due: 0,
            behind_since: None,
            snapshots_at: 0,
            deadlines_at: now,
        }
    }

    /// Whether the deadlines are to be looked at `now`, every connection and session being
    /// looked at, so not at every tick: a twentieth of the `shorter` timeout apart (at most
    /// 100 ms), which a deadline may pass by.
    pub(super) fn deadlines_due(&mut self, now: Instant, shorter: Duration) -> bool {
        if now < self.deadlines_at {
            return false;
        }
        self.deadlines_at = now + (shorter / 20).min(DEADLINE_LOOK);
        true
    }

    /// The tick the clock has due.
    pub(super) fn due(&self) -> u64 {
        self.due
    }

    /// The clock has `due` at `now`, and `next` (due at `next_at`) is the next tick to
    /// step: more than one owed begins a catch-up, unless one is under way.
    pub(super) fn set_due(&mut self, due: u64, next: u64, next_at: Instant, now: Instant) {
        self.due = due;
        if due > next && self.behind_since.is_none() {
            self.behind_since = Some((next, now, now.saturating_duration_since(next_at)));
        }
    }

    /// The world has stepped to `tick` at `now`: a catch-up that ends there is over.
    pub(super) fn stepped_to(&mut self, tick: u64, now: Instant) -> Option<Event> {
        if tick != self.due {
            return None;
        }
        let (from, since, behind) = self.behind_since.take()?;
        Some(Event::CaughtUp {
            from,
            ticks: self.due + 1 - from,
            behind,
            took: now.saturating_duration_since(since),
        })
    }

    /// Snapshots are encoded at `tick`: the ticks since they last were (at least one), in
    /// which whoever was due is due now.
    pub(super) fn snapshots(&mut self, tick: u64) -> u64 {
        let span = tick.saturating_sub(self.snapshots_at).max(1);
        self.snapshots_at = tick;
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catch_up_is_reported_once_when_the_world_reaches_the_tick_due() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut pace = Pace::new(t0);
        // On time: tick 5 due and next.
        pace.set_due(5, 5, t0, t0);
        assert_eq!(pace.stepped_to(5, t0), None);
        // Held up: tick 6 was due 40 ms ago, and the clock is at 9.
        let now = t0 + ms(100);
        pace.set_due(9, 6, t0 + ms(60), now);
        assert_eq!(pace.due(), 9);
        assert_eq!(pace.stepped_to(7, now), None, "not there yet");
        // Later calls do not move where it began.
        pace.set_due(12, 8, t0 + ms(80), now + ms(30));
        let e = pace.stepped_to(12, now + ms(50));
        let Some(Event::CaughtUp {
            from,
            ticks,
            behind,
            took,
        }) = e
        else {
            panic!("{e:?}");
        };
        assert_eq!((from, ticks, behind, took), (6, 7, ms(40), ms(50)));
        assert_eq!(pace.stepped_to(12, now + ms(60)), None, "reported once");
    }

    #[test]
    fn snapshots_span_the_ticks_since_the_last_and_deadlines_wait_their_turn() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let mut pace = Pace::new(t0);
        assert_eq!(pace.snapshots(1), 1);
        assert_eq!(pace.snapshots(4), 3, "caught up on three");
        assert_eq!(pace.snapshots(4), 1, "at least one");
        let shorter = Duration::from_secs(1);
        assert!(pace.deadlines_due(t0, shorter));
        assert!(!pace.deadlines_due(t0 + Duration::from_millis(49), shorter));
        assert!(pace.deadlines_due(t0 + Duration::from_millis(50), shorter));
        // Long timeouts are looked at every 100 ms at most.
        let t1 = t0 + Duration::from_secs(1);
        assert!(pace.deadlines_due(t1, Duration::from_secs(10)));
        assert!(pace.deadlines_due(t1 + DEADLINE_LOOK, Duration::from_secs(10)));
    }
}
