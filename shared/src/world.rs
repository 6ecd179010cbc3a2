//! The deterministic world: the map, the players, and one `step` per tick.
//!
//! Each tick the movers advance first (carrying riders, pushing players in their way, turning
//! back rather than trapping anyone), then players move in ascending id order, each against
//! the map, the movers and the other players' boxes as they stand at that moment (so two
//! players never overlap); every result is quantized (see [`crate::movement`]). The state
//! hash is FNV-1a (64-bit) over the tick number, each mover's state (progress, phase, timer)
//! in map order, and, in id order, each player's id and [`PlayerState::hash_bytes`]: stable
//! across platforms, builds and runs.

use crate::collision::{hull::Hull, CollisionModel, Contents, Region, Trace, TraceScratch};
use crate::geom::{Aabb, EXPEL, POSITION_EPS};
use crate::movement::{pmove, Collider, MoveCommand, MoveConfig, MoveMode, Movement, PlayerState};
use crate::mover::{Mover, MoverState};
use glam::{DQuat, DVec3};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub type PlayerId = u32;

/// The simulated world. The map is shared read-only (`Arc`), so many worlds or threads can
/// use one compiled model.
pub struct World {
    pub map: Arc<CollisionModel>,
    pub movement: Movement,
    pub tick: u64,
    players: BTreeMap<PlayerId, PlayerState>,
    movers: Vec<Mover>,
    mover_states: Vec<MoverState>,
    scratch: TraceScratch,
    region: Region,
}

/// Cell size of the per-tick grid that finds nearby players.
const PLAYER_CELL: f64 = 256.0;

impl World {
    pub fn new(map: Arc<CollisionModel>, config: MoveConfig) -> World {
        World {
            map,
            movement: Movement::new(config),
            tick: 0,
            players: BTreeMap::new(),
            movers: Vec::new(),
            mover_states: Vec::new(),
            scratch: TraceScratch::new(),
            region: Region::default(),
        }
    }

    /// Adds movers (see [`Mover::from_map`]); they advance before the players each tick.
    pub fn add_movers(&mut self, movers: Vec<Mover>) {
        self.mover_states.extend(movers.iter().map(|m| m.initial()));
        self.movers.extend(movers);
    }

    pub fn movers(&self) -> impl Iterator<Item = (&Mover, &MoverState)> {
        self.movers.iter().zip(&self.mover_states)
    }

    /// Advances every mover one tick, carrying its riders and pushing the players in its
    /// way. A mover that cannot push a player (the player would be crushed against the
    /// world) does not move this tick and turns back if its kind does; nobody is ever left
    /// inside it.
    fn step_movers(&mut self) {
        let rate = self.movement.config.tick_rate;
        let reach = self.movement.config.ground_distance + EXPEL * 2.0;
        for i in 0..self.movers.len() {
            let mover = &self.movers[i];
            let now = self.mover_states[i];
            let triggered = self.players.values().any(|p| {
                let o = p.origin();
                o.cmpge(mover.trigger.min).all() && o.cmple(mover.trigger.max).all()
            });
            let next = mover.advance(&now, triggered, rate);
            let (off0, q0) = mover.transform(&now);
            let (off1, q1) = mover.transform(&next);
            if off0 == off1 && q0 == q1 {
                self.mover_states[i] = next;
                continue;
            }
            let mut moves: Vec<(PlayerId, PlayerState)> = Vec::new();
            let mut blocked = false;
            // Only players near where the mover is, or goes, can ride or be pushed.
            let near = mover
                .world_bounds(off0, q0)
                .union(&mover.world_bounds(off1, q1))
                .expand(reach);
            for (id, p) in &self.players {
                let hull = self.movement.hull(p);
                let o = p.origin();
                let hb = hull.bounds();
                if !near.overlaps(&Aabb {
                    min: o + hb.min,
                    max: o + hb.max,
                }) {
                    continue;
                }
                // Riding: standing on the mover as it was.
                let local = mover.to_local(o, off0, q0);
                let down = DVec3::Z * -reach;
                let rides = p.on_ground() && {
                    let lh = mover.local_hull(hull, q0);
                    let h = lh.as_ref().unwrap_or(hull);
                    let t = mover.model.sweep(
                        h,
                        local,
                        local + q0.inverse() * down,
                        Contents::ALL,
                        &mut self.scratch,
                    );
                    t.normal
                        .is_some_and(|n| (q0 * n).z >= self.movement.config.walkable_normal_z)
                };
                let hit = mover.overlaps(hull, o, &next, &mut self.scratch);
                if !rides && !hit {
                    continue;
                }
                // Where the mover takes the point under the player...
                let mut target = mover.pivot + off1 + q1 * local;
                if hit && q0 != q1 {
                    // ...but a turning mover sweeps the far side of the player faster than
                    // its centre: come back along the sweep until just clear of it.
                    let d = (target - o).normalize_or_zero();
                    let size = (hull.bounds().max - hull.bounds().min).length();
                    let out = target + d * size;
                    let lh = mover.local_hull(hull, q1);
                    let h = lh.as_ref().unwrap_or(hull);
                    let back = mover.model.sweep(
                        h,
                        mover.to_local(out, off1, q1),
                        mover.to_local(o, off1, q1),
                        Contents::ALL,
                        &mut self.scratch,
                    );
                    if back.hit() {
                        target = out + (o - out) * back.fraction;
                    }
                }
                let t = self
                    .map
                    .sweep(hull, o, target, Contents::PLAYER, &mut self.scratch);
                let to = t.end;
                if hit && mover.overlaps(hull, to, &next, &mut self.scratch) {
                    blocked = true;
                    break;
                }
                let mut np = *p;
                np.origin = PlayerState::at(to).origin;
                if mover.overlaps(hull, np.origin(), &next, &mut self.scratch)
                    || self.map.position_solid(
                        hull,
                        np.origin(),
                        Contents::PLAYER,
                        &mut self.scratch,
                    )
                {
                    np.origin = p.origin;
                    if hit {
                        blocked = true;
                        break;
                    }
                }
                moves.push((*id, np));
            }
            if blocked {
                self.mover_states[i] = mover.blocked(&now);
                continue;
            }
            for (id, np) in moves {
                self.players.insert(id, np);
            }
            self.mover_states[i] = next;
        }
    }

