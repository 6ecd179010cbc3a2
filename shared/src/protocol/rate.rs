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
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + since * self.rate).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
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
    }
}
