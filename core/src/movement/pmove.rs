//! One tick of player movement (after Quake 3's `bg_pmove`, rewritten): ground check,
//! crouch, jump, friction, acceleration, then a step-slide move against the world through
//! the [`Collider`], and a ground check again.

use super::{flags, MoveCommand, MoveConfig, MoveMode, Movement, PlayerState};
use crate::collision::{hull::Hull, CollisionModel, Contents, Sweep, Target, TraceScratch};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// The world as movement sees it: hull sweeps and position tests.
pub trait Collider {
    /// Sweeps `hull` from `start` to `end` against everything a player collides with.
    fn sweep(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Sweep;
    /// Whether `hull` at `pos` overlaps anything a player collides with.
    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool;
}

/// The static map alone.
pub struct MapCollider<'a> {
    /// The map.
    pub model: &'a CollisionModel,
    /// Working memory for its queries.
    pub scratch: &'a mut TraceScratch,
}

/// Something a player touched during a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Obstacle {
    /// The map's world geometry.
    World,
    /// A mover, by its index in the simulation.
    Mover(u32),
    /// Another player.
    Player(crate::PlayerId),
}

impl From<Target> for Obstacle {
    fn from(t: Target) -> Obstacle {
        match t {
            Target::Model(_) => Obstacle::World,
            Target::Mover { mover, .. } => Obstacle::Mover(mover),
            Target::Player(id) => Obstacle::Player(id),
        }
    }
}

/// Most distinct obstacles a tick records (a tick makes at most a dozen sweeps).
const MAX_TOUCHES: usize = 16;

/// The distinct obstacles a player touched in one tick, in order of first contact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touches {
    len: u8,
    items: [Obstacle; MAX_TOUCHES],
}

impl Default for Touches {
    fn default() -> Self {
        Touches {
            len: 0,
            items: [Obstacle::World; MAX_TOUCHES],
        }
    }
}

impl Touches {
    pub(crate) fn add(&mut self, o: Obstacle) {
        let n = self.len as usize;
        if n < MAX_TOUCHES && !self.items[..n].contains(&o) {
            self.items[n] = o;
            self.len += 1;
        }
    }

    /// The obstacles, in order of first contact.
    pub fn as_slice(&self) -> &[Obstacle] {
        &self.items[..self.len as usize]
    }

    /// Whether another player was among them.
    pub fn any_player(&self) -> bool {
        self.as_slice()
            .iter()
            .any(|o| matches!(o, Obstacle::Player(_)))
    }
}

/// What happened during one player's tick, as Quake 3's `pmove` reports touches and events.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoveEvents {
    /// Everything the player's moves and ground checks touched.
    pub touched: Touches,
    /// The player was airborne at the start and stands on ground at the end.
    pub landed: bool,
    /// The player jumped.
    pub jumped: bool,
    /// Height climbed by a step up (positive) or dropped by a step down (negative).
    pub stepped: f64,
    /// Largest speed (units per second) lost into a surface hit this tick.
    pub impact_speed: f64,
    /// The player started in solid and was moved to a free spot.
    pub unstuck: bool,
}

impl Collider for MapCollider<'_> {
    fn sweep(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Sweep {
        self.model
            .sweep(hull, start, end, Contents::PLAYER, self.scratch)
    }

    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool {
        self.model
            .position_solid(hull, pos, Contents::PLAYER, self.scratch)
    }
}

/// Most planes a slide remembers, and most moves it makes, per tick.
const MAX_CLIP_PLANES: usize = 5;
const MAX_BUMPS: usize = 4;

struct Move<'a, C: Collider> {
    cfg: &'a MoveConfig,
    world: &'a mut C,
    hull: &'a Hull,
    origin: DVec3,
    velocity: DVec3,
    ground: Option<DVec3>,
    dt: f64,
    events: MoveEvents,
}

