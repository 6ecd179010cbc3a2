//! Interpolation of other players: drawn a fixed delay behind the newest snapshot,
//! between the two snapshots around that moment, so they move (and turn) smoothly however
//! snapshots arrive.

use super::{EntityView, Snapshot};
use crate::game::ends::EntityEnd;
use expel_core::movement::flags;
use expel_core::sim::history::between;
pub use expel_core::sim::history::SNAP_DISTANCE;
use expel_core::sim::ShotView;
use expel_core::{EntityId, PlayerId};
use glam::DVec3;
use std::collections::{BTreeMap, VecDeque};

/// Snapshots kept for interpolation.
const KEEP: usize = 32;

/// Another player as a game draws it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Drawn {
    /// Where it stands.
    pub origin: DVec3,
    /// Which way it faces, degrees counter-clockwise from +x seen from above (0 to 360).
    pub yaw: f64,
    /// Its pitch, degrees, positive looking down (-180 to 180).
    pub pitch: f64,
    /// Crouched (the smaller hull).
    pub crouched: bool,
}

/// An angle in a command's units, as degrees from `0` to `360`.
fn degrees(a: u16) -> f64 {
    f64::from(a) * (360.0 / 65536.0)
}

/// From `a` towards `b` (degrees) by `k`, the short way round.
fn turn(a: f64, b: f64, k: f64) -> f64 {
    let d = (b - a + 540.0).rem_euclid(360.0) - 180.0;
    (a + d * k).rem_euclid(360.0)
}

/// A game entity as a game draws it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DrawnEntity {
    /// Where it is, interpolated.
    pub origin: DVec3,
    /// Everything else about it, from the nearer snapshot.
    pub view: EntityView,
}

/// Other players and the game's entities over recent snapshots.
#[derive(Debug, Default)]
pub struct Interpolator {
    frames: VecDeque<(u64, BTreeMap<PlayerId, Drawn>)>,
    /// The entities of the same snapshots, in the same order.
    entities: VecDeque<BTreeMap<EntityId, EntityView>>,
    /// The players' teleports' counts of the same snapshots.
    leaps: VecDeque<BTreeMap<PlayerId, u8>>,
    /// The entities' ends lately told, by id: each is drawn to its end, and no further.
    ends: BTreeMap<EntityId, EntityEnd>,
}

/// Ends kept for drawing at most (the oldest go first).
const ENDS_DRAWN: usize = 256;

impl Interpolator {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a snapshot's other players (older than the newest: ignored).
    pub fn push(&mut self, snap: &Snapshot) {
        if self.frames.back().is_some_and(|(t, _)| *t >= snap.tick) {
            return;
        }
        let drawn = snap
            .players
            .iter()
            .map(|(id, p)| {
                let [yaw, pitch] = snap.facing.get(id).copied().unwrap_or_default();
                let pitch = degrees(pitch);
                let d = Drawn {
                    origin: p.origin(),
                    yaw: degrees(yaw),
                    pitch: if pitch > 180.0 { pitch - 360.0 } else { pitch },
                    crouched: p.flags & flags::CROUCHED != 0,
                };
                (*id, d)
            })
            .collect();
        self.frames.push_back((snap.tick, drawn));
        self.entities.push_back(snap.entities.clone());
        self.leaps.push_back(snap.leaps.clone());
        while self.frames.len() > KEEP {
            self.frames.pop_front();
            self.entities.pop_front();
            self.leaps.pop_front();
        }
        for e in &snap.ends {
            self.ends.entry(e.id).or_insert(*e);
        }
        // Ends older than every snapshot kept are drawn by nobody.
        let oldest = self.frames.front().map_or(0, |f| f.0);
        self.ends.retain(|_, e| e.tick + 1 >= oldest);
        while self.ends.len() > ENDS_DRAWN {
            let first = self
                .ends
                .values()
                .min_by_key(|e| (e.tick, e.id))
                .map(|e| e.id);
            first.map(|id| self.ends.remove(&id));
        }
    }

