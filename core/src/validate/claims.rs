//! Move validation, trusted-client mode: the client owns its movement and claims the state
//! it reached after each tick; the server accepts a claim only if the shared rules allow
//! it from the last accepted state.
//!
//! A claim is judged after the tick's mover phase (so a rider has already been carried,
//! exactly as [`Sim::step`] does) in this order; the first failure rejects it:
//!
//! 1. **invalid**: a position outside the supported coordinates, or another movement mode.
//!    A player the game froze may claim only the place it holds, at rest.
//! 2. **teleport**: farther than anything reaches in a tick ([`Sim`]'s own per-tick reach,
//!    plus the unsticking search's distance when the player started in solid). A player
//!    who left the arena may come back at its spawn, as [`Sim::step`] respawns it.
//! 3. **speed**: horizontal speed, or horizontal displacement over a tick, beyond what
//!    one tick of friction and acceleration allows. Acceleration only adds speed along the
//!    wish direction up to the wish speed, so a speed `v` becomes at most
//!    `sqrt(v² + a(2w − a))` (`w` the wish speed, `a` one tick's acceleration): the exact
//!    bound, which strafe-jumping reaches and nothing exceeds. Contact with a surface can
//!    turn vertical speed into horizontal (a fall onto a slope), so with contact the bound
//!    is the whole speed.
//! 4. **fly**: rising beyond a jump, a step or the speed there was; claiming ground where
//!    there is none; or, airborne and touching nothing, vertical speed or motion that does
//!    not follow gravity.
//! 5. **blocked**: no free path from the last accepted position to the claim: a straight
//!    hull sweep, a horizontal-then-vertical or vertical-then-horizontal path, the step a
//!    walking player takes (up, across, down), or a slide along what the straight sweep
//!    hits. Every leg is a real sweep, so an accepted path never crosses solid.
//!
//! A rejected claim leaves the player where the straight sweep toward it stopped (for
//! `blocked`) or where it was (for the rest), at rest: never in solid, never past a wall.
//! The client is told its corrected state.

use super::{Judge, Violation, ViolationKind};
use crate::collision::hull::Hull;
use crate::geom::{Aabb, EXPEL};
use crate::movement::pmove::{ground_sweep, unstuck_position, Collider};
use crate::movement::{flags, MoveMode, PlayerState};
use crate::mover::Pose;
use crate::sim::{in_range, PlayerBox, PlayerId, SimScratch};
use glam::DVec3;
use std::ops::ControlFlow;

/// How close a path must come to the claimed position: the expel zone on both sides and
/// the rounding of a quantized position.
const REACH_TOL: f64 = 2.0 * EXPEL + 1.0 / 64.0;
/// Slack on claimed speeds (units/s): velocity quantization and the tiny nudges a slide
/// adds when it meets the same plane twice (1 unit/s a bump, a step retry doubling them).
const SPEED_TOL: f64 = 9.0;
/// Slack on displacements (units): position quantization on both ends.
const MOVE_TOL: f64 = 1.0 / 32.0;
/// Longest span of ticks a claim is judged over (see [`TickView::span`]). A claim after
/// a longer gap is not judged: the bounds over so many ticks would let a cheat through,
/// so the server's held state stands and the client is corrected to it, unflagged (an
/// honest client whose claims queued for a second gets there too).
pub const MAX_SPAN: u32 = 30;
/// How far past a ledge the ground test reaches level: twice a position's rounding.
const GROUND_SLACK: f64 = 2.0 / 256.0;
/// How near a surface counts as contact for the fly and speed bounds.
const CONTACT: f64 = 1.0;

/// The result of judging one claim.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimOutcome {
    /// The authoritative state after the tick: the claim if accepted, else the correction.
    pub state: PlayerState,
    /// Whether the claim was accepted as is.
    pub accepted: bool,
    /// Why it was not.
    pub violation: Option<Violation>,
}

