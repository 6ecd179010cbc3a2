//! Snapshots: the server's per-client encoder (interest, deltas against the newest
//! acknowledged snapshot, the datagram size limit) and the client's decoder and
//! interpolation ([`interp`]).
//!
//! Every entity is a short list of integer fields (a player's origin, velocity, flags and
//! mode; a mover's progress, phase and timer; a game entity's origin, kind, owner and
//! flags). A delta carries a mask of the fields that
//! differ from the baseline and, for each, the difference (zig-zag varints in postcard, so
//! a small move costs a byte). An entity new to the baseline is sent against zero. The
//! baseline is first carried on to the snapshot's tick at each entity's pace (a
//! scene keeps each entity's last step), so an entity moving steadily costs nothing.
//!
//! A scene is what one snapshot shows: each entity's fields at its tick (and each one's
//! last step). Here: the fields and scenes both ends share. `crowd`: whom each client sees.
//! `encoder`: the server's side. `decoder`: the client's side.

use super::wire::{tick_from_gap, tick_gap};
use crate::codec::{decode, ProtocolError, MOVER_INTEREST_RADIUS};
use crate::game::ends::{EntityEnd, EntityStart, WireEnd};
pub use crate::wire::Feedback;
use crate::wire::{EntityDelta, ServerDatagram};
use expel_core::geom::Aabb;
use expel_core::movement::{MoveMode, PlayerState, POSITION_SCALE};
use expel_core::mover::{MoverState, Phase};
use expel_core::sim::history::drawn_between;
use expel_core::sim::players::{Binned, Grid};
use expel_core::sim::{EntityId, EntityState, PlayerBox, PlayerId, ShotView, Sim, WorldState};
use glam::DVec3;

use std::collections::{BTreeMap, VecDeque};

mod crowd;
mod decoder;
mod encoder;
mod ended;
mod fit;
pub mod interp;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_tests;

pub use crowd::Crowd;
use crowd::*;
use decoder::*;
pub use decoder::{Snapshot, SnapshotDecoder};
pub use encoder::{SnapshotEncoder, MAX_VIEW, VIEW_DRIFT, VIEW_REFRESH};
pub(crate) use ended::{EndLog, Ended};
pub use ended::{ENDS_KEPT, ENDS_KEPT_TICKS, ENDS_PER_SNAPSHOT};
use fit::*;
pub use fit::{Held, Room};

/// Snapshots remembered as baselines; an acknowledgement older than this gets full state.
pub const HISTORY: usize = 64;

/// Another player as a client needs it: origin, flags (crouched among them; its
/// teleports' count rides the same field above them, see [`flags_field`]), mode, and the
/// way it faces (yaw, pitch: to draw it). Its velocity is left out: prediction holds other
/// players where the snapshot shows them, and interpolation needs only positions, so
/// velocity would only cost bytes (the client's own state is exact).
const PLAYER_FIELDS: usize = 7;
const MOVER_FIELDS: usize = 3;
/// A game entity: origin, kind, owner (its id plus one; 0: none) and flags (at rest;
/// moving by itself). No velocity: a client draws entities where the snapshots put them,
/// and a new rocket's velocity was a third of its bytes (six fields also keep its mask
/// to one byte).
const ENTITY_FIELDS: usize = 7;
/// The client's own player: origin, velocity, flags (and its teleports' count) and mode,
/// all of it exact.
const OWN_FIELDS: usize = 8;
// A delta's mask has 16 bits, and its values 16 places.
const _: () = assert!(PLAYER_FIELDS <= 16 && MOVER_FIELDS <= 16 && ENTITY_FIELDS <= 16);

type PlayerFields = [i64; PLAYER_FIELDS];
type MoverFields = [i64; MOVER_FIELDS];
type EntityFields = [i64; ENTITY_FIELDS];

/// Who may see a game entity: the rules choose when they spawn it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Clients within [`ENTITY_INTEREST_RADIUS`] of it (a projectile, a pickup).
    #[default]
    Near,
    /// Every client, wherever it is (a flag, a goal).
    Everyone,
    /// Its owner's client alone (what only its holder should know of).
    Owner,
}

/// What the server keeps of an entity beside the world's: who may see it, and how it
/// started (the tick it was spawned for, where, as what, whose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spawned {
    /// Who may see it.
    pub scope: Scope,
    /// How it started: `start.born` is the tick it was spawned for (its first step).
    pub start: EntityStart,
}

