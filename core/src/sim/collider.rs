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
pub(crate) const SWEEP_MARGIN: f64 = EXPEL * 4.0;

/// The map, the movers at their poses, and other players' boxes.
pub(crate) struct SimCollider<'a> {
    pub(super) sim: &'a Sim,
    /// What of the map stops the hull: players stop at clip brushes, projectiles do not.
    pub(super) mask: Contents,
    pub(super) scratch: &'a mut TraceScratch,
    pub(super) region: &'a Region,
    pub(super) boxes: &'a [PlayerBox],
    /// A zone around where the player stands and the boxes of `boxes` that reach into it
    /// (in the same order). A query wholly inside the zone meets exactly these, and most
    /// of a tick's queries are: in a crowd, a tick's reach holds several times more
    /// players than one step of it touches.
    pub(super) close: Option<(Aabb, &'a [PlayerBox])>,
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
        let mut t = map.sweep_in(self.region, hull, start, end, self.mask, self.scratch);
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
        for b in self
            .boxes_for(&swept)
            .iter()
            .filter(|b| b.bounds.overlaps(&swept))
        {
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
        let blocking = self
            .boxes_for(&me)
            .iter()
            .filter(|b| entangled(&me, &b.bounds));
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

impl<'a> SimCollider<'a> {
    /// The boxes a query within `q` must look at: the close ones when `q` is inside their
    /// zone (a box that overlaps `q` then overlaps the zone), else all.
    fn boxes_for(&self, q: &Aabb) -> &'a [PlayerBox] {
        match self.close {
            Some((zone, close)) if zone.contains(q) => close,
            _ => self.boxes,
        }
    }
}

/// A point moving from `p` by `d` against box `b` with the expel zone of
/// [`EXPEL`] (the box inflated by e): the fraction where it enters, with the face normal.
/// A point already in the zone, its outer boundary included, may move along or away,
/// never deeper; a point inside the box itself is left free to leave.
fn point_vs_box(p: DVec3, d: DVec3, b: &Aabb) -> Option<(f64, DVec3)> {
    let inflated = b.expand(EXPEL);
    let inside = |q: DVec3, bb: &Aabb| q.cmpgt(bb.min).all() && q.cmplt(bb.max).all();
    if inside(p, b) {
        return None;
    }
    // The boundary counts: a sweep that stopped at the zone left the point exactly there
    // (quantized positions and boxes make it exact), and from there the slab test below
    // would see it enter at 0 with no face crossed, and let it through the box.
    if p.cmpge(inflated.min).all() && p.cmple(inflated.max).all() {
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

#[cfg(test)]
mod tests {
    use super::SimCollider;
    use crate::geom::{Aabb, EXPEL};
    use crate::movement::{buttons, Collider, MoveCommand, MoveConfig, PlayerState};
    use crate::sim::{PlayerBox, Sim, SimScratch};
    use crate::PlayerId;
    use crate::{CollisionModel, MapData};
    use glam::DVec3;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn arena() -> Sim {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map");
        let map = MapData::parse_map(&std::fs::read_to_string(path).unwrap()).unwrap();
        let movement = MoveConfig::default().validate().unwrap();
        Sim::from_map(Arc::new(CollisionModel::build(&map)), &map, movement).0
    }

    fn point_in(rng: &mut ChaCha8Rng, b: &Aabb) -> DVec3 {
        DVec3::new(
            rng.gen_range(b.min.x..b.max.x),
            rng.gen_range(b.min.y..b.max.y),
            rng.gen_range(b.min.z..b.max.z),
        )
    }

    /// A player pressed against another rests at the expel zone's edge, exactly (its
    /// origin and the other's box lie on the position grid). A sweep from there into the
    /// box once passed straight through it: the slab test saw it enter at 0 with no face
    /// crossed. The rounding then took the whole move back (a snag, with the velocity
    /// kept), which a trusted client claimed and the server judged as flying. Chains of
    /// sweeps, each from where the last stopped rounded to the grid as a tick ends, must
    /// never end inside a box (overlap deeper than 1e-6, checked here, not by the code's
    /// own test).
    #[test]
    fn sweeps_from_the_expel_zone_edge_never_end_inside_a_player() {
        let sim = arena();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let hull = sim.movement.stand().clone();
        let hb = hull.bounds();
        let c = sim.arena().center();
        let grid = |v: DVec3| (v * 256.0).round() / 256.0;
        let inside = |me: &Aabb, b: &Aabb| {
            (0..3).all(|a| me.min[a] + 1e-6 < b.max[a] && b.min[a] < me.max[a] - 1e-6)
        };
        let cube = Aabb {
            min: c - DVec3::splat(120.0),
            max: c + DVec3::splat(120.0),
        };
        let (mut from_edge, mut sweeps) = (0, 0);
        for _ in 0..500 {
            let boxes: Vec<PlayerBox> = (0..6)
                .map(|id| PlayerBox {
                    id: PlayerId(id),
                    bounds: hb.offset(grid(c + (point_in(&mut rng, &cube) - c) * 0.4)),
                })
                .collect();
            let poses = Vec::new();
            let mut s = SimScratch::new();
            let mut col: SimCollider = sim.collider(cube, &poses, &boxes, &mut s);
            let mut p = grid(c + (point_in(&mut rng, &cube) - c) * 0.5);
            if boxes.iter().any(|b| inside(&hb.offset(p), &b.bounds)) {
                continue;
            }
            for _ in 0..30 {
                // Mostly toward a box, as a crowd pushes.
                let b = boxes[rng.gen_range(0..boxes.len())].bounds;
                let jitter = DVec3::from_array([(); 3].map(|_| rng.gen_range(-8.0..8.0)));
                let aim = b.center() - p + jitter;
                let end = p + aim.normalize_or_zero() * rng.gen_range(0.5..12.0);
                let me = hb.offset(p);
                from_edge += usize::from(boxes.iter().any(|b| {
                    (0..3).any(|a| {
                        me.min[a] == b.bounds.max[a] + EXPEL || me.max[a] == b.bounds.min[a] - EXPEL
                    })
                }));
                let t = col.sweep(&hull, p, end);
                let at = hb.offset(t.end);
                for b in &boxes {
                    assert!(
                        !inside(&at, &b.bounds),
                        "from {p:?} toward {end:?} the sweep ended at {:?}, inside player {}'s box {:?}",
                        t.end,
                        b.id,
                        b.bounds
                    );
                }
                sweeps += 1;
                // As a tick ends: to the grid, unless that overlaps.
                let q = grid(t.end);
                p = if col.solid(&hull, q) { t.end } else { q };
            }
        }
        eprintln!("{sweeps} sweeps, {from_edge} from the zone's edge");
        assert!(sweeps > 4_000, "{sweeps} sweeps");
        assert!(
            from_edge > 500,
            "only {from_edge} sweeps began at the zone's edge"
        );
    }

    /// Sweeps and position tests anywhere, inside the close zone and out of it, meet the
    /// same boxes with the close list as with all of them.
    #[test]
    fn queries_in_and_out_of_the_close_zone_meet_the_same_boxes() {
        let sim = arena();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let hull = sim.movement.stand().clone();
        let c = sim.arena().center();
        let cube = Aabb {
            min: c - DVec3::splat(150.0),
            max: c + DVec3::splat(150.0),
        };
        let (mut narrowed, mut checked) = (0, 0);
        for _ in 0..200 {
            let boxes: Vec<PlayerBox> = (0..60)
                .map(|id| PlayerBox {
                    id: PlayerId(id),
                    bounds: hull.bounds().offset(point_in(&mut rng, &cube)),
                })
                .collect();
            let zone = hull.bounds().offset(c).expand(rng.gen_range(5.0..80.0));
            let close: Vec<PlayerBox> = boxes
                .iter()
                .filter(|b| b.bounds.overlaps(&zone))
                .copied()
                .collect();
            narrowed += usize::from(close.len() < boxes.len());
            let poses = Vec::new();
            let (mut s1, mut s2) = (SimScratch::new(), SimScratch::new());
            let mut wide: SimCollider = sim.collider(cube, &poses, &boxes, &mut s1);
            let mut narrow: SimCollider = sim.collider(cube, &poses, &boxes, &mut s2);
            narrow.close = Some((zone, &close));
            for _ in 0..50 {
                // Short moves near the zone's middle (mostly inside it) and long ones.
                let reach = if rng.gen_bool(0.5) { 20.0 } else { 150.0 };
                let start = c + DVec3::splat(reach)
                    * DVec3::new(
                        rng.gen_range(-1.0..1.0),
                        rng.gen_range(-1.0..1.0),
                        rng.gen_range(-1.0..1.0),
                    );
                let end = start + (point_in(&mut rng, &cube) - c) * 0.3;
                assert_eq!(
                    narrow.sweep(&hull, start, end),
                    wide.sweep(&hull, start, end)
                );
                assert_eq!(narrow.solid(&hull, start), wide.solid(&hull, start));
                assert_eq!(narrow.blocked_by, wide.blocked_by);
                checked += 1;
            }
        }
        assert_eq!(checked, 10_000);
        assert!(narrowed > 100, "the close lists leave boxes out");
    }

    /// The close boxes' shortcut changes no bit of a packed crowd's ticks (players
    /// touching, jumping and crouching), and it is taken: their lists are far shorter.
    #[test]
    fn a_crowd_ticks_the_same_with_close_boxes_as_with_all() {
        let sim = arena();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut world = sim.new_state();
        let centre = sim.arena().center();
        for id in 0..160u32 {
            let (i, j) = (f64::from(id % 12), f64::from(id / 12));
            let at = centre + DVec3::new(i * 31.5, j * 31.5, rng.gen_range(0.0..40.0));
            sim.add_player(&mut world, PlayerId(id), PlayerState::at(at))
                .unwrap();
        }
        let (mut narrow, mut wide, mut step) =
            (SimScratch::new(), SimScratch::new(), SimScratch::new());
        wide.all_boxes = true;
        let mut poses = Vec::new();
        let (mut close, mut all) = (0, 0);
        for _ in 0..120 {
            let cmds: BTreeMap<PlayerId, MoveCommand> = world
                .players
                .keys()
                .map(|&id| {
                    let b = [0, buttons::JUMP, buttons::CROUCH][rng.gen_range(0..3)];
                    let cmd = MoveCommand::new(
                        rng.gen_range(-1.0..1.0),
                        rng.gen_range(-1.0..1.0),
                        0.0,
                        rng.gen_range(0.0..360.0),
                        0.0,
                    )
                    .with_buttons(b);
                    (id, cmd)
                })
                .collect();
            sim.poses(&world.movers, &mut poses);
            let boxes: Vec<_> = world
                .players
                .iter()
                .filter_map(|(id, s)| sim.player_box(*id, &s.state))
                .collect();
            for (id, slot) in &world.players {
                let cmd = &cmds[id];
                let a = sim.player_tick(*id, &slot.state, cmd, &poses, &boxes, &mut narrow);
                let b = sim.player_tick(*id, &slot.state, cmd, &poses, &boxes, &mut wide);
                assert_eq!(a, b, "player {id} at tick {}", world.tick);
                close += narrow.close.len();
                all += narrow.boxes.len();
            }
            sim.step(&mut world, &cmds, &mut step);
        }
        assert!(close * 2 < all, "{close} close boxes of {all}");
    }
}
