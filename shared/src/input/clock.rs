//! The client's clock: steered to stay ahead of the server by the path's delay, its
//! jitter and a buffer, from what each snapshot says of our commands' arrival.

use crate::snapshot::Snapshot;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// Ticks stepped at most per
/// [`ClientMachine::handle_timeout`](crate::client::ClientMachine::handle_timeout); a game that
/// stopped calling for longer resumes from now (the steering then catches the server up).
pub(crate) const MAX_CATCH_UP: u32 = 32;
/// Most of the round trip (seconds) the clock lead covers. A transport's estimate taken
/// while the server is swamped (a crowd joining at once) can be seconds of queueing; a
/// client that ran that far ahead would send commands the server must refuse as out of
/// its window, and the feedback steers it on from here either way.
pub(crate) const MAX_LEAD_RTT: f64 = 0.5;

/// Weight of each new lead report in the running mean and deviation (about a second of
/// snapshots).
const LEAD_SMOOTHING: f64 = 0.05;

/// How fast the least round trip seen forgets (ticks per second), so that a path that
/// got slower for good is believed within a minute or so.
const TRIP_FLOOR_RISE: f64 = 0.3;

/// The client's clock: the newest tick predicted and sent, when the next is due, and
/// what steers it.
#[derive(Debug)]
pub(crate) struct Clock {
    /// The server's ticks a second.
    rate: f64,
    /// The newest tick predicted and sent.
    pub(crate) tick: u64,
    /// Seconds per tick, as steered.
    pub(crate) period: f64,
    /// When the next tick is due.
    pub(crate) next_at: Instant,
    /// Whether the server has yet reported a command of ours arriving in time. Until
    /// then a clock found behind jumps at once rather than speeding up: each command
    /// that arrives late is one the server must repeat, and the player is corrected.
    pub(crate) settled: bool,
    /// When each recent command tick was sent.
    pub(crate) sent_at: BTreeMap<u64, Instant>,
    /// The server's reports of how early our commands arrive: their running mean and
    /// mean deviation, ticks (the path's jitter as the server sees it).
    lead_mean: Option<f64>,
    lead_deviation: f64,
    /// The least round trip seen lately, ticks (it creeps up when none is as small):
    /// the path's own, without the queueing a starved host or a swamped server adds.
    /// Measured by the commands the server reports on, so it counts every delay they
    /// meet (a transport's estimate may not see a queue above it).
    trip_floor: Option<f64>,
    /// When `trip_floor` was last updated.
    floor_at: Instant,
}

impl Clock {
    /// A clock at `tick` of a server running `rate` ticks a second, the next due `now`.
    pub(crate) fn new(rate: u32, tick: u64, now: Instant) -> Clock {
        let rate = f64::from(rate.max(1));
        Clock {
            rate,
            tick,
            period: 1.0 / rate,
            next_at: now,
            settled: false,
            sent_at: BTreeMap::new(),
            lead_mean: None,
            lead_deviation: 0.0,
            trip_floor: None,
            floor_at: now,
        }
    }

