//! The work of [`Game::shot_as_seen`](super::Game::shot_as_seen): a shot judged as its
//! shooter saw the world when it made its command (lag compensation), and counted where
//! its view or its aim could not have been an honest client's.

use super::ServerMachine;
use crate::shots::server::{SeenShot, ShotError, Unseen, AIMED_AT_COS, AIM_SLACK, BEHIND_MARGIN};
use crate::shots::server::{SHOOTER_REACH, SHOOTER_SLACK};
use expel_core::collision::hull::Hull;
use expel_core::collision::Contents;
use expel_core::sim::{PlayerId, Struck};
use glam::DVec3;

/// [`Game::shot_as_seen`] for tick `tick`'s rules.
pub(super) fn shot_as_seen(
    server: &mut ServerMachine,
    tick: u64,
    shooter: PlayerId,
    hull: &Hull,
    (start, end): (DVec3, DVec3),
) -> Result<SeenShot, ShotError> {
    let (rate, every) = (server.rate(), server.input_every());
    let s = (server.players.get_mut(&shooter)).ok_or(ShotError::NotPlaying(shooter))?;
    let claimed = (s.inputs.claimed())
        .filter(|_| s.inputs.last_applied() == tick)
        .ok_or(ShotError::NoCommand(shooter))?;
    if !s.aim.take_shot(tick) {
        server.stats.shots_over_budget += 1;
        return Err(ShotError::Budget(shooter));
    }
    let judged = (s.aim.judge(&claimed, &s.snapshots, &server.history, every))
        .ok_or(ShotError::NothingDrawn(shooter))?;
    let view = judged.view;
    // From where the shooter's client had itself after the tick before (its reported
    // prediction, as offset from where the server had it then) rather than where the
    // server has it: as it stands within SHOOTER_SLACK; farther, within SHOOTER_REACH,
    // only if its own prediction re-run makes that very place. Never through anything
    // solid.
    let grid = |o| expel_core::movement::from_grid(o, expel_core::movement::POSITION_SCALE);
    let own = (s.aim.report_near(tick.saturating_sub(1)))
        .and_then(|r| {
            let d = grid(r.state.origin) - grid(server.history.origin_of(r.tick, shooter)?);
            if d == DVec3::ZERO || d.length() > SHOOTER_REACH {
                return None;
            }
            if d.length() > SHOOTER_SLACK {
                // The movers as they stand stand in only for those the client was never
                // shown (none it reaches): a few ticks' difference changes nothing.
                let borne_out = server.replayer.own_prediction(
                    &server.sim,
                    shooter,
                    (&s.snapshots, &s.commands),
                    r.ack,
                    r.tick,
                    &r.state,
                    &server.world.movers,
                    &mut server.stats,
                ) == Some(r.state);
                if !borne_out {
                    server.stats.shot_places_refused += 1;
                    return None;
                }
                server.stats.shot_places_replayed += 1;
            }
            Some(d)
        })
        .filter(|d| {
            let (map, trace) = (server.sim.map(), &mut server.rewind.trace);
            let t = map.trace(&Hull::point(), start, start + *d, Contents::SOLID, trace);
            t.sweep.fraction >= 1.0
        });
    let (start, end) = own.map_or((start, end), |d| (start + d, end + d));
    let rewind = &mut server.rewind;
    rewind.shown.clear();
    rewind
        .shown
        .extend(s.snapshots.showed(view.from).into_iter().flatten());
    // The shooter among them (in id order): its own box is passed through, never
    // an aim at someone unseen.
    if let Err(i) = rewind.shown.binary_search(&shooter) {
        rewind.shown.insert(i, shooter);
    }
    let shown = &rewind.shown;
    let sim = &*server.sim;
    // The others where the snapshots it was sent put them (a player seen from afar is
    // sent only now and then, and drawn where its baseline carries it between), the
    // shooter where the server had it.
    s.snapshots.drawn_boxes(sim, &view, &mut rewind.boxes);
    server
        .history
        .boxes_of(sim, &view, &[shooter], &mut rewind.own);
    if let Some(own) = rewind.own.first() {
        let i = rewind.boxes.partition_point(|b| b.id < shooter);
        rewind.boxes.insert(i, *own);
    }
    sim.poses(&server.world.movers, &mut rewind.poses);
    let (_, hit) = sim.shot(
        hull,
        start,
        end,
        &rewind.poses,
        &rewind.boxes,
        Some(shooter),
        &mut server.scratch,
    );
    // Aimed through someone it was never shown (where it stood at the view, or now),
    // and at nobody it was shown (a miss of a shown player flies on past it)?
    let dir = (end - start).normalize_or_zero();
    let at_shown = (rewind.boxes.iter()).any(|b| {
        let to = (b.bounds.center() - start).normalize_or_zero();
        b.id != shooter && to.dot(dir) >= AIMED_AT_COS
    });
    let unseen = match (hit, server.history.span()) {
        (Some((Struck::Player(_), _)), _) | (_, None) => None,
        _ if at_shown => None,
        (_, Some((_, now))) => {
            (server.history).first_crossed(sim, (view.from, now), shown, (start, end))
        }
    };
    // Aimed at a player it was shown, standing behind what the shot met as its own
    // screen had them, and hidden by the map (a shot at someone in sight that clipped a
    // corner is no such aim): an aim that sees through walls.
    let behind = match hit {
        Some((Struck::World | Struck::Mover(_), h)) if unseen.is_none() => {
            let wall = (h.point - start).length() + BEHIND_MARGIN;
            let (map, trace) = (sim.map(), &mut rewind.trace);
            (rewind.boxes.iter()).find_map(|b| {
                let centre = b.bounds.center();
                let to = centre - start;
                let along = to.dot(dir);
                let half = 0.5 * (b.bounds.max - b.bounds.min).truncate().max_element();
                let off = (to - dir * along).length();
                let aimed = b.id != shooter && along > wall && off <= half + AIM_SLACK;
                let mut hidden = || {
                    let t = map.trace(&Hull::point(), start, centre, Contents::SOLID, trace);
                    t.sweep.fraction < 1.0
                };
                (aimed && hidden()).then_some(b.id)
            })
        }
        _ => None,
    };
    let stats = &mut server.stats;
    stats.shots_judged += 1;
    stats.shot_views_clamped += u64::from(judged.clamped.is_some());
    stats.shots_unseen += u64::from(unseen.is_some());
    stats.shots_behind_walls += u64::from(behind.is_some());
    let clamped = judged.clamped.as_deref();
    let why = (unseen.map(Unseen::NeverShown)).or(behind.map(Unseen::BehindWall));
    if let Some(v) = s.aim.count(tick, rate, clamped, why) {
        server.violation(shooter, &v);
    }
    Ok(SeenShot {
        hit,
        view,
        clamped: judged.clamped.is_some(),
        unseen,
    })
}
