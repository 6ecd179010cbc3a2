//! The shooter's own projectiles, predicted: a rocket appears the tick its trigger is
//! pulled, not a round trip later. The game gives the client the same launch function its
//! rules use ([`Launcher`]); each tick the client predicts, it launches what its command
//! launches from its player's predicted state, and moves each flight with the core's
//! sweep against the map and the movers, exactly as the server steps entities. When a
//! snapshot shows the server's twin (the player's own entity of the same kind, spawned
//! for the same tick: [`EntityView::born`]), the flight is matched to it; from then on
//! each snapshot's position of the twin is compared with the flight's for that tick, and
//! a difference restarts the flight from the server's position, the visual error fading
//! at most [`CORRECTION_STEP`] units a tick. The flight meets the map, the movers and the
//! other players' boxes where this client draws them (a rocket is drawn stopping at the
//! player it is seen to reach, not flying through).
//!
//! When the twin ends (its end rides the snapshots: see [`ends`](super::ends)), the drawn
//! flight goes on along its path to where the server ended it, at its speed, and ends
//! there; one the prediction had already carried past that place ends where it is drawn.
//! Either way it is never drawn stepping back along its path, and the twin's interpolated
//! copy, which lags behind, is not drawn after it.

use crate::predict::Predictor;
use crate::report::client::{push_event, ClientEvent};
use crate::snapshot::{EntityView, Snapshot};
use expel_core::movement::{MoveCommand, PlayerState};
use expel_core::mover::Pose;
use expel_core::sim::{EntityId, EntityState, PlayerBox, PlayerId, Sim};
use expel_core::SimScratch;
use glam::DVec3;
use std::collections::BTreeMap;

/// Most flights kept at once (a launcher gone wild is cut here, not in memory).
pub const MAX_FLIGHTS: usize = 64;
/// Ticks either side of a flight's own within which a twin's spawn tick still matches
/// (the server applied the command a little off, and repeated it).
const MATCH_TICKS: u64 = 2;
/// Most a drawn projectile is moved a tick to take away a correction's error, units.
pub const CORRECTION_STEP: f64 = 4.0;
/// Fraction of a correction's error taken away each tick (within [`CORRECTION_STEP`]).
const SMOOTHING: f64 = 0.25;
/// How near (units, along its way) a drawn flight must be to the server's end to have
/// arrived there rather than gone past it (ends are told to the unit).
const ARRIVED: f64 = 1.0;
/// Ticks a flight's path is kept behind the newest predicted tick.
const KEEP_TICKS: u64 = 256;

/// What a game launches with its own commands, the same function on the server's rules'
/// side and on the client's: the client calls it once for each tick it predicts, with its
/// player's predicted state before that tick and the command for it, as the rules see
/// them when they run before the tick is stepped.
pub trait Launcher: Send + Sync {
    /// Pushes onto `out` what `player`'s command `cmd` for `tick` launches, given its
    /// state `before` the tick.
    fn launch(
        &mut self,
        sim: &Sim,
        tick: u64,
        player: PlayerId,
        before: &PlayerState,
        cmd: &MoveCommand,
        out: &mut Vec<EntityState>,
    );
}

/// How the predicted projectiles fared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaunchStats {
    /// Flights launched.
    pub launched: u64,
    /// Those the server's twin matched.
    pub matched: u64,
    /// Those the server never launched (dropped).
    pub missed: u64,
    /// Snapshots whose twin stood elsewhere than the flight had it for that tick.
    pub corrections: u64,
    /// The largest such difference, units.
    pub max_correction: f64,
    /// The largest difference between the flight and its twin at the first snapshot
    /// that matched it, units.
    pub max_match_error: f64,
    /// Flights whose twin's end came.
    pub ended: u64,
    /// Of those, flights the prediction had carried past the server's end when it came
    /// (ended where they were drawn).
    pub overshot: u64,
    /// The farthest past the server's end such a flight was drawn, units.
    pub max_overshoot: f64,
}

