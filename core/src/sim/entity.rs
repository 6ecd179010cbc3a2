//! The game's things in the world: [`EntityState`], and the [`Motion`] that makes one a
//! projectile the simulation sweeps each tick with the same continuous collision core as
//! players, so nothing a game moves tunnels, at any speed.
//!
//! # One entity's tick ([`Sim::entity_tick`])
//!
//! Over the tick's time `dt` the entity follows its ballistic path: with gravity `g` (down,
//! along -z) the exact parabola's chord, `p + (v + v') / 2 · dt` where `v' = v - g·dt`.
//! That straight segment is swept as the motion's hull against the map (solid brushes and
//! patches; clip brushes stop players, not projectiles), the movers at their poses and
//! the players' boxes as they stood when the tick began (its owner excepted). The first
//! thing met is an [`Impact`]: what was hit, where, with which normal, at which fraction
//! of the tick. Then, by the motion's `bounce`:
//! * `0`: the entity stops there (a rocket meets a wall; the rules explode it);
//! * above `0`: the velocity at the contact is mirrored about the surface and scaled by the
//!   factor (Quake 3's grenades: 0.65), and the rest of the tick is swept from the contact.
//!   On walkable ground (normal z ≥ 0.7) with gravity, a bounce that leaves less than two
//!   ticks of gravity's speed off the floor comes to rest instead (it would hop forever).
//!
//! At most [`CONTACTS_PER_TICK`] impacts a tick (a hull wedged in a corner stops for the
//! tick after that). An entity stopped without bounce stays where it hit (an arrow in a
//! wall) until the rules move or remove it; one that came to rest bouncing stays while
//! something holds it up, and with nothing under it (a lift left) it falls again. An entity whose origin leaves the
//! arena is removed ([`StepReport::lost`](super::StepReport)).
//!
//! The state is quantized like a player's (origin in 1/256 units, velocity in 1/16 units
//! a second): a sweep stops [`EXPEL`](crate::geom::EXPEL) (1/32 unit) short of what it
//! meets and rounding moves a point at most √3/512 units, so the rounding never puts an
//! entity into solid, and a client that steps the same state gets the same bits.

use super::EntityId;
use super::{PlayerBox, PlayerId, Sim, SimScratch};
use crate::collision::hull::Hull;
use crate::movement::{from_grid, quantize, POSITION_SCALE, VELOCITY_SCALE};
use crate::mover::Pose;
use glam::DVec3;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Most impacts one entity makes in one tick.
pub const CONTACTS_PER_TICK: usize = 8;
/// Fastest an entity may be launched, units a second (a tick's move at 10 Hz stays well
/// inside the supported coordinates).
pub const MAX_SPEED: f64 = 1_048_576.0;
/// Strongest gravity a motion may have, units a second squared.
pub const MAX_GRAVITY: f64 = 100_000.0;
/// Largest extent of a projectile's box from its origin on any axis, units.
pub const MAX_EXTENT: f64 = 256.0;
/// Walkable ground: a contact normal at least this steep up lets a bounce come to rest.
const FLOOR_Z: f64 = 0.7;
/// How far below an entity at rest the ground that holds it may be, units.
const SUPPORT: f64 = 0.25;

/// How an entity moves by itself each tick: the game's choice of hull, gravity and bounce.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Motion {
    /// The swept hull's box relative to the origin, in 1/256 units; all zero is a point.
    pub mins: [i32; 3],
    /// See `mins`.
    pub maxs: [i32; 3],
    /// Downward acceleration, units a second squared (0: it flies straight).
    pub gravity: f64,
    /// What is kept of the velocity at an impact, 0..=1 (0: it stops at the first).
    pub bounce: f64,
}

