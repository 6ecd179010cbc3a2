//! Shared player movement: the same `pmove` runs on the server and in every client.
//!
//! The state the network carries ([`PlayerState`]) and the input ([`MoveCommand`]) are
//! stored quantized, exactly as they are sent, so a client that restores a snapshot and
//! replays its commands computes the server's numbers bit for bit. Inside a tick the maths
//! is `f64` with a fixed operation order, no fused multiply-add, and `libm` for the only
//! transcendental functions (the view angles).

pub(crate) mod pmove;

pub use pmove::{pmove, Collider, MapCollider, MoveEvents, Obstacle, Touches};

use crate::collision::hull::Hull;
use glam::DVec3;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A [`MoveConfig`] value outside what the movement supports.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("movement setting {field} = {value} is invalid: {rule}")]
pub struct ConfigError {
    /// The setting's name, as in [`MoveConfig`].
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub rule: &'static str,
}

/// Position quantum: 1/256 unit (an `i32` then spans ±2^23 units).
pub const POSITION_SCALE: f64 = 256.0;
/// Velocity quantum: 1/16 unit per second.
pub const VELOCITY_SCALE: f64 = 16.0;

/// Movement constants, with Quake 3's defaults (units per second, units, seconds). Checked
/// once by [`MoveConfig::validate`] into a [`Movement`], the only form movement runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveConfig {
    /// Simulation rate of players and movers alike; 10 to 240 ticks per second.
    pub tick_rate: u32,
    /// Downward acceleration.
    pub gravity: f64,
    /// Upward speed a jump gives.
    pub jump_velocity: f64,
    /// Ground speed with full input.
    pub max_speed: f64,
    /// Speed factor while crouched.
    pub crouch_scale: f64,
    /// Ground acceleration (times the wished speed, per second).
    pub accelerate: f64,
    /// Air acceleration (times the wished speed, per second).
    pub air_accelerate: f64,
    /// Ground friction (fraction of the speed lost per second).
    pub friction: f64,
    /// Friction acts as if the speed were at least this.
    pub stop_speed: f64,
    /// Ground is walkable when its normal's z is at least this (about 45.6°).
    pub walkable_normal_z: f64,
    /// Highest step climbed (and lowest dropped while walking down).
    pub step_height: f64,
    /// Velocity clipping pushes this much further off a plane, so a slide leaves it.
    pub overclip: f64,
    /// How far below the hull the ground check looks.
    pub ground_distance: f64,
    /// Speed in noclip and spectator modes.
    pub fly_speed: f64,
    /// No velocity component may exceed this (Quake's `sv_maxvelocity`).
    pub max_velocity: f64,
    /// Standing hull's lower corner, relative to the origin.
    pub stand_mins: [f64; 3],
    /// Standing hull's upper corner, relative to the origin.
    pub stand_maxs: [f64; 3],
    /// Crouched hull top (the rest as standing).
    pub crouch_max_z: f64,
}

impl Default for MoveConfig {
    fn default() -> Self {
        MoveConfig {
            tick_rate: 60,
            gravity: 800.0,
            jump_velocity: 270.0,
            max_speed: 320.0,
            crouch_scale: 0.25,
            accelerate: 10.0,
            air_accelerate: 1.0,
            friction: 6.0,
            stop_speed: 100.0,
            walkable_normal_z: 0.7,
            step_height: 18.0,
            overclip: 1.001,
            ground_distance: 0.25,
            fly_speed: 640.0,
            max_velocity: 2000.0,
            stand_mins: [-15.0, -15.0, -24.0],
            stand_maxs: [15.0, 15.0, 32.0],
            crouch_max_z: 16.0,
        }
    }
}

/// Limits [`MoveConfig::validate`] enforces.
pub mod limits {
    /// Tick rates, per second.
    pub const TICK_RATE: std::ops::RangeInclusive<u32> = 10..=240;
    /// Largest speed, acceleration or gravity accepted (units per second, or per second
    /// squared).
    pub const MAX_RATE: f64 = 100_000.0;
    /// Largest hull extent from the origin on any axis.
    pub const MAX_HULL: f64 = 512.0;
    /// Thinnest hull side accepted (thinner boxes cannot be traced reliably).
    pub const MIN_HULL_SIDE: f64 = 1.0;
}

