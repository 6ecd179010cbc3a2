//! Snapshots: the server's per-client encoder (interest, deltas against the newest
//! acknowledged snapshot, the datagram size limit) and the client's decoder.
//!
//! Every entity is a short list of integer fields (a player's origin, velocity, flags and
//! mode; a mover's progress, phase and timer). A delta carries a mask of the fields that
//! differ from the baseline and, for each, the difference (zig-zag varints in postcard, so
//! a small move costs a byte). An entity new to the baseline is sent against zero. The
//! baseline is first carried on to the snapshot's tick at each entity's pace (a
//! frame keeps each entity's last step), so an entity moving steadily costs nothing.

use super::messages::{tick_from_gap, tick_gap};
pub use super::Feedback;
use super::{decode, EntityDelta, ProtocolError, ServerDatagram, MOVER_INTEREST_RADIUS};
use crate::geom::Aabb;
use crate::movement::{MoveMode, PlayerState, POSITION_SCALE};
use crate::mover::{MoverState, Phase};
use crate::sim::players::{Binned, Grid};
use crate::sim::{PlayerId, Sim, WorldState};
use glam::DVec3;

use std::collections::{BTreeMap, VecDeque};

/// Snapshots remembered as baselines; an acknowledgement older than this gets full state.
pub const HISTORY: usize = 64;

/// Another player as a client needs it: origin, flags (crouched among them), mode, and the
/// way it faces (yaw, pitch: to draw it). Its velocity is left out: prediction holds other
/// players where the snapshot shows them, and interpolation needs only positions, so
/// velocity would only cost bytes (the client's own state is exact).
const PLAYER_FIELDS: usize = 7;
const MOVER_FIELDS: usize = 3;
/// The client's own player: origin, velocity, flags and mode, all of it exact.
const OWN_FIELDS: usize = 8;
// A delta's mask has 16 bits, and its values 16 places.
const _: () = assert!(PLAYER_FIELDS <= 16 && MOVER_FIELDS <= 16);

type PlayerFields = [i64; PLAYER_FIELDS];
type MoverFields = [i64; MOVER_FIELDS];

/// A player's fields: its state, and `facing` (yaw, pitch) from its newest command.
fn player_fields(p: &PlayerState, facing: [u16; 2]) -> PlayerFields {
    [
        p.origin[0] as i64,
        p.origin[1] as i64,
        p.origin[2] as i64,
        p.flags as i64,
        p.mode as i64,
        facing[0] as i64,
        facing[1] as i64,
    ]
}

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
    state_from(&f[0..3], &[0; 3], f[3], f[4])
}

/// The way a player faces (yaw, pitch) from its fields.
fn facing_from(f: &PlayerFields) -> Option<[u16; 2]> {
    Some([u16::try_from(f[5]).ok()?, u16::try_from(f[6]).ok()?])
}

fn own_fields(p: &PlayerState) -> [i64; OWN_FIELDS] {
    let o = p.origin.map(i64::from);
    let v = p.velocity.map(i64::from);
    [
        o[0],
        o[1],
        o[2],
        v[0],
        v[1],
        v[2],
        p.flags as i64,
        p.mode as i64,
    ]
}

