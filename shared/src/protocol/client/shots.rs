//! The client's side of shots judged as the shooter saw them: the view each command was
//! made at (sent with the commands that press a game button, see
//! [`ViewClaim`](crate::protocol::ViewClaim)), and the same trace the server's rules run
//! ([`Game::shot_as_seen`](crate::protocol::server::Game::shot_as_seen)) over what this
//! client drew, so a game (or a bot) knows what its shot hit on its own screen.

use super::Client;
use crate::collision::hull::Hull;
use crate::collision::Hit;
use crate::movement::PlayerState;
use crate::protocol::snapshot::interp::Interpolator;
use crate::sim::{PlayerBox, ShotView, Sim, Struck};
use glam::DVec3;

/// The other players' boxes as `interp` draws them at `view`.
pub(super) fn boxes_drawn(sim: &Sim, interp: &Interpolator, view: &ShotView) -> Vec<PlayerBox> {
    let movement = sim.movement();
    (interp.drawn_view(view).into_iter())
        .map(|(id, d)| {
            let hull = if d.crouched {
                movement.crouch()
            } else {
                movement.stand()
            };
            PlayerBox {
                id,
                bounds: hull.bounds().offset(d.origin),
            }
        })
        .collect()
}

impl Client {
    /// The view the others were drawn at when the command for `tick` was made (while it
    /// is recent).
    pub fn view_of(&self, tick: u64) -> Option<ShotView> {
        Some(self.play.as_ref()?.views.get(&tick)?.0)
    }

    /// Our player as predicted after the tick before `tick`, as reported to the server
    /// (a shot of the command for `tick` leaves from there), while it is recent.
    pub fn made_from(&self, tick: u64) -> Option<PlayerState> {
        Some(self.play.as_ref()?.views.get(&tick)?.1)
    }

    /// The other players' boxes as this client drew them at `view` (empty once its
    /// snapshots are no longer held).
    pub fn boxes_at(&self, view: &ShotView) -> Vec<PlayerBox> {
        let Some(p) = self.play.as_ref() else {
            return Vec::new();
        };
        boxes_drawn(&p.sim, &p.interp, view)
    }

    /// What `hull` from `start` to `end` met as this client drew the world when it made
    /// the command for `tick`: the map, the movers as predicted before that tick, and the
    /// others at that command's view (our own player passed through), exactly as the
    /// server's rules judge it from the same view. `None` also when the tick is no
    /// longer recent.
    pub fn trace_seen(
        &mut self,
        tick: u64,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
    ) -> Option<(Struck, Hit)> {
        let view = self.view_of(tick)?;
        let boxes = self.boxes_at(&view);
        let p = self.play.as_mut()?;
        let movers = p.predictor.movers_after(tick.checked_sub(1)?)?;
        let mut poses = Vec::new();
        p.sim.poses(movers, &mut poses);
        let me = p.welcome.player_id;
        let scratch = &mut p.scratch;
        p.sim
            .shot(hull, start, end, &poses, &boxes, Some(me), scratch)
            .1
    }
}
