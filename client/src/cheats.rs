//! Test-only cheats (feature `cheats`), for proving the server catches them: a fast clock,
//! and states that no honest movement reaches. Free of I/O: the run loop passes each
//! honest prediction through [`CheatState::apply`] and sends what comes out, as its claim
//! (trusted-client mode) or its reported prediction (authoritative mode).

use expel_shared::{MoveCommand, PlayerState, Sim};
use glam::DVec3;

/// Which cheats, from which tick of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cheats {
    /// The clock runs this many times too fast (1.0: honest).
    pub clock_factor: f64,
    /// Ticks of honest play before the position cheats start.
    pub after_ticks: u64,
    /// Move along the command's wish direction at full speed, through walls.
    pub noclip: bool,
    /// Jump by this offset once, then carry on from there.
    pub teleport: Option<DVec3>,
    /// Scale every tick's displacement and velocity (1.0: honest).
    pub speed: f64,
    /// Rise at this many units per second, never on the ground (0: honest).
    pub fly: f64,
}

impl Default for Cheats {
    fn default() -> Self {
        Cheats {
            clock_factor: 1.0,
            after_ticks: 0,
            noclip: false,
            teleport: None,
            speed: 1.0,
            fly: 0.0,
        }
    }
}

impl Cheats {
    /// Whether any position cheat is on.
    pub fn moves(&self) -> bool {
        self.noclip || self.teleport.is_some() || self.speed != 1.0 || self.fly != 0.0
    }
}

/// The cheats' running state: where the cheater says it is.
#[derive(Debug, Default)]
pub struct CheatState {
    ticks: u64,
    /// The honest prediction of the previous tick.
    last: Option<DVec3>,
    /// The cheated position, once cheating.
    at: Option<DVec3>,
}

impl CheatState {
    /// The state to send for this tick instead of the honest prediction `honest`, made
    /// for `cmd`. Also returns whether the cheat is active yet.
    pub fn apply(
        &mut self,
        cheats: &Cheats,
        sim: &Sim,
        cmd: &MoveCommand,
        honest: PlayerState,
    ) -> (PlayerState, bool) {
        self.ticks += 1;
        let now = honest.origin();
        let step = self.last.map_or(DVec3::ZERO, |l| now - l);
        self.last = Some(now);
        if !cheats.moves() || self.ticks <= cheats.after_ticks {
            return (honest, false);
        }
        let dt = sim.movement().dt();
        let first = self.at.is_none();
        let at = self.at.get_or_insert(now - step);
        let mut out = honest;
        let mut velocity = honest.velocity();
        let mut step = step * cheats.speed;
        velocity *= cheats.speed;
        if cheats.noclip {
            let (fwd, _, _) = cmd.view();
            let wish = DVec3::new(fwd.x, fwd.y, 0.0).normalize_or_zero();
            velocity = wish * sim.config().max_speed * (cmd.forward as f64 / 127.0);
            step = velocity * dt;
        }
        if cheats.fly != 0.0 {
            velocity.z = cheats.fly;
            step.z = cheats.fly * dt;
            out.flags &= !expel_shared::movement::flags::ON_GROUND;
        }
        if let (Some(o), true) = (cheats.teleport, first) {
            step += o;
        }
        *at += step;
        out.origin = PlayerState::at(*at).origin;
        out.set_velocity(velocity);
        (out, true)
    }
}