/// Advances `state` by one tick of `cmd`, reporting what happened. Pure apart from the
/// collider's own scratch.
pub fn pmove<C: Collider>(
    state: &PlayerState,
    cmd: &MoveCommand,
    mv: &Movement,
    world: &mut C,
) -> (PlayerState, MoveEvents) {
    let cfg = mv.config();
    let mut out = *state;
    let dt = mv.dt();
    let (stand, crouch) = (mv.stand(), mv.crouch());
    let crouched = state.crouched();
    let mut m = Move {
        cfg,
        hull: if crouched { crouch } else { stand },
        world,
        origin: state.origin(),
        velocity: state.velocity(),
        ground: None,
        dt,
        events: MoveEvents::default(),
    };
    m.cap_velocity();
    match state.mode {
        MoveMode::Frozen => {
            out.velocity = [0; 3];
            return (out, MoveEvents::default());
        }
        MoveMode::Noclip => {
            m.fly(cmd);
            m.origin += m.velocity * dt;
            return m.finish(out, None);
        }
        MoveMode::Spectator => {
            m.fly(cmd);
            m.unstick();
            m.slide(false);
            return m.finish(out, None);
        }
        MoveMode::Walk => {}
    }
    let previous_safe = m.unstick();

    // Crouch: down at once; up only where the standing hull fits.
    let mut is_crouched = crouched;
    if cmd.crouch() {
        is_crouched = true;
    } else if crouched && !m.world.solid(stand, m.origin) {
        is_crouched = false;
    }
    m.hull = if is_crouched { crouch } else { stand };
    out.set(flags::CROUCHED, is_crouched);

    m.ground_check();
    let was_on_ground = m.ground.is_some();

    // Jump: needs ground and a released button.
    let mut jumped = false;
    if cmd.jump() {
        if m.ground.is_some() && !state.has(flags::JUMP_HELD) {
            m.velocity.z = cfg.jump_velocity;
            m.ground = None;
            jumped = true;
            m.events.jumped = true;
        }
        out.set(flags::JUMP_HELD, true);
    } else {
        out.set(flags::JUMP_HELD, false);
    }

    m.friction();
    let (fwd, right, _) = cmd.view();
    // Walking ignores pitch: the wish direction is level (then follows the ground).
    let flat = |v: DVec3| DVec3::new(v.x, v.y, 0.0).normalize_or_zero();
    let (fwd, right) = (flat(fwd), flat(right));
    let fmove = cmd.forward as f64 / 127.0;
    let smove = cmd.side as f64 / 127.0;
    let mut wish = fwd * fmove + right * smove;
    let scale = wish.length().min(1.0);
    let mut wishspeed = cfg.max_speed * scale;
    if is_crouched {
        wishspeed *= cfg.crouch_scale;
    }
    if let Some(n) = m.ground {
        wish = clip(wish, n, 1.0);
        let wish_dir = wish.normalize_or_zero();
        m.accelerate(wish_dir, wishspeed, cfg.accelerate);
        // Follow the ground without losing speed.
        let speed = m.velocity.length();
        m.velocity = clip(m.velocity, n, cfg.overclip);
        m.velocity = m.velocity.normalize_or_zero() * speed;
        if m.velocity.x != 0.0 || m.velocity.y != 0.0 {
            m.step_slide(false);
        }
    } else {
        m.accelerate(wish.normalize_or_zero(), wishspeed, cfg.air_accelerate);
        m.step_slide(true);
    }

    // On the ground, the box rests where the ground test met it: without this, the
    // rounding (away from the ground) would widen the gap tick by tick on a slope walked
    // up, until the ground test missed it.
    let rest = m.ground_check();
    if m.ground.is_some() {
        m.origin = rest;
    }
    // Walking off a step or down a slope: stay on the ground if it is within a step.
    if was_on_ground && !jumped && m.ground.is_none() && m.velocity.z <= 0.0 {
        m.step_down();
    }
    if let Some(n) = m.ground {
        // Landing: drop the velocity into the ground.
        if m.velocity.dot(n) < 0.0 {
            m.impact(m.velocity, n);
            m.velocity = clip(m.velocity, n, cfg.overclip);
        }
        m.events.landed = !state.on_ground();
    }
    m.finish(out, Some(previous_safe))
}

/// Where a hull at `origin` ends after the unsticking search: `origin` itself when free,
/// else the nearest free spot of a bounded search (26 directions at growing radii), never
/// deeper; `None` when nothing near is free.
pub(crate) fn unstuck_position<C: Collider>(
    world: &mut C,
    hull: &Hull,
    origin: DVec3,
) -> Option<DVec3> {
    if !world.solid(hull, origin) {
        return Some(origin);
    }
    for r in [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
        for d in NEIGHBOURS {
            let p = origin + DVec3::from_array(d) * r;
            if !world.solid(hull, p) {
                return Some(p);
            }
        }
    }
    None
}

/// Farthest an unstuck hull moves: the search's largest radius along a diagonal.
pub(crate) const UNSTICK_REACH: f64 = 64.0 * 1.7320508075688772;