/// A claimed state from values that may be anything (a file, a network peer): refused if
/// not finite or beyond the supported range, before it is quantized.
pub fn claim_from_values(
    origin: [f64; 3],
    velocity: [f64; 3],
    on_ground: bool,
    crouched: bool,
) -> Result<PlayerState, String> {
    let (o, v) = (DVec3::from_array(origin), DVec3::from_array(velocity));
    if !o.is_finite() || !v.is_finite() {
        return Err(format!(
            "origin {origin:?} or velocity {velocity:?} is not finite"
        ));
    }
    if !in_range(o) {
        return Err(format!(
            "origin {origin:?} is beyond the supported coordinates"
        ));
    }
    // Far beyond any speed the rules cap at, yet within the quantized range.
    if v.abs().max_element() > 1.0e6 {
        return Err(format!(
            "velocity {velocity:?} is beyond the supported range"
        ));
    }
    let mut s = PlayerState::at(o);
    s.set_velocity(v);
    let mut f = 0;
    if on_ground {
        f |= flags::ON_GROUND;
    }
    if crouched {
        f |= flags::CROUCHED;
    }
    s.flags = f;
    Ok(s)
}

/// The claim flags the validator compares: what a client can claim (the jump latch is
/// its own business).
pub(super) fn claimable(s: &PlayerState) -> u8 {
    s.flags & (flags::ON_GROUND | flags::CROUCHED)
}

/// The world a claim is judged in: the tick, the movers' poses after its mover phase and
/// the other players' boxes at its start.
#[derive(Clone, Copy, Debug)]
pub struct TickView<'a> {
    /// The tick being judged.
    pub tick: u64,
    /// The movers' poses.
    pub poses: &'a [Pose],
    /// The players as obstacles (the claimant among them is passed over).
    pub others: &'a [PlayerBox],
    /// Ticks since the state the claim is judged from: 1, or more when claims went
    /// missing and the player held its last state meanwhile; the bounds allow that many
    /// ticks of motion, up to [`MAX_SPAN`].
    pub span: u32,
}

/// Judges `claim`, the state player `id` says it reached this tick, against `prev`:
/// its last accepted state, after this tick's mover phase.
/// `probes` are the player's contact probes for this movement ([`ContactHulls`]).
pub(super) fn check_claim(
    judge: &Judge<'_>,
    id: PlayerId,
    prev: &PlayerState,
    claim: &PlayerState,
    view: TickView<'_>,
    probes: &ContactHulls,
    s: &mut SimScratch,
) -> ClaimOutcome {
    if view.span > MAX_SPAN {
        return ClaimOutcome {
            state: *prev,
            accepted: false,
            violation: None,
        };
    }
    let h = Hearing {
        tick: view.tick,
        prev,
        claim,
        k: view.span.max(1) as f64,
    };
    match hear(judge, &h, id, view, probes, s) {
        ControlFlow::Break(outcome) => outcome,
        ControlFlow::Continue(()) => h.accept(),
    }
}

/// One claim under judgement: the tick, the state it is judged from and the one
/// claimed, the ticks of motion the bounds allow; and the outcomes the checks give.
struct Hearing<'a> {
    tick: u64,
    prev: &'a PlayerState,
    claim: &'a PlayerState,
    /// The span's ticks, at least 1.
    k: f64,
}

impl Hearing<'_> {
    /// The player at rest at `origin`, as crouched as it was.
    fn at_rest(&self, origin: [i32; 3]) -> PlayerState {
        PlayerState {
            origin,
            velocity: [0; 3],
            flags: self.prev.flags & flags::CROUCHED,
            mode: self.prev.mode,
        }
    }

    fn verdict(&self, kind: ViolationKind, evidence: String, state: PlayerState) -> ClaimOutcome {
        ClaimOutcome {
            state,
            accepted: false,
            violation: Some(Violation {
                kind,
                tick: self.tick,
                evidence,
            }),
        }
    }

    /// A violation that leaves the player at rest where it was.
    fn refuse(&self, kind: ViolationKind, evidence: String) -> ClaimOutcome {
        self.verdict(kind, evidence, self.at_rest(self.prev.origin))
    }

    fn accept(&self) -> ClaimOutcome {
        let mut state = *self.claim;
        state.flags = claimable(self.claim);
        ClaimOutcome {
            state,
            accepted: true,
            violation: None,
        }
    }
}

