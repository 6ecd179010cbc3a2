//! When to try again: capped exponential backoff with jitter, for a client reconnecting
//! to a server that went away (killed, restarting, draining). Pure: it hands out delays,
//! the caller sleeps.
//!
//! Each delay is drawn uniformly from the upper half of the current step ("equal
//! jitter"): a crowd that lost the same server at the same instant spreads its retries
//! instead of arriving as one wave, and no delay is shorter than half the step.

use std::time::Duration;

/// Delays between attempts: `first`, doubling each failure up to `cap`, each jittered.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    failures: u32,
    rng: u64,
}

impl Backoff {
    /// Starts at `first`, never more than `cap`; `seed` picks the jitter (give each client
    /// its own).
    pub fn new(first: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff {
            first,
            cap: cap.max(first),
            failures: 0,
            rng: seed,
        }
    }

    /// The delay before the next attempt; each call counts one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let step = self
            .first
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.cap);
        self.failures = self.failures.saturating_add(1);
        // splitmix64: enough to spread a crowd, no dependency.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        step.mul_f64(0.5 + 0.5 * unit)
    }

    /// An attempt succeeded: the next failure starts from `first` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_jittered_in_the_upper_half_and_reset() {
        let (first, cap) = (Duration::from_millis(100), Duration::from_secs(2));
        let mut b = Backoff::new(first, cap, 7);
        let mut step = first;
        for _ in 0..10 {
            let d = b.next_delay();
            assert!(d >= step / 2 && d <= step, "{d:?} for step {step:?}");
            step = (step * 2).min(cap);
        }
        b.reset();
        assert!(b.next_delay() <= first);
        // Two clients that failed together wait different times.
        let mut a = Backoff::new(first, cap, 1);
        let mut c = Backoff::new(first, cap, 2);
        let (da, dc): (Vec<_>, Vec<_>) = (0..4).map(|_| (a.next_delay(), c.next_delay())).unzip();
        assert_ne!(da, dc);
    }
}