fn own_from(f: &[i64; OWN_FIELDS]) -> Option<PlayerState> {
    state_from(&f[0..3], &f[3..6], f[6], f[7])
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
    if d.mask >> N != 0 || d.values.as_slice().len() != d.mask.count_ones() as usize {
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

/// Entities' fields by id, in id order: a flat list, so a frame is cloned, searched and
/// walked without a node per entity (a frame holds a few dozen).
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

#[derive(Clone, Debug, Default)]
struct Frame {
    tick: u64,
    players: Entities<PLAYER_FIELDS>,
    movers: Entities<MOVER_FIELDS>,
    /// The client's own player (id 0; none before the first frame).
    own: Entities<OWN_FIELDS>,
    /// How far each entity here moved since this frame's own baseline (see [`Motion`]),
    /// and that baseline's age in ticks (0: it had none). Both ends know it, so a
    /// later snapshot against this frame is written against where its entities would be
    /// by now at that pace: a player running straight on, or a lift, costs nothing.
    player_motion: Motion,
    mover_motion: Motion,
    own_motion: Motion,
    span: u64,
}

/// Entities' steps over a frame's span, one per entity of its list, in the same order:
/// the fields that move at a pace (a player's origin; a mover's progress and timer), as
/// listed in the `*_MOVING` constants. Zero for an entity new to the baseline, or whose
/// step does not fit (it is then sent as it is). Sixteen bits keep a client's history of
/// frames small: a run's step over a few ticks fits many times over.
type Motion = Vec<[i16; 3]>;
const PLAYER_MOVING: &[usize] = &[0, 1, 2];
const MOVER_MOVING: &[usize] = &[0, 2];

/// Beyond this distance from a client, another player cannot meet it within any
/// prediction the client runs (two players running at each other for the half second a
/// clock lead covers at most, with room to spare): it is only drawn.
pub const EXACT_REACH: f64 = 512.0;
/// How far (in 1/[`POSITION_SCALE`] units: an eighth of a unit) a player beyond
/// [`EXACT_REACH`] may stray from where the client's baseline carries it before its state
/// is sent: dead reckoning. Positions on the grid jitter by a step from tick to tick, which
/// a running player would otherwise pay for in every snapshot.
pub const FAR_TOLERANCE: i64 = 32;

/// Ticks past its frame a baseline's motion carries its entities on; beyond, the
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
    ahead: i64,
    span: i64,
    out: &mut Entities<N>,
) {
    out.0.clear();
    out.0.extend_from_slice(&from.0);
    if ahead == 0 {
        return;
    }
    for ((_, f), step) in out.0.iter_mut().zip(motion) {
        for (&k, &s) in moving.iter().zip(step) {
            // `ahead` is at most MOTION_REACH and a step fits i16: no overflow.
            f[k] = f[k].wrapping_add(i64::from(s) * ahead / span);
        }
    }
}

impl Frame {
    /// The snapshot this frame shows a client (without `others`, the players are checked
    /// but left out), refusing out-of-range fields. The decoder's and the encoder's frames
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
        let (players, facing) = if others {
            let facing = typed(&self.players, facing_from, "player")?;
            (typed(&self.players, player_from, "player")?, facing)
        } else {
            checked(&self.players, player_from, "player")?;
            (BTreeMap::new(), BTreeMap::new())
        };
        Ok(Snapshot {
            tick: self.tick,
            feedback,
            own,
            players,
            facing,
            movers: typed(&self.movers, mover_from, "mover")?,
        })
    }

    /// Records how each entity moved since `base`, the frame this one was written against.
    fn set_motion(&mut self, base: &Frame) {
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
    }

    /// This frame as the baseline of a snapshot of `tick`: its entities where they would
    /// be by then at the pace of their motion.
    fn carried_to(&self, tick: u64, out: &mut Frame) {
        out.tick = self.tick;
        let ahead = tick.saturating_sub(self.tick);
        let span = i64::try_from(self.span).unwrap_or(0);
        let (ahead, span) = if span == 0 || ahead > MOTION_REACH {
            (0, 1)
        } else {
            (ahead as i64, span)
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
    }
}

/// Snapshots one choice of a client's nearest players serves before it is made again
/// (at 30 snapshots a second, a choice is at most a tenth of a second old). Finding the
/// nearest of a thousand cost as much as writing the snapshot; who is nearest changes
/// far more slowly than where they are, and every snapshot still carries the chosen
/// players' state of its own tick.
/// Each client's refreshes fall on its own turn (see `refresh_turn`), so a tick
/// chooses for about one client in four rather than for all of them every fourth time.
pub const VIEW_REFRESH: u32 = 4;
/// How far a client may move from where its players were chosen before they are chosen
/// again at once (a teleport or a respawn must not show the old surroundings).
pub const VIEW_DRIFT: f64 = 128.0;

/// The players a client was last sent: crowd indices in id order.
#[derive(Debug, Default)]
struct View {
    chosen: Vec<u32>,
    /// The [`Crowd::generation`] the indices belong to (0: none).
    generation: u64,
    /// Snapshots written from this choice.
    uses: u32,
    from: DVec3,
    interest: usize,
}

/// The server's snapshot state for one client.
#[derive(Debug, Default)]
pub struct SnapshotEncoder {
    /// Frames sent, in tick order.
    history: VecDeque<Frame>,
    acked: u64,
    /// Snapshots sent in full because no baseline was usable.
    pub full_sends: u64,
    /// The frame that last left the history, whose lists the next frame reuses.
    spare: Frame,
    /// The nearest players' (squared distance, crowd index).
    near: Vec<Near>,
    view: View,
    /// Snapshots written, for the turn of the view's refresh.
    written: u64,
    /// The baseline carried on to the tick written (see [`Frame::carried_to`]).
    ahead: Frame,
}

/// Whether the `written`-th snapshot of client `me` is its turn to choose its players
/// afresh: one in [`VIEW_REFRESH`], at an offset drawn from the id. Clients that joined
/// together (or were all made to choose at once by a change of the crowd) would
/// otherwise choose together, and one tick in four carried every client's choice.
fn refresh_turn(me: PlayerId, written: u64) -> bool {
    // The id's bits mixed (Fibonacci hashing), so ids of one snapshot parity spread over
    // every turn.
    let offset =
        (u64::from(me).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % u64::from(VIEW_REFRESH);
    (written.wrapping_add(offset)) % u64::from(VIEW_REFRESH) == 0
}

impl SnapshotEncoder {
    /// A client that has acknowledged nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The client received snapshot `tick`. Acknowledgements of snapshots never sent, or
    /// older than the newest one, are ignored.
    pub fn ack(&mut self, tick: u64) {
        if tick > self.acked && self.sent(tick).is_some() {
            self.acked = tick;
        }
    }

    /// Where the frame of `tick` is in the history. Acknowledgements are of the last few
    /// snapshots: looking from the newest back reads the frames just written, where a
    /// binary search would touch cold ones of a thousand clients.
    fn sent(&self, tick: u64) -> Option<usize> {
        let i = self.history.iter().rposition(|f| f.tick <= tick)?;
        (self.history[i].tick == tick).then_some(i)
    }

    /// The newest acknowledged snapshot.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The snapshot of `tick` as the client decoded it, if it is still in the history
    /// (its feedback left at the default: the client's prediction does not read it).
    /// `movers` (the server's, or any the client may hold) takes every mover each frame
    /// up to it showed, oldest first: what a client that received them all holds.
    pub fn seen(&self, tick: u64, movers: &mut [MoverState]) -> Option<Snapshot> {
        let i = self.sent(tick)?;
        for f in self.history.range(..=i) {
            for (m, fields) in f.movers.iter() {
                if let (Some(slot), Some(state)) = (movers.get_mut(m as usize), mover_from(fields))
                {
                    *slot = state;
                }
            }
        }
        self.history[i].snapshot(Feedback::default(), true).ok()
    }

    /// The snapshot datagram of `world` for player `me`: its own state in full, the
    /// nearest `interest` other players and the movers within
    /// [`MOVER_INTEREST_RADIUS`], as deltas against the newest acknowledged snapshot.
    /// Drops the farthest players until the datagram fits `max_bytes`; `None` if even
    /// the player alone does not fit, `me` is not in the world, or the world has not
    /// stepped yet (tick 0 means "nothing" in acknowledgements).
    pub fn encode(
        &mut self,
        sim: &Sim,
        world: &WorldState,
        me: PlayerId,
        feedback: Feedback,
        interest: usize,
        max_bytes: usize,
    ) -> Option<Vec<u8>> {
        let crowd = Crowd::new(sim, world, interest);
        self.encode_in(world, &crowd, me, feedback, interest, max_bytes)
    }

    /// [`SnapshotEncoder::encode`] with the tick's [`Crowd`] built once for every client.
    /// Writes the datagram straight from the frame and its baseline (two id-ordered lists
    /// merged), reusing the encoder's buffers: no message is built on the way.
    pub fn encode_in(
        &mut self,
        world: &WorldState,
        crowd: &Crowd,
        me: PlayerId,
        feedback: Feedback,
        interest: usize,
        max_bytes: usize,
    ) -> Option<Vec<u8>> {
        if world.tick == 0 {
            return None;
        }
        let own = *world.player(me)?;
        let o = own.origin();
        let base = (self.acked != 0).then(|| self.sent(self.acked)).flatten();
        if base.is_none() {
            self.full_sends += 1;
        }
        let mut frame = std::mem::take(&mut self.spare);
        frame.tick = world.tick;
        frame.own.0.clear();
        frame.own.0.push((0, own_fields(&own)));
        frame.movers.0.clear();
        frame.movers.0.extend(
            crowd
                .movers
                .iter()
                .filter(|(centre, ..)| (*centre - o).length() <= MOVER_INTEREST_RADIUS)
                .map(|&(_, i, f)| (i, f)),
        );
        let empty = Frame::default();
        let b = base.map_or(&empty, |i| &self.history[i]);
        b.carried_to(world.tick, &mut self.ahead);
        let ahead = &self.ahead;
        let turn = refresh_turn(me, self.written);
        self.written = self.written.wrapping_add(1);
        let view = &mut self.view;
        if view.generation != 0 && view.generation != crowd.generation {
            // The crowd changed (someone joined or left): the players last sent who are
            // still in it stay chosen, at their new places, until the client's turn. Every
            // client choosing afresh at once made each join and leave a slow tick.
            if let Some(last) = self.history.back() {
                view.chosen.clear();
                view.chosen.extend(
                    last.players
                        .0
                        .iter()
                        .filter_map(|(id, _)| crowd.index_of(*id)),
                );
                view.generation = crowd.generation;
            }
        }
        let reuse = view.generation == crowd.generation
            && !turn
            && view.uses < VIEW_REFRESH
            && view.interest == interest
            && (o - view.from).length_squared() < VIEW_DRIFT * VIEW_DRIFT;
        let mut bytes = None;
        if reuse {
            view.uses += 1;
            frame.players.0.clear();
            frame
                .players
                .0
                .extend(view.chosen.iter().map(|&i| crowd.players[i as usize]));
            hold_far(&mut frame.players, &ahead.players, o);
            bytes = Some(write_snapshot(&frame, ahead, feedback)).filter(|b| b.len() <= max_bytes);
        }
        if bytes.is_none() {
            // Chosen afresh: the nearest, the farthest dropped until the datagram fits.
            let mut near = std::mem::take(&mut self.near);
            crowd.nearest_indices(crowd.index_of(me), o, interest, &mut near);
            let mut count = near.len();
            bytes = loop {
                // Crowd indices follow ids: sorted indices give the id order.
                view.chosen.clear();
                view.chosen.extend(near[..count].iter().map(|n| n.index()));
                view.chosen.sort_unstable();
                frame.players.0.clear();
                frame
                    .players
                    .0
                    .extend(view.chosen.iter().map(|&i| crowd.players[i as usize]));
                hold_far(&mut frame.players, &ahead.players, o);
                let bytes = write_snapshot(&frame, ahead, feedback);
                if bytes.len() <= max_bytes {
                    break Some(bytes);
                }
                if count == 0 {
                    break None;
                }
                count = count * 3 / 4;
            };
            self.near = near;
            *view = View {
                chosen: std::mem::take(&mut view.chosen),
                generation: if bytes.is_some() { crowd.generation } else { 0 },
                uses: 1,
                from: o,
                interest,
            };
        }
        if bytes.is_none() {
            self.spare = frame;
            return None;
        }
        frame.set_motion(b);
        self.history.push_back(frame);
        if self.history.len() > HISTORY {
            self.spare = self.history.pop_front().unwrap_or_default();
        }
        bytes
    }
}

/// Puts each player beyond [`EXACT_REACH`] of `o` that stands within [`FAR_TOLERANCE`] of
/// its place in `ahead` (the carried baseline) at that place: the frame then holds what
/// the client will, and nothing is sent for it.
fn hold_far(players: &mut Entities<PLAYER_FIELDS>, ahead: &Entities<PLAYER_FIELDS>, o: DVec3) {
    let reach = EXACT_REACH * POSITION_SCALE;
    let o = o * POSITION_SCALE;
    let mut olds = ahead.0.iter().peekable();
    for (id, f) in players.0.iter_mut() {
        while olds.next_if(|(a, _)| a < id).is_some() {}
        let Some((_, a)) = olds.next_if(|(a, _)| a == id) else {
            continue;
        };
        let near = (0..3).all(|k| f[k].abs_diff(a[k]) <= FAR_TOLERANCE as u64);
        let far =
            DVec3::new(f[0] as f64, f[1] as f64, f[2] as f64).distance_squared(o) > reach * reach;
        if near && far && f[3..] == a[3..] {
            *f = *a;
        }
    }
}

/// The snapshot datagram of `frame` against baseline `base` (empty: none; carried on to
/// the frame's tick), byte for byte what postcard makes of the
/// [`ServerDatagram::Snapshot`] it stands for.
fn write_snapshot(frame: &Frame, base: &Frame, fb: Feedback) -> Vec<u8> {
    // The variant's index (0), then the message's fields in order: postcard writes a
    // tuple and a struct alike.
    let head = (
        0u32,
        frame.tick,
        tick_gap(frame.tick, base.tick),
        fb.to_wire(frame.tick),
    );
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let mut out = postcard::to_extend(&head, std::mem::take(scratch)).unwrap_or_default();
        let (old, new) = (
            base.own.get(0),
            frame.own.get(0).unwrap_or(&[0; OWN_FIELDS]),
        );
        put_delta(&mut out, 0, old, new, changed(old, new).unwrap_or(0));
        put_changes(&mut out, &frame.players, &base.players);
        put_changes(&mut out, &frame.movers, &base.movers);
        let bytes = out.as_slice().to_vec();
        *scratch = out;
        bytes
    })
}