/// Every check of a claim in turn: `Break` with the first outcome decided, `Continue`
/// when nothing stands against it.
fn hear(
    judge: &Judge<'_>,
    h: &Hearing<'_>,
    id: PlayerId,
    view: TickView<'_>,
    probes: &ContactHulls,
    s: &mut SimScratch,
) -> ControlFlow<ClaimOutcome> {
    let TickView { poses, others, .. } = view;
    let (prev, claim, k) = (h.prev, h.claim, h.k);
    screen(h)?;
    let c = claim.origin();
    let cfg = judge.sim.config();
    let mv = judge.sim.movement();
    let dt = mv.dt();
    let p0 = prev.origin();
    // Speed can grow every tick of the span: the reaches add up.
    let reach = judge.sim.reach(prev) * k * (k + 1.0) / 2.0;
    let unstick = crate::movement::pmove::UNSTICK_REACH;
    // Respawn: the simulation puts a player who left the arena back at its spawn.
    let spawn = judge.sim.spawn_state(id, prev.mode);
    if claim.origin == spawn.origin
        && claim.velocity == [0; 3]
        && !in_arena_by(judge, p0, reach + unstick)
    {
        return ControlFlow::Break(h.accept());
    }
    let teleport = |moved: f64| {
        let why = format!("moved {moved:.1} units in a tick, at most {reach:.1} reachable");
        ControlFlow::Break(h.refuse(ViolationKind::Teleport, why))
    };
    // A gross bound first, so a teleport never makes us gather a far region.
    if (c - p0).length() > reach + unstick + MOVE_TOL {
        return teleport((c - p0).length());
    }
    let hull_p = mv.hull(prev);
    let hull_c = mv.hull(claim);
    // Players the claimant stood inside as the tick began do not block it (the
    // simulation's rule: they pass through each other until they part). Nor do those
    // beyond anything the checks reach (a crowd's thousand would be looked at by every
    // sweep).
    let me = mv.player_box(prev);
    let stand = mv.stand().bounds();
    let reach_zone = judged_zone(judge, stand.offset(p0).expand(unstick), c)
        .expand(crate::sim::collider::SWEEP_MARGIN);
    let others: Vec<_> = others
        .iter()
        .filter(|b| {
            b.id != id
                && b.bounds.overlaps(&reach_zone)
                && !crate::sim::players::entangled(&me, &b.bounds)
        })
        .copied()
        .collect();
    let others = &others[..];
    // Gather only the space the checks can touch: both ends with a step and the
    // contact margin, and the unsticking search's reach only when it will run.
    let near = stand.offset(p0).expand(2.0 * CONTACT);
    let stuck = judge.sim.collider(near, poses, others, s).solid(hull_p, p0);
    let from = stand.offset(p0).expand(if stuck { unstick } else { 0.0 });
    let around = judged_zone(judge, from, c);
    let mut col = judge.sim.collider(around, poses, others, s);
    let start = unstuck_position(&mut col, hull_p, p0).unwrap_or(p0);
    let unstuck = start != p0;
    // Stuck in solid with nothing free nearby, the movement leaves a player where it
    // is, whatever its speed and ground say.
    if stuck && !unstuck && claim.origin == prev.origin {
        return ControlFlow::Break(h.accept());
    }
    let d = c - start;
    if d.length() > reach + MOVE_TOL {
        return teleport(d.length());
    }
    let claimed = ClaimedMove { start, d, unstuck };
    let limits = speed_limits(h, &mut col, probes, [hull_p, hull_c], &claimed, cfg, dt);
    check_speed(h, &limits, d, dt)?;
    check_vertical(h, &mut col, probes, &limits, hull_c, &claimed, cfg, dt)?;

    // Reachability through free space.
    if let Err(stop) = reachable(&mut col, hull_c, start, c, cfg.step_height) {
        // Where the sweep toward the claim stopped, each axis rounded toward the
        // start so it stays free; else where the player was.
        let toward = |x: f64, from: f64| {
            let q = x * crate::movement::POSITION_SCALE;
            (if from < x { q.floor() } else { q.ceil() }) as i32
        };
        let to = [0, 1, 2].map(|i| toward(stop[i], start[i]));
        let free = !col.solid(hull_p, h.at_rest(to).origin());
        let state = h.at_rest(if free { to } else { prev.origin });
        // Only another player in the way is a correction, not a cheat: the client
        // could not know where that player went since its last snapshot.
        let by_players = !others.is_empty() && {
            let mut bare = judge.sim.collider(around, poses, &[], s);
            reachable(&mut bare, hull_c, start, c, cfg.step_height).is_ok()
        };
        if by_players {
            return ControlFlow::Break(ClaimOutcome {
                state,
                accepted: false,
                violation: None,
            });
        }
        let why = format!(
            "no free path from {:?} to {:?}; stopped at {:?}",
            start.to_array(),
            c.to_array(),
            state.origin().to_array()
        );
        return ControlFlow::Break(h.verdict(ViolationKind::Blocked, why, state));
    }
    ControlFlow::Continue(())
}