    pub fn config(&self) -> &MoveConfig {
        &self.movement.config
    }

    pub fn add_player(&mut self, id: PlayerId, state: PlayerState) {
        self.players.insert(id, state);
    }

    pub fn remove_player(&mut self, id: PlayerId) -> Option<PlayerState> {
        self.players.remove(&id)
    }

    pub fn player(&self, id: PlayerId) -> Option<&PlayerState> {
        self.players.get(&id)
    }

    pub fn players(&self) -> impl Iterator<Item = (PlayerId, &PlayerState)> {
        self.players.iter().map(|(k, v)| (*k, v))
    }

    /// How far a player can move in one tick, generously: its speed, a tick of gravity,
    /// a step, and slack.
    fn reach(&self, p: &PlayerState) -> f64 {
        let c = &self.movement.config;
        let dt = c.dt();
        let gain = match p.mode {
            MoveMode::Walk => c.jump_velocity + c.max_speed * c.accelerate * dt,
            MoveMode::Noclip | MoveMode::Spectator => c.fly_speed,
        };
        (p.velocity().length() + c.gravity * dt + gain) * dt + c.step_height + 1.0
    }

    /// Advances one tick. A player without a command this tick gets an empty one (no
    /// keys, same view as nothing was sent).
    pub fn step(&mut self, commands: &BTreeMap<PlayerId, MoveCommand>) {
        self.step_movers();
        let ids: Vec<PlayerId> = self.players.keys().copied().collect();
        // Players near each other, from where they stand at the start of the tick; the
        // query margin covers how far anyone moves within it.
        let mut grid: HashMap<(i64, i64, i64), Vec<PlayerId>, BuildGrid> = HashMap::default();
        let mut max_reach: f64 = 0.0;
        for (id, p) in &self.players {
            let c = (p.origin() / PLAYER_CELL).floor();
            grid.entry((c.x as i64, c.y as i64, c.z as i64))
                .or_default()
                .push(*id);
            max_reach = max_reach.max(self.reach(p));
        }
        let hull_size = {
            let b = self.movement.stand.bounds();
            (b.max - b.min).max_element()
        };
        // Movers stand still while the players move: their transforms, once per tick.
        let movers: Vec<(&Mover, DVec3, DQuat)> = self
            .movers
            .iter()
            .zip(&self.mover_states)
            .map(|(m, s)| {
                let (off, q) = m.transform(s);
                (m, off, q)
            })
            .collect();
        let mut near: Vec<PlayerId> = Vec::new();
        let mut others: Vec<Aabb> = Vec::new();
        for id in ids {
            let state = self.players[&id];
            let cmd = commands.get(&id).copied().unwrap_or_default();
            let margin = self.reach(&state) + max_reach + hull_size;
            let o = state.origin();
            let (lo, hi) = (
                ((o - DVec3::splat(margin)) / PLAYER_CELL).floor(),
                ((o + DVec3::splat(margin)) / PLAYER_CELL).floor(),
            );
            near.clear();
            for x in lo.x as i64..=hi.x as i64 {
                for y in lo.y as i64..=hi.y as i64 {
                    for z in lo.z as i64..=hi.z as i64 {
                        if let Some(v) = grid.get(&(x, y, z)) {
                            near.extend(v.iter().filter(|k| **k != id));
                        }
                    }
                }
            }
            // Deterministic order, whatever the grid's.
            near.sort_unstable();
            // Every trace of this tick stays within the player's reach: one broad-phase
            // query serves them all, and only players whose boxes reach into it matter.
            let hb = self.movement.stand.bounds();
            let around = Aabb {
                min: o + hb.min,
                max: o + hb.max,
            }
            .expand(self.reach(&state) + 1.0);
            others.clear();
            others.extend(near.iter().filter_map(|k| {
                let p = &self.players[k];
                let b = self.movement.hull(p).bounds();
                let o = p.origin();
                let bx = Aabb {
                    min: o + b.min,
                    max: o + b.max,
                };
                bx.overlaps(&around.expand(EXPEL)).then_some(bx)
            }));
            self.map
                .gather_region(around, &mut self.region, &mut self.scratch);
            let mut col = WorldCollider {
                model: &self.map,
                scratch: &mut self.scratch,
                region: &self.region,
                boxes: &others,
                movers: &movers,
            };
            let next = pmove(&state, &cmd, &self.movement, &mut col);
            self.players.insert(id, next);
        }
        self.tick += 1;
    }

