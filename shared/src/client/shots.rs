//! The client's side of shots judged as the shooter saw them: the view each command was
//! made at (sent with the commands that press a game button, see
//! [`ViewClaim`](crate::wire::ViewClaim)), and the same trace the server's rules run
//! ([`Game::shot_as_seen`](crate::server::Game::shot_as_seen)) over what this
//! client drew, so a game (or a bot) knows what its shot hit on its own screen.

use super::ClientMachine;
use crate::snapshot::interp::Interpolator;
use expel_core::collision::hull::Hull;
use expel_core::collision::Hit;
use expel_core::movement::PlayerState;
use expel_core::sim::{PlayerBox, ShotView, Sim, Struck};
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

/// The work of [`ClientMachine::view_of`].
pub(super) fn view_of(client: &ClientMachine, tick: u64) -> Option<ShotView> {
    Some(client.play.as_ref()?.views.get(&tick)?.0)
}

/// The work of [`ClientMachine::made_from`].
pub(super) fn made_from(client: &ClientMachine, tick: u64) -> Option<PlayerState> {
    Some(client.play.as_ref()?.views.get(&tick)?.1)
}

/// The work of [`ClientMachine::boxes_at`].
pub(super) fn boxes_at(client: &ClientMachine, view: &ShotView) -> Vec<PlayerBox> {
    let Some(p) = client.play.as_ref() else {
        return Vec::new();
    };
    boxes_drawn(&p.sim, &p.interp, view)
}

/// The work of [`ClientMachine::trace_seen`].
pub(super) fn trace_seen(
    client: &mut ClientMachine,
    tick: u64,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
) -> Option<(Struck, Hit)> {
    let view = client.view_of(tick)?;
    let boxes = client.boxes_at(&view);
    let p = client.play.as_mut()?;
    let movers = p.predictor.movers_after(tick.checked_sub(1)?)?;
    let mut poses = Vec::new();
    p.sim.poses(movers, &mut poses);
    let me = p.welcome.player;
    let scratch = &mut p.scratch;
    p.sim
        .shot(hull, start, end, &poses, &boxes, Some(me), scratch)
        .1
}
