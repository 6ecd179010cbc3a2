//! The server's side: one client's snapshot history, whom it sees, and the datagram written against its acknowledged baseline.

use super::*;

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

/// Most other players a snapshot shows: those within [`EXACT_REACH`] are all shown even
/// past the interest (a brawl of forty shows all forty), up to this many. Each costs the
/// tick's workers its share of every snapshot written: 64 cost the light bots' crowd a
/// third more of the workers' time than 32 did, 48 about a tenth.
pub const MAX_VIEW: usize = 48;

/// The players a client was last sent: crowd indices in id order.
#[derive(Debug, Default)]
pub(super) struct View {
    chosen: Vec<u32>,
    /// The [`Crowd::generation`] the indices belong to (0: none).
    generation: u64,
    /// Snapshots written from this choice.
    pub(super) uses: u32,
    from: DVec3,
    interest: usize,
}

impl View {
    /// The crowd changed (someone joined or left): the players last sent (`last`) who are
    /// still in it stay chosen, at their new places, until the client's turn. Every
    /// client choosing afresh at once made each join and leave a slow tick.
    fn follow(&mut self, crowd: &Crowd, last: Option<&Scene>) {
        if self.generation == 0 || self.generation == crowd.generation {
            return;
        }
        if let Some(last) = last {
            self.chosen.clear();
            let ids = last.players.0.iter();
            (self.chosen).extend(ids.filter_map(|(id, _)| crowd.index_of(PlayerId(*id))));
            self.generation = crowd.generation;
        }
    }
}

/// The server's snapshot state for one client.
#[derive(Debug, Default)]
pub struct SnapshotEncoder {
    /// Frames sent, in tick order.
    history: VecDeque<Scene>,
    acked: u64,
    /// Snapshots sent in full because no baseline was usable.
    pub full_sends: u64,
    /// The scene that last left the history, whose lists the next scene reuses.
    spare: Scene,
    /// The nearest players' (squared distance, crowd index).
    near: Vec<Near>,
    pub(super) view: View,
    /// Snapshots written, for the turn of the view's refresh.
    written: u64,
    /// The baseline carried on to the tick written (see [`Scene::carried_to`]).
    ahead: Scene,
    /// The game entities in scope for the snapshot being written, nearest first.
    near_entities: Vec<(f64, usize)>,
    /// What its snapshots held back, since [`SnapshotEncoder::take_held`].
    counts: Held,
    /// Those entities' fields, in id order (the same order).
    entities: Entities<ENTITY_FIELDS>,
    /// What the budget's choices are worked out in, reused.
    fit: FitScratch,
    /// The index in [`SQUEEZE`] the last snapshot settled on: the next starts there, or
    /// a step below on its probe turns (see `fit::probe_turn`).
    squeezed: usize,
}

/// Whether the `written`-th snapshot of client `me` is its turn to choose its players
/// afresh: one in [`VIEW_REFRESH`], at an offset drawn from the id. Clients that joined
/// together (or were all made to choose at once by a change of the crowd) would
/// otherwise choose together, and one tick in four carried every client's choice.
fn refresh_turn(me: PlayerId, written: u64) -> bool {
    let offset = mixed(me) % u64::from(VIEW_REFRESH);
    written
        .wrapping_add(offset)
        .is_multiple_of(u64::from(VIEW_REFRESH))
}