    /// Stable hash of the tick and every player's state.
    pub fn state_hash(&self) -> u64 {
        let mut bytes = Vec::with_capacity(16 + self.players.len() * 32);
        bytes.extend_from_slice(&self.tick.to_le_bytes());
        for s in &self.mover_states {
            bytes.extend_from_slice(&s.progress.to_le_bytes());
            bytes.push(s.phase as u8);
            bytes.extend_from_slice(&s.timer.to_le_bytes());
        }
        for (id, p) in &self.players {
            bytes.extend_from_slice(&id.to_le_bytes());
            p.hash_bytes(&mut bytes);
        }
        fnv1a(&bytes)
    }
}

/// A small multiplicative `Hasher` (FxHash's step) for the player grid's integer keys:
/// much cheaper than SipHash, and lookups never depend on iteration order anyway.
#[derive(Default)]
struct GridHasher(u64);

impl GridHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for GridHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.add(*b as u64);
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.add(v as u64);
    }
}

type BuildGrid = std::hash::BuildHasherDefault<GridHasher>;

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The map plus other players' boxes.
struct WorldCollider<'a> {
    model: &'a CollisionModel,
    scratch: &'a mut TraceScratch,
    region: &'a Region,
    boxes: &'a [Aabb],
    /// Movers at their transforms this tick.
    movers: &'a [(&'a Mover, DVec3, DQuat)],
}

impl Collider for WorldCollider<'_> {
    fn trace(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Trace {
        let mut t = self.model.sweep_in(
            self.region,
            hull,
            start,
            end,
            Contents::PLAYER,
            self.scratch,
        );
        let hb = hull.bounds();
        let swept = Aabb {
            min: start.min(end) + hb.min,
            max: start.max(end) + hb.max,
        }
        .expand(EXPEL * 4.0);
        for (m, off, q) in self.movers {
            if !m.world_bounds(*off, *q).overlaps(&swept) {
                continue;
            }
            let lh = m.local_hull(hull, *q);
            let h = lh.as_ref().unwrap_or(hull);
            let (a, b) = (m.to_local(start, *off, *q), m.to_local(end, *off, *q));
            let mt = m.model.sweep(h, a, b, Contents::ALL, self.scratch);
            if mt.fraction < t.fraction {
                t.fraction = mt.fraction;
                t.end = start + (end - start) * mt.fraction;
                t.normal = mt.normal.map(|n| *q * n);
                t.point = mt.point.map(|p| m.pivot + *off + *q * p);
                t.feature = None;
                t.contents = mt.contents;
            }
        }
        for b in self.boxes.iter().filter(|b| b.overlaps(&swept)) {
            // The moving box against a standing one is a point against their sum.
            let sum = Aabb {
                min: b.min - hb.max,
                max: b.max - hb.min,
            };
            if let Some((f, n)) = point_vs_box(start, end - start, &sum) {
                if f < t.fraction {
                    t.fraction = f;
                    t.end = start + (end - start) * f;
                    t.normal = Some(n);
                    t.point = None;
                    t.feature = None;
                    t.contents = Contents::PLAYER;
                }
            }
        }
        t
    }

    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool {
        let hb = hull.bounds();
        let me = Aabb {
            min: pos + hb.min,
            max: pos + hb.max,
        };
        self.boxes
            .iter()
            .any(|b| me.expand(-POSITION_EPS).overlaps(b))
            || self
                .model
                .position_solid(hull, pos, Contents::PLAYER, self.scratch)
            || self.movers.iter().any(|(m, off, q)| {
                if !m.world_bounds(*off, *q).overlaps(&me) {
                    return false;
                }
                let lh = m.local_hull(hull, *q);
                let h = lh.as_ref().unwrap_or(hull);
                m.model
                    .position_solid(h, m.to_local(pos, *off, *q), Contents::ALL, self.scratch)
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