thread_local! {
    /// Where a snapshot is written before it is copied out at its size. Asking the
    /// allocator for a datagram's worth each time (over 1 KiB, a large request to glibc)
    /// made it consolidate its small free chunks on every snapshot.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A list's deltas against its baseline, then the baseline's ids no longer in it, in
/// postcard's form: a length, then each delta's id (as its gap from the one before),
/// mask and values (zig-zag varints, one per bit of the mask). Ids ascend in both lists,
/// so no gap underflows.
fn put_changes<const N: usize>(out: &mut Vec<u8>, new: &Entities<N>, old: &Entities<N>) {
    // The count goes first, but is known only after: one byte is held for it (a count
    // under 128), and the rare larger count moves the deltas up.
    let at = out.len();
    out.push(0);
    let mut count = 0u64;
    let mut prev = 0;
    for (id, o, n) in new.paired(old) {
        let Some(mask) = changed(o, n) else {
            continue;
        };
        count += 1;
        put_delta(out, id - prev, o, n, mask);
        prev = id;
    }
    if count < 0x80 {
        out[at] = count as u8;
    } else {
        let mut head = Vec::new();
        put_varint(&mut head, count);
        out.splice(at..at + 1, head);
    }
    put_varint(out, old.gone_from(new).count() as u64);
    let mut prev = 0;
    for id in old.gone_from(new) {
        put_varint(out, (id - prev).into());
        prev = id;
    }
}

/// One delta: the id (or its gap), the mask, and each masked field's difference from
/// `old` (zeros when none) as a zig-zag varint.
fn put_delta<const N: usize>(
    out: &mut Vec<u8>,
    id: u32,
    old: Option<&[i64; N]>,
    new: &[i64; N],
    mask: u16,
) {
    put_varint(out, id.into());
    put_varint(out, mask.into());
    let o = old.copied().unwrap_or([0; N]);
    for i in (0..N).filter(|i| mask & 1 << i != 0) {
        let v = new[i].wrapping_sub(o[i]);
        put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
    }
}

/// postcard's unsigned varint: seven bits a byte, low first.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The players of one tick, binned by where they stand, so each client's nearest
/// `interest` others are found from the cells around it rather than by measuring
/// everyone: built once per tick for every client's snapshot, with each player's
/// snapshot fields.
pub struct Crowd {
    /// Each player's origin, named by its index in `players`.
    grid: Grid<Point>,
    /// Each player's id and fields, in id order.
    players: Vec<(PlayerId, PlayerFields)>,
    /// Largest distance across (x, y) between any two players (bounds the search).
    span: f64,
    /// Each mover's centre at its pose, index and fields, in mover order.
    movers: Vec<(DVec3, u32, MoverFields)>,
    /// Names the players' membership and order: the same while the same ids stand at the
    /// same indices, unique otherwise (a client's choice of players, kept as indices, is
    /// good for the crowds of its generation only).
    generation: u64,
    points: Vec<Point>,
    poses: Vec<crate::mover::Pose>,
}

/// The last [`Crowd::generation`] handed out, across every crowd.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn new_generation() -> u64 {
    GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// A player in the crowd's grid: where it stands and its index in the crowd (a third of
/// a box's bytes: a query reads dozens of them).
#[derive(Clone, Copy, Debug)]
struct Point {
    at: DVec3,
    index: u32,
}

impl Binned for Point {
    fn centre(&self) -> DVec3 {
        self.at
    }

    fn overlaps(&self, zone: &Aabb) -> bool {
        (zone.min.cmple(self.at) & self.at.cmple(zone.max)).all()
    }
}

impl Crowd {
    /// Indexes `world`'s players for searches of the nearest `interest`, and places its
    /// movers.
    pub fn new(sim: &Sim, world: &WorldState, interest: usize) -> Crowd {
        let mut crowd = Crowd {
            grid: Grid::default(),
            players: Vec::new(),
            span: 0.0,
            movers: Vec::new(),
            generation: 0,
            points: Vec::new(),
            poses: Vec::new(),
        };
        crowd.renew(sim, world, interest);
        crowd
    }

    /// [`Crowd::new`] for a later tick, in place: the lists are reused, and the
    /// generation kept when the same players stand in the same order (so the clients'
    /// choices of players carry over).
    pub fn renew(&mut self, sim: &Sim, world: &WorldState, interest: usize) {
        sim.poses(&world.movers, &mut self.poses);
        self.movers.clear();
        self.movers.extend(
            sim.movers()
                .iter()
                .zip(&self.poses)
                .zip(&world.movers)
                .enumerate()
                .map(|(i, ((m, pose), s))| {
                    (m.world_bounds(pose).center(), i as u32, mover_fields(s))
                }),
        );
        let same = self.generation != 0
            && self.players.len() == world.players.len()
            && self
                .players
                .iter()
                .zip(world.players.keys())
                .all(|(p, id)| p.0 == *id);
        if !same {
            self.generation = new_generation();
        }
        self.points.clear();
        self.players.clear();
        // Indices fit: a world's players are far fewer than 2^32.
        for (i, (id, p)) in world.players.iter().enumerate() {
            let at = p.state.origin();
            self.points.push(Point {
                at,
                index: i as u32,
            });
            let facing = [p.last_command.yaw, p.last_command.pitch];
            self.players.push((*id, player_fields(&p.state, facing)));
        }
        let all = Aabb::from_points(self.points.iter().map(|p| &p.at));
        self.span = if self.points.is_empty() {
            0.0
        } else {
            (all.max - all.min).truncate().max_element()
        };
        // About one player to a cell of an even crowd: a search reads a few rings.
        let cell = 0.25 * self.even_reach(interest);
        self.grid.build_with(&self.points, cell);
    }

    /// Half the side of a square that holds about `2k` players of an even crowd.
    fn even_reach(&self, k: usize) -> f64 {
        let even = 2.0 * k as f64 / self.players.len().max(1) as f64;
        (0.5 * self.span * even.min(1.0).sqrt()).max(32.0)
    }

    /// Where player `id` is in the crowd's order.
    fn index_of(&self, id: PlayerId) -> Option<u32> {
        let i = self.players.binary_search_by_key(&id, |p| p.0).ok()?;
        Some(i as u32)
    }

    /// Into `out`, the `k` players nearest `o` other than `me`, nearest first (ties by
    /// id), as (squared distance, id): exactly what measuring everyone would give.
    pub fn nearest(&self, me: PlayerId, o: DVec3, k: usize, out: &mut Vec<(f64, PlayerId)>) {
        let mut near = Vec::new();
        self.nearest_indices(self.index_of(me), o, k, &mut near);
        out.clear();
        out.extend(
            near.iter()
                .map(|n| (n.distance2(), self.players[n.index() as usize].0)),
        );
    }

    /// [`Crowd::nearest`] by crowd index (the id order, so ties by index are ties by id).
    /// The grid's cells are read in rings around `o`'s cell, nearest ring first. Every
    /// player beyond the rings read so far is at least `gap` away (the distance from `o`
    /// across (x, y) to the square they cover), so once `k` found are nearer than that,
    /// no player left unread can take a place. Only the best `k` found are kept as it
    /// goes; a dense crowd stops after a ring or two, a sparse one reads further.
    fn nearest_indices(&self, me: Option<u32>, o: DVec3, k: usize, out: &mut Vec<Near>) {
        out.clear();
        if k == 0 || self.players.is_empty() {
            return;
        }
        let g = &self.grid;
        // A point beyond the grid reads from the cell next to it; its gaps below are then
        // negative, so the search reads every ring: still exact.
        let [cx, cy] = g.cell_at(o);
        let [w, h] = g.dims();
        // Rings wholly outside the grid hold nobody.
        let first = [0, -cx, cx - (w - 1), -cy, cy - (h - 1)]
            .into_iter()
            .fold(0, i64::max);
        let take = |items: &[Point], out: &mut Vec<Near>| {
            for p in items {
                if Some(p.index) != me {
                    out.push(Near::new((p.at - o).length_squared(), p.index));
                }
            }
        };
        for r in first.. {
            if r == 0 {
                take(g.row(cx, cy, cy), out);
            } else {
                take(g.row(cx - r, cy - r, cy + r), out);
                take(g.row(cx + r, cy - r, cy + r), out);
                for x in (cx - r + 1).max(0)..=(cx + r - 1).min(w - 1) {
                    take(g.row(x, cy - r, cy - r), out);
                    take(g.row(x, cy + r, cy + r), out);
                }
            }
            if out.len() > k {
                out.select_nth_unstable(k - 1);
                out.truncate(k);
            }
            if cx - r <= 0 && cy - r <= 0 && cx + r >= w - 1 && cy + r >= h - 1 {
                break;
            }
            if out.len() == k {
                let (lo, side) = g.corner([cx - r, cy - r]);
                let hi = lo + DVec3::splat(side * (2 * r + 1) as f64);
                // Less a hair: a point on a cell's border may have been binned either side.
                let gap = [o.x - lo.x, hi.x - o.x, o.y - lo.y, hi.y - o.y]
                    .into_iter()
                    .fold(f64::INFINITY, f64::min)
                    - 1e-6;
                let kth = out.iter().max().map_or(0.0, |n| n.distance2());
                if gap > 0.0 && kth < gap * gap {
                    break;
                }
            }
        }
        out.sort_unstable();
    }
}

/// A player found near: its squared distance and crowd index in one key, whose integer
/// order is the order by distance, then index (a distance is never negative, and a
/// non-negative float's bits order as it does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Near(u128);

impl Near {
    fn new(distance2: f64, index: u32) -> Near {
        Near(u128::from(distance2.to_bits()) << 32 | u128::from(index))
    }

    fn distance2(self) -> f64 {
        f64::from_bits((self.0 >> 32) as u64)
    }

    fn index(self) -> u32 {
        self.0 as u32
    }
}

/// A list's ids from the gaps they are sent as (see [`SnapshotMsg`]), refusing ids
/// beyond `u32`.
///
/// [`SnapshotMsg`]: super::SnapshotMsg
fn ids_from_gaps<'a>(ids: impl Iterator<Item = &'a mut u32>) -> Result<(), ProtocolError> {
    let mut prev = 0u32;
    for id in ids {
        prev = prev
            .checked_add(*id)
            .ok_or_else(|| ProtocolError::Invalid {
                what: "snapshot",
                detail: format!("an id past {prev} by {id} overflows"),
            })?;
        *id = prev;
    }
    Ok(())
}