/// Most bytes of the game's own state of one player or entity (its postcard encoding).
pub const MAX_STATE_BYTES: usize = 60;
/// The game's state as fields: its length, then its bytes four to a field (little
/// endian), so a delta carries the four-byte pieces that changed and nothing else.
const STATE_FIELDS: usize = 1 + MAX_STATE_BYTES / 4;
pub(crate) type StateFields = [i64; STATE_FIELDS];

/// The fields of a game state's bytes; `None` past [`MAX_STATE_BYTES`].
#[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
pub(crate) fn game_state_fields(bytes: &[u8]) -> Option<StateFields> {
    if bytes.len() > MAX_STATE_BYTES {
        return None;
    }
    let mut f = [0i64; STATE_FIELDS];
    f[0] = bytes.len() as i64;
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let mut four = [0u8; 4];
        four[..chunk.len()].copy_from_slice(chunk);
        f[1 + i] = i64::from(u32::from_le_bytes(four));
    }
    Some(f)
}

/// A state's bytes from its fields, refusing a length, a piece or padding out of range.
fn game_state_from(f: &StateFields) -> Option<Vec<u8>> {
    let len = usize::try_from(f[0])
        .ok()
        .filter(|l| *l <= MAX_STATE_BYTES)?;
    let mut out = Vec::with_capacity(len);
    for (i, v) in f[1..].iter().enumerate() {
        let four = u32::try_from(*v).ok()?.to_le_bytes();
        let keep = len.saturating_sub(i * 4).min(4);
        if four[keep..].iter().any(|b| *b != 0) {
            return None;
        }
        out.extend_from_slice(&four[..keep]);
    }
    Some(out)
}

/// How far from a client the game's [`Scope::Near`] entities are sent to it.
pub const ENTITY_INTEREST_RADIUS: f64 = 1024.0;
/// Most game entities one snapshot carries: the nearest in scope (those of
/// [`Scope::Everyone`] and [`Scope::Owner`] count as nearest of all).
pub const ENTITY_BUDGET: usize = 64;

/// A game entity as a client sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntityView {
    /// Position in 1/[`POSITION_SCALE`] units.
    pub origin: [i32; 3],
    /// What it is, in the game's numbering ([`EntityState::kind`]).
    pub kind: u16,
    /// The player it belongs to.
    pub owner: Option<PlayerId>,
    /// It stopped (and stays until the rules move or remove it).
    pub at_rest: bool,
    /// It moves by itself (a projectile).
    pub moving: bool,
    /// The tick it was spawned for (its first step), as the server's rules spawned it:
    /// what a shooter's client matches its own predicted projectile by (sent to its
    /// owner alone; 0 for others').
    pub born: u64,
}

impl From<EntityStart> for EntityView {
    /// The entity as it started (a projectile, just launched), as a snapshot would have
    /// shown it.
    fn from(s: EntityStart) -> EntityView {
        EntityView {
            origin: s.from,
            kind: s.kind,
            owner: s.owner,
            at_rest: false,
            moving: true,
            born: s.born,
        }
    }
}

impl EntityView {
    /// Position in units.
    pub fn origin(&self) -> DVec3 {
        expel_core::movement::from_grid(self.origin, POSITION_SCALE)
    }
}

fn entity_fields(e: &EntityState) -> EntityFields {
    let o = e.origin.map(i64::from);
    let flags = i64::from(e.at_rest) | i64::from(e.motion.is_some()) << 1;
    [
        o[0],
        o[1],
        o[2],
        i64::from(e.kind),
        e.owner.map_or(0, |p| i64::from(p.0) + 1),
        flags,
        // The tick it was spawned for: set with its scope (`Crowd::set_spawned`).
        0,
    ]
}

fn entity_from(f: &EntityFields) -> Option<EntityView> {
    let i = |v: i64| i32::try_from(v).ok();
    if f[5] >> 2 != 0 {
        return None;
    }
    Some(EntityView {
        origin: [i(f[0])?, i(f[1])?, i(f[2])?],
        kind: u16::try_from(f[3]).ok()?,
        owner: match f[4] {
            0 => None,
            o => Some(PlayerId(u32::try_from(o - 1).ok()?)),
        },
        at_rest: f[5] & 1 != 0,
        moving: f[5] & 2 != 0,
        born: u64::try_from(f[6]).ok()?,
    })
}

