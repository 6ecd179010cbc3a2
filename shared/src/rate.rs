//! Rate limits over instants passed in, for what a peer may send: a token bucket (the
//! server's QUIC shell limits packets with it) and the server machine's input gate on
//! it, which also flags floods.

use crate::time::Instant;
#[cfg(feature = "server")]
use expel_core::validate::{Violation, ViolationKind};
#[cfg(feature = "server")]
use std::time::Duration;

/// Input datagrams a connection may send a second, in input rates: an honest client sends
/// one per input period, a little faster while its clock steers ahead.
#[cfg(feature = "server")]
const INPUT_ALLOWANCE: f64 = 4.0;
/// Input datagrams a connection may send at once, in input rates (a client catching up
/// after a stall sends up to 32 at once; a path's jitter bunches a few).
#[cfg(feature = "server")]
const INPUT_BURST: f64 = 2.0;
/// A connection whose datagrams over the allowance in one [`FLOOD_WINDOW`] reach this
/// many input rates is flagged for flooding (the third flag within the validator's kick
/// window kicks it).
#[cfg(feature = "server")]
const FLOOD_FLAG: f64 = 1.0;
/// The window over which a connection's excess datagrams are added up.
#[cfg(feature = "server")]
const FLOOD_WINDOW: Duration = Duration::from_secs(1);
/// What a server's absence is credited with, in input rates over its length: what an
/// honest client sent meanwhile, twice over.
#[cfg(feature = "server")]
const ABSENCE_CREDIT: f64 = 2.0;

/// Refills at `rate` tokens a second up to `burst`; each thing let through takes one.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: f64, burst: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Whether one more may go through at `now` (it takes a token). Instants earlier
    /// than one seen before add nothing.
    pub fn take(&mut self, now: Instant) -> bool {
        self.take_n(1.0, now)
    }

    /// Whether `n` tokens are there at `now` (taking them if so).
    pub fn take_n(&mut self, n: f64, now: Instant) -> bool {
        let there = self.holds(n, now);
        if there {
            self.tokens -= n;
        }
        there
    }

    /// Whether `n` tokens are there at `now` (taking none).
    pub fn holds(&mut self, n: f64, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= n
    }

    /// At `now`, `n` more tokens than the refill gives, beyond the burst if need be: what
    /// a peer could not send while the one counting was away (a stalled server) is not
    /// held against it.
    pub fn grant(&mut self, n: f64, now: Instant) {
        self.refill(now);
        self.tokens += n.max(0.0);
    }

    /// Refills for the time since the last look, up to the burst (tokens granted beyond
    /// it stay until taken).
    fn refill(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        if self.tokens < self.burst {
            self.tokens = (self.tokens + since * self.rate).min(self.burst);
        }
        self.at = self.at.max(now);
    }
}

/// A connection's datagram allowance: [`INPUT_ALLOWANCE`] input rates, [`INPUT_BURST`] at
/// once; a datagram past it is dropped before it is decoded. The excess is added up per
/// [`FLOOD_WINDOW`] to flag a flood.
#[cfg(feature = "server")]
#[derive(Debug)]
pub(crate) struct InputGate {
    bucket: TokenBucket,
    /// Dropped since `window`, and when that window began.
    dropped: u64,
    window: Instant,
    /// The end of the newest absence of the server's credited to this connection.
    credited: Instant,
}

#[cfg(feature = "server")]
impl InputGate {
    pub(crate) fn new(rate: u32, now: Instant) -> InputGate {
        let rate = f64::from(rate);
        InputGate {
            bucket: TokenBucket::new(rate * INPUT_ALLOWANCE, rate * INPUT_BURST, now),
            dropped: 0,
            window: now,
            credited: now,
        }
    }

    /// A datagram arriving `now` at tick `tick`, with the server's newest absence as it
    /// stands (its end and length): whether it is within the allowance (the absence
    /// credited first), and the flood the window's drops make, once a window is over.
    pub(crate) fn pass(
        &mut self,
        rate: u32,
        absence: Option<(Instant, Duration)>,
        now: Instant,
        tick: u64,
    ) -> (bool, Option<Violation>) {
        if let Some((end, length)) = absence {
            self.credit(rate, end, length, now);
        }
        let admitted = self.admit(now);
        (admitted, self.flood(rate, now, tick))
    }

    /// Credits the server's absence of `length` that ended at `end` (once): what an
    /// honest client sent meanwhile, twice over.
    fn credit(&mut self, rate: u32, end: Instant, length: Duration, now: Instant) {
        if end > self.credited {
            self.credited = end;
            let backlog = length.as_secs_f64() * f64::from(rate) * ABSENCE_CREDIT;
            self.bucket.grant(backlog, now);
        }
    }

    /// Whether a datagram arriving `now` is within the allowance.
    fn admit(&mut self, now: Instant) -> bool {
        let ok = self.bucket.take(now);
        if !ok {
            self.dropped += 1;
        }
        ok
    }

    /// Once a window is over: the flood its dropped datagrams make, if they do (found at
    /// server tick `tick`), and a new window.
    fn flood(&mut self, rate: u32, now: Instant, tick: u64) -> Option<Violation> {
        let span = now.saturating_duration_since(self.window);
        if span < FLOOD_WINDOW {
            return None;
        }
        let dropped = std::mem::take(&mut self.dropped);
        self.window = now;
        let rate = f64::from(rate);
        (dropped as f64 >= rate * FLOOD_FLAG).then(|| Violation {
            kind: ViolationKind::Flood,
            tick,
            evidence: format!(
                "{dropped} input datagrams over the limit of {} a second in {:.1} s",
                rate * INPUT_ALLOWANCE,
                span.as_secs_f64()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_lets_its_burst_through_then_its_rate() {
        #[allow(clippy::disallowed_methods)] // the base of virtual time
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 10.0, t0);
        assert_eq!((0..50).filter(|_| b.take(t0)).count(), 10);
        // A second later: a burst's worth again (the rate would give 100, the bucket
        // holds 10).
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..50).filter(|_| b.take(t1)).count(), 10);
        // Paced at the rate, everything goes through.
        let through = (1..=1000)
            .filter(|i| b.take(t1 + Duration::from_millis(10 * i)))
            .count();
        assert_eq!(through, 1000);
        // A grant goes beyond the burst, and is spent before refilling starts again.
        let t2 = t1 + Duration::from_secs(20);
        b.grant(25.0, t2);
        assert_eq!((0..50).filter(|_| b.take(t2)).count(), 35);
    }
}