    /// The entities that ended, drawn at (fractional) server tick `at`: each goes on from
    /// where the last snapshot that showed it had it to where it ended, reaching it at its
    /// end's tick, and is drawn no more after (a brief one, never shown, from where it
    /// started, the tick before its first step). Before that last snapshot's tick the
    /// snapshots draw it: an end that comes later changes nothing already drawn.
    fn draw_ends(&self, at: f64, drawn: &mut BTreeMap<EntityId, DrawnEntity>) {
        for (id, e) in &self.ends {
            if at >= e.tick as f64 {
                drawn.remove(id);
                continue;
            }
            // The last snapshot that showed it: before it, the snapshots draw it.
            let last = (self.frames.iter().zip(&self.entities))
                .rev()
                .find_map(|((t, _), m)| m.get(id).map(|v| (*t, v.origin(), *v)));
            if last.is_some_and(|(t, ..)| at < t as f64) {
                continue;
            }
            let start = (e.start).map(|s| (s.born.saturating_sub(1), EntityView::from(s)));
            let start = start.map(|(t, v)| (t, v.origin(), v));
            let Some((t0, from, view)) = last.or(start) else {
                continue;
            };
            if (t0 as f64) > at {
                continue;
            }
            let span = e.tick.saturating_sub(t0) as f64;
            let k = if span > 0.0 {
                ((at - t0 as f64) / span).clamp(0.0, 1.0)
            } else {
                1.0
            };
            let to = e.at();
            let origin = if (to - from).length() > SNAP_DISTANCE {
                from
            } else {
                from + (to - from) * k
            };
            drawn.insert(*id, DrawnEntity { origin, view });
        }
    }

    /// The game's entities at (fractional) server tick `at`, interpolated between the
    /// snapshots around it like players (a jump past [`SNAP_DISTANCE`] is not swept;
    /// one in only one of the two is drawn from the one it is in, if nearer). One that
    /// ended is drawn on to where it ended, until its end's tick, however briefly it
    /// lived.
    pub fn entities(&self, at: f64) -> BTreeMap<EntityId, DrawnEntity> {
        let mut drawn = self.entities_shown(at);
        self.draw_ends(at, &mut drawn);
        drawn
    }

    /// [`Interpolator::entities`] from the snapshots' entities alone.
    fn entities_shown(&self, at: f64) -> BTreeMap<EntityId, DrawnEntity> {
        let whole = |m: &BTreeMap<EntityId, EntityView>| {
            m.iter()
                .map(|(id, v)| {
                    let d = DrawnEntity {
                        origin: v.origin(),
                        view: *v,
                    };
                    (*id, d)
                })
                .collect()
        };
        let Some(i) = self.frames.iter().position(|(t, _)| *t as f64 > at) else {
            return self.entities.back().map(whole).unwrap_or_default();
        };
        if i == 0 {
            return whole(&self.entities[0]);
        }
        let (t0, t1) = (self.frames[i - 1].0, self.frames[i].0);
        let (a, b) = (&self.entities[i - 1], &self.entities[i]);
        let k = ((at - t0 as f64) / (t1 - t0) as f64).clamp(0.0, 1.0);
        a.iter()
            .filter_map(|(id, p)| {
                let d = match b.get(id) {
                    // Gone by the next snapshot: drawn until halfway there.
                    None if k >= 0.5 => return None,
                    None => DrawnEntity {
                        origin: p.origin(),
                        view: *p,
                    },
                    Some(q) => {
                        let (po, qo) = (p.origin(), q.origin());
                        let jump = (qo - po).length() > SNAP_DISTANCE;
                        let near = if k < 0.5 { p } else { q };
                        DrawnEntity {
                            origin: if jump {
                                near.origin()
                            } else {
                                po + (qo - po) * k
                            },
                            view: *near,
                        }
                    }
                };
                Some((*id, d))
            })
            .chain(
                b.iter()
                    .filter(|(id, _)| k >= 0.5 && !a.contains_key(id))
                    .map(|(id, q)| {
                        let d = DrawnEntity {
                            origin: q.origin(),
                            view: *q,
                        };
                        (*id, d)
                    }),
            )
            .collect()
    }

    /// Positions at (fractional) server tick `at` (see [`Interpolator::drawn`]).
    pub fn at(&self, at: f64) -> BTreeMap<PlayerId, DVec3> {
        (self.drawn(at).into_iter())
            .map(|(id, d)| (id, d.origin))
            .collect()
    }

    /// The snapshots around (fractional) server tick `at` and how far between them
    /// (the oldest, or the newest, alone outside their span).
    fn around(&self, at: f64) -> Option<(usize, usize, f64)> {
        let i = match self.frames.iter().position(|(t, _)| *t as f64 > at) {
            None => {
                let n = self.frames.len().checked_sub(1)?;
                return Some((n, n, 0.0));
            }
            Some(0) => return Some((0, 0, 0.0)),
            Some(i) => i,
        };
        let (t0, t1) = (self.frames[i - 1].0, self.frames[i].0);
        let k = ((at - t0 as f64) / (t1 - t0) as f64).clamp(0.0, 1.0);
        Some((i - 1, i, k))
    }