impl MoveConfig {
    /// Checks every value and builds the hulls once.
    pub fn validate(self) -> Result<Movement, ConfigError> {
        let bad = |field: &'static str, value: String, rule: &'static str| {
            Err(ConfigError { field, value, rule })
        };
        if !limits::TICK_RATE.contains(&self.tick_rate) {
            return bad(
                "tick_rate",
                self.tick_rate.to_string(),
                "10 to 240 ticks per second",
            );
        }
        let rates = [
            ("gravity", self.gravity),
            ("jump_velocity", self.jump_velocity),
            ("max_speed", self.max_speed),
            ("accelerate", self.accelerate),
            ("air_accelerate", self.air_accelerate),
            ("friction", self.friction),
            ("stop_speed", self.stop_speed),
            ("fly_speed", self.fly_speed),
            ("max_velocity", self.max_velocity),
        ];
        for (field, v) in rates {
            if !(0.0..=limits::MAX_RATE).contains(&v) {
                return bad(field, v.to_string(), "finite, 0 to 100000");
            }
        }
        if self.max_velocity <= 0.0 {
            return bad("max_velocity", self.max_velocity.to_string(), "positive");
        }
        let in_range = |v: f64, lo: f64, hi: f64| v.is_finite() && v >= lo && v <= hi;
        if !in_range(self.crouch_scale, 0.0, 1.0) {
            return bad("crouch_scale", self.crouch_scale.to_string(), "0 to 1");
        }
        if !(in_range(self.walkable_normal_z, 0.0, 1.0) && self.walkable_normal_z > 0.0) {
            let v = self.walkable_normal_z.to_string();
            return bad("walkable_normal_z", v, "above 0, at most 1");
        }
        if !in_range(self.step_height, 0.0, limits::MAX_HULL) {
            return bad("step_height", self.step_height.to_string(), "0 to 512");
        }
        if !in_range(self.overclip, 1.0, 1.1) {
            return bad("overclip", self.overclip.to_string(), "1 to 1.1");
        }
        if !(in_range(self.ground_distance, 0.0, 4.0) && self.ground_distance > 0.0) {
            let v = self.ground_distance.to_string();
            return bad("ground_distance", v, "above 0, at most 4");
        }
        let (mins, maxs) = (DVec3::from(self.stand_mins), DVec3::from(self.stand_maxs));
        let hull_ok = |v: DVec3| v.is_finite() && v.abs().max_element() <= limits::MAX_HULL;
        if !hull_ok(mins) || !hull_ok(maxs) {
            let v = format!("{:?} {:?}", self.stand_mins, self.stand_maxs);
            return bad(
                "stand_mins/stand_maxs",
                v,
                "finite, within 512 of the origin",
            );
        }
        if (maxs - mins).min_element() < limits::MIN_HULL_SIDE {
            let v = format!("{:?} {:?}", self.stand_mins, self.stand_maxs);
            return bad("stand_mins/stand_maxs", v, "at least 1 unit on every axis");
        }
        if !(in_range(self.crouch_max_z, mins.z + limits::MIN_HULL_SIDE, maxs.z)) {
            let v = self.crouch_max_z.to_string();
            return bad(
                "crouch_max_z",
                v,
                "at least 1 above stand_mins z, at most stand_maxs z",
            );
        }
        let mut crouch_maxs = maxs;
        crouch_maxs.z = self.crouch_max_z;
        // Checked above: the boxes are finite and thick, so building them cannot fail.
        let hull = |lo, hi| {
            Hull::aabb(lo, hi).map_err(|_| ConfigError {
                field: "stand_mins/stand_maxs",
                value: format!("{lo} {hi}"),
                rule: "a valid box",
            })
        };
        Ok(Movement {
            stand: hull(mins, maxs)?,
            crouch: hull(mins, crouch_maxs)?,
            dt: 1.0 / self.tick_rate as f64,
            config: self,
        })
    }
}