/// Bits of a facing angle dropped for others' drawing: a 256th of a turn (1.4 degrees)
/// is finer than a drawn model shows, and an aiming crowd's turns each cost a byte per
/// angle instead of two or three.
const FACING_SHIFT: u32 = 8;

/// An angle to its field: rounded to [`FACING_SHIFT`]'s step, the turn wrapping.
fn facing_field(a: u16) -> i64 {
    i64::from(a.wrapping_add(1 << (FACING_SHIFT - 1)) >> FACING_SHIFT)
}

/// A player's fields: its state, and `facing` (yaw, pitch) from its newest command (its
/// teleports' count is set with the crowd's: `Crowd::set_leaps`).
fn player_fields(p: &PlayerState, facing: [u16; 2]) -> PlayerFields {
    [
        p.origin[0] as i64,
        p.origin[1] as i64,
        p.origin[2] as i64,
        flags_field(p.flags, 0),
        p.mode as i64,
        facing_field(facing[0]),
        facing_field(facing[1]),
    ]
}

/// A player's flags field: its state's flags, and above them its teleports' count (a
/// byte each). A count that did not change costs nothing; one that did is sent with the
/// flags, as a change of them would be.
fn flags_field(flags: u8, leaps: u8) -> i64 {
    i64::from(flags) | i64::from(leaps) << 8
}

/// The flags and the teleports' count from a flags field (`None` past two bytes).
fn flags_from(v: i64) -> Option<(u8, u8)> {
    let v = u16::try_from(v).ok()?;
    Some((v as u8, (v >> 8) as u8))
}

/// The field index of the flags in a player's fields and in the client's own.
const PLAYER_FLAGS: usize = 3;
const OWN_FLAGS: usize = 6;

/// A state from its fields: origin, velocity, flags and mode (`None` out of range).
fn state_from(origin: &[i64], velocity: &[i64], flags: i64, mode: i64) -> Option<PlayerState> {
    let i = |v: &i64| i32::try_from(*v).ok();
    let three =
        |f: &[i64]| -> Option<[i32; 3]> { Some([i(f.first()?)?, i(f.get(1)?)?, i(f.get(2)?)?]) };
    Some(PlayerState {
        origin: three(origin)?,
        velocity: three(velocity)?,
        flags: u8::try_from(flags).ok()?,
        mode: match mode {
            0 => MoveMode::Walk,
            1 => MoveMode::Noclip,
            2 => MoveMode::Spectator,
            3 => MoveMode::Frozen,
            _ => return None,
        },
    })
}

fn player_from(f: &PlayerFields) -> Option<PlayerState> {
    facing_from(f)?;
    let (flags, _) = flags_from(f[PLAYER_FLAGS])?;
    state_from(&f[0..3], &[0; 3], i64::from(flags), f[4])
}

/// The way a player faces (yaw, pitch) from its fields.
fn facing_from(f: &PlayerFields) -> Option<[u16; 2]> {
    let angle = |v: i64| {
        Some(
            u16::try_from(v)
                .ok()
                .filter(|a| *a >> (16 - FACING_SHIFT) == 0)?
                << FACING_SHIFT,
        )
    };
    Some([angle(f[5])?, angle(f[6])?])
}

fn own_fields(p: &PlayerState, leaps: u8) -> [i64; OWN_FIELDS] {
    let o = p.origin.map(i64::from);
    let v = p.velocity.map(i64::from);
    [
        o[0],
        o[1],
        o[2],
        v[0],
        v[1],
        v[2],
        flags_field(p.flags, leaps),
        p.mode as i64,
    ]
}

fn own_from(f: &[i64; OWN_FIELDS]) -> Option<PlayerState> {
    let (flags, _) = flags_from(f[OWN_FLAGS])?;
    state_from(&f[0..3], &f[3..6], i64::from(flags), f[7])
}

fn mover_fields(m: &MoverState) -> MoverFields {
    [m.progress, m.phase as i64, m.timer as i64]
}

fn mover_from(f: &MoverFields) -> Option<MoverState> {
    Some(MoverState {
        progress: f[0],
        phase: match f[1] {
            0 => Phase::Closed,
            1 => Phase::Opening,
            2 => Phase::Open,
            3 => Phase::Closing,
            _ => return None,
        },
        timer: u32::try_from(f[2]).ok()?,
    })
}

