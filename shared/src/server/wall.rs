//! The server's wall clock: when tick 0 was, so the tick due at any instant (however late
//! the server runs them, ticks keep their numbers, and the tick clients keep to is the
//! wall clock's), Unix time for token expiry, and the shell's calls, whose gaps are the
//! server's own absences.

use crate::time::Instant;
use std::time::Duration;

/// A gap this long between two calls of the shell is the server's own absence (a stall:
/// a healthy shell calls at least once a tick). What clients sent meanwhile arrives at
/// once afterwards, and is not held against them.
const ABSENCE: Duration = Duration::from_millis(50);

/// The wall clock of a server ticking `rate` times a second.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wall {
    /// When tick 0 was: tick `t` is due at `epoch + t / rate`.
    epoch: Instant,
    /// Unix seconds at `epoch`: token expiry follows the wall clock, which ticks skipped
    /// do not set back.
    unix_epoch: u64,
    rate: u32,
    /// When the shell last called.
    last_call: Instant,
    /// The newest absence: its end and length.
    absence: Option<(Instant, Duration)>,
}

impl Wall {
    /// Tick 0 at `now`, which is `unix_now` in Unix seconds.
    pub(super) fn new(now: Instant, unix_now: u64, rate: u32) -> Wall {
        Wall {
            epoch: now,
            unix_epoch: unix_now,
            rate,
            last_call: now,
            absence: None,
        }
    }

    /// When tick `t` is due.
    pub(super) fn tick_at(&self, t: u64) -> Instant {
        self.epoch + Duration::from_secs_f64(t as f64 / f64::from(self.rate))
    }

    /// The tick due at `now` (the server may not have run it yet): what an honest
    /// client's clock follows.
    pub(super) fn tick(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.epoch).as_secs_f64() * f64::from(self.rate)) as u64
    }

    /// Unix seconds at `now`.
    pub(super) fn unix(&self, now: Instant) -> u64 {
        (self.unix_epoch).saturating_add(now.saturating_duration_since(self.epoch).as_secs())
    }

    /// Notes a call of the shell at `now`: after a gap of [`ABSENCE`] or more, the server
    /// was away.
    pub(super) fn called(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last_call);
        if gap >= ABSENCE {
            self.absence = Some((now, gap));
        }
        self.last_call = self.last_call.max(now);
    }

    /// When the shell last called: the present, for the machine.
    pub(super) fn last_call(&self) -> Instant {
        self.last_call
    }

    /// The newest absence of the server's: its end and length.
    pub(super) fn absence(&self) -> Option<(Instant, Duration)> {
        self.absence
    }

    /// Since when silence is a client's own: the end of the newest absence, or tick 0.
    pub(super) fn back(&self) -> Instant {
        self.absence.map_or(self.epoch, |(end, _)| end)
    }
}