/// What needs no world: an origin beyond the coordinates or a mode the game did not
/// set is invalid; a frozen player's tick is exact (it stays where the movers left it,
/// at rest).
fn screen(h: &Hearing<'_>) -> ControlFlow<ClaimOutcome> {
    let (prev, claim) = (h.prev, h.claim);
    let c = claim.origin();
    if !in_range(c) || claim.mode != prev.mode {
        let why = if claim.mode != prev.mode {
            format!("mode {:?} claimed, {:?} allowed", claim.mode, prev.mode)
        } else {
            format!(
                "origin {:?} is beyond the supported coordinates",
                c.to_array()
            )
        };
        return ControlFlow::Break(h.refuse(ViolationKind::Invalid, why));
    }
    if prev.mode == MoveMode::Frozen {
        let held = claimable(claim) == claimable(prev);
        if claim.origin == prev.origin && claim.velocity == [0; 3] && held {
            return ControlFlow::Break(h.accept());
        }
        let moved = (c - prev.origin()).length();
        let why = format!("moved {moved:.1} units while frozen by the game");
        return ControlFlow::Break(h.refuse(ViolationKind::Teleport, why));
    }
    ControlFlow::Continue(())
}

/// The claimed move from where the checks start it: `start` (the unstuck origin when
/// the player began inside something) and the displacement `d` to the claim.
struct ClaimedMove {
    start: DVec3,
    d: DVec3,
    unstuck: bool,
}

/// What one tick of friction and acceleration allows from the state judged from.
struct Limits {
    /// The velocity judged from, capped.
    v: DVec3,
    /// Most level speed, tolerance included.
    h_max: f64,
    /// Most upward speed.
    up: f64,
    /// On the ground at the start, standing or crouched.
    grounded: bool,
    /// Touching something the move can turn along.
    contact: bool,
    /// Something facing up holds the player or turns its speed upward.
    lift: bool,
}

fn speed_limits<C: Collider>(
    h: &Hearing<'_>,
    col: &mut C,
    probes: &ContactHulls,
    [hull_p, hull_c]: [&Hull; 2],
    m: &ClaimedMove,
    cfg: &crate::movement::MoveConfig,
    dt: f64,
) -> Limits {
    let (claim, k, start, c) = (h.claim, h.k, m.start, m.start + m.d);
    let v = h.prev.velocity().clamp(
        DVec3::splat(-cfg.max_velocity),
        DVec3::splat(cfg.max_velocity),
    );
    let grounded = [hull_p, hull_c]
        .iter()
        .any(|hull| ground_sweep(col, hull, start, v, cfg).1.is_some());
    // Landing turns a fall's speed along the ground, which may be level or up a slope.
    let landing = claim.on_ground() && !grounded;
    let contact = m.unstuck || landing || touching(col, probes.probe(claim.crouched()), start, c);
    // Only a surface that faces up (a floor, a slope, a steep face, a mover's top,
    // another player's head) can hold a player up against gravity or turn its speed
    // upward; a wall or a ceiling cannot, however hard the player presses into it.
    let lift = m.unstuck || landing || under(col, probes.under(claim.crouched()), hull_c, start, c);
    let w = cfg.max_speed;
    let gain = |accel: f64| {
        let a = (accel * dt * w).min(w);
        a * (2.0 * w - a)
    };
    let flat2 = v.x * v.x + v.y * v.y;
    // Airborne (or jumping: no friction that tick): air acceleration, level.
    let mut h2 = flat2 + k * gain(cfg.air_accelerate);
    let mut up = v.z;
    if grounded {
        up = up.max(cfg.jump_velocity);
        // Walking: friction, ground acceleration, and the ground's slope keeps speed.
        let walk = friction(v, cfg.stop_speed, cfg.friction * dt).length_squared()
            + k * gain(cfg.accelerate);
        h2 = h2.max(walk);
        up = up.max(walk.sqrt());
    }
    if contact {
        // A slanted surface may turn vertical speed level; one facing up may turn
        // any of the speed upward.
        let most = up.max(v.z.abs());
        let all = h2 + most * most;
        h2 = all;
        if lift {
            up = all.sqrt();
        }
    }
    Limits {
        v,
        h_max: h2.sqrt() + SPEED_TOL * k,
        up,
        grounded,
        contact,
        lift,
    }
}