/// Which fields of `new` differ from `old` (zeros for an entity new to the baseline), as
/// a delta's mask; `None` when the entity sends nothing. An unchanged entity still in
/// view sends nothing; a new one at all zeros sends its id.
fn changed<const N: usize>(old: Option<&[i64; N]>, new: &[i64; N]) -> Option<u16> {
    let zero = [0i64; N];
    let old = old.unwrap_or(&zero);
    // N is at most 16 (the mask's bits).
    let mask = (0..N)
        .filter(|&i| new[i] != old[i])
        .fold(0u16, |m, i| m | 1 << i);
    // With no field changed, `new` is `old`: sent only when both are zeros.
    (mask != 0 || old.iter().all(|&v| v == 0)).then_some(mask)
}

/// Applies `d` to `old`, checking its shape.
fn apply<const N: usize>(
    old: Option<&[i64; N]>,
    d: &EntityDelta,
) -> Result<[i64; N], ProtocolError> {
    let invalid = |detail: String| ProtocolError::Invalid {
        what: "snapshot",
        detail,
    };
    if d.mask.checked_shr(N as u32).unwrap_or(0) != 0
        || d.values.as_slice().len() != d.mask.count_ones() as usize
    {
        return Err(invalid(format!(
            "entity {}: mask {:#x} does not match {} values",
            d.id,
            d.mask,
            d.values.as_slice().len()
        )));
    }
    let mut out = old.copied().unwrap_or([0; N]);
    let mut vals = d.values.as_slice().iter();
    for (i, o) in out.iter_mut().enumerate() {
        if d.mask & (1 << i) != 0 {
            let v = vals.next().copied().unwrap_or(0);
            *o = o
                .checked_add(v)
                .ok_or_else(|| invalid(format!("entity {}: field {i} overflows", d.id)))?;
        }
    }
    Ok(out)
}

/// Entities' fields by id, in id order: a flat list, so a scene is cloned, searched and
/// walked without a node per entity (a scene holds a few dozen).
#[derive(Clone, Debug)]
struct Entities<const N: usize>(Vec<(u32, [i64; N])>);

impl<const N: usize> Default for Entities<N> {
    fn default() -> Self {
        Entities(Vec::new())
    }
}

impl<const N: usize> Entities<N> {
    /// From entities given in id order.
    #[cfg(test)]
    fn sorted(list: Vec<(u32, [i64; N])>) -> Self {
        debug_assert!(list.windows(2).all(|w| w[0].0 < w[1].0));
        Entities(list)
    }

    fn get(&self, id: u32) -> Option<&[i64; N]> {
        let i = self.0.binary_search_by_key(&id, |e| e.0).ok()?;
        Some(&self.0[i].1)
    }

    #[cfg(test)]
    fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    fn set(&mut self, id: u32, f: [i64; N]) {
        match self.0.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.0[i].1 = f,
            Err(i) => self.0.insert(i, (id, f)),
        }
    }

    fn remove(&mut self, ids: &[u32]) {
        self.0.retain(|(id, _)| !ids.contains(id));
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &[i64; N])> + '_ {
        self.0.iter().map(|(id, f)| (*id, f))
    }

    /// Each entity with its entry in `old`, if any (a merge of the two id orders).
    fn paired<'a>(
        &'a self,
        old: &'a Self,
    ) -> impl Iterator<Item = (u32, Option<&'a [i64; N]>, &'a [i64; N])> + 'a {
        let mut olds = old.0.iter().peekable();
        self.0.iter().map(move |(id, f)| {
            while olds.next_if(|(o, _)| o < id).is_some() {}
            (*id, olds.next_if(|(o, _)| o == id).map(|(_, f)| f), f)
        })
    }

    /// The ids here that `new` no longer has.
    fn gone_from<'a>(&'a self, new: &'a Self) -> impl Iterator<Item = u32> + 'a {
        let mut news = new.0.iter().peekable();
        self.0.iter().map(|(id, _)| *id).filter(move |id| {
            while news.next_if(|(n, _)| n < id).is_some() {}
            news.next_if(|(n, _)| n == id).is_none()
        })
    }
}