/// A validated [`MoveConfig`] with its hulls built once: what [`pmove`] runs with. Only
/// [`MoveConfig::validate`] makes one, so it is never invalid or stale.
#[derive(Clone, Debug)]
pub struct Movement {
    config: MoveConfig,
    stand: Hull,
    crouch: Hull,
    dt: f64,
}

impl Default for Movement {
    fn default() -> Self {
        // The defaults are within every limit (a unit test checks it).
        match MoveConfig::default().validate() {
            Ok(m) => m,
            Err(e) => unreachable!("default movement config is invalid: {e}"),
        }
    }
}

impl Movement {
    /// The settings.
    pub fn config(&self) -> &MoveConfig {
        &self.config
    }

    /// Seconds per tick.
    pub fn dt(&self) -> f64 {
        self.dt
    }

    /// Ticks per second.
    pub fn tick_rate(&self) -> u32 {
        self.config.tick_rate
    }

    /// The standing hull.
    pub fn stand(&self) -> &Hull {
        &self.stand
    }

    /// The crouched hull.
    pub fn crouch(&self) -> &Hull {
        &self.crouch
    }

    /// The hull for a state.
    pub fn hull(&self, state: &PlayerState) -> &Hull {
        if state.crouched() {
            &self.crouch
        } else {
            &self.stand
        }
    }

    /// The world box a player in `state` occupies.
    pub fn player_box(&self, state: &PlayerState) -> crate::geom::Aabb {
        self.hull(state).bounds().offset(state.origin())
    }
}

/// Movement mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum MoveMode {
    /// Walks, with gravity and collision.
    #[default]
    Walk,
    /// Flies through everything.
    Noclip,
    /// Flies, colliding with the world.
    Spectator,
    /// Held where it is by the game's rules (its commands move nothing; movers still
    /// carry and push it, and others still collide with it).
    Frozen,
}

/// State flags.
pub mod flags {
    /// Standing on walkable ground.
    pub const ON_GROUND: u8 = 1;
    /// Crouched (the smaller hull).
    pub const CROUCHED: u8 = 2;
    /// Jump was held last tick: a new jump needs a release first.
    pub const JUMP_HELD: u8 = 4;
}

/// What the network carries for a player, quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct PlayerState {
    /// Position in 1/[`POSITION_SCALE`] units.
    pub origin: [i32; 3],
    /// Velocity in 1/[`VELOCITY_SCALE`] units per second.
    pub velocity: [i32; 3],
    /// [`flags`] bits.
    pub flags: u8,
    /// Movement mode.
    pub mode: MoveMode,
}

/// `v` in steps of `1/scale` (rounded to the nearest, saturating at the `i32` range):
/// how positions ([`POSITION_SCALE`]) and velocities ([`VELOCITY_SCALE`]) are stored.
pub fn quantize(v: DVec3, scale: f64) -> [i32; 3] {
    let q = |x: f64| grid_step((x * scale).round());
    [q(v.x), q(v.y), q(v.z)]
}

/// Steps of `1/scale` as a vector (the inverse of [`quantize`]).
pub fn from_grid(v: [i32; 3], scale: f64) -> DVec3 {
    DVec3::new(v[0] as f64, v[1] as f64, v[2] as f64) / scale
}

/// A whole number of grid steps as stored (saturating at the `i32` range).
fn grid_step(r: f64) -> i32 {
    r.clamp(i32::MIN as f64, i32::MAX as f64) as i32
}

impl PlayerState {
    /// A player at rest at `origin` (quantized).
    pub fn at(origin: DVec3) -> PlayerState {
        PlayerState {
            origin: quantize(origin, POSITION_SCALE),
            ..Default::default()
        }
    }

    /// Position in units.
    pub fn origin(&self) -> DVec3 {
        from_grid(self.origin, POSITION_SCALE)
    }

    /// Velocity in units per second.
    pub fn velocity(&self) -> DVec3 {
        from_grid(self.velocity, VELOCITY_SCALE)
    }

    /// Sets the velocity (quantized).
    pub fn set_velocity(&mut self, v: DVec3) {
        self.velocity = quantize(v, VELOCITY_SCALE);
    }