/// Field lists as typed entities, refusing out-of-range values.
fn typed<const N: usize, T>(
    fields: &Entities<N>,
    from: fn(&[i64; N]) -> Option<T>,
    what: &str,
) -> Result<BTreeMap<u32, T>, ProtocolError> {
    fields
        .iter()
        .map(|(id, f)| {
            from(f)
                .map(|t| (id, t))
                .ok_or_else(|| out_of_range(what, id))
        })
        .collect()
}

/// [`typed`]'s checks alone.
fn checked<const N: usize, T>(
    fields: &Entities<N>,
    from: fn(&[i64; N]) -> Option<T>,
    what: &str,
) -> Result<(), ProtocolError> {
    match fields.iter().find(|(_, f)| from(f).is_none()) {
        Some((id, _)) => Err(out_of_range(what, id)),
        None => Ok(()),
    }
}

fn out_of_range(what: &str, id: u32) -> ProtocolError {
    ProtocolError::Invalid {
        what: "snapshot",
        detail: format!("{what} {id} has out-of-range fields"),
    }
}

/// A snapshot as the client sees it, every entity in full.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The server tick it shows.
    pub tick: u64,
    /// What the server says of our commands.
    pub feedback: Feedback,
    /// The client's own state.
    pub own: PlayerState,
    /// Other players in view.
    pub players: BTreeMap<u32, PlayerState>,
    /// The way each of them faces: yaw and pitch as in its newest command
    /// ([`MoveCommand`](crate::MoveCommand)'s units).
    pub facing: BTreeMap<u32, [u16; 2]>,
    /// Movers in view, by index.
    pub movers: BTreeMap<u32, MoverState>,
}