    /// The view the others are drawn at at (fractional) server tick `at`: the two
    /// snapshots and the fraction between, as a shot claims it (see
    /// [`Interpolator::drawn_view`]).
    pub fn view(&self, at: f64) -> Option<ShotView> {
        let (i, j, k) = self.around(at)?;
        Some(ShotView {
            from: self.frames[i].0,
            to: self.frames[j].0,
            k: (k * 255.0).round() as u8,
        })
    }

    /// The players as drawn at `view` exactly (the server's rewind of a shot puts their
    /// boxes there); empty when its snapshots are no longer held.
    pub fn drawn_view(&self, view: &ShotView) -> BTreeMap<PlayerId, Drawn> {
        let find = |t: u64| self.frames.iter().position(|(f, _)| *f == t);
        match (find(view.from), find(view.to)) {
            (Some(i), Some(j)) => self.drawn_between(i, j, view.fraction()),
            _ => BTreeMap::new(),
        }
    }

    /// The players at (fractional) server tick `at`: interpolated between the snapshots
    /// around it (angles the short way round; crouch and a jump past [`SNAP_DISTANCE`]
    /// taken from the nearer one), held at the nearest one outside their span.
    pub fn drawn(&self, at: f64) -> BTreeMap<PlayerId, Drawn> {
        self.around(at)
            .map(|(i, j, k)| self.drawn_between(i, j, k))
            .unwrap_or_default()
    }

    /// The players of snapshot `i` as drawn `k` of the way to snapshot `j`'s. One that
    /// teleported between them is drawn at one or the other (see [`leapt`]).
    fn drawn_between(&self, i: usize, j: usize, k: f64) -> BTreeMap<PlayerId, Drawn> {
        let (a, b) = (&self.frames[i].1, &self.frames[j].1);
        let (la, lb) = (&self.leaps[i], &self.leaps[j]);
        a.iter()
            .map(|(id, p)| {
                let d = match b.get(id) {
                    None => *p,
                    Some(q) => {
                        let k = leapt(la.get(id), lb.get(id), k);
                        let near = if k < 0.5 { p } else { q };
                        if (q.origin - p.origin).length() > SNAP_DISTANCE {
                            *near
                        } else {
                            Drawn {
                                origin: between(p.origin, q.origin, k),
                                yaw: turn(p.yaw, q.yaw, k),
                                pitch: p.pitch + (q.pitch - p.pitch) * k,
                                crouched: near.crouched,
                            }
                        }
                    }
                };
                (*id, d)
            })
            .collect()
    }
}

