//! What a predicting bot draws at the edges, counted as a player would notice it: the
//! projectiles it was told ended and whether it had seen them start, the farthest a drawn
//! projectile stepped back along its path, its own teleports drawn with a place between,
//! and how late the messages released with the drawn view came.

use expel_core::sim::EntityId;
use expel_protocol::client::{ClientEvent, ClientMachine};
use glam::DVec3;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Projectiles followed at once at most (the oldest forgotten first).
const FOLLOWED: usize = 256;

/// One bot's look at what it draws.
#[derive(Debug, Default)]
pub struct Sight {
    /// Entities it was told started (spawned into view), recently.
    started: BTreeSet<EntityId>,
    /// Projectiles drawn: first place, way, farthest progress along it.
    along: BTreeMap<(bool, u32), (DVec3, DVec3, f64)>,
    figures: SightFigures,
    teleports: u64,
}

/// What [`Sight`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SightFigures {
    /// Entities whose end it was told: every one it should have seen.
    pub projectiles_ended: u64,
    /// Of those, the ones it was told started too (spawned into its view first).
    pub projectiles_started: u64,
    /// The farthest any drawn projectile (its own predicted, or another's interpolated)
    /// stepped back along its path between two looks, units.
    pub max_backstep: f64,
    /// Its own teleports (respawns) taken.
    pub teleports: u64,
    /// Of those, drawn with a place between (the drawing not at once where it went).
    pub teleports_slid: u64,
    /// Messages released with the drawn view.
    pub messages_released: u64,
    /// The most ticks the drawn view had passed such a message's tick when it went to
    /// the game (late); none go before it (early) by construction.
    pub max_release_late_ticks: f64,
}

impl SightFigures {
    /// Adds another bot's figures.
    pub fn add(&mut self, o: &SightFigures) {
        self.projectiles_ended += o.projectiles_ended;
        self.projectiles_started += o.projectiles_started;
        self.max_backstep = self.max_backstep.max(o.max_backstep);
        self.teleports += o.teleports;
        self.teleports_slid += o.teleports_slid;
        self.messages_released += o.messages_released;
        self.max_release_late_ticks = self.max_release_late_ticks.max(o.max_release_late_ticks);
    }
}

impl Sight {
    /// Takes what the client's last update brought (its events: the game's other
    /// readers get none) and what it draws at `now`.
    pub fn look(&mut self, c: &mut ClientMachine, now: Instant) {
        while let Some(e) = c.poll_event() {
            match e {
                ClientEvent::EntitySpawned { id, .. } => {
                    self.started.insert(id);
                    if self.started.len() > FOLLOWED * 4 {
                        self.started.pop_first();
                    }
                }
                ClientEvent::EntityEnded { end } => {
                    self.figures.projectiles_ended += 1;
                    self.figures.projectiles_started += u64::from(self.started.remove(&end.id));
                }
                _ => {}
            }
        }
        let mut live = BTreeSet::new();
        let launched = c.launched();
        let twins: BTreeSet<EntityId> = launched.iter().filter_map(|l| l.twin).collect();
        for l in launched {
            let way = l.entity.velocity().normalize_or_zero();
            self.see((true, l.local), l.origin, way);
            live.insert((true, l.local));
        }
        let at = c.render_tick(now);
        for (id, d) in c.entities_drawn(at) {
            if d.view.moving && !twins.contains(&id) {
                // Its way: from where it was first drawn to where it is.
                let way = self
                    .along
                    .get(&(false, id.0))
                    .map_or(DVec3::ZERO, |(o, w, _)| {
                        if *w == DVec3::ZERO {
                            (d.origin - *o).normalize_or_zero()
                        } else {
                            *w
                        }
                    });
                self.see((false, id.0), d.origin, way);
                live.insert((false, id.0));
            }
        }
        self.along.retain(|k, _| live.contains(k));
        let st = c.stats();
        if st.teleports > self.teleports {
            self.teleports = st.teleports;
            self.figures.teleports += 1;
            let drawn = c.display_origin();
            let at = c.local_player().map(|p| p.origin());
            if drawn.zip(at).is_some_and(|(d, a)| d.distance(a) > 1.0) {
                self.figures.teleports_slid += 1;
            }
        }
        self.figures.messages_released = st.releases.released;
        self.figures.max_release_late_ticks = st.releases.max_late_ticks;
    }

    fn see(&mut self, key: (bool, u32), at: DVec3, way: DVec3) {
        if self.along.len() >= FOLLOWED && !self.along.contains_key(&key) {
            self.along.pop_first();
        }
        let (o, w, best) = self.along.entry(key).or_insert((at, way, 0.0));
        if *w == DVec3::ZERO {
            // Its way is known once it moved.
            *w = way;
        }
        let progress = (at - *o).dot(*w);
        self.figures.max_backstep = self.figures.max_backstep.max(*best - progress);
        *best = best.max(progress);
    }

    /// What it counted.
    pub fn figures(&self) -> SightFigures {
        self.figures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_back_along_the_way_is_measured_and_one_forward_is_not() {
        let mut s = Sight::default();
        let x = DVec3::X;
        s.see((true, 1), DVec3::ZERO, x);
        s.see((true, 1), DVec3::new(10.0, 0.0, 0.0), x);
        s.see((true, 1), DVec3::new(30.0, 5.0, 0.0), x);
        assert_eq!(s.figures.max_backstep, 0.0);
        s.see((true, 1), DVec3::new(22.0, 0.0, 0.0), x);
        assert_eq!(s.figures.max_backstep, 8.0);
    }
}