/// A [`Motion`] the simulation refuses.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum MotionError {
    /// A box with `mins` above `maxs` on an axis, or an extent past [`MAX_EXTENT`].
    #[error("hull box {mins:?}..{maxs:?} must have mins <= maxs within ±{MAX_EXTENT} units")]
    Hull {
        /// The box's mins, units.
        mins: [f64; 3],
        /// The box's maxs, units.
        maxs: [f64; 3],
    },
    /// Gravity not finite or past [`MAX_GRAVITY`].
    #[error("gravity {0} must be finite and within ±{MAX_GRAVITY}")]
    Gravity(f64),
    /// A bounce factor outside 0..=1.
    #[error("bounce {0} must be within 0 and 1")]
    Bounce(f64),
    /// A launch speed that is not finite or past [`MAX_SPEED`].
    #[error("speed {0} must be finite and at most {MAX_SPEED} units a second")]
    Speed(f64),
    /// A start outside the supported coordinates.
    #[error("position {0:?} is outside the supported coordinate range")]
    OutOfRange([f64; 3]),
}

impl Motion {
    /// A point that flies straight and stops at its first impact (a rocket).
    pub const POINT: Motion = Motion {
        mins: [0; 3],
        maxs: [0; 3],
        gravity: 0.0,
        bounce: 0.0,
    };

    /// A motion with the hull box `mins..maxs` (units, rounded to the position grid),
    /// checked: each extent within [`MAX_EXTENT`], gravity finite within
    /// [`MAX_GRAVITY`], bounce within 0..=1.
    pub fn new(mins: DVec3, maxs: DVec3, gravity: f64, bounce: f64) -> Result<Motion, MotionError> {
        let bad_hull = || MotionError::Hull {
            mins: mins.to_array(),
            maxs: maxs.to_array(),
        };
        let ok = |v: DVec3| v.is_finite() && v.abs().max_element() <= MAX_EXTENT;
        if !ok(mins) || !ok(maxs) || mins.cmpgt(maxs).any() {
            return Err(bad_hull());
        }
        if !gravity.is_finite() || gravity.abs() > MAX_GRAVITY {
            return Err(MotionError::Gravity(gravity));
        }
        if !(0.0..=1.0).contains(&bounce) {
            return Err(MotionError::Bounce(bounce));
        }
        Ok(Motion {
            mins: quantize(mins, POSITION_SCALE),
            maxs: quantize(maxs, POSITION_SCALE),
            gravity,
            bounce,
        })
    }

    /// Checks a motion received from elsewhere (see [`Motion::new`]).
    pub fn validate(&self) -> Result<(), MotionError> {
        Motion::new(self.box_mins(), self.box_maxs(), self.gravity, self.bounce).map(|_| ())
    }

    /// The hull box's mins, units.
    pub fn box_mins(&self) -> DVec3 {
        from_grid(self.mins, POSITION_SCALE)
    }

    /// The hull box's maxs, units.
    pub fn box_maxs(&self) -> DVec3 {
        from_grid(self.maxs, POSITION_SCALE)
    }

    fn is_point(&self) -> bool {
        self.mins == [0; 3] && self.maxs == [0; 3]
    }

    /// The swept hull (a point, or the box).
    pub fn hull(&self) -> Hull {
        if self.is_point() {
            return Hull::point();
        }
        Hull::aabb(self.box_mins(), self.box_maxs()).unwrap_or_else(|_| Hull::point())
    }
}

/// A thing of the game's in the world: where it is, how it moves, whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntityState {
    /// Position in 1/[`POSITION_SCALE`] units.
    pub origin: [i32; 3],
    /// Velocity in 1/[`VELOCITY_SCALE`] units a second.
    pub velocity: [i32; 3],
    /// What it is, in the game's own numbering (a rocket, a grenade, a flag): the
    /// simulation does not read it; clients get it with the entity.
    pub kind: u16,
    /// The player it belongs to: its projectiles pass through it.
    pub owner: Option<PlayerId>,
    /// How it moves; `None`: it stays where the rules put it (a pickup, a flag).
    pub motion: Option<Motion>,
    /// It stopped (an impact without bounce, or a bounce that came to rest) and stays
    /// until the ground under it goes.
    pub at_rest: bool,
}