/// The fraction a player is drawn at between two snapshots whose teleports' counts for it
/// are `a` and `b`, `k` of the way: `k`, or, when it teleported between them, the nearer
/// snapshot's end (0 or 1), so it is drawn at one place or the other and never between.
/// The server's rewind of a shot draws it the same way
/// ([`SnapshotEncoder::drawn_boxes`](super::SnapshotEncoder::drawn_boxes)).
pub fn leapt(a: Option<&u8>, b: Option<&u8>, k: f64) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) if a != b => {
            if k < 0.5 {
                0.0
            } else {
                1.0
            }
        }
        _ => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expel_core::PlayerState;

    fn snap(tick: u64, x: f64) -> Snapshot {
        let mut players = BTreeMap::new();
        players.insert(PlayerId(7), PlayerState::at(DVec3::new(x, 0.0, 0.0)));
        Snapshot {
            tick,
            feedback: Default::default(),
            own: PlayerState::default(),
            players,
            facing: BTreeMap::new(),
            entities: BTreeMap::new(),
            player_states: BTreeMap::new(),
            entity_states: BTreeMap::new(),
            movers: BTreeMap::new(),
            ends: Vec::new(),
            leaps: BTreeMap::new(),
            own_leaps: 0,
        }
    }

    #[test]
    fn interpolates_between_snapshots_and_holds_outside_them() {
        let mut i = Interpolator::new();
        i.push(&snap(10, 0.0));
        i.push(&snap(12, 20.0));
        i.push(&snap(11, 99.0)); // late: ignored
        assert_eq!(i.at(11.0)[&PlayerId(7)].x, 10.0);
        assert_eq!(i.at(11.5)[&PlayerId(7)].x, 15.0);
        assert_eq!(i.at(5.0)[&PlayerId(7)].x, 0.0);
        assert_eq!(i.at(30.0)[&PlayerId(7)].x, 20.0);
    }

    /// A snapshot of player 7 at `x`, facing `yaw` degrees, maybe crouched.
    fn facing(tick: u64, x: f64, yaw: f64, crouched: bool) -> Snapshot {
        let mut s = snap(tick, x);
        if crouched {
            s.players.get_mut(&PlayerId(7)).unwrap().flags |= flags::CROUCHED;
        }
        let cmd = expel_core::MoveCommand::new(0.0, 0.0, 0.0, yaw, -10.0);
        s.facing.insert(PlayerId(7), [cmd.yaw, cmd.pitch]);
        s
    }

    #[test]
    fn angles_turn_the_short_way_crouch_follows_and_a_jump_is_not_swept() {
        let mut i = Interpolator::new();
        i.push(&facing(10, 0.0, 350.0, false));
        i.push(&facing(12, 20.0, 10.0, true));
        i.push(&facing(14, 2000.0, 90.0, true));
        let half = i.drawn(11.0)[&PlayerId(7)];
        // 350 to 10 goes through 0, not back through 180.
        assert!(half.yaw < 0.01 || half.yaw > 359.99, "{half:?}");
        assert!((half.pitch + 10.0).abs() < 0.01, "{half:?}");
        assert!(half.crouched, "crouch from the nearer snapshot");
        assert!(!i.drawn(10.5)[&PlayerId(7)].crouched);
        let quarter = i.drawn(10.5)[&PlayerId(7)];
        assert!((quarter.yaw - 355.0).abs() < 0.01, "{quarter:?}");
        // 1980 units in two ticks: a teleport, drawn at one end or the other.
        assert_eq!(i.drawn(12.5)[&PlayerId(7)].origin.x, 20.0);
        assert_eq!(i.drawn(13.5)[&PlayerId(7)].origin.x, 2000.0);
    }

    #[test]
    fn an_ended_entity_is_drawn_on_to_its_end_and_no_further() {
        use crate::game::ends::{EndCause, EntityEnd, EntityStart};
        let mut i = Interpolator::new();
        let mut a = snap(10, 0.0);
        a.entities.insert(
            EntityId(4),
            EntityView {
                origin: [0, 0, 0],
                moving: true,
                ..Default::default()
            },
        );
        i.push(&a);
        // Gone by 12: it stood at x 30 at tick 11. EntityState 5 lived only tick 11.
        let mut b = snap(12, 0.0);
        let at = |x: f64| {
            expel_core::movement::quantize(
                DVec3::new(x, 0.0, 0.0),
                expel_core::movement::POSITION_SCALE,
            )
        };
        let end = |id, start| EntityEnd {
            id,
            tick: 11,
            at: at(30.0),
            cause: EndCause::Expired,
            start,
        };
        let brief = EntityStart {
            kind: 1,
            owner: None,
            born: 11,
            from: at(100.0),
        };
        b.ends = vec![end(EntityId(4), None), end(EntityId(5), Some(brief))];
        i.push(&b);
        let drawn = i.entities(10.5);
        assert!(
            (drawn[&EntityId(4)].origin.x - 15.0).abs() < 1e-9,
            "{drawn:?}"
        );
        // The brief one from where it started (the tick before its first step) to its end.
        assert!(
            (drawn[&EntityId(5)].origin.x - 65.0).abs() < 1e-9,
            "{drawn:?}"
        );
        assert!(i.entities(11.0).is_empty(), "both ended at 11");
        assert!(
            !i.entities(9.5).contains_key(&EntityId(5)),
            "not before it started"
        );
    }

    #[test]
    fn a_teleport_between_snapshots_is_drawn_at_one_end_or_the_other() {
        let mut i = Interpolator::new();
        let mut a = snap(10, 0.0);
        a.leaps.insert(PlayerId(7), 1);
        let mut b = snap(12, 100.0);
        b.leaps.insert(PlayerId(7), 2);
        i.push(&a);
        i.push(&b);
        assert_eq!(i.drawn(10.9)[&PlayerId(7)].origin.x, 0.0);
        assert_eq!(i.drawn(11.0)[&PlayerId(7)].origin.x, 100.0);
        // Without the count's change, the same 100 units are swept.
        let mut j = Interpolator::new();
        j.push(&snap(10, 0.0));
        j.push(&snap(12, 100.0));
        assert_eq!(j.drawn(11.0)[&PlayerId(7)].origin.x, 50.0);
    }
}