/// One predicted projectile.
#[derive(Clone, Debug)]
struct Flight {
    local: u32,
    /// The tick of the command that launched it (its first step).
    born: u64,
    kind: u16,
    twin: Option<EntityId>,
    /// The entity after each tick from `born` on.
    path: BTreeMap<u64, EntityState>,
    /// What is left of the last correction, fading.
    error: DVec3,
    /// Where the server ended the twin; the drawn flight goes on to it from `drawn`.
    end: Option<DVec3>,
    /// Where it was drawn last.
    drawn: DVec3,
    /// The way its path went last (at launch, the launch's), and its speed at launch
    /// (units a tick).
    way: DVec3,
    step: f64,
    /// It reached its end: drawn there once more, then gone.
    done: bool,
}

/// A predicted projectile as a game draws it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrawnLaunch {
    /// The client's own number for it (see [`ClientEvent::LaunchMatched`]).
    pub local: u32,
    /// The server's entity it was matched to, once it was.
    pub twin: Option<EntityId>,
    /// Where to draw it: the prediction at the newest tick, plus the fading error.
    pub origin: DVec3,
    /// The entity as predicted at the newest tick.
    pub entity: EntityState,
}

/// Twins of ended flights remembered, whose interpolated copies are not drawn.
const ENDED_KEPT: usize = 64;

/// The predicted projectiles of a client.
#[derive(Default)]
pub(crate) struct Launched {
    /// Twins whose flights ended, newest last: their interpolated copies lag behind the
    /// flight, and drawing them would fly the projectile a second time.
    pub(crate) ended: std::collections::VecDeque<EntityId>,
    pub(crate) launcher: Option<Box<dyn Launcher>>,
    flights: Vec<Flight>,
    next_local: u32,
    scratch: SimScratch,
    poses: Vec<Pose>,
    out: Vec<EntityState>,
    pub(crate) stats: LaunchStats,
}

