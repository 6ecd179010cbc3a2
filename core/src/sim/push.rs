//! Movers in a tick: each advances, carrying the players standing on it and pushing the
//! players in its way, or stays put when it cannot.

use super::{Sim, SimScratch, WorldState};
use crate::collision::Contents;
use crate::geom::{Aabb, EXPEL};
use crate::movement::{MoveMode, PlayerState};
use crate::mover::MoverState;
use glam::DVec3;

/// The work of [`Sim::advance_movers`].
pub(super) fn advance_movers(sim: &Sim, world: &mut WorldState, s: &mut SimScratch) {
    world.movers.resize(sim.movers.len(), MoverState::default());
    let rate = sim.movement.tick_rate();
    let reach = sim.config().ground_distance + EXPEL * 2.0;
    let walkable = sim.config().walkable_normal_z;
    // Every player once, in id order, with its origin and box: each mover reads them
    // all (its trigger, who is near), and sees the pushes of the movers before it.
    let mut bodies = std::mem::take(&mut s.bodies);
    bodies.clear();
    bodies.extend(world.players.values().map(|slot| Body {
        state: slot.state,
        origin: slot.state.origin(),
        bounds: sim.movement.player_box(&slot.state),
    }));
    let mut pushed = false;
    let t = &mut s.trace;
    for (i, mover) in sim.movers.iter().enumerate() {
        let now = world.movers[i];
        let triggered = bodies.iter().any(|b| {
            b.origin.cmpge(mover.trigger.min).all() && b.origin.cmple(mover.trigger.max).all()
        });
        let next = mover.advance(&now, triggered, rate);
        let (p0, p1) = (mover.pose(&now), mover.pose(&next));
        if p0 == p1 {
            world.movers[i] = next;
            continue;
        }
        let mut moves: Vec<(usize, PlayerState)> = Vec::new();
        let mut blocked = false;
        // Only players near where the mover is, or goes, can ride or be pushed.
        let near = mover
            .world_bounds(&p0)
            .union(&mover.world_bounds(&p1))
            .expand(reach);
        for (k, b) in bodies.iter().enumerate() {
            let p = &b.state;
            if p.mode == MoveMode::Noclip || !near.overlaps(&b.bounds) {
                continue;
            }
            let hull = sim.movement.hull(p);
            let o = b.origin;
            // Riding: standing on the mover as it was.
            let rides = p.on_ground()
                && mover
                    .sweep(i as u32, hull, o, o - DVec3::Z * reach, &p0, t)
                    .normal()
                    .is_some_and(|n| n.z >= walkable);
            let hit = mover.overlaps(hull, o, &p1, t);
            if !rides && !hit {
                continue;
            }
            // Where the mover takes the point under the player...
            let mut target = mover.to_world(mover.to_local(o, &p0), &p1);
            if hit && p0.rotation != p1.rotation {
                // ...but a turning mover sweeps the far side of the player faster than
                // its centre: come back along the sweep until just clear of it.
                let d = (target - o).normalize_or_zero();
                let out = target + d * hull.bounds().size().length();
                let back = mover.sweep(i as u32, hull, out, o, &p1, t);
                if back.hit.is_some() {
                    target = back.end;
                }
            }
            let to = sim.map.sweep(hull, o, target, Contents::PLAYER, t).end;
            if hit && mover.overlaps(hull, to, &p1, t) {
                blocked = true;
                break;
            }
            let mut np = *p;
            np.origin = PlayerState::at(to).origin;
            if mover.overlaps(hull, np.origin(), &p1, t)
                || sim
                    .map
                    .position_solid(hull, np.origin(), Contents::PLAYER, t)
            {
                np.origin = p.origin;
                if hit {
                    blocked = true;
                    break;
                }
            }
            moves.push((k, np));
        }
        if blocked {
            world.movers[i] = mover.blocked(&now);
            continue;
        }
        for (k, np) in moves {
            let b = &mut bodies[k];
            b.state = np;
            b.origin = np.origin();
            b.bounds = sim.movement.player_box(&np);
            pushed = true;
        }
        world.movers[i] = next;
    }
    if pushed {
        for (slot, b) in world.players.values_mut().zip(&bodies) {
            slot.state = b.state;
        }
    }
    s.bodies = bodies;
}

/// A player as the movers see it in one tick (in id order, as `world.players`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Body {
    state: PlayerState,
    origin: DVec3,
    bounds: Aabb,
}