impl EntityState {
    /// An entity that stays at `origin` (quantized).
    pub fn fixed(origin: DVec3) -> EntityState {
        EntityState {
            origin: quantize(origin, POSITION_SCALE),
            velocity: [0; 3],
            kind: 0,
            owner: None,
            motion: None,
            at_rest: true,
        }
    }

    /// The entity as the game's `kind`.
    pub fn with_kind(mut self, kind: u16) -> EntityState {
        self.kind = kind;
        self
    }

    /// A projectile launched from `origin` along `dir` (any length; zero launches it at
    /// rest) at `speed` units a second, moving by `motion`.
    pub fn launched(
        origin: DVec3,
        dir: DVec3,
        speed: f64,
        motion: Motion,
        owner: Option<PlayerId>,
    ) -> Result<EntityState, MotionError> {
        if !super::in_range(origin) {
            return Err(MotionError::OutOfRange(origin.to_array()));
        }
        if !speed.is_finite() || !(0.0..=MAX_SPEED).contains(&speed) {
            return Err(MotionError::Speed(speed));
        }
        let d = dir.try_normalize().unwrap_or(DVec3::ZERO);
        motion.validate()?;
        Ok(EntityState {
            origin: quantize(origin, POSITION_SCALE),
            velocity: quantize(d * speed, VELOCITY_SCALE),
            kind: 0,
            owner,
            motion: Some(motion),
            at_rest: false,
        })
    }

    /// Position in units.
    pub fn origin(&self) -> DVec3 {
        from_grid(self.origin, POSITION_SCALE)
    }

    /// Velocity in units a second.
    pub fn velocity(&self) -> DVec3 {
        from_grid(self.velocity, VELOCITY_SCALE)
    }

    /// Bytes hashed for the world's state hash: every field, little endian, in order.
    pub fn hash_bytes(&self, out: &mut Vec<u8>) {
        for v in self.origin.iter().chain(&self.velocity) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.kind.to_le_bytes());
        out.extend_from_slice(
            &self
                .owner
                .map_or(u64::MAX, |o| u64::from(o.0))
                .to_le_bytes(),
        );
        match &self.motion {
            None => out.push(0),
            Some(m) => {
                out.push(1);
                for v in m.mins.iter().chain(&m.maxs) {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.extend_from_slice(&m.gravity.to_bits().to_le_bytes());
                out.extend_from_slice(&m.bounce.to_bits().to_le_bytes());
            }
        }
        out.push(self.at_rest as u8);
    }
}

/// A motion's hull box (mins, maxs), the key its built hull is kept under.
pub(crate) type HullKey = ([i32; 3], [i32; 3]);

/// What a projectile met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Struck {
    /// The map.
    World,
    /// A mover (its index in the simulation's movers).
    Mover(u32),
    /// A player's box.
    Player(PlayerId),
}

/// One impact of an entity in a tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impact {
    /// The entity.
    pub entity: EntityId,
    /// What it met.
    pub struck: Struck,
    /// Its origin when it met it (the sweep's end, outside what it met).
    pub point: DVec3,
    /// The contact point on what it met.
    pub contact: DVec3,
    /// Unit normal of the contact, from what it met towards the entity.
    pub normal: DVec3,
    /// When in the tick, 0..=1.
    pub fraction: f64,
}

/// The result of one entity's tick.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityTick {
    /// The new state.
    pub entity: EntityState,
    /// The impacts on the way, in order.
    pub impacts: Vec<Impact>,
    /// Its origin left the arena: the world drops it.
    pub lost: bool,
}