/// The client's snapshot state: recent snapshots kept as baselines.
#[derive(Debug, Default)]
pub struct SnapshotDecoder {
    history: VecDeque<Frame>,
    newest: u64,
    /// Snapshots dropped because their baseline was unknown.
    pub missing_baseline: u64,
    /// Snapshots older than one already received (reordered or duplicated).
    pub stale: u64,
    /// Other players are checked but not handed out (a light client uses none of them).
    no_others: bool,
}

impl SnapshotDecoder {
    /// A client that has received nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether decoded snapshots carry the other players (by default they do). Without
    /// them a snapshot still decodes, checks and keeps every player as a baseline; only
    /// its `players` stays empty, which spares a light client most of its decoding.
    pub fn set_others(&mut self, others: bool) {
        self.no_others = !others;
    }

    /// The newest snapshot received, to acknowledge (0: none).
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// Decodes a snapshot datagram. `Ok(None)` for a stale or undecodable-baseline one
    /// (counted); an error for malformed bytes.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Option<Snapshot>, ProtocolError> {
        let ServerDatagram::Snapshot(mut msg) = decode("snapshot", bytes)? else {
            return Err(ProtocolError::Invalid {
                what: "snapshot",
                detail: "a message, not a snapshot".into(),
            });
        };
        ids_from_gaps(msg.players.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.removed.iter_mut())?;
        ids_from_gaps(msg.movers.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.removed_movers.iter_mut())?;
        if msg.tick <= self.newest {
            self.stale += 1;
            return Ok(None);
        }
        let empty = Frame::default();
        let bad_tick = |what: &str| ProtocolError::Invalid {
            what: "snapshot",
            detail: format!("{what} reaches before tick 1"),
        };
        let baseline = tick_from_gap(msg.tick, msg.baseline).ok_or_else(|| bad_tick("baseline"))?;
        let feedback = msg
            .feedback
            .off_wire(msg.tick)
            .ok_or_else(|| bad_tick("feedback"))?;
        let base = if baseline == 0 {
            &empty
        } else {
            match self.history.iter().find(|f| f.tick == baseline) {
                Some(f) => f,
                None => {
                    self.missing_baseline += 1;
                    return Ok(None);
                }
            }
        };
        let mut ahead = Frame::default();
        base.carried_to(msg.tick, &mut ahead);
        let own = apply(ahead.own.get(0), &msg.own)?;
        let mut frame = Frame {
            tick: msg.tick,
            players: ahead.players.clone(),
            movers: ahead.movers.clone(),
            own: Entities(vec![(0, own)]),
            ..Frame::default()
        };
        frame.players.remove(&msg.removed);
        frame.movers.remove(&msg.removed_movers);
        for d in &msg.players {
            let f = apply(ahead.players.get(d.id), d)?;
            frame.players.set(d.id, f);
        }
        for d in &msg.movers {
            let f = apply(ahead.movers.get(d.id), d)?;
            frame.movers.set(d.id, f);
        }
        let snapshot = frame.snapshot(feedback, !self.no_others)?;
        frame.set_motion(base);
        self.newest = msg.tick;
        self.history.push_back(frame);
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        Ok(Some(snapshot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movement::MoveCommand;
    use crate::protocol::encode;
    use crate::protocol::SnapshotMsg;
    use crate::sim::PlayerSlot;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The message the datagram stands for, built the plain way (lookups by id): the
    /// oracle of the writer's merge.
    fn oracle(frame: &Frame, base: &Frame, fb: Feedback) -> SnapshotMsg {
        fn delta<const N: usize>(
            id: u32,
            o: Option<&[i64; N]>,
            f: &[i64; N],
        ) -> Option<EntityDelta> {
            let mask = changed(o, f)?;
            let o = o.copied().unwrap_or([0; N]);
            let mut values = crate::protocol::FieldValues::default();
            for i in (0..N).filter(|i| mask & 1 << i != 0) {
                values.push(f[i].wrapping_sub(o[i]));
            }
            Some(EntityDelta { id, mask, values })
        }
        fn deltas<const N: usize>(new: &Entities<N>, old: &Entities<N>) -> Vec<EntityDelta> {
            new.iter()
                .filter_map(|(id, f)| delta(id, old.get(id), f))
                .collect()
        }
        fn gone<const N: usize>(new: &Entities<N>, old: &Entities<N>) -> Vec<u32> {
            old.iter()
                .map(|(id, _)| id)
                .filter(|id| !new.contains(*id))
                .collect()
        }
        // On the wire each id is its gap from the one before.
        fn gaps<'a>(ids: impl Iterator<Item = &'a mut u32>) {
            let mut prev = 0;
            for id in ids {
                (*id, prev) = (*id - prev, *id);
            }
        }
        let mut msg = SnapshotMsg {
            tick: frame.tick,
            baseline: tick_gap(frame.tick, base.tick),
            feedback: fb.to_wire(frame.tick),
            own: delta(0, base.own.get(0), frame.own.get(0).unwrap()).unwrap_or(EntityDelta {
                id: 0,
                mask: 0,
                values: Default::default(),
            }),
            players: deltas(&frame.players, &base.players),
            removed: gone(&frame.players, &base.players),
            movers: deltas(&frame.movers, &base.movers),
            removed_movers: gone(&frame.movers, &base.movers),
        };
        gaps(msg.players.iter_mut().map(|d| &mut d.id));
        gaps(msg.removed.iter_mut());
        gaps(msg.movers.iter_mut().map(|d| &mut d.id));
        gaps(msg.removed_movers.iter_mut());
        msg
    }

    /// The datagram written from a frame and its baseline is byte for byte postcard's
    /// encoding of the message built by lookups, and decodes back to the frame, for
    /// random frames: overlapping and disjoint ids, unchanged, zero, huge and negative
    /// fields, with and without a baseline.
    #[test]
    fn snapshots_are_written_as_the_message_they_stand_for() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let field = |rng: &mut ChaCha8Rng| match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(-3..3),
            2 => rng.gen_range(-100_000..100_000),
            _ => i64::from(rng.gen::<i32>()),
        };
        for round in 0..2000 {
            // Now and then a crowd: more than 127 deltas take a longer count.
            let many = round % 7 == 0;
            let ids_up_to = if many { 1000 } else { 64 };
            let entities = |rng: &mut ChaCha8Rng, n: usize| -> Vec<(u32, [i64; PLAYER_FIELDS])> {
                let mut ids: Vec<u32> = (0..n).map(|_| rng.gen_range(0..ids_up_to)).collect();
                ids.sort_unstable();
                ids.dedup();
                ids.into_iter()
                    .map(|id| (id, std::array::from_fn(|_| field(rng))))
                    .collect()
            };
            let n = rng.gen_range(0..if many { 400 } else { 40 });
            let base_players = entities(&mut rng, n);
            // Some of the baseline's entities again, some changed, some new.
            let mut players = Vec::new();
            for &(id, f) in &base_players {
                match rng.gen_range(0..3) {
                    0 => {}
                    1 => players.push((id, f)),
                    _ => players.push((id, f.map(|v| v ^ 1))),
                }
            }
            let n = rng.gen_range(0..if many { 300 } else { 10 });
            players.extend(entities(&mut rng, n));
            players.sort_by_key(|e| e.0);
            players.dedup_by_key(|e| e.0);
            let three = |v: Vec<(u32, [i64; PLAYER_FIELDS])>| -> Vec<(u32, [i64; 3])> {
                v.into_iter()
                    .map(|(id, f)| (id, [f[0], f[1], f[2]]))
                    .collect()
            };
            let has_base = round % 5 != 0;
            let base = Frame {
                tick: if has_base { 100 } else { 0 },
                players: Entities::sorted(if has_base {
                    base_players.clone()
                } else {
                    vec![]
                }),
                movers: Entities::sorted(if has_base {
                    three(base_players)
                } else {
                    vec![]
                }),
                own: Entities::sorted(if has_base {
                    vec![(0, std::array::from_fn(|_| field(&mut rng)))]
                } else {
                    vec![]
                }),
                ..Frame::default()
            };
            // The own state unchanged now and then: a delta with no field.
            let own = match (round % 3, base.own.get(0)) {
                (0, Some(o)) => *o,
                _ => std::array::from_fn(|_| field(&mut rng)),
            };
            let frame = Frame {
                tick: 104,
                movers: Entities::sorted(three(players.clone())),
                players: Entities::sorted(players),
                own: Entities::sorted(vec![(0, own)]),
                ..Frame::default()
            };
            let fb = Feedback {
                last_command: rng.gen(),
                input_lead: rng.gen_bool(0.5).then(|| rng.gen()),
                ..Feedback::default()
            };
            let want = encode(&ServerDatagram::Snapshot(oracle(&frame, &base, fb)));
            let got = write_snapshot(&frame, &base, fb);
            assert_eq!(got, want, "round {round}");
            let Ok(ServerDatagram::Snapshot(mut msg)) = decode("snapshot", &got) else {
                panic!("not a snapshot");
            };
            ids_from_gaps(msg.players.iter_mut().map(|d| &mut d.id)).unwrap();
            ids_from_gaps(msg.removed.iter_mut()).unwrap();
            let mut back = base.players.clone();
            back.remove(&msg.removed);
            for d in &msg.players {
                back.set(d.id, apply(base.players.get(d.id), d).unwrap());
            }
            assert_eq!(back.0, frame.players.0, "round {round}");
            assert_eq!(
                apply(base.own.get(0), &msg.own).unwrap(),
                own,
                "round {round}"
            );
        }
    }

    /// Ids whose gaps add up past `u32` are refused, not wrapped.
    #[test]
    fn a_snapshot_whose_id_gaps_overflow_is_refused() {
        let delta = |id| EntityDelta {
            id,
            mask: 0,
            values: Default::default(),
        };
        let msg = |players| SnapshotMsg {
            tick: 5,
            baseline: 0,
            feedback: Feedback::default(),
            own: delta(0),
            players,
            removed: vec![],
            movers: vec![],
            removed_movers: vec![],
        };
        let bytes = encode(&ServerDatagram::Snapshot(msg(vec![
            delta(u32::MAX),
            delta(1),
        ])));
        let err = SnapshotDecoder::new().decode(&bytes).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        let bytes = encode(&ServerDatagram::Snapshot(msg(vec![delta(7), delta(3)])));
        let snap = SnapshotDecoder::new().decode(&bytes).unwrap().unwrap();
        assert_eq!(snap.players.keys().copied().collect::<Vec<_>>(), [7, 10]);
    }

    /// The simulation of the embedded arena.
    fn arena_sim() -> Sim {
        let text = include_str!("../../../maps/arena.map");
        let map = crate::MapData::parse_map(text).unwrap();
        let model = std::sync::Arc::new(crate::CollisionModel::build(&map));
        let movement = crate::MoveConfig::default().validate().unwrap();
        Sim::from_map(model, &map, movement).0
    }

    /// Clients that joined together, all of one snapshot parity (even ids: the server
    /// writes their snapshots on the same ticks), choose their players afresh on their own
    /// turns: each once every `VIEW_REFRESH` snapshots, and about a quarter of them at
    /// each snapshot, never all at once, not even when someone leaves.
    #[test]
    fn clients_that_joined_together_choose_their_players_on_turns_of_their_own() {
        let sim = arena_sim();
        let mut world = sim.new_state();
        world.tick = 1;
        let ids: Vec<PlayerId> = (0..400).map(|i| 2 * i).collect();
        for &id in &ids {
            let p = DVec3::new(f64::from(id % 40) * 40.0, f64::from(id / 40) * 40.0, 0.0);
            let slot = PlayerSlot {
                state: PlayerState::at(p),
                last_command: MoveCommand::default(),
            };
            world.players.insert(id, slot);
        }
        let mut crowd = Crowd::new(&sim, &world, 16);
        let mut encoders: Vec<SnapshotEncoder> =
            ids.iter().map(|_| SnapshotEncoder::new()).collect();
        let mut chosen = vec![0u32; ids.len()];
        let rounds = 8 * VIEW_REFRESH;
        // The last client leaves halfway (the crowd's membership changes).
        let (leaver, leaves_at) = (ids[ids.len() - 1], rounds / 2);
        for round in 0..rounds {
            world.tick = 1 + u64::from(round);
            if round == leaves_at {
                world.remove_player(leaver);
                crowd.renew(&sim, &world, 16);
            }
            let mut now = 0;
            for (i, (&id, e)) in ids.iter().zip(&mut encoders).enumerate() {
                if id == leaver && round >= leaves_at {
                    continue;
                }
                e.encode_in(&world, &crowd, id, Feedback::default(), 16, 1200)
                    .unwrap();
                // A choice made for this snapshot has served it alone.
                if e.view.uses == 1 && round > 0 {
                    now += 1;
                    chosen[i] += 1;
                }
            }
            if round > 0 {
                let even = ids.len() / VIEW_REFRESH as usize;
                assert!(
                    now > even / 2 && now < even * 3 / 2,
                    "snapshot {round}: {now} of {} clients chose afresh",
                    ids.len()
                );
            }
        }
        // Every client once per turn (the first choice, at round 0, not counted).
        for (c, id) in chosen.iter().zip(&ids).filter(|(_, id)| **id != leaver) {
            assert!(
                (rounds / VIEW_REFRESH - 1..=rounds / VIEW_REFRESH).contains(c),
                "client {id} chose {c} times in {rounds} snapshots"
            );
        }
    }

    /// The crowd's nearest players are exactly those measuring everyone gives, in the same
    /// order (ties by id), for crowds packed, spread, stacked on one spot and split far
    /// apart, and any `k`.
    #[test]
    fn the_crowd_finds_exactly_the_nearest_players() {
        let sim = arena_sim();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut out = Vec::new();
        for round in 0..200 {
            let n = rng.gen_range(1..400);
            let spread: f64 = [0.0, 64.0, 1000.0, 20000.0][round % 4];
            let mut world = sim.new_state();
            world.tick = 1;
            for _ in 0..n {
                let id = rng.gen_range(0..100_000u32);
                // Some pairs share a spot (ties), some stand in a far cluster.
                let far = if rng.gen_bool(0.1) { 50_000.0 } else { 0.0 };
                let p = DVec3::new(
                    (rng.gen_range(-1.0..1.0f64) * spread + far).round(),
                    (rng.gen_range(-1.0..1.0f64) * spread).round(),
                    (rng.gen_range(-1.0..1.0f64) * spread * 0.1).round(),
                );
                world.players.insert(
                    id,
                    PlayerSlot {
                        state: PlayerState::at(p),
                        last_command: MoveCommand::default(),
                    },
                );
            }
            let crowd = Crowd::new(&sim, &world, rng.gen_range(0..64));
            let ids: Vec<PlayerId> = world.players.keys().copied().collect();
            for q in 0..6 {
                // Mostly from a player; once from anywhere, by someone not in the world.
                let (me, o) = if q < 5 {
                    let me = ids[rng.gen_range(0..ids.len())];
                    (me, world.player(me).unwrap().origin())
                } else {
                    let far = [0.0, 1000.0, 100_000.0, 1e300][rng.gen_range(0..4)];
                    let mut at = || (rng.gen_range(-1.0..1.0f64) * (spread + far)).round();
                    (u32::MAX, DVec3::new(at(), at(), at()))
                };
                let k = rng.gen_range(0..64);
                let mut want: Vec<(f64, PlayerId)> = world
                    .players
                    .iter()
                    .filter(|(id, _)| **id != me)
                    .map(|(id, p)| ((p.state.origin() - o).length_squared(), *id))
                    .collect();
                want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                want.truncate(k);
                crowd.nearest(me, o, k, &mut out);
                assert_eq!(out, want, "round {round}: {n} players, k {k}");
            }
        }
    }
}