impl Launched {
    /// Tick `t` was predicted with `cmd` from `before`, the others drawn as `players`:
    /// launches what it launches and moves every flight through it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tick(
        &mut self,
        sim: &Sim,
        predictor: &Predictor,
        t: u64,
        before: Option<&PlayerState>,
        cmd: &MoveCommand,
        players: &[PlayerBox],
        events: &mut std::collections::VecDeque<ClientEvent>,
    ) {
        let (Some(launcher), Some(before)) = (self.launcher.as_mut(), before) else {
            return;
        };
        let Some(movers) = predictor.movers_after(t) else {
            return;
        };
        sim.poses(movers, &mut self.poses);
        self.out.clear();
        launcher.launch(sim, t, predictor.id(), before, cmd, &mut self.out);
        for e in self.out.drain(..) {
            if self.flights.len() >= MAX_FLIGHTS || Sim::validate_entity(EntityId(0), &e).is_err() {
                continue;
            }
            let local = self.next_local;
            self.next_local = self.next_local.wrapping_add(1);
            self.stats.launched += 1;
            let mut path = BTreeMap::new();
            path.insert(t - 1, e);
            let v = e.velocity();
            self.flights.push(Flight {
                local,
                born: t,
                kind: e.kind,
                twin: None,
                path,
                error: DVec3::ZERO,
                end: None,
                drawn: e.origin(),
                way: v.normalize_or_zero(),
                step: v.length() * sim.movement().dt(),
                done: false,
            });
            push_event(events, ClientEvent::Launched { local });
        }
        let (stats, ended) = (&mut self.stats, &mut self.ended);
        self.flights.retain_mut(|f| {
            if f.done {
                remember(ended, f.twin);
                return false;
            }
            let Some(end) = f.end else {
                return true;
            };
            // On to the server's end along the path, never back: one already past it ends
            // where it is.
            let left = (end - f.drawn).dot(f.way);
            if left <= 0.0 && left > -ARRIVED {
                // There already (a flight that stopped at the same wall).
                f.drawn = end;
                remember(ended, f.twin);
                return false;
            }
            if left <= 0.0 {
                stats.overshot += 1;
                stats.max_overshoot = stats.max_overshoot.max(-left);
                remember(ended, f.twin);
                return false;
            }
            let gap = end - f.drawn;
            if gap.length() <= f.step {
                f.drawn = end;
                f.done = true;
            } else {
                f.drawn += gap.normalize_or_zero() * f.step;
            }
            true
        });
        for f in &mut self.flights {
            let Some((&last, &e)) = f.path.last_key_value() else {
                continue;
            };
            if last >= t || f.end.is_some() {
                continue;
            }
            let id = f.twin.unwrap_or(EntityId(0));
            let next = sim.entity_tick(id, &e, &self.poses, players, &mut self.scratch);
            f.path.insert(t, next.entity);
            while f.path.len() > 1
                && f.path
                    .first_key_value()
                    .is_some_and(|(k, _)| k + KEEP_TICKS < t)
            {
                f.path.pop_first();
            }
            let moved = next.entity.origin() - e.origin();
            let fade = (f.error.length() * SMOOTHING).min(CORRECTION_STEP);
            f.error -= forward_fade(f.error.normalize_or_zero() * fade, moved, f.way);
            // Its way is where its path goes now (a bounce turns it).
            if let Some(way) = moved.try_normalize() {
                f.way = way;
            }
            if f.error.length() < 1e-3 {
                f.error = DVec3::ZERO;
            }
            f.drawn = next.entity.origin() + f.error;
        }
    }

    /// A snapshot came: flights meet their twins, are corrected by them, or end with
    /// them; one the server never launched is dropped.
    pub(crate) fn snapshot(
        &mut self,
        sim: &Sim,
        predictor: &Predictor,
        me: PlayerId,
        snap: &Snapshot,
        events: &mut std::collections::VecDeque<ClientEvent>,
    ) {
        if self.flights.is_empty() {
            return;
        }
        let stats = &mut self.stats;
        let (scratch, poses) = (&mut self.scratch, &mut self.poses);
        let mut taken: Vec<EntityId> = self.flights.iter().filter_map(|f| f.twin).collect();
        let ended = &mut self.ended;
        self.flights.retain_mut(|f| {
            if f.end.is_some() {
                return true;
            }
            // A twin that ended, or one that lived and ended between two snapshots.
            let end = (snap.ends.iter()).find(|e| match (f.twin, e.start) {
                (Some(id), _) => e.id == id,
                (None, Some(s)) => {
                    s.owner == Some(me)
                        && s.kind == f.kind
                        && s.born.abs_diff(f.born) <= MATCH_TICKS
                        && !taken.contains(&e.id)
                }
                (None, None) => false,
            });
            if let Some(e) = end {
                if f.twin.is_none() {
                    f.twin = Some(e.id);
                    taken.push(e.id);
                    stats.matched += 1;
                    push_event(
                        events,
                        ClientEvent::LaunchMatched {
                            local: f.local,
                            id: e.id,
                        },
                    );
                }
                stats.ended += 1;
                f.end = Some(e.at());
                return true;
            }
            let twin = match f.twin {
                Some(id) => match snap.entities.get(&id) {
                    Some(v) => (id, *v),
                    // The twin went untold (out of view): so does the flight.
                    None => {
                        remember(ended, Some(id));
                        return false;
                    }
                },
                None => {
                    let found = twin_of(f, me, snap, &taken);
                    match found {
                        Some((id, v)) => {
                            f.twin = Some(id);
                            taken.push(id);
                            stats.matched += 1;
                            push_event(events, ClientEvent::LaunchMatched { local: f.local, id });
                            if let Some(e) = f.path.get(&snap.tick) {
                                let off = e.origin().distance(v.origin());
                                stats.max_match_error = stats.max_match_error.max(off);
                            }
                            (id, v)
                        }
                        None if snap.tick >= f.born + MATCH_TICKS => {
                            stats.missed += 1;
                            push_event(events, ClientEvent::LaunchMissed { local: f.local });
                            return false;
                        }
                        None => return true,
                    }
                }
            };
            correct(f, sim, predictor, snap.tick, &twin.1, stats, scratch, poses);
            true
        });
    }

    /// Whether the game gave a launcher: its flights meet the others' boxes, which are
    /// made only for it.
    pub(crate) fn predicts(&self) -> bool {
        self.launcher.is_some()
    }

    /// The flights as drawn at the newest predicted tick.
    pub(crate) fn drawn(&self) -> impl Iterator<Item = DrawnLaunch> + '_ {
        self.flights.iter().filter_map(|f| {
            let (_, e) = f.path.last_key_value()?;
            Some(DrawnLaunch {
                local: f.local,
                twin: f.twin,
                origin: f.drawn,
                entity: *e,
            })
        })
    }
}

