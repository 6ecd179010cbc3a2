//! How a game entity ended, told with the snapshots: its last place, its last tick and
//! why (what it hit, expired, removed by the rules, left the map), and, to a client whose
//! baseline never held it, how it started. A rocket fired point-blank lives a tick; a
//! client sent a snapshot every other tick would otherwise never hear of it (Quake 3 sends
//! such things as temporary entities with the snapshot for the same reason). Each
//! snapshot carries every end since the baseline it was written against, so an end is
//! sent again until a snapshot that held it is acknowledged: a lost snapshot loses none.
//!
//! A client takes each end once, however often it comes; the server keeps those of the
//! last few seconds for the snapshots
//! ([`ENDS_KEPT_TICKS`](crate::snapshot::ENDS_KEPT_TICKS)).

use expel_core::sim::{EntityId, PlayerId, Struck};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Why a game entity ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndCause {
    /// It hit something (the rules removed it the tick after its impact).
    Impact(Struck),
    /// Its time ran out (the rules said so: [`Game::expire`]).
    ///
    /// [`Game::expire`]: crate::server::Game::expire
    Expired,
    /// The rules removed it for their own reasons.
    Removed,
    /// It left the map.
    Lost,
}

/// How an entity started, for a client that never had it in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityStart {
    /// What it was, in the game's numbering.
    pub kind: u16,
    /// Whose it was.
    pub owner: Option<PlayerId>,
    /// The tick it was spawned for (its first step).
    pub born: u64,
    /// Where it was spawned, in 1/[`POSITION_SCALE`](expel_core::movement::POSITION_SCALE)
    /// units.
    pub from: [i32; 3],
}

/// A game entity's end, as a snapshot tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityEnd {
    /// The entity.
    pub id: EntityId,
    /// The last tick it stood in the world: a snapshot of this tick shows it at `at`, one
    /// of the next no longer.
    pub tick: u64,
    /// Where it stood then, in 1/[`POSITION_SCALE`](expel_core::movement::POSITION_SCALE)
    /// units.
    pub at: [i32; 3],
    /// Why it ended.
    pub cause: EndCause,
    /// How it started: sent when the snapshot's baseline did not hold the entity.
    pub start: Option<EntityStart>,
}

impl EntityEnd {
    /// Where it ended, units.
    pub fn at(&self) -> glam::DVec3 {
        expel_core::movement::from_grid(self.at, expel_core::movement::POSITION_SCALE)
    }
}

/// An end as a snapshot datagram carries it: its ticks as gaps back from the snapshot's
/// (a byte each), its places to the unit, where it ended as its offset from a place both
/// ends know (where it started, when the start is sent; else where the baseline, carried
/// on to the snapshot's tick, has it: the snapshot is written against that baseline).
/// A rocket's end costs about 8 bytes, with its start about 19. See [`EntityEnd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEnd {
    id: EntityId,
    /// The snapshot's tick less the end's.
    ago: u64,
    /// Where it ended less the place both ends know, units.
    at: [i32; 3],
    cause: EndCause,
    /// The start: its `born` as the end's tick less it, `from` in units.
    start: Option<EntityStart>,
}

/// Units from a place in 1/[`POSITION_SCALE`](expel_core::movement::POSITION_SCALE) units,
/// rounded (ends are told to the unit).
fn units(p: [i32; 3]) -> [i32; 3] {
    p.map(|v| ((i64::from(v) + 128).div_euclid(256)) as i32)
}

/// A place to the unit, in 1/256 units (`None` out of range).
fn from_units(u: [i64; 3]) -> Option<[i32; 3]> {
    let one = |v: i64| i32::try_from(v.checked_mul(256)?).ok();
    Some([one(u[0])?, one(u[1])?, one(u[2])?])
}

impl EntityEnd {
    /// The end as told: its places to the unit.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
    pub(crate) fn rounded(mut self) -> EntityEnd {
        let round = |p: [i32; 3]| from_units(units(p).map(i64::from)).unwrap_or(p);
        self.at = round(self.at);
        if let Some(s) = self.start.as_mut() {
            s.from = round(s.from);
        }
        self
    }
}

