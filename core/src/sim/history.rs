//! The players' past, for shots judged as the shooter saw them (lag compensation). A
//! client draws the others between two snapshots it received, a few ticks behind the
//! newest; [`History`] keeps where every player stood each tick for a little over a
//! second, so the server can put each player's box back where that client drew it
//! ([`History::boxes_of`]) and trace a shot against those boxes and the map as it is.
//! Nothing in the world moves: a rewind is a query over the history.
//!
//! Movers are not kept: a client predicts them in the present, like its own player, so a
//! shot meets a platform where it stands at the shot's own tick, which is where the
//! shooter saw it.

use super::{PlayerBox, PlayerId, Sim, WorldState};
use crate::movement::{flags, from_grid, MoveMode, PlayerState, POSITION_SCALE};
use glam::DVec3;
use std::collections::VecDeque;

/// Farther than this (units) between two snapshots, a player jumped (a teleport, a
/// respawn): it is drawn at one place or the other, never swept across the map between.
/// A player running or falling covers a few tens of units between snapshots.
pub const SNAP_DISTANCE: f64 = 256.0;

/// Where an interpolating client draws a player that stood at `a` and then at `b`, `k`
/// of the way between the two snapshots (0 to 1): on the line, or at the nearer end of a
/// jump past [`SNAP_DISTANCE`]. The client's drawing and the server's rewind both use it,
/// so they agree to the bit.
pub fn between(a: DVec3, b: DVec3, k: f64) -> DVec3 {
    if (b - a).length() > SNAP_DISTANCE {
        if k < 0.5 {
            a
        } else {
            b
        }
    } else {
        a + (b - a) * k
    }
}

/// The moment a client drew the others at: between its snapshots of ticks `from` and
/// `to`, `k`/255 of the way (`from == to`: held at one snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShotView {
    /// The older snapshot's tick.
    pub from: u64,
    /// The newer snapshot's tick.
    pub to: u64,
    /// How far from `from` to `to`, in 255ths.
    pub k: u8,
}

impl ShotView {
    /// Held at snapshot `tick`.
    pub fn at(tick: u64) -> ShotView {
        ShotView {
            from: tick,
            to: tick,
            k: 0,
        }
    }

    /// The fraction of the way from `from` to `to`.
    pub fn fraction(&self) -> f64 {
        f64::from(self.k) / 255.0
    }

    /// The (fractional) server tick it shows.
    pub fn tick(&self) -> f64 {
        let span = self.to.saturating_sub(self.from) as f64;
        self.from as f64 + span * self.fraction()
    }
}

/// The box of a player that stood as `p` and then as `q` (if it was still there), drawn
/// `k` of the way between: on the line by [`between`], crouched as at the nearer one;
/// none if it had no box at the first.
fn drawn_box(sim: &Sim, p: &Past, q: Option<&Past>, k: f64) -> Option<PlayerBox> {
    if p.bits & SOLID == 0 {
        return None;
    }
    let pa = from_grid(p.origin, POSITION_SCALE);
    let (at, bits) = match q {
        Some(q) => {
            let pb = from_grid(q.origin, POSITION_SCALE);
            (between(pa, pb, k), if k < 0.5 { p.bits } else { q.bits })
        }
        None => (pa, p.bits),
    };
    let movement = sim.movement();
    let hull = if bits & CROUCHED != 0 {
        movement.crouch()
    } else {
        movement.stand()
    };
    Some(PlayerBox {
        id: p.id,
        bounds: hull.bounds().offset(at),
    })
}

/// A player as a tick left it: where it stood, crouched, and whether it has a box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Past {
    id: PlayerId,
    origin: [i32; 3],
    /// [`CROUCHED`] and [`SOLID`].
    bits: u8,
}

impl Past {
    fn of(id: PlayerId, s: &PlayerState) -> Past {
        let solid = matches!(s.mode, MoveMode::Walk | MoveMode::Frozen);
        Past {
            id,
            origin: s.origin,
            bits: (u8::from(s.flags & flags::CROUCHED != 0) * CROUCHED) | (u8::from(solid) * SOLID),
        }
    }
}

/// The box a client drew player `id` with, when its snapshots showed it as `a` and then
/// as `b` (if still there), `k` of the way between: what [`History::boxes_of`] puts back
/// from the server's own record, here from the states a client was sent.
pub fn drawn_between(
    sim: &Sim,
    id: PlayerId,
    a: &PlayerState,
    b: Option<&PlayerState>,
    k: f64,
) -> Option<PlayerBox> {
    let q = b.map(|b| Past::of(id, b));
    drawn_box(sim, &Past::of(id, a), q.as_ref(), k)
}

const CROUCHED: u8 = 1;
/// Walking or frozen: it has a box shots meet.
const SOLID: u8 = 2;

/// Bytes one player's tick of history holds.
pub const HISTORY_BYTES_PER_PLAYER_TICK: usize = std::mem::size_of::<Past>();

/// Every player's place, tick by tick, for the last second and a little more.
#[derive(Debug, Default)]
pub struct History {
    /// Each tick's players in id order, oldest tick first.
    ticks: VecDeque<(u64, Vec<Past>)>,
    keep: usize,
}