/// The ground test: a short sweep down, and the walkable ground it finds (none while
/// moving up and away from the plane, as at a jump or a ramp's crest).
pub(crate) fn ground_sweep<C: Collider>(
    world: &mut C,
    hull: &Hull,
    origin: DVec3,
    velocity: DVec3,
    cfg: &MoveConfig,
) -> (Sweep, Option<DVec3>) {
    let t = world.sweep(hull, origin, origin - DVec3::Z * cfg.ground_distance);
    let ground = match t.normal() {
        Some(n) if velocity.z > 0.0 && velocity.dot(n) > 10.0 => None,
        Some(n) if n.z >= cfg.walkable_normal_z => Some(n),
        _ => None,
    };
    (t, ground)
}

/// Removes the part of `v` going into the plane with normal `n`, pushing `overclip`
/// further out.
fn clip(v: DVec3, n: DVec3, overclip: f64) -> DVec3 {
    let backoff = v.dot(n);
    let backoff = if backoff < 0.0 {
        backoff * overclip
    } else {
        backoff / overclip
    };
    v - n * backoff
}

impl<C: Collider> Move<'_, C> {
    /// Sweeps the hull, recording what it touches.
    fn sweep(&mut self, start: DVec3, end: DVec3) -> Sweep {
        let t = self.world.sweep(self.hull, start, end);
        if let Some(h) = t.hit {
            self.events.touched.add(h.target.into());
        }
        t
    }

    /// Records the speed lost into a surface of normal `n` by velocity `v`.
    fn impact(&mut self, v: DVec3, n: DVec3) {
        let into = -v.dot(n);
        if into > self.events.impact_speed {
            self.events.impact_speed = into;
        }
    }

    /// Quake's `sv_maxvelocity`: no component beyond the cap, so one player's fall can
    /// never make anyone's tick search far.
    fn cap_velocity(&mut self) {
        let c = self.cfg.max_velocity;
        self.velocity = self.velocity.clamp(DVec3::splat(-c), DVec3::splat(c));
    }

    /// A hull found in solid moves to the nearest free spot (see [`unstuck_position`]).
    /// Returns the position it ends at.
    fn unstick(&mut self) -> DVec3 {
        if let Some(p) = unstuck_position(self.world, self.hull, self.origin) {
            self.events.unstuck = p != self.origin;
            self.origin = p;
        }
        self.origin
    }

    /// Looks for walkable ground just below; returns where the ground test's sweep ended.
    fn ground_check(&mut self) -> DVec3 {
        let (t, ground) = ground_sweep(self.world, self.hull, self.origin, self.velocity, self.cfg);
        if let Some(h) = t.hit {
            self.events.touched.add(h.target.into());
        }
        self.ground = ground;
        t.end
    }

    fn friction(&mut self) {
        let mut v = self.velocity;
        if self.ground.is_some() {
            v.z = 0.0;
        }
        let speed = v.length();
        if speed < 1.0 {
            if self.ground.is_some() {
                self.velocity.x = 0.0;
                self.velocity.y = 0.0;
            }
            return;
        }
        if self.ground.is_none() {
            return;
        }
        let control = speed.max(self.cfg.stop_speed);
        let drop = control * self.cfg.friction * self.dt;
        let scale = ((speed - drop) / speed).max(0.0);
        self.velocity *= scale;
    }

    /// Adds speed along `dir` up to `wishspeed`; only the speed along `dir` is limited,
    /// which is what makes strafe-jumping work.
    fn accelerate(&mut self, dir: DVec3, wishspeed: f64, accel: f64) {
        let current = self.velocity.dot(dir);
        let add = wishspeed - current;
        if add <= 0.0 {
            return;
        }
        let amount = (accel * self.dt * wishspeed).min(add);
        self.velocity += dir * amount;
    }

    fn fly(&mut self, cmd: &MoveCommand) {
        let (fwd, right, up) = cmd.view();
        let wish = fwd * (cmd.forward as f64 / 127.0)
            + right * (cmd.side as f64 / 127.0)
            + up * (cmd.up as f64 / 127.0);
        let speed = wish.length().min(1.0) * self.cfg.fly_speed;
        // Strong friction, then accelerate: responsive flying.
        let s = self.velocity.length();
        if s > 0.0 {
            let drop = s * self.cfg.friction * 1.5 * self.dt;
            self.velocity *= ((s - drop) / s).max(0.0);
        }
        self.accelerate(wish.normalize_or_zero(), speed, self.cfg.accelerate);
    }

    /// Slides along whatever is hit, up to [`MAX_BUMPS`] moves. Returns whether anything
    /// was hit.
    fn slide(&mut self, gravity: bool) -> bool {
        let mut end_velocity = self.velocity;
        if gravity {
            end_velocity.z -= self.cfg.gravity * self.dt;
            // Trapezoidal: move with the average vertical speed of the tick.
            self.velocity.z = (self.velocity.z + end_velocity.z) * 0.5;
        }
        let primal = self.velocity;
        let mut planes: [DVec3; MAX_CLIP_PLANES] = [DVec3::ZERO; MAX_CLIP_PLANES];
        let mut count = 0;
        if let Some(n) = self.ground {
            planes[count] = n;
            count += 1;
        }
        // Never turn back against the original motion.
        planes[count] = self.velocity.normalize_or_zero();
        count += 1;
        let mut time_left = self.dt;
        let mut bumps = 0;
        while bumps < MAX_BUMPS {
            let end = self.origin + self.velocity * time_left;
            let t = self.sweep(self.origin, end);
            self.origin = t.end;
            let Some(n) = t.normal() else { break };
            self.impact(self.velocity, n);
            time_left -= time_left * t.fraction;
            bumps += 1;
            if count >= MAX_CLIP_PLANES {
                self.velocity = DVec3::ZERO;
                return true;
            }
            // The same plane again: nudge off it.
            if planes[..count].iter().any(|p| n.dot(*p) > 0.99) {
                self.velocity += n;
                continue;
            }
            planes[count] = n;
            count += 1;
            let mut stopped = false;
            let mut found = false;
            for i in 0..count {
                let ni = planes[i];
                if self.velocity.dot(ni) >= 0.1 {
                    continue; // moving away from it
                }
                let mut v = clip(self.velocity, ni, self.cfg.overclip);
                let mut ev = clip(end_velocity, ni, self.cfg.overclip);
                for j in 0..count {
                    if j == i {
                        continue;
                    }
                    let nj = planes[j];
                    if v.dot(nj) >= 0.1 {
                        continue;
                    }
                    v = clip(v, nj, self.cfg.overclip);
                    ev = clip(ev, nj, self.cfg.overclip);
                    if v.dot(ni) >= 0.0 {
                        continue;
                    }
                    // Two planes: slide along their crease.
                    let crease = ni.cross(nj).normalize_or_zero();
                    v = crease * crease.dot(self.velocity);
                    ev = crease * crease.dot(end_velocity);
                    // A third plane: stop dead.
                    for (k, nk) in planes[..count].iter().enumerate() {
                        if k != i && k != j && v.dot(*nk) < 0.1 {
                            stopped = true;
                        }
                    }
                }
                self.velocity = v;
                end_velocity = ev;
                found = true;
                break;
            }
            if stopped || self.velocity.dot(primal) <= 0.0 {
                self.velocity = DVec3::ZERO;
                return true;
            }
            if !found {
                break;
            }
        }
        if gravity {
            self.velocity.z = end_velocity.z;
        }
        bumps > 0
    }

    /// Slide, and where blocked try again from a step up; keep the stepped result when it
    /// lands on walkable ground and gets further.
    fn step_slide(&mut self, gravity: bool) {
        let (o0, v0, g0) = (self.origin, self.velocity, self.ground);
        if !self.slide(gravity) {
            return;
        }
        let (o1, v1) = (self.origin, self.velocity);
        // Rising (a jump): no stepping.
        if v0.z > 0.0 && g0.is_none() {
            return;
        }
        let up = self.sweep(o0, o0 + DVec3::Z * self.cfg.step_height);
        let lift = up.end.z - o0.z;
        if lift <= 0.0 {
            return;
        }
        self.origin = up.end;
        self.velocity = v0;
        self.ground = g0;
        self.slide(gravity);
        let down = self.sweep(self.origin, self.origin - DVec3::Z * lift);
        let landed = down
            .normal()
            .is_some_and(|n| n.z >= self.cfg.walkable_normal_z);
        let flat = |v: DVec3| DVec3::new(v.x, v.y, 0.0).length_squared();
        if landed && flat(down.end - o0) > flat(o1 - o0) + 1e-6 {
            self.origin = down.end;
            self.events.stepped = down.end.z - o0.z;
            if let Some(n) = down.normal() {
                self.velocity = clip(self.velocity, n, self.cfg.overclip);
            }
        } else {
            self.origin = o1;
            self.velocity = v1;
        }
    }

    /// Keeps a walking player on the ground over a step or slope down.
    fn step_down(&mut self) {
        // A full step plus the ground margin: the hull rests a zone's width above a tread.
        let reach = self.cfg.step_height + self.cfg.ground_distance;
        let t = self.sweep(self.origin, self.origin - DVec3::Z * reach);
        if let Some(n) = t.normal() {
            if n.z >= self.cfg.walkable_normal_z && t.fraction > 0.0 {
                self.events.stepped = t.end.z - self.origin.z;
                self.origin = t.end;
                self.ground = Some(n);
            }
        }
    }

    /// Quantizes the result. Rounding must not put the hull into solid, nor let a player
    /// walking a slope sink into it tick by tick (the same rounding every tick adds up to
    /// more than the expel zone: the box then rests on the surface itself and sticks).
    /// On the ground each axis rounds away from the ground's plane, so the gap only grows,
    /// by less than a grid step (the box rested at the zone's width before it); in the air, to the
    /// nearest. If that overlaps, each axis rounds towards where the tick started, and if
    /// that still overlaps, the start is kept.
    ///
    /// The ground flag is the ground test at the rounded position: rounding can carry a
    /// box off a step's edge, or out of the ground margin, and whatever reads the flag
    /// (a mover carrying its riders, the validator, others drawing the player) must find
    /// the ground it says.
    fn finish(mut self, mut out: PlayerState, safe: Option<DVec3>) -> (PlayerState, MoveEvents) {
        self.cap_velocity();
        out.set_velocity(self.velocity);
        let Some(start) = safe else {
            out.set(flags::ON_GROUND, self.ground.is_some());
            out.origin = super::quantize(self.origin, super::POSITION_SCALE);
            return (out, self.events);
        };
        let s = super::POSITION_SCALE;
        // Each axis rounded up where `up` says so, down where it says not, else nearest.
        let round_by = |up: [Option<bool>; 3]| -> [i32; 3] {
            let o = self.origin.to_array();
            std::array::from_fn(|k| {
                let q = o[k] * s;
                super::grid_step(match up[k] {
                    Some(true) => q.ceil(),
                    Some(false) => q.floor(),
                    None => q.round(),
                })
            })
        };
        let sign = |x: f64| (x != 0.0).then_some(x > 0.0);
        let rounded = match self.ground {
            Some(n) => round_by([sign(n.x), sign(n.y), sign(n.z)]),
            None => round_by([None; 3]),
        };
        let d = start - self.origin;
        let cand = round_by([sign(d.x), sign(d.y), sign(d.z)].map(|u| Some(u.unwrap_or(true))));
        let pos = |q: [i32; 3]| DVec3::new(q[0] as f64, q[1] as f64, q[2] as f64) / s;
        out.origin = if !self.world.solid(self.hull, pos(rounded)) {
            rounded
        } else if !self.world.solid(self.hull, pos(cand)) {
            cand
        } else {
            super::quantize(start, s)
        };
        self.origin = out.origin();
        self.ground_check();
        out.set(flags::ON_GROUND, self.ground.is_some());
        (out, self.events)
    }
}

/// The 26 neighbouring directions, nearest (axes) first.
const NEIGHBOURS: [[f64; 3]; 26] = [
    [0.0, 0.0, 1.0],
    [0.0, 0.0, -1.0],
    [1.0, 0.0, 0.0],
    [-1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.0, -1.0, 0.0],
    [1.0, 1.0, 0.0],
    [1.0, -1.0, 0.0],
    [-1.0, 1.0, 0.0],
    [-1.0, -1.0, 0.0],
    [1.0, 0.0, 1.0],
    [-1.0, 0.0, 1.0],
    [0.0, 1.0, 1.0],
    [0.0, -1.0, 1.0],
    [1.0, 0.0, -1.0],
    [-1.0, 0.0, -1.0],
    [0.0, 1.0, -1.0],
    [0.0, -1.0, -1.0],
    [1.0, 1.0, 1.0],
    [1.0, -1.0, 1.0],
    [-1.0, 1.0, 1.0],
    [-1.0, -1.0, 1.0],
    [1.0, 1.0, -1.0],
    [1.0, -1.0, -1.0],
    [-1.0, 1.0, -1.0],
    [-1.0, -1.0, -1.0],
];