/// What one snapshot shows: its tick, each entity's fields, and their last steps.
#[derive(Clone, Debug, Default)]
struct Scene {
    tick: u64,
    players: Entities<PLAYER_FIELDS>,
    movers: Entities<MOVER_FIELDS>,
    /// The client's own player (id 0; none before the first scene).
    own: Entities<OWN_FIELDS>,
    /// The game's entities in view.
    entities: Entities<ENTITY_FIELDS>,
    /// The game's own state of players (the client's own by its id) and of entities.
    player_states: Entities<STATE_FIELDS>,
    entity_states: Entities<STATE_FIELDS>,
    /// How far each entity here moved since this scene's own baseline (see [`Motion`]),
    /// and that baseline's age in ticks (0: it had none). Both ends know it, so a
    /// later snapshot against this scene is written against where its entities would be
    /// by now at that pace: a player running straight on, or a lift, costs nothing.
    player_motion: Motion,
    mover_motion: Motion,
    own_motion: Motion,
    entity_motion: Motion,
    span: u64,
    /// The game's entities that ended since the baseline (not carried to later scenes).
    ends: Vec<EntityEnd>,
}

/// Entities' steps over a scene's span, one per entity of its list, in the same order:
/// the fields that move at a pace (a player's origin; a mover's progress and timer), as
/// listed in the `*_MOVING` constants. Zero for an entity new to the baseline, or whose
/// step does not fit (it is then sent as it is). Sixteen bits keep a client's history of
/// scenes small: a run's step over a few ticks fits many times over.
type Motion = Vec<[i16; 3]>;
const PLAYER_MOVING: &[usize] = &[0, 1, 2];
const MOVER_MOVING: &[usize] = &[0, 2];
const ENTITY_MOVING: &[usize] = &[0, 1, 2];

/// Within this of a client, another player is always sent as it stands: two hulls
/// and a step, the least room in which the client's prediction may meet it.
pub const EXACT_NEAR: f64 = 96.0;
/// Beyond this distance from a client, another player cannot meet it within any
/// prediction the client runs (two players running at each other for the half second a
/// clock lead covers at most, with room to spare): it is only drawn.
pub const EXACT_REACH: f64 = 512.0;
/// Beyond a client's exact reach, another player at distance `d` is sent once in
/// `d / THIN_STEP` snapshots (at least once in `MAX_HELD + 1`), and held between where
/// the client's baseline carries it (dead reckoning): far players' steps, turns and aim
/// were most of a crowded snapshot, and a far player a few units off is drawn a few
/// pixels off.
pub const THIN_STEP: f64 = 64.0;
/// The most snapshots in a row a far player is held.
pub const MAX_HELD: u32 = 5;
/// How far a held player may stray from where it is drawn, as a share of its distance:
/// a 32nd (under two degrees of a client's view).
pub const DRIFT_SHARE: f64 = 32.0;
/// How far a held player may turn from the way it is drawn, in 256ths of a turn.
pub const FACING_DRIFT: i64 = 16;

/// How far (units) from where it is drawn a player `d` units from a client may stray
/// before it is sent, when it is beyond the client's exact reach.
pub fn held_tolerance(d: f64) -> f64 {
    d / DRIFT_SHARE
}

/// A client's exact reach when it may close `closing` units on the others before its
/// next acknowledged prediction (see `Crowd::closing`): [`EXACT_NEAR`] more, at most
/// [`EXACT_REACH`].
pub fn exact_reach(closing: f64) -> f64 {
    (EXACT_NEAR + closing).min(EXACT_REACH)
}

/// The turn (in facing steps, the short way round) between two facing fields.
fn facing_turn(a: i64, b: i64) -> i64 {
    let steps = 1i64 << (16 - FACING_SHIFT);
    let d = a.wrapping_sub(b).rem_euclid(steps);
    d.min(steps - d)
}

/// Ticks past its scene a baseline's motion carries its entities on; beyond, the
/// baseline stands where it is (a guess that old saves nothing).
const MOTION_REACH: u64 = 32;

/// The steps of `moving` fields from `old` to `new`, one per entity of `new`.
fn motion_of<const N: usize>(
    new: &Entities<N>,
    old: &Entities<N>,
    moving: &[usize],
    out: &mut Motion,
) {
    out.clear();
    for (_, o, n) in new.paired(old) {
        let mut step = [0i16; 3];
        let fits = o.is_some_and(|o| {
            moving.iter().zip(step.iter_mut()).all(|(&k, s)| {
                i16::try_from(n[k].wrapping_sub(o[k]))
                    .map(|v| *s = v)
                    .is_ok()
            })
        });
        out.push(if fits { step } else { [0; 3] });
    }
}