impl History {
    /// Keeps a little over one second at `tick_rate` (a quarter more: the slack a view's
    /// check allows).
    pub fn for_rate(tick_rate: u32) -> History {
        History {
            ticks: VecDeque::new(),
            keep: (tick_rate as usize + tick_rate as usize / 4).max(2),
        }
    }

    /// Ticks kept at most.
    pub fn capacity(&self) -> usize {
        self.keep
    }

    /// Records the world as its tick left it.
    pub fn record(&mut self, world: &WorldState) {
        let mut players = if self.ticks.len() >= self.keep {
            self.ticks.pop_front().map(|t| t.1).unwrap_or_default()
        } else {
            Vec::new()
        };
        players.clear();
        players.extend(world.players.iter().map(|(id, p)| Past::of(*id, &p.state)));
        self.ticks.push_back((world.tick, players));
    }

    /// The oldest and newest ticks held.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.ticks.front()?.0, self.ticks.back()?.0))
    }

    /// Bytes the history holds now (its players' ticks).
    pub fn bytes(&self) -> usize {
        self.ticks
            .iter()
            .map(|(_, p)| p.capacity() * HISTORY_BYTES_PER_PLAYER_TICK)
            .sum()
    }

    fn tick(&self, tick: u64) -> Option<&[Past]> {
        let first = self.ticks.front()?.0;
        let i = usize::try_from(tick.checked_sub(first)?).ok()?;
        let (t, p) = self.ticks.get(i)?;
        (*t == tick).then_some(p.as_slice())
    }

    /// Whether tick `tick` is held.
    pub fn holds(&self, tick: u64) -> bool {
        self.tick(tick).is_some()
    }

    /// Where player `id` stood after tick `tick` (on the grid), while that tick is held.
    pub fn origin_of(&self, tick: u64, id: PlayerId) -> Option<[i32; 3]> {
        let t = self.tick(tick)?;
        let i = t.binary_search_by_key(&id, |p| p.id).ok()?;
        Some(t[i].origin)
    }

    /// Into `out`, the boxes of the players `ids` (in id order) as a client drew them at
    /// `view`: each between its places of the view's two ticks by [`between`], crouched
    /// as at the nearer one; one absent at `to` held where it stood at `from`; one without
    /// a box at `from` left out. False, and `out` empty, when a tick is not held.
    pub fn boxes_of(
        &self,
        sim: &Sim,
        view: &ShotView,
        ids: &[PlayerId],
        out: &mut Vec<PlayerBox>,
    ) -> bool {
        out.clear();
        let (Some(a), Some(b)) = (self.tick(view.from), self.tick(view.to)) else {
            return false;
        };
        // `ids` in order: each search starts past the last one found; a player stands at
        // the same index of the next tick's list unless someone joined or left between.
        let mut from = 0;
        for id in ids {
            let Some(rest) = a.get(from..) else {
                break;
            };
            let Ok(i) = rest.binary_search_by_key(id, |p| p.id) else {
                continue;
            };
            let i = from + i;
            from = i + 1;
            let q = match b.get(i) {
                Some(q) if q.id == *id => Some(q),
                _ => b.binary_search_by_key(id, |p| p.id).ok().map(|j| &b[j]),
            };
            out.extend(drawn_box(sim, &a[i], q, view.fraction()));
        }
        true
    }

    /// The first player, among those not in `skip` (in id order), whose box at four ticks
    /// across `then` to `now` the segment from `start` to `end` crosses, the map aside:
    /// what a shot aims at, whenever in that span the aimer learned of it.
    pub fn first_crossed(
        &self,
        sim: &Sim,
        (then, now): (u64, u64),
        skip: &[PlayerId],
        (start, end): (DVec3, DVec3),
    ) -> Option<PlayerId> {
        // Four ticks across the span: a place leaked to a cheat is some of that old, and
        // a strafing player's ends of the span miss where it went between.
        let span = now.checked_sub(then)?;
        let ticks = [then, then + span / 3, then + 2 * span / 3, now];
        let mut lists = ticks.iter().filter_map(|t| self.tick(*t)).peekable();
        lists.peek()?;
        let inv = (end - start).recip();
        let movement = sim.movement();
        let crossed = |p: &Past| {
            let hull = if p.bits & CROUCHED != 0 {
                movement.crouch()
            } else {
                movement.stand()
            };
            let bounds = hull.bounds().offset(from_grid(p.origin, POSITION_SCALE));
            // The slab test: the ray's entry and exit of the box along each axis.
            let t0 = (bounds.min - start) * inv;
            let t1 = (bounds.max - start) * inv;
            let near = t0.min(t1).max_element().max(0.0);
            let far = t0.max(t1).min_element().min(1.0);
            (near <= far).then_some(near)
        };
        lists
            .flatten()
            .filter(|p| p.bits & SOLID != 0 && skip.binary_search(&p.id).is_err())
            .filter_map(|p| crossed(p).map(|t| (t, p.id)))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, id)| id)
    }
}