/// What of `fade` (taken off a drawn flight's error) leaves it moving no way but forward,
/// its path having moved `moved` this tick (launched along `way`): a flight drawn ahead of
/// its path closes on it no faster than the path moves, and not at all while the path
/// stands still (it waits at the wall for its end).
fn forward_fade(fade: DVec3, moved: DVec3, way: DVec3) -> DVec3 {
    let m = moved.length();
    let dir = if m > 1e-9 { moved / m } else { way };
    let back = fade.dot(dir);
    if back <= m {
        fade
    } else if back > 0.0 && m > 0.0 {
        fade * (m / back)
    } else {
        DVec3::ZERO
    }
}

/// Remembers that `twin`'s flight ended (its interpolated copy is drawn no more).
fn remember(ended: &mut std::collections::VecDeque<EntityId>, twin: Option<EntityId>) {
    if let Some(id) = twin {
        ended.push_back(id);
        if ended.len() > ENDED_KEPT {
            ended.pop_front();
        }
    }
}

/// The server's entity a flight is the prediction of: the player's own, of its kind,
/// spawned for its tick (or the nearest within [`MATCH_TICKS`]), not another's twin.
fn twin_of(
    f: &Flight,
    me: PlayerId,
    snap: &Snapshot,
    taken: &[EntityId],
) -> Option<(EntityId, EntityView)> {
    snap.entities
        .iter()
        .filter(|(id, v)| {
            v.owner == Some(me)
                && v.kind == f.kind
                && v.born.abs_diff(f.born) <= MATCH_TICKS
                && !taken.contains(id)
        })
        .min_by_key(|(id, v)| (v.born.abs_diff(f.born), **id))
        .map(|(id, v)| (*id, *v))
}

/// Where the twin stood at `tick` is where the flight was: a flight that had it elsewhere
/// restarts from there (with its own velocity) and flies again to the newest tick, the
/// jump left as an error that fades.
#[allow(clippy::too_many_arguments)]
fn correct(
    f: &mut Flight,
    sim: &Sim,
    predictor: &Predictor,
    tick: u64,
    twin: &EntityView,
    stats: &mut LaunchStats,
    scratch: &mut SimScratch,
    poses: &mut Vec<Pose>,
) {
    let Some(e) = f.path.get(&tick).copied() else {
        return;
    };
    if e.origin == twin.origin && e.at_rest == twin.at_rest {
        return;
    }
    stats.corrections += 1;
    stats.max_correction = stats.max_correction.max(e.origin().distance(twin.origin()));
    let Some((_, was)) = f.path.last_key_value().map(|(t, e)| (*t, e.origin())) else {
        return;
    };
    let mut now = EntityState {
        origin: twin.origin,
        at_rest: twin.at_rest,
        ..e
    };
    f.path.retain(|t, _| *t < tick);
    f.path.insert(tick, now);
    for t in tick + 1..=predictor.tick() {
        let Some(movers) = predictor.movers_after(t) else {
            break;
        };
        sim.poses(movers, poses);
        now = sim
            .entity_tick(f.twin.unwrap_or(EntityId(0)), &now, poses, &[], scratch)
            .entity;
        f.path.insert(t, now);
    }
    f.error += was - now.origin();
}
