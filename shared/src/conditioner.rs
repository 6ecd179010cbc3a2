//! A link conditioner as a pure queue: packets pushed at an instant come out of
//! [`Conditioner::pop`] once their delay has passed, some lost, some twice, reordered by
//! jitter; the randomness is seeded, so a run repeats exactly.

use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// Loss, delay, jitter and duplication of one direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairment {
    /// Probability a packet is lost.
    pub loss: f64,
    /// One-way delay, milliseconds.
    pub delay_ms: f64,
    /// Uniform ± jitter on the delay, milliseconds (reorders packets).
    pub jitter_ms: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
}

impl Impairment {
    /// Whether it changes anything.
    pub fn active(&self) -> bool {
        self.loss > 0.0 || self.delay_ms > 0.0 || self.jitter_ms > 0.0 || self.duplicate > 0.0
    }
}

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Packets in flight through a conditioned link.
#[derive(Clone, Debug)]
pub struct Conditioner<T> {
    link: Impairment,
    rng: SplitMix,
    /// By delivery instant, then push order (so equal instants keep their order).
    queue: BTreeMap<(Instant, u64), T>,
    pushed: u64,
    /// Packets lost.
    pub lost: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
}

impl<T: Clone> Conditioner<T> {
    /// An empty link with these conditions and this seed.
    pub fn new(link: Impairment, seed: u64) -> Self {
        Conditioner {
            link,
            rng: SplitMix(seed),
            queue: BTreeMap::new(),
            pushed: 0,
            lost: 0,
            duplicated: 0,
        }
    }

    /// Changes the link's conditions for packets sent from now on (those in flight keep
    /// their delivery instants).
    pub fn set_link(&mut self, link: Impairment) {
        self.link = link;
    }

    /// Sends `packet` at `now`.
    pub fn push(&mut self, packet: T, now: Instant) {
        if self.rng.chance(self.link.loss) {
            self.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            self.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if self.link.jitter_ms > 0.0 {
                (self.rng.unit() * 2.0 - 1.0) * self.link.jitter_ms
            } else {
                0.0
            };
            let delay = (self.link.delay_ms + jitter).max(0.0) / 1000.0;
            let at = now + Duration::from_secs_f64(delay);
            self.pushed += 1;
            self.queue.insert((at, self.pushed), packet.clone());
        }
    }

    /// The next packet whose delivery instant has come by `now`.
    pub fn pop(&mut self, now: Instant) -> Option<T> {
        let (&(at, _), _) = self.queue.first_key_value()?;
        if at > now {
            return None;
        }
        self.queue.pop_first().map(|(_, p)| p)
    }

    /// When the next packet is due, if any is in flight.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Packets in flight.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_reorders_loses_and_duplicates_reproducibly() {
        let link = Impairment {
            loss: 0.1,
            delay_ms: 100.0,
            jitter_ms: 30.0,
            duplicate: 0.05,
        };
        #[allow(clippy::disallowed_methods)] // the base of virtual time, or a wall-time figure
        let t0 = Instant::now();
        let run = || {
            let mut c = Conditioner::new(link, 7);
            for i in 0..1000u32 {
                c.push(i, t0 + Duration::from_millis(u64::from(i)));
            }
            assert!(c.pop(t0 + Duration::from_millis(69)).is_none());
            let mut out = Vec::new();
            let end = t0 + Duration::from_secs(2);
            while let Some(p) = c.pop(end) {
                out.push(p);
            }
            (out, c.lost, c.duplicated)
        };
        let (a, lost, dup) = run();
        assert_eq!(run().0, a, "the same seed gives the same deliveries");
        assert!((60..140).contains(&lost), "lost {lost}");
        assert!((20..80).contains(&dup), "duplicated {dup}");
        assert_eq!(a.len() as u64, 1000 - lost + dup);
        assert!(a.windows(2).any(|w| w[0] > w[1]), "jitter reorders");
    }
}