    /// Clock steering: stay ahead of the server by the path's delay plus the buffer, plus
    /// the path's jitter. The server says how early our commands arrive (the worst since its
    /// last snapshot), which covers every delay on the path; before it has, the round trip
    /// stands in. How much that report wanders is the jitter: a command that arrives a few
    /// ticks late on a jittery path is as lost as a dropped one, so the lead keeps the
    /// report's mean deviation in hand (nothing on a steady path). Not more: a trusted client
    /// predicts further ahead on an older picture of the others, and its claims meet them
    /// where they no longer stand.
    ///
    /// Nor ever so far that a command would arrive more than a quarter second early on the
    /// path's quickest round trip of late: a server that ran behind, or a host that held our
    /// commands back, can report them a second late, and a clock that chased that would be
    /// far ahead once the queue drained, which reads as a fast clock.
    pub(crate) fn steer(&mut self, snap: &Snapshot, rtt: f64, buffer: f64, now: Instant) {
        let rate = self.rate;
        // Ticks already due run right after this (a host that was held up has a backlog):
        // the clock is where they put it.
        let due = match now.checked_duration_since(self.next_at) {
            Some(late) => {
                (late.as_secs_f64() / self.period)
                    .floor()
                    .min(f64::from(MAX_CATCH_UP))
                    + 1.0
            }
            None => 0.0,
        };
        let clock = self.tick as f64 + due;
        // The server's clock when it made the snapshot: past its tick while it catches up.
        let server = snap.tick as f64 + f64::from(snap.feedback.behind);
        let error = match snap.feedback.input_lead {
            Some(l) => {
                // The jitter is the reports' own: a command our host sent late is as late
                // as one the path held, and only lead covers either.
                let raw = f64::from(l);
                let mean = *self.lead_mean.get_or_insert(raw);
                self.lead_deviation += ((raw - mean).abs() - self.lead_deviation) * LEAD_SMOOTHING;
                self.lead_mean = Some(mean + (raw - mean) * LEAD_SMOOTHING);
                let (l, trip) = self.lead_now(snap.tick, raw, clock, rate, now);
                self.settled |= l >= 0.0;
                if let Some(trip) = trip {
                    let risen = now.saturating_duration_since(self.floor_at).as_secs_f64();
                    let floor = self
                        .trip_floor
                        .map_or(trip, |f| f + risen * TRIP_FLOOR_RISE);
                    self.trip_floor = Some(floor.min(trip));
                    self.floor_at = now;
                }
                // At most an eighth of a second: beyond it the lead would read as a fast
                // clock to the server's speedhack check.
                let jitter = self.lead_deviation.min(rate / 8.0);
                let most = server + self.trip_floor.unwrap_or(0.0) + rate / 4.0 - clock;
                (buffer + jitter - l).min(most)
            }
            // No datagram of ours reached the server since its last snapshot (one every
            // other tick, jitter or a loss leaves a snapshot's span without one), while
            // the server keeps time: that says nothing of our lead, and the round trip
            // below, capped for the start, would steer a long path's clock back. (A server
            // behind its ticks reads nothing as timely: then the round trip steers.)
            None if self.lead_mean.is_some() && snap.feedback.behind == 0 => return,
            None => server + (rtt.min(MAX_LEAD_RTT) * rate + buffer).min(rate / 4.0) - clock,
        };
        if error > rate || (!self.settled && error >= 1.0) {
            // Far behind (at the start, or after a stall): jump forward only. The jump is
            // where the clock belongs now: the ticks the clock missed while behind (a
            // frozen host's) are not to be run on top of it.
            self.tick = (clock + error.floor()) as u64;
            self.next_at = self.next_at.max(now + Duration::from_secs_f64(self.period));
        } else {
            self.period = 1.0 / rate / (1.0 + (error * 0.02).clamp(-0.2, 0.2));
        }
    }

    /// The lead a command sent at `clock` now would arrive with, from the server's report
    /// `l` of one sent earlier, and the round trip (ticks) that report took. The report is a
    /// round trip old, and since that command left the clock may have run fast or slow or
    /// jumped; or the command itself left late, in a starved host's burst. The ticks run
    /// since it left less the time passed count all of these: steering on the raw report
    /// overshoots by what the last round trip's steering already did, and reads a late burst
    /// as a slow clock (which no clock speed mends).
    fn lead_now(
        &self,
        snap_tick: u64,
        l: f64,
        clock: f64,
        rate: f64,
        now: Instant,
    ) -> (f64, Option<f64>) {
        // The server's tick at the report's arrival was about the snapshot's, so the command
        // was about `snap_tick + l`: the newest of some message we sent then. From its
        // leaving to this snapshot's coming is a round trip, whatever the lead.
        let tick = (snap_tick as f64 + l).max(0.0) as u64;
        match self.sent_at.range(..=tick.min(self.tick)).next_back() {
            Some((&sent, &at)) => {
                let trip = now.saturating_duration_since(at).as_secs_f64() * rate;
                (l + (clock - sent as f64) - trip, Some(trip))
            }
            None => (l, None),
        }
    }
}
