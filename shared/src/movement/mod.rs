//! Shared player movement: the same `pmove` runs on the server and in every client.
//!
//! The state the network carries ([`PlayerState`]) and the input ([`MoveCommand`]) are
//! stored quantized, exactly as they are sent, so a client that restores a snapshot and
//! replays its commands computes the server's numbers bit for bit. Inside a tick the maths
//! is `f64` with a fixed operation order, no fused multiply-add, and `libm` for the only
//! transcendental functions (the view angles).

mod pmove;

pub use pmove::{pmove, Collider, MapCollider};

use crate::collision::hull::Hull;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Position quantum: 1/256 unit (an `i32` then spans ±2^23 units).
pub const POSITION_SCALE: f64 = 256.0;
/// Velocity quantum: 1/16 unit per second.
pub const VELOCITY_SCALE: f64 = 16.0;

/// Movement constants, with Quake 3's defaults (units per second, units, seconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoveConfig {
    /// Simulation rate; 10 to 240 ticks per second.
    pub tick_rate: u32,
    pub gravity: f64,
    pub jump_velocity: f64,
    /// Ground speed with full input.
    pub max_speed: f64,
    /// Speed factor while crouched.
    pub crouch_scale: f64,
    pub accelerate: f64,
    pub air_accelerate: f64,
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
    pub stand_mins: [f64; 3],
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
            stand_mins: [-15.0, -15.0, -24.0],
            stand_maxs: [15.0, 15.0, 32.0],
            crouch_max_z: 16.0,
        }
    }
}

impl MoveConfig {
    pub fn dt(&self) -> f64 {
        1.0 / self.tick_rate.clamp(10, 240) as f64
    }

    pub fn stand_hull(&self) -> Hull {
        Hull::aabb(self.stand_mins.into(), self.stand_maxs.into()).expect("valid stand hull")
    }

    pub fn crouch_hull(&self) -> Hull {
        let mut maxs = self.stand_maxs;
        maxs[2] = self.crouch_max_z;
        Hull::aabb(self.stand_mins.into(), maxs.into()).expect("valid crouch hull")
    }
}

/// A [`MoveConfig`] with its hulls built once: what [`pmove`] runs with.
#[derive(Clone, Debug)]
pub struct Movement {
    pub config: MoveConfig,
    pub stand: Hull,
    pub crouch: Hull,
}

impl Movement {
    pub fn new(config: MoveConfig) -> Movement {
        Movement {
            stand: config.stand_hull(),
            crouch: config.crouch_hull(),
            config,
        }
    }

    /// The hull for a state.
    pub fn hull(&self, state: &PlayerState) -> &Hull {
        if state.crouched() {
            &self.crouch
        } else {
            &self.stand
        }
    }
}

/// Movement mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum MoveMode {
    #[default]
    Walk,
    /// Flies through everything.
    Noclip,
    /// Flies, colliding with the world.
    Spectator,
}

/// State flags.
pub mod flags {
    pub const ON_GROUND: u8 = 1;
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
    pub flags: u8,
    pub mode: MoveMode,
}

fn quantize(v: DVec3, scale: f64) -> [i32; 3] {
    let q = |x: f64| {
        let r = (x * scale).round();
        r.clamp(i32::MIN as f64, i32::MAX as f64) as i32
    };
    [q(v.x), q(v.y), q(v.z)]
}

impl PlayerState {
    pub fn at(origin: DVec3) -> PlayerState {
        PlayerState {
            origin: quantize(origin, POSITION_SCALE),
            ..Default::default()
        }
    }

    pub fn origin(&self) -> DVec3 {
        DVec3::new(
            self.origin[0] as f64,
            self.origin[1] as f64,
            self.origin[2] as f64,
        ) / POSITION_SCALE
    }

    pub fn velocity(&self) -> DVec3 {
        DVec3::new(
            self.velocity[0] as f64,
            self.velocity[1] as f64,
            self.velocity[2] as f64,
        ) / VELOCITY_SCALE
    }

    pub fn set_velocity(&mut self, v: DVec3) {
        self.velocity = quantize(v, VELOCITY_SCALE);
    }

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

    pub fn on_ground(&self) -> bool {
        self.has(flags::ON_GROUND)
    }

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
    pub forward: i8,
    pub side: i8,
    pub up: i8,
    /// Yaw, counter-clockwise from +x seen from above.
    pub yaw: u16,
    /// Pitch, positive looking down (Quake's convention).
    pub pitch: u16,
    pub buttons: u8,
}

/// Command buttons.
pub mod buttons {
    pub const JUMP: u8 = 1;
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
        }
    }

    pub fn with_buttons(mut self, b: u8) -> Self {
        self.buttons = b;
        self
    }

    pub fn jump(&self) -> bool {
        self.buttons & buttons::JUMP != 0
    }

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