impl WireEnd {
    /// `end` (its places to the unit) as a snapshot of `tick` carries it; `held` is where
    /// the snapshot's baseline has the entity, which the receiver has too (needed when
    /// the start is not sent).
    pub fn of(end: &EntityEnd, tick: u64, held: Option<[i32; 3]>) -> WireEnd {
        let known = end.start.map(|s| s.from).or(held).unwrap_or([0; 3]);
        let (at, known) = (units(end.at), units(known));
        WireEnd {
            id: end.id,
            ago: tick.saturating_sub(end.tick),
            at: [0, 1, 2].map(|k| at[k].wrapping_sub(known[k])),
            cause: end.cause,
            start: end.start.map(|s| EntityStart {
                born: end.tick.saturating_sub(s.born),
                from: units(s.from),
                ..s
            }),
        }
    }

    /// The entity it ends.
    pub fn id(&self) -> EntityId {
        self.id
    }

    /// The end a snapshot of `tick` told, given where its baseline has the entity
    /// (`held`); `None` for ticks before tick 1, places out of range, or an end of an
    /// entity the baseline lacks sent without its start.
    pub fn end(&self, tick: u64, held: Option<[i32; 3]>) -> Option<EntityEnd> {
        let t = tick.checked_sub(self.ago).filter(|t| *t > 0)?;
        let start = match self.start {
            Some(s) => Some(EntityStart {
                born: t.checked_sub(s.born).filter(|b| *b > 0)?,
                from: from_units(s.from.map(i64::from))?,
                ..s
            }),
            None => None,
        };
        let known = units(start.map(|s| s.from).or(held)?);
        let at = from_units([0, 1, 2].map(|k| i64::from(known[k]) + i64::from(self.at[k])))?;
        Some(EntityEnd {
            id: self.id,
            tick: t,
            at,
            cause: self.cause,
            start,
        })
    }
}

/// Ends a client keeps to take each once: more than any snapshot repeats.
const SEEN_KEPT: usize = 512;

/// The ends a client took, so each is told to the game once however often it comes.
#[derive(Debug, Default)]
pub(crate) struct EndsSeen {
    seen: BTreeMap<(EntityId, u64), ()>,
    order: VecDeque<(EntityId, u64)>,
}

impl EndsSeen {
    /// Whether `end` is new (and from now on, not).
    pub(crate) fn first(&mut self, end: &EntityEnd) -> bool {
        let key = (end.id, end.tick);
        if self.seen.insert(key, ()).is_some() {
            return false;
        }
        self.order.push_back(key);
        while self.order.len() > SEEN_KEPT {
            if let Some(k) = self.order.pop_front() {
                self.seen.remove(&k);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(id: EntityId, tick: u64) -> EntityEnd {
        EntityEnd {
            id,
            tick,
            at: [256, 0, 0],
            cause: EndCause::Impact(Struck::World),
            start: None,
        }
    }

    fn start(born: u64) -> EntityStart {
        EntityStart {
            kind: 1,
            owner: Some(PlayerId(3)),
            born,
            from: [0; 3],
        }
    }

    #[test]
    fn a_wire_end_reads_back_to_the_unit_and_refuses_what_it_cannot_place() {
        let mut e = end(EntityId(5), 100);
        e.at = [256 * 700 + 100, -256 * 3 - 200, 5];
        e.start = Some(start(99));
        let told = e.rounded();
        assert_eq!(told.at, [256 * 700, -256 * 4, 0]);
        let w = WireEnd::of(&told, 104, None);
        assert_eq!(w.end(104, None), Some(told));
        assert_eq!(w.end(3, None), None, "before tick 1");
        let mut far = w;
        far.start = Some(start(1000));
        assert_eq!(far.end(104, None), None, "born before tick 1");
        // Without its start, it is placed from where the baseline has it.
        let bare = EntityEnd {
            start: None,
            ..told
        };
        let held = [256 * 690, 0, 0];
        let w = WireEnd::of(&bare, 104, Some(held));
        assert_eq!(
            w.at,
            [10, -4, 0],
            "a few units from the baseline: a byte each"
        );
        assert_eq!(w.end(104, Some(held)), Some(bare));
        assert_eq!(w.end(104, None), None, "nothing to place it from");
        let mut wild = w;
        wild.at = [i32::MAX, 0, 0];
        assert_eq!(wild.end(104, Some(held)), None, "out of range");
    }

    #[test]
    fn each_end_is_taken_once_in_bounded_memory() {
        let mut seen = EndsSeen::default();
        let e = end(EntityId(1), 10);
        assert!(seen.first(&e));
        assert!(!seen.first(&e));
        for i in 0..10_000 {
            seen.first(&end(EntityId(100 + i), 10));
        }
        assert!(seen.seen.len() <= SEEN_KEPT && seen.order.len() <= SEEN_KEPT);
    }
}