    /// Whether a [`flags`] bit is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// Standing on walkable ground.
    pub fn on_ground(&self) -> bool {
        self.has(flags::ON_GROUND)
    }

    /// Crouched.
    pub fn crouched(&self) -> bool {
        self.has(flags::CROUCHED)
    }

    /// Bytes hashed for the world's state hash: every field, little endian, in order.
    pub fn hash_bytes(&self, out: &mut Vec<u8>) {
        for v in self.origin.iter().chain(&self.velocity) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(self.flags);
        out.push(self.mode as u8);
    }
}

/// One tick of input, quantized as sent: axes in 1/127 steps, angles in 1/65536 turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct MoveCommand {
    /// Forward axis, -127..127.
    pub forward: i8,
    /// Sideways axis (positive right), -127..127.
    pub side: i8,
    /// Up axis (flying modes), -127..127.
    pub up: i8,
    /// Yaw, counter-clockwise from +x seen from above.
    pub yaw: u16,
    /// Pitch, positive looking down (Quake's convention).
    pub pitch: u16,
    /// [`buttons`] bits: the movement's (jump, crouch).
    pub buttons: u8,
    /// The game's own buttons (fire, alt-fire, use, reload, weapon slots: bits the game
    /// names). Movement never reads them; the rules get them with the tick they belong
    /// to (`expel_protocol::server::Game::command`), and prediction
    /// replays them exactly.
    pub actions: u16,
    /// A field the game defines (the weapon held, an aim mode), carried like `actions`.
    pub weapon: u8,
}

/// Command buttons.
pub mod buttons {
    /// Jump (needs a release between jumps).
    pub const JUMP: u8 = 1;
    /// Crouch.
    pub const CROUCH: u8 = 2;
}

impl MoveCommand {
    /// From axes in -1..1 and angles in degrees (out-of-range axes are clamped; non-finite
    /// values read as zero).
    pub fn new(forward: f64, side: f64, up: f64, yaw_deg: f64, pitch_deg: f64) -> MoveCommand {
        let axis = |v: f64| {
            if v.is_finite() {
                (v.clamp(-1.0, 1.0) * 127.0).round() as i8
            } else {
                0
            }
        };
        let angle = |d: f64| {
            if d.is_finite() {
                (d.rem_euclid(360.0) / 360.0 * 65536.0).round() as i64 as u16
            } else {
                0
            }
        };
        MoveCommand {
            forward: axis(forward),
            side: axis(side),
            up: axis(up),
            yaw: angle(yaw_deg),
            pitch: angle(pitch_deg),
            buttons: 0,
            actions: 0,
            weapon: 0,
        }
    }

    /// The command with these [`buttons`].
    pub fn with_buttons(mut self, b: u8) -> Self {
        self.buttons = b;
        self
    }

    /// The command with the game's `actions` buttons and its `weapon` field.
    pub fn with_actions(mut self, actions: u16, weapon: u8) -> Self {
        self.actions = actions;
        self.weapon = weapon;
        self
    }

    /// Whether the game's button `bit` of [`MoveCommand::actions`] is held.
    pub fn holds(&self, bit: u16) -> bool {
        self.actions & bit != 0
    }

    /// Jump held.
    pub fn jump(&self) -> bool {
        self.buttons & buttons::JUMP != 0
    }

    /// Crouch held.
    pub fn crouch(&self) -> bool {
        self.buttons & buttons::CROUCH != 0
    }

    fn radians(a: u16) -> f64 {
        a as f64 * (std::f64::consts::TAU / 65536.0)
    }

    /// Unit view vectors (forward, right, up) from the angles.
    pub fn view(&self) -> (DVec3, DVec3, DVec3) {
        let (sy, cy) = (
            libm::sin(Self::radians(self.yaw)),
            libm::cos(Self::radians(self.yaw)),
        );
        let (sp, cp) = (
            libm::sin(Self::radians(self.pitch)),
            libm::cos(Self::radians(self.pitch)),
        );
        let forward = DVec3::new(cp * cy, cp * sy, -sp);
        let right = DVec3::new(sy, -cy, 0.0);
        let up = right.cross(forward);
        (forward, right, up)
    }
}