/// Level speed, claimed and moved, within the limits.
fn check_speed(h: &Hearing<'_>, l: &Limits, d: DVec3, dt: f64) -> ControlFlow<ClaimOutcome> {
    let h_max = l.h_max;
    let claimed_h = h.claim.velocity().truncate().length();
    if claimed_h > h_max {
        let why = format!("horizontal speed {claimed_h:.1} claimed, at most {h_max:.1} allowed");
        return ControlFlow::Break(h.refuse(ViolationKind::Speed, why));
    }
    let moved_h = d.truncate().length();
    if moved_h > h_max * dt * h.k + MOVE_TOL {
        let why = format!(
            "moved {moved_h:.2} units level in a tick, at most {:.2} allowed",
            h_max * dt * h.k
        );
        return ControlFlow::Break(h.refuse(ViolationKind::Speed, why));
    }
    ControlFlow::Continue(())
}

/// Vertical: jumps, steps, ground claimed and gravity.
#[allow(clippy::too_many_arguments)]
fn check_vertical<C: Collider>(
    h: &Hearing<'_>,
    col: &mut C,
    probes: &ContactHulls,
    l: &Limits,
    hull_c: &Hull,
    m: &ClaimedMove,
    cfg: &crate::movement::MoveConfig,
    dt: f64,
) -> ControlFlow<ClaimOutcome> {
    let (claim, k, d, v, up) = (h.claim, h.k, m.d, l.v, l.up);
    let c = m.start + d;
    let cv = claim.velocity();
    let fly = |why: String| ControlFlow::Break(h.refuse(ViolationKind::Fly, why));
    let rise_max = (up.max(0.0) * dt + cfg.step_height + cfg.ground_distance) * k + MOVE_TOL;
    if !m.unstuck && d.z > rise_max {
        return fly(format!(
            "rose {:.2} units in a tick, at most {rise_max:.2} allowed",
            d.z
        ));
    }
    if cv.z > up.max(0.0) + SPEED_TOL * k {
        return fly(format!(
            "vertical speed {:.1} claimed, at most {:.1} allowed",
            cv.z,
            up.max(0.0)
        ));
    }
    let feet = probes.ground(claim.crouched());
    if claim.on_ground() && !has_ground(col, hull_c, c, cfg) && !has_ground(col, feet, c, cfg) {
        return fly("ground claimed where there is none".into());
    }
    // Pressed into a crease or a corner, the movement stops dead (Quake's rule):
    // at rest, no higher than the tick's motion began to take it. From rest, the
    // next tick falls again, so this cannot be held.
    let stopped_dead = l.contact
        && claim.velocity == [0; 3]
        && h.prev.velocity != [0; 3]
        && d.z <= v.z.max(0.0) * dt * k + MOVE_TOL;
    if !l.grounded && !claim.on_ground() && !l.lift && !stopped_dead {
        // Free fall over the span (exact for the trapezoidal step the movement takes),
        // the speed capped as the movement caps it.
        let vz = (v.z - cfg.gravity * dt * k).max(-cfg.max_velocity);
        let dz = (v.z * k - cfg.gravity * dt * k * k * 0.5) * dt;
        if cv.z > vz + SPEED_TOL * k || d.z > dz + MOVE_TOL + fall_rounding(k, dt) {
            return fly(format!(
                "airborne: vertical speed {:.1} and rise {:.2} claimed, gravity allows {vz:.1} and {dz:.2}",
                cv.z, d.z
            ));
        }
    }
    ControlFlow::Continue(())
}