/// The work of [`Sim::entity_tick`].
pub(super) fn entity_tick(
    sim: &Sim,
    id: EntityId,
    e: &EntityState,
    poses: &[Pose],
    players: &[PlayerBox],
    s: &mut SimScratch,
) -> EntityTick {
    let Some(motion) = e.motion else {
        return EntityTick {
            entity: *e,
            impacts: Vec::new(),
            lost: false,
        };
    };
    let hull = s.take_entity_hull(&motion);
    let out = move_entity(sim, id, e, &motion, &hull, poses, players, s);
    s.entity_hulls.push(((motion.mins, motion.maxs), hull));
    out
}

#[allow(clippy::too_many_arguments)]
fn move_entity(
    sim: &Sim,
    id: EntityId,
    e: &EntityState,
    motion: &Motion,
    hull: &Hull,
    poses: &[Pose],
    players: &[PlayerBox],
    s: &mut SimScratch,
) -> EntityTick {
    let mut out = EntityTick {
        entity: *e,
        impacts: Vec::new(),
        lost: false,
    };
    let dt = sim.movement.dt();
    let fall = DVec3::new(0.0, 0.0, -motion.gravity);
    let mut pos = e.origin();
    let mut vel = e.velocity();
    let mut at_rest = e.at_rest;
    if at_rest {
        // Held up by what it rests on, or falling again now that it went.
        let below = pos + DVec3::new(0.0, 0.0, -SUPPORT);
        let stuck = motion.bounce == 0.0 || motion.gravity <= 0.0;
        if stuck
            || sim
                .shot(hull, pos, below, poses, players, e.owner, s)
                .1
                .is_some()
        {
            return out;
        }
        at_rest = false;
        vel = DVec3::ZERO;
    }
    let mut left = dt;
    for _ in 0..CONTACTS_PER_TICK {
        let vel_end = vel + fall * left;
        let end = pos + (vel + vel_end) * 0.5 * left;
        if !super::in_range(end) {
            // Only a launch far outside the map goes there: it is lost either way.
            out.lost = true;
            return out;
        }
        let (sweep, struck) = sim.shot(hull, pos, end, poses, players, e.owner, s);
        let Some((struck, hit)) = struck else {
            pos = end;
            vel = vel_end;
            break;
        };
        let used = left * sweep.fraction;
        pos = sweep.end;
        vel += fall * used;
        out.impacts.push(Impact {
            entity: id,
            struck,
            point: pos,
            contact: hit.point,
            normal: hit.normal,
            fraction: ((dt - left + used) / dt).clamp(0.0, 1.0),
        });
        left -= used;
        let n = hit.normal;
        let into = vel.dot(n);
        if motion.bounce == 0.0 {
            (vel, at_rest) = (DVec3::ZERO, true);
            break;
        }
        if into < 0.0 {
            vel = (vel - n * (2.0 * into)) * motion.bounce;
        }
        if motion.gravity > 0.0 && n.z >= FLOOR_Z && vel.dot(n) < 2.0 * motion.gravity * dt {
            (vel, at_rest) = (DVec3::ZERO, true);
            break;
        }
    }
    // Out of contacts with time left, it waits for the next tick where the last one
    // left it.
    out.entity.origin = quantize(pos, POSITION_SCALE);
    out.entity.velocity = quantize(vel, VELOCITY_SCALE);
    out.entity.at_rest = at_rest;
    out.lost = !sim.in_arena(out.entity.origin());
    out
}

impl SimScratch {
    /// The hull of `motion`, taken out of the few kept (built on a miss, the oldest
    /// dropped): the caller puts it back after the tick.
    fn take_entity_hull(&mut self, motion: &Motion) -> Hull {
        let key = (motion.mins, motion.maxs);
        if let Some(i) = self.entity_hulls.iter().position(|(k, _)| *k == key) {
            return self.entity_hulls.swap_remove(i).1;
        }
        if self.entity_hulls.len() >= 8 {
            self.entity_hulls.remove(0);
        }
        motion.hull()
    }
}
