//! What a player's move collides with inside a tick: the map, the movers at their poses
//! and the other players' boxes, behind the movement code's [`Collider`].

use super::players::entangled;
use super::{PlayerBox, PlayerId, Sim};
use crate::collision::hull::Hull;
use crate::collision::{Contents, Hit, Region, Sweep, Target, TraceScratch};
use crate::geom::{Aabb, EXPEL};
use crate::movement::Collider;
use crate::mover::Pose;
use glam::DVec3;

/// How far past a sweep's own bounds the movers and players it may meet are looked for.
pub(super) const SWEEP_MARGIN: f64 = EXPEL * 4.0;

/// The map, the movers at their poses, and other players' boxes.
pub(crate) struct SimCollider<'a> {
    pub(super) sim: &'a Sim,
    pub(super) scratch: &'a mut TraceScratch,
    pub(super) region: &'a Region,
    pub(super) boxes: &'a [PlayerBox],
    pub(super) poses: &'a [Pose],
    /// The movers that reach into the tick's zone (index, bounds at its pose), in mover
    /// order: a sweep looks at these, not at every mover of the map.
    pub(super) movers: &'a [(usize, Aabb)],
    /// A player whose box made a position test fail (the move's outcome hung on where
    /// that player stands, though no sweep touched it).
    pub(crate) blocked_by: Option<PlayerId>,
}

impl Collider for SimCollider<'_> {
    fn sweep(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Sweep {
        let map = &self.sim.map;
        let mut t = map.sweep_in(
            self.region,
            hull,
            start,
            end,
            Contents::PLAYER,
            self.scratch,
        );
        let hb = hull.bounds();
        let swept = hull.swept_bounds(start, end).expand(SWEEP_MARGIN);
        for &(i, bounds) in self.movers {
            if !bounds.overlaps(&swept) {
                continue;
            }
            let (m, pose) = (&self.sim.movers[i], &self.poses[i]);
            let mt = m.sweep(i as u32, hull, start, end, pose, self.scratch);
            if mt.hit.is_some() && mt.fraction < t.fraction {
                t = mt;
            }
        }
        for b in self.boxes.iter().filter(|b| b.bounds.overlaps(&swept)) {
            // The moving box against a standing one is a point against their sum.
            let sum = Aabb {
                min: b.bounds.min - hb.max,
                max: b.bounds.max - hb.min,
            };
            if let Some((f, n)) = point_vs_box(start, end - start, &sum) {
                // Of two players hit at once the lower id, whatever order they come in.
                let first = match t.hit {
                    Some(Hit {
                        target: Target::Player(other),
                        ..
                    }) => f < t.fraction || (f == t.fraction && b.id < other),
                    _ => f < t.fraction,
                };
                if first {
                    let at = start + (end - start) * f;
                    t = Sweep {
                        fraction: f,
                        end: at,
                        hit: Some(Hit {
                            normal: n,
                            // The nearest point of the other box to the hull's centre.
                            point: (at + hb.center()).clamp(b.bounds.min, b.bounds.max),
                            contents: Contents::PLAYER,
                            target: Target::Player(b.id),
                        }),
                    };
                }
            }
        }
        t
    }

    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool {
        let me = hull.bounds().offset(pos);
        let blocking = self.boxes.iter().filter(|b| entangled(&me, &b.bounds));
        if let Some(b) = blocking.min_by_key(|b| b.id) {
            self.blocked_by = Some(b.id);
            return true;
        }
        self.sim
            .map
            .position_solid_in(self.region, hull, pos, Contents::PLAYER, self.scratch)
            || self.movers.iter().any(|&(i, bounds)| {
                bounds.overlaps(&me)
                    && self.sim.movers[i].overlaps(hull, pos, &self.poses[i], self.scratch)
            })
    }
}

/// A point moving from `p` by `d` against box `b` with the expel zone of
/// [`EXPEL`] (the box inflated by e): the fraction where it enters, with the face normal.
/// A point already in the zone may move along or away, never deeper; a point inside the
/// box itself is left free to leave.
fn point_vs_box(p: DVec3, d: DVec3, b: &Aabb) -> Option<(f64, DVec3)> {
    let inflated = b.expand(EXPEL);
    let inside = |q: DVec3, bb: &Aabb| q.cmpgt(bb.min).all() && q.cmplt(bb.max).all();
    if inside(p, b) {
        return None;
    }
    if inside(p, &inflated) {
        // In the zone: blocked if moving towards the box on an axis where it is outside.
        for a in 0..3 {
            if p[a] >= b.max[a] && d[a] < 0.0 {
                return Some((0.0, DVec3::AXES[a]));
            }
            if p[a] <= b.min[a] && d[a] > 0.0 {
                return Some((0.0, -DVec3::AXES[a]));
            }
        }
        return None;
    }
    // Slab test against the inflated box.
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    let mut normal = DVec3::ZERO;
    for a in 0..3 {
        if d[a] == 0.0 {
            if p[a] <= inflated.min[a] || p[a] >= inflated.max[a] {
                return None;
            }
            continue;
        }
        let (mut lo, mut hi) = (
            (inflated.min[a] - p[a]) / d[a],
            (inflated.max[a] - p[a]) / d[a],
        );
        let mut n = -DVec3::AXES[a];
        if lo > hi {
            std::mem::swap(&mut lo, &mut hi);
            n = DVec3::AXES[a];
        }
        if lo > t0 {
            t0 = lo;
            normal = n;
        }
        t1 = t1.min(hi);
        if t0 >= t1 {
            return None;
        }
    }
    (normal != DVec3::ZERO).then_some((t0, normal))
}
