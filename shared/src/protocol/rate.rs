//! A token bucket: a rate limit over instants passed in, for what a peer may send (input
//! datagrams in the server's machine, packets in the server's QUIC shell).

use std::time::Instant;

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
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl TokenBucket {
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