/// `from` with each entity's `moving` fields carried `ahead` ticks on at the pace of its
/// step over `span` ticks (integer arithmetic: the same bits at both ends).
fn carry<const N: usize>(
    from: &Entities<N>,
    motion: &Motion,
    moving: &[usize],
    ahead: i32,
    span: i32,
    out: &mut Entities<N>,
) {
    out.0.clear();
    out.0.extend_from_slice(&from.0);
    if ahead == 0 {
        return;
    }
    // A step (i16) times `ahead` (at most MOTION_REACH) fits i32: the 32-bit division,
    // three a player every snapshot, costs a fraction of a 64-bit one and truncates
    // alike. Carried as far as the step came, the step is added whole.
    for ((_, f), step) in out.0.iter_mut().zip(motion) {
        for (&k, &s) in moving.iter().zip(step) {
            let by = if ahead == span {
                i32::from(s)
            } else {
                i32::from(s) * ahead / span
            };
            f[k] = f[k].wrapping_add(i64::from(by));
        }
    }
}

impl Scene {
    /// The snapshot this scene shows a client (without `others`, the players are checked
    /// but left out), refusing out-of-range fields. The decoder's and the encoder's scenes
    /// of a tick are equal, so both ends get the same snapshot.
    fn snapshot(&self, feedback: Feedback, others: bool) -> Result<Snapshot, ProtocolError> {
        let own = self
            .own
            .get(0)
            .and_then(own_from)
            .ok_or_else(|| ProtocolError::Invalid {
                what: "snapshot",
                detail: "own state out of range".into(),
            })?;
        let (players, facing, leaps) = if others {
            let facing = typed(&self.players, facing_from, "player")?;
            let leaps = typed(
                &self.players,
                |f| Some(flags_from(f[PLAYER_FLAGS])?.1),
                "player",
            )?;
            (typed(&self.players, player_from, "player")?, facing, leaps)
        } else {
            checked(&self.players, player_from, "player")?;
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new())
        };
        let own_flags = self.own.get(0).and_then(|f| flags_from(f[OWN_FLAGS]));
        let own_leaps = own_flags.map_or(0, |(_, leaps)| leaps);
        Ok(Snapshot {
            tick: self.tick,
            feedback,
            own,
            players,
            facing,
            leaps,
            own_leaps,
            movers: typed(&self.movers, mover_from, "mover")?,
            entities: typed(&self.entities, entity_from, "entity")?,
            player_states: typed(&self.player_states, game_state_from, "player state")?,
            entity_states: typed(&self.entity_states, game_state_from, "entity state")?,
            ends: self.ends.clone(),
        })
    }

    /// Records how each entity moved since `base`, the scene this one was written against.
    fn set_motion(&mut self, base: &Scene) {
        self.span = if base.tick == 0 {
            0
        } else {
            self.tick.saturating_sub(base.tick)
        };
        motion_of(
            &self.players,
            &base.players,
            PLAYER_MOVING,
            &mut self.player_motion,
        );
        motion_of(
            &self.movers,
            &base.movers,
            MOVER_MOVING,
            &mut self.mover_motion,
        );
        motion_of(&self.own, &base.own, PLAYER_MOVING, &mut self.own_motion);
        motion_of(
            &self.entities,
            &base.entities,
            ENTITY_MOVING,
            &mut self.entity_motion,
        );
    }

    /// This scene as the baseline of a snapshot of `tick`: its entities where they would
    /// be by then at the pace of their motion.
    fn carried_to(&self, tick: u64, out: &mut Scene) {
        out.tick = self.tick;
        let ahead = tick.saturating_sub(self.tick);
        // A span past i32 carries nothing: no step times `ahead` reaches it.
        let span = i32::try_from(self.span).unwrap_or(0);
        let (ahead, span) = if span == 0 || ahead > MOTION_REACH {
            (0, 1)
        } else {
            // At most MOTION_REACH: the cast cannot truncate.
            (ahead as i32, span)
        };
        carry(
            &self.players,
            &self.player_motion,
            PLAYER_MOVING,
            ahead,
            span,
            &mut out.players,
        );
        carry(
            &self.movers,
            &self.mover_motion,
            MOVER_MOVING,
            ahead,
            span,
            &mut out.movers,
        );
        carry(
            &self.own,
            &self.own_motion,
            PLAYER_MOVING,
            ahead,
            span,
            &mut out.own,
        );
        carry(
            &self.entities,
            &self.entity_motion,
            ENTITY_MOVING,
            ahead,
            span,
            &mut out.entities,
        );
        // The game's states do not move: carried as they are.
        out.player_states.0.clone_from(&self.player_states.0);
        out.entity_states.0.clone_from(&self.entity_states.0);
    }
}