/// The space a claim's checks can touch, from the player's box at the start (`from`)
/// to the claimed origin: both ends with a step and the contact margin.
pub(super) fn judged_zone(judge: &Judge<'_>, from: Aabb, to: DVec3) -> Aabb {
    let cfg = judge.sim.config();
    let margin = cfg.step_height + cfg.ground_distance + 2.0 * CONTACT + 1.0;
    let stand = judge.sim.movement().stand().bounds();
    from.union(&stand.offset(to)).expand(margin)
}

/// Whether the box of half-size `margin` around `p` lies in the arena.
fn in_arena_by(judge: &Judge<'_>, p: DVec3, margin: f64) -> bool {
    judge.sim.in_arena(p - DVec3::splat(margin)) && judge.sim.in_arena(p + DVec3::splat(margin))
}

/// How far a fall of `k` ticks may come short of the exact trapezoid: every tick rounds
/// the velocity (half a quantum, and the error carries into every later tick's motion)
/// and the position (half a quantum). Over one tick it is within [`MOVE_TOL`]; over the
/// span after a correction (a round trip's ticks) it is not: 13 ticks of honest falling
/// came 0.03 units short.
fn fall_rounding(k: f64, dt: f64) -> f64 {
    use crate::movement::{POSITION_SCALE, VELOCITY_SCALE};
    let (dv, dp) = (0.5 / VELOCITY_SCALE, 0.5 / POSITION_SCALE);
    dv * dt * k * k * 0.5 + dp * k
}

/// Friction on the ground for one tick (the speed it leaves; see `pmove`).
fn friction(v: DVec3, stop_speed: f64, drop_rate: f64) -> DVec3 {
    let speed = DVec3::new(v.x, v.y, 0.0).length();
    if speed < 1.0 {
        return DVec3::new(0.0, 0.0, v.z);
    }
    let drop = speed.max(stop_speed) * drop_rate;
    v * ((speed - drop) / speed).max(0.0)
}

/// The player's hulls as the checks probe with them: grown by [`CONTACT`] with the bottom
/// not lowered (a level floor right under the player is no contact); grown level by a
/// rounding step, for the ground test (a tick can end with the hull's corner a hair over a
/// ledge that rounding the position then leaves); and lowered only, for what holds the
/// player up.
#[derive(Debug)]
pub(super) struct ContactHulls {
    stand: [Hull; 3],
    crouch: [Hull; 3],
}

impl ContactHulls {
    /// The probes for `movement`'s hulls.
    pub(super) fn new(movement: &crate::movement::Movement) -> ContactHulls {
        let grow = |h: &Hull| {
            let b = h.bounds().expand(CONTACT);
            let min = DVec3::new(b.min.x, b.min.y, h.bounds().min.z + 0.25);
            Hull::aabb(min, b.max).unwrap_or_else(|_| h.clone())
        };
        let level = |h: &Hull| {
            let b = h.bounds();
            let d = DVec3::new(GROUND_SLACK, GROUND_SLACK, 0.0);
            Hull::aabb(b.min - d, b.max + d).unwrap_or_else(|_| h.clone())
        };
        let down = |h: &Hull| {
            let b = h.bounds();
            Hull::aabb(b.min - DVec3::Z * CONTACT, b.max).unwrap_or_else(|_| h.clone())
        };
        let (s, c) = (movement.stand(), movement.crouch());
        ContactHulls {
            stand: [grow(s), level(s), down(s)],
            crouch: [grow(c), level(c), down(c)],
        }
    }

    /// The contact probe: anything within [`CONTACT`] of the hull but the floor under it.
    fn probe(&self, crouched: bool) -> &Hull {
        let set = if crouched { &self.crouch } else { &self.stand };
        &set[0]
    }

    fn ground(&self, crouched: bool) -> &Hull {
        let set = if crouched { &self.crouch } else { &self.stand };
        &set[1]
    }

    /// The hull with its bottom lowered by [`CONTACT`] and its sides as they are: it
    /// meets what lies under the player, never a wall beside it.
    fn under(&self, crouched: bool) -> &Hull {
        let set = if crouched { &self.crouch } else { &self.stand };
        &set[2]
    }
}

/// Whether anything solid lies within [`CONTACT`] of the hull anywhere between `a` and `b`
/// (the probe swept along the move), apart from a floor right under it (a level floor
/// turns no speed).
fn touching<C: Collider>(col: &mut C, probe: &Hull, a: DVec3, b: DVec3) -> bool {
    col.solid(probe, a) || col.sweep(probe, a, b).hit.is_some()
}