/// An id's bits mixed (Fibonacci hashing), for turns drawn from it: ids of one snapshot
/// parity, or in one run, spread over every turn.
pub(super) fn mixed(id: PlayerId) -> u64 {
    u64::from(id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
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

    /// The ticks of the snapshots held (the last [`HISTORY`] written), oldest first.
    pub fn sent_ticks(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.history.iter().map(|s| s.tick)
    }

    /// The other players snapshot `tick` showed, in id order, while it is held.
    pub fn showed(&self, tick: u64) -> Option<impl Iterator<Item = PlayerId> + '_> {
        let i = self.sent(tick)?;
        Some(
            self.history[i]
                .players
                .0
                .iter()
                .map(|(id, _)| PlayerId(*id)),
        )
    }

    /// Where the scene of `tick` is in the history. Acknowledgements are of the last few
    /// snapshots: looking from the newest back reads the scenes just written, where a
    /// binary search would touch cold ones of a thousand clients.
    fn sent(&self, tick: u64) -> Option<usize> {
        let i = self.history.iter().rposition(|f| f.tick <= tick)?;
        (self.history[i].tick == tick).then_some(i)
    }

    /// Into `out`, the boxes of the other players as this client drew them at `view`:
    /// between the scenes of the two snapshots it was sent, `view.k` of the way, in id
    /// order (see [`drawn_between`]). `false` (and none) if either is no longer held.
    /// A shot is judged against these: what the client was shown, a far player held
    /// where its baseline carried it included.
    pub fn drawn_boxes(&self, sim: &Sim, view: &ShotView, out: &mut Vec<PlayerBox>) -> bool {
        out.clear();
        let (Some(a), Some(b)) = (self.sent(view.from), self.sent(view.to)) else {
            return false;
        };
        let (a, b) = (&self.history[a].players, &self.history[b].players);
        for (id, later, f) in a.paired(b) {
            let Some(at) = player_from(f) else {
                continue;
            };
            let then = later.and_then(player_from);
            let leaps = |f: &PlayerFields| flags_from(f[PLAYER_FLAGS]).map_or(0, |(_, n)| n);
            let k = interp::leapt(Some(&leaps(f)), later.map(leaps).as_ref(), view.fraction());
            out.extend(drawn_between(sim, PlayerId(id), &at, then.as_ref(), k));
        }
        true
    }

    /// The newest acknowledged snapshot.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The snapshot of `tick` as the client decoded it, if it is still in the history
    /// (its feedback left at the default: the client's prediction does not read it).
    /// `movers` (the server's, or any the client may hold) takes every mover each scene
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
    /// nearest `interest` other players (and any more within [`EXACT_REACH`], up to
    /// [`MAX_VIEW`]) and the movers within [`MOVER_INTEREST_RADIUS`], as deltas against
    /// the newest acknowledged snapshot. Drops the farthest players until the datagram
    /// fits `max_bytes`; `None` if even the player alone does not fit, `me` is not in
    /// the world, or the world has not stepped yet (tick 0 means "nothing" in
    /// acknowledgements).
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
        let room = Room::datagram(max_bytes);
        self.encode_in(world, &crowd, me, feedback, interest, room)
    }

    /// [`SnapshotEncoder::encode`] with the tick's [`Crowd`] built once for every client,
    /// within `room` (see [`Room`]). Writes the datagram straight from the scene and its
    /// baseline (two id-ordered lists merged), reusing the encoder's buffers: no message
    /// is built on the way.
    pub fn encode_in(
        &mut self,
        world: &WorldState,
        crowd: &Crowd,
        me: PlayerId,
        feedback: Feedback,
        interest: usize,
        room: Room,
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
        let mut scene = std::mem::take(&mut self.spare);
        scene.tick = world.tick;
        scene.own.0.clear();
        let leaps = crowd.leaps_of(crowd.index_of(me));
        scene.own.0.push((0, own_fields(&own, leaps)));
        scene.movers.0.clear();
        scene.movers.0.extend(
            crowd
                .movers
                .iter()
                .filter(|(centre, ..)| (*centre - o).length() <= MOVER_INTEREST_RADIUS)
                .map(|&(_, i, f)| (i, f)),
        );
        let empty = Scene::default();
        let b = base.map_or(&empty, |i| &self.history[i]);
        b.carried_to(world.tick, &mut self.ahead);
        let ahead = &self.ahead;
        crowd.entities_for(
            me,
            o,
            &ahead.entities,
            &mut self.near_entities,
            &mut self.entities,
        );
        // The ends since what the client last acknowledged (if its scene is no longer
        // held, since its tick all the same); a client yet to acknowledge anything is
        // told those since its first snapshot.
        let since = match self.acked {
            0 => self.history.front().map_or(world.tick, |s| s.tick),
            acked => acked,
        };
        let ends = (since, world.tick);
        self.counts.ends_cut += crowd.ends_for(me, o, ends, &ahead.entities, &mut scene.ends);
        let written = self.written;
        let turn = refresh_turn(me, written);
        self.written = self.written.wrapping_add(1);
        let exact = match base {
            // The acknowledged snapshot's age and the commands' lead: the span of the
            // client's prediction from this snapshot, about.
            Some(_) => {
                let lead = feedback.input_lead.unwrap_or(0).max(0) as u64;
                let span = world.tick.saturating_sub(self.acked).saturating_add(lead);
                exact_reach(span as f64 * crowd.closing)
            }
            None => EXACT_REACH,
        };
        let view = &mut self.view;
        view.follow(crowd, self.history.back());
        let reuse = view.generation == crowd.generation
            && !turn
            && view.uses < VIEW_REFRESH
            && view.interest == interest
            && (o - view.from).length_squared() < VIEW_DRIFT * VIEW_DRIFT;
        let mut bytes = None;
        let fwd = crowd
            .index_of(me)
            .map_or(glam::DVec2::X, |i| yaw_dir(crowd.players[i as usize].1[5]));
        let fit = Fit {
            crowd,
            ahead,
            entities: (&self.entities, &self.near_entities),
            me,
            o,
            fwd,
            exact,
            written,
            feedback,
            room,
        };
        if reuse {
            view.uses += 1;
            bytes = fit.write(&mut scene, &view.chosen, &mut self.fit, &mut self.squeezed);
        }
        if bytes.is_none() {
            // Chosen afresh: the nearest, the farthest dropped until the datagram fits.
            let mut near = std::mem::take(&mut self.near);
            crowd.in_view(crowd.index_of(me), o, interest, &mut near);
            let mut count = near.len();
            bytes = loop {
                // Crowd indices follow ids: sorted indices give the id order.
                view.chosen.clear();
                view.chosen.extend(near[..count].iter().map(|n| n.index()));
                view.chosen.sort_unstable();
                let (scratch, squeezed) = (&mut self.fit, &mut self.squeezed);
                if let Some(bytes) = fit.write(&mut scene, &view.chosen, scratch, squeezed) {
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
        let Some(Written {
            bytes,
            held,
            squeezed,
            ends_left,
        }) = bytes
        else {
            self.spare = scene;
            return None;
        };
        self.counts.held += u64::from(held);
        self.counts.squeezed += u64::from(squeezed);
        self.counts.ends_left += ends_left as u64;
        scene.set_motion(b);
        self.history.push_back(scene);
        if self.history.len() > HISTORY {
            self.spare = self.history.pop_front().unwrap_or_default();
        }
        Some(bytes)
    }

    /// What this client's snapshots held back since the last call (see [`Held`]).
    pub fn take_held(&mut self) -> Held {
        std::mem::take(&mut self.counts)
    }
}

/// The snapshot datagram of `scene` against baseline `base` (empty: none; carried on to
/// the scene's tick), byte for byte what postcard makes of the
/// [`ServerDatagram::Snapshot`] it stands for.
pub(super) fn write_snapshot(scene: &Scene, base: &Scene, fb: Feedback) -> Vec<u8> {
    // The variant's index (0), then the message's fields in order: postcard writes a
    // tuple and a struct alike.
    let head = (
        0u32,
        scene.tick,
        tick_gap(scene.tick, base.tick),
        fb.to_wire(scene.tick, base.tick),
    );
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let mut out = postcard::to_extend(&head, std::mem::take(scratch)).unwrap_or_default();
        let (old, new) = (
            base.own.get(0),
            scene.own.get(0).unwrap_or(&[0; OWN_FIELDS]),
        );
        put_delta(&mut out, 0, old, new, changed(old, new).unwrap_or(0));
        put_changes(&mut out, &scene.players, &base.players);
        put_changes(&mut out, &scene.movers, &base.movers);
        // The game's lists: a byte saying which carry anything, then those (see
        // `GameLists`); each is written, and taken out again when it said nothing.
        let at = out.len();
        let mut mask = put_if_any(&mut out, &scene.entities, &base.entities, 0)
            | put_if_any(&mut out, &scene.player_states, &base.player_states, 1)
            | put_if_any(&mut out, &scene.entity_states, &base.entity_states, 2);
        if !scene.ends.is_empty() {
            mask |= 1 << 3;
            let held = |id| {
                base.entities
                    .get(id)
                    .map(|f| [f[0], f[1], f[2]].map(|v| v as i32))
            };
            let wire = (scene.ends.iter()).map(|e| WireEnd::of(e, scene.tick, held(e.id.0)));
            out = postcard::to_extend(&wire.collect::<Vec<_>>(), out).unwrap_or_default();
        }
        out.insert(at, mask);
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
    // The baseline's entries each paired: the rest are gone (counted on the way, so
    // the common case, none gone, merges the two lists once).
    let mut paired = 0;
    for (id, o, n) in new.paired(old) {
        paired += usize::from(o.is_some());
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
    let gone = old.0.len() - paired;
    put_varint(out, gone as u64);
    if gone > 0 {
        let mut prev = 0;
        for id in old.gone_from(new) {
            put_varint(out, (id - prev).into());
            prev = id;
        }
    }
}

/// [`put_changes`] of one of the game's lists, taken out again when it says nothing (no
/// delta, no id removed): its bit of the lists' mask, or 0.
fn put_if_any<const N: usize>(
    out: &mut Vec<u8>,
    new: &Entities<N>,
    old: &Entities<N>,
    bit: u8,
) -> u8 {
    let from = out.len();
    put_changes(out, new, old);
    if out[from..] == [0, 0] {
        out.truncate(from);
        0
    } else {
        1 << bit
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
