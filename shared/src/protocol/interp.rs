//! Interpolation of other players: drawn a fixed delay behind the newest snapshot,
//! between the two snapshots around that moment, so they move smoothly however snapshots
//! arrive.

use super::snapshot::Snapshot;
use glam::DVec3;
use std::collections::{BTreeMap, VecDeque};

/// Snapshots kept for interpolation.
const KEEP: usize = 32;

/// Other players' positions over recent snapshots.
#[derive(Debug, Default)]
pub struct Interpolator {
    frames: VecDeque<(u64, BTreeMap<u32, DVec3>)>,
}

impl Interpolator {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a snapshot's other players (older than the newest: ignored).
    pub fn push(&mut self, snap: &Snapshot) {
        if self.frames.back().is_some_and(|(t, _)| *t >= snap.tick) {
            return;
        }
        let pos = snap
            .players
            .iter()
            .map(|(id, p)| (*id, p.origin()))
            .collect();
        self.frames.push_back((snap.tick, pos));
        while self.frames.len() > KEEP {
            self.frames.pop_front();
        }
    }

    /// Positions at (fractional) server tick `at`: interpolated between the snapshots
    /// around it, held at the nearest one outside their span.
    pub fn at(&self, at: f64) -> BTreeMap<u32, DVec3> {
        let Some(i) = self.frames.iter().position(|(t, _)| *t as f64 > at) else {
            return self.frames.back().map(|f| f.1.clone()).unwrap_or_default();
        };
        if i == 0 {
            return self.frames[0].1.clone();
        }
        let ((t0, a), (t1, b)) = (&self.frames[i - 1], &self.frames[i]);
        let k = ((at - *t0 as f64) / (*t1 - *t0) as f64).clamp(0.0, 1.0);
        a.iter()
            .map(|(id, p)| (*id, b.get(id).map_or(*p, |q| *p + (*q - *p) * k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlayerState;

    fn snap(tick: u64, x: f64) -> Snapshot {
        let mut players = BTreeMap::new();
        players.insert(7, PlayerState::at(DVec3::new(x, 0.0, 0.0)));
        Snapshot {
            tick,
            feedback: Default::default(),
            own: PlayerState::default(),
            players,
            movers: BTreeMap::new(),
        }
    }

    #[test]
    fn interpolates_between_snapshots_and_holds_outside_them() {
        let mut i = Interpolator::new();
        i.push(&snap(10, 0.0));
        i.push(&snap(12, 20.0));
        i.push(&snap(11, 99.0)); // late: ignored
        assert_eq!(i.at(11.0)[&7].x, 10.0);
        assert_eq!(i.at(11.5)[&7].x, 15.0);
        assert_eq!(i.at(5.0)[&7].x, 0.0);
        assert_eq!(i.at(30.0)[&7].x, 20.0);
    }
}