/// Whether something facing up lies under the player anywhere between `a` and `b`: the
/// `under` probe overlaps it at either end, or meets a face whose normal points up along
/// the way; or the hull itself, sinking by [`CONTACT`] along the way, does. The probe
/// alone misses a step's top that the hull meets at its edge: stepping off a step's
/// side onto its corner (the box level with the top, touching the side's plane), the
/// lowered probe meets the side first, and the hull rests on the top.
fn under<C: Collider>(col: &mut C, under: &Hull, hull: &Hull, a: DVec3, b: DVec3) -> bool {
    let up = |t: crate::collision::Sweep| t.normal().is_some_and(|n| n.z > 1e-6);
    col.solid(under, a)
        || col.solid(under, b)
        || up(col.sweep(under, a, b))
        || up(col.sweep(hull, a, b - DVec3::Z * CONTACT))
}

/// Whether walkable ground lies under the hull at `p`, within the ground test's reach
/// (and the rounding of a quantized position).
fn has_ground<C: Collider>(
    col: &mut C,
    hull: &Hull,
    p: DVec3,
    cfg: &crate::movement::MoveConfig,
) -> bool {
    let t = col.sweep(hull, p, p - DVec3::Z * (cfg.ground_distance + MOVE_TOL));
    t.normal().is_some_and(|n| n.z >= cfg.walkable_normal_z)
}

/// Slides through `waypoints` in turn; the end of the last leg if every leg got within
/// [`REACH_TOL`] of its waypoint, else where the failing leg stopped.
fn legs<C: Collider>(
    col: &mut C,
    hull: &Hull,
    from: DVec3,
    waypoints: &[DVec3],
) -> Result<DVec3, DVec3> {
    let mut at = from;
    for w in waypoints {
        at = slide(col, hull, at, *w)?;
    }
    Ok(at)
}

/// Slides from `from` toward `to` along whatever is hit, up to four times.
fn slide<C: Collider>(col: &mut C, hull: &Hull, from: DVec3, to: DVec3) -> Result<DVec3, DVec3> {
    let mut at = from;
    for _ in 0..4 {
        let t = col.sweep(hull, at, to);
        at = t.end;
        if (t.end - to).length() <= REACH_TOL {
            return Ok(at);
        }
        let Some(n) = t.normal() else { return Err(at) };
        let rest = to - at;
        let along = rest - n * rest.dot(n).min(0.0);
        if along.length() <= REACH_TOL {
            return Err(at);
        }
        at = col.sweep(hull, at, at + along).end;
    }
    Err(at)
}

/// Whether the hull can get from `a` to `b` through free space by one of the paths a
/// tick's movement takes (see the module docs); else where the straight sweep stopped.
fn reachable<C: Collider>(
    col: &mut C,
    hull: &Hull,
    a: DVec3,
    b: DVec3,
    step: f64,
) -> Result<(), DVec3> {
    if col.solid(hull, b) || col.solid(hull, a) {
        return Err(col.sweep(hull, a, b).end);
    }
    let straight = col.sweep(hull, a, b);
    if (straight.end - b).length() <= REACH_TOL {
        return Ok(());
    }
    let level = DVec3::new(b.x, b.y, a.z);
    let plumb = DVec3::new(a.x, a.y, b.z);
    // The step: up as far as it is free, across, down.
    let top = col.sweep(hull, a, a + DVec3::Z * step).end;
    let across = DVec3::new(b.x, b.y, top.z);
    let paths: [(DVec3, &[DVec3]); 4] = [
        (a, &[b]),
        (a, &[level, b]),
        (a, &[plumb, b]),
        (top, &[across, b]),
    ];
    if paths
        .iter()
        .any(|(from, w)| legs(col, hull, *from, w).is_ok())
    {
        return Ok(());
    }
    // Between two free positions closer than half the hull's thinnest side nothing
    // can lie that the hull does not overlap at one end or the other: such a move
    // crosses no wall, though rounding may leave no sweep ending exactly at it.
    if (b - a).length() < hull.bounds().size().min_element() * 0.5 {
        return Ok(());
    }
    Err(straight.end)
}
