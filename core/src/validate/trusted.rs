//! The trusted-client tick: movers advance, then each player's claim is judged, and a
//! failing one again as its client saw the world (exactly, from what the server sent it
//! and holds of its path, else by looser ways reaching back over the kept world); and
//! the same tick for one player on its own ([`ClaimValidator`], what `expel validate`
//! runs). The rules a claim is judged by are in `claims`.

use super::claims::{claimable, ClaimOutcome, ContactHulls, TickView, MAX_SPAN};
use super::{Judge, Violation, ViolationKind};
use crate::geom::Aabb;
use crate::movement::{MoveCommand, PlayerState};
use crate::mover::MoverState;
use crate::sim::{PlayerBox, PlayerId, PlayerSlot, Sim, SimScratch, WorldState};
use std::collections::{BTreeMap, VecDeque};

/// A player's claim for a tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TickClaim {
    /// The state claimed.
    pub state: PlayerState,
    /// See [`TickView::span`].
    pub span: u32,
    /// The newest snapshot the client had when it sent the claim (0: none): the others
    /// it predicted against stood as that tick left them.
    pub seen: u64,
}

/// Snapshots before the acknowledged one a claim may have been predicted against: a
/// claim travels in `expel_protocol::INPUT_REDUNDANCY` messages, and the first copy
/// to arrive is judged.
const SEEN_BACK: u64 = 8;
/// Work a claim's retries may take, whatever it says it saw: each tick of the kept world
/// looked at, each mover tick run on and each judgement counts one. The retries reach
/// back from a little before the acknowledged snapshot and no further than what is kept,
/// which bounds them already (under a thousand); this is the fixed ceiling over all of
/// them. Past it the claim stands rejected.
pub const RETRY_BUDGET: u32 = 1024;
/// How far from a claim the others whose riding or blocking a client's run of the
/// movers takes in may stand (the lifts and doors near a claim are smaller than this).
const RUN_ON_REACH: f64 = 512.0;

/// What the snapshots of recent ticks showed, so what a claim acknowledging one was
/// predicted against: the players' states and the movers' states after each tick.
#[derive(Debug, Default)]
pub struct SeenWorld {
    ticks: VecDeque<Seen>,
}

/// One tick of [`SeenWorld`].
#[derive(Debug, Default)]
struct Seen {
    tick: u64,
    players: Vec<(PlayerId, PlayerState)>,
    movers: Vec<MoverState>,
}

impl SeenWorld {
    /// Ticks kept: as far back as a command may be stamped ahead.
    const KEPT: usize = super::MAX_AHEAD as usize;

    /// Records the world after its tick.
    pub fn record(&mut self, world: &WorldState) {
        let mut seen = if self.ticks.len() >= Self::KEPT {
            self.ticks.pop_front().unwrap_or_default()
        } else {
            Seen::default()
        };
        seen.tick = world.tick;
        seen.players.clear();
        seen.players
            .extend(world.players.iter().map(|(id, p)| (*id, p.state)));
        seen.movers.clone_from(&world.movers);
        self.ticks.push_back(seen);
    }

    /// The oldest tick kept.
    fn oldest(&self) -> Option<u64> {
        self.ticks.front().map(|s| s.tick)
    }

    fn get(&self, tick: u64) -> Option<&Seen> {
        let first = self.ticks.front()?.tick;
        let i = usize::try_from(tick.checked_sub(first)?).ok()?;
        self.ticks.get(i).filter(|s| s.tick == tick)
    }

    /// The boxes of the players but `me` after `tick` into `out` (none when it is not
    /// kept).
    fn boxes(&self, sim: &Sim, tick: u64, me: PlayerId, out: &mut Vec<PlayerBox>) {
        out.clear();
        if let Some(seen) = self.get(tick) {
            out.extend(
                seen.players
                    .iter()
                    .filter(|(id, _)| *id != me)
                    .filter_map(|(id, p)| sim.player_box(*id, p)),
            );
        }
    }
}

/// What the server knows of what its clients were shown and did: the protocol's records,
/// for judging a claim exactly as its client made it.
pub trait ClientRecords {
    /// Puts the players as client `id` decoded them from the snapshot of `tick` into
    /// `world.players` (its own among them), and the movers it showed over
    /// `world.movers`; false when that snapshot is not known.
    fn shown(&mut self, id: PlayerId, tick: u64, world: &mut WorldState) -> bool;
    /// Client `id`'s prediction for `tick` replayed from the snapshot of `from` with its
    /// own commands (what a client predicts after taking a correction there); `None`
    /// when the snapshot or a command is not known. `movers` stand in for those it was
    /// never shown.
    fn replayed(
        &mut self,
        id: PlayerId,
        from: u64,
        tick: u64,
        movers: &[MoverState],
    ) -> Option<PlayerState>;
}

/// No records: claims are judged by the looser ways alone (an offline validator).
pub struct NoRecords;

impl ClientRecords for NoRecords {
    fn shown(&mut self, _: PlayerId, _: u64, _: &mut WorldState) -> bool {
        false
    }
    fn replayed(&mut self, _: PlayerId, _: u64, _: u64, _: &[MoverState]) -> Option<PlayerState> {
        None
    }
}

/// What a trusted-client tick did to one player.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimReport {
    /// The player.
    pub id: PlayerId,
    /// The judgement of its claim; `None` when none came for the tick and the player
    /// held its state.
    pub outcome: Option<ClaimOutcome>,
    /// What its retries cost: ticks of the kept world looked at and judgements made, at
    /// most [`RETRY_BUDGET`] (0 when it was accepted at once, or none came).
    pub retry_cost: u32,
}

impl Judge<'_> {
    /// A trusted-client tick: movers advance (carrying and pushing players), then each
    /// player with a claim for the tick is judged against the others as they stood at its
    /// start. A player without one holds its state (the client's path stays the one
    /// judged; its next claim is judged over the gap, see [`TickView::span`]).
    /// A claim that fails is judged again as the client saw the world: first exactly,
    /// from what `records` hold of what its acknowledged snapshot showed it and of its
    /// path, then by looser ways (the others and movers as recent ticks left them).
    pub fn step_claims(
        &self,
        world: &mut WorldState,
        claims: &BTreeMap<PlayerId, TickClaim>,
        seen: &SeenWorld,
        records: &mut dyn ClientRecords,
        s: &mut SimScratch,
    ) -> Vec<ClaimReport> {
        let probes = ContactHulls::new(self.sim.movement());
        self.step_claims_with(&probes, world, claims, seen, records, s)
    }

    /// [`Judge::step_claims`] with the contact probes built beforehand (a validator that
    /// judges one tick per call keeps them).
    fn step_claims_with(
        &self,
        probes: &ContactHulls,
        world: &mut WorldState,
        claims: &BTreeMap<PlayerId, TickClaim>,
        seen: &SeenWorld,
        records: &mut dyn ClientRecords,
        s: &mut SimScratch,
    ) -> Vec<ClaimReport> {
        self.sim.advance_movers(world, s);
        let tick = world.tick.wrapping_add(1);
        let mut poses = Vec::new();
        self.sim.poses(&world.movers, &mut poses);
        let boxes: Vec<PlayerBox> = world
            .players
            .iter()
            .filter_map(|(id, p)| self.sim.player_box(*id, &p.state))
            .collect();
        // The entities move as in an authoritative tick (their impacts wait in `s`).
        s.entity_report = self.sim.step_entities(world, &poses, &boxes, s);
        let mut reports = Vec::with_capacity(world.players.len());
        for (id, slot) in world.players.iter_mut() {
            let prev = slot.state;
            let cost = std::cell::Cell::new(0);
            let outcome = claims.get(id).map(|claim| {
                let view = TickView {
                    tick,
                    poses: &poses,
                    others: &boxes,
                    span: claim.span,
                };
                let outcome =
                    super::claims::check_claim(self, *id, &prev, &claim.state, view, probes, s);
                // The client's view is known only while the snapshot it acknowledged is
                // kept: past it (an acknowledgement of long ago, or none) the world as it
                // is decides, whatever the acknowledgement.
                if outcome.violation.is_none() || seen.get(claim.seen).is_none() {
                    return outcome;
                }
                let mut retry = Retry {
                    id: *id,
                    prev: &prev,
                    claim,
                    view,
                    seen,
                    probes,
                    cost: &cost,
                };
                if let Some(o) = self.as_the_client_ran(&retry, records, s) {
                    return o;
                }
                if let Some(o) = self.as_the_client_saw(&retry, s) {
                    return o;
                }
                // Held since a correction (or claims that went missing), the player stood
                // still in every snapshot since; the client took up its path again from
                // the newest it had, so it may have moved over fewer ticks than the span.
                let since_seen = tick.saturating_sub(claim.seen);
                if claim.seen < tick && since_seen < u64::from(claim.span) {
                    retry.view.span = since_seen as u32;
                    if let Some(Some(o)) = retry.accepted(*self, retry.view, s) {
                        return o;
                    }
                    if let Some(o) = self.as_the_client_saw(&retry, s) {
                        return o;
                    }
                }
                outcome
            });
            if let Some(o) = &outcome {
                slot.state = o.state;
            }
            reports.push(ClaimReport {
                id: *id,
                outcome,
                retry_cost: cost.get(),
            });
        }
        world.tick = tick;
        reports
    }
}

/// A claim that failed against the world as it is, and what it is judged again with.
struct Retry<'a> {
    id: PlayerId,
    prev: &'a PlayerState,
    claim: &'a TickClaim,
    view: TickView<'a>,
    seen: &'a SeenWorld,
    probes: &'a ContactHulls,
    /// Work done so far (see [`RETRY_BUDGET`]).
    cost: &'a std::cell::Cell<u32>,
}

impl Retry<'_> {
    /// Takes `n` from the budget; `None` when it is spent.
    fn spend(&self, n: u32) -> Option<()> {
        let left = RETRY_BUDGET.saturating_sub(self.cost.get());
        self.cost
            .set(self.cost.get().saturating_add(n).min(RETRY_BUDGET));
        (left >= n).then_some(())
    }

    /// Judges the claim with the world seen as `view` says: the outcome if accepted;
    /// `None` once the budget is spent.
    fn accepted(
        &self,
        judge: Judge<'_>,
        view: TickView<'_>,
        s: &mut SimScratch,
    ) -> Option<Option<ClaimOutcome>> {
        self.spend(1)?;
        let o = super::claims::check_claim(
            &judge,
            self.id,
            self.prev,
            &self.claim.state,
            view,
            self.probes,
            s,
        );
        Some(o.accepted.then_some(o))
    }

    /// The first tick a retry looks at: a little before the acknowledged snapshot, and
    /// never before what is kept.
    fn first(&self) -> u64 {
        let back = self.claim.seen.saturating_sub(SEEN_BACK);
        back.max(self.seen.oldest().unwrap_or(back))
    }
}

impl Judge<'_> {
    /// Judges a claim against the world exactly as the client predicted it. A trusted
    /// client runs the movers on from each snapshot it takes: from the movers' states
    /// there, the others where it showed them (carried and pushed by the movers as the
    /// ticks go), and itself along its own path, tick by tick. While the server accepted
    /// that path, its own states are the path, so it runs the same ticks and judges the
    /// claim against those movers and those others. The accepted outcome, if any.
    fn as_the_client_ran(
        &self,
        r: &Retry,
        records: &mut dyn ClientRecords,
        s: &mut SimScratch,
    ) -> Option<ClaimOutcome> {
        // The snapshot it acknowledged, or (for a later copy of the claim) one of the few
        // before it; a tick with no snapshot for this client costs nothing.
        let mut w = WorldState::default();
        for from in (r.claim.seen.saturating_sub(SEEN_BACK)..=r.claim.seen).rev() {
            let Some(start) = r.seen.get(from) else {
                continue;
            };
            w.tick = from;
            w.players.clear();
            w.movers.clone_from(&start.movers);
            if !records.shown(r.id, from, &mut w) {
                continue;
            }
            if let Some(o) = self.run_as_the_client(r, &mut w, s)? {
                return Some(o);
            }
            // Corrected there, the client replayed its own commands from that snapshot:
            // a claim that is that replay is the rules run in the world it was shown.
            r.spend(u32::try_from(r.view.tick.saturating_sub(from)).unwrap_or(u32::MAX))?;
            if records.replayed(r.id, from, r.view.tick, &start.movers) == Some(r.claim.state) {
                let mut state = r.claim.state;
                state.flags = claimable(&state);
                return Some(ClaimOutcome {
                    state,
                    accepted: true,
                    violation: None,
                });
            }
        }
        None
    }

    /// [`Sim::as_the_client_ran`] from one snapshot, shown in `w`: the outcome if
    /// accepted; `None` once the budget is spent.
    fn run_as_the_client(
        &self,
        r: &Retry,
        w: &mut WorldState,
        s: &mut SimScratch,
    ) -> Option<Option<ClaimOutcome>> {
        let tick = r.view.tick;
        let Some(ticks) = tick
            .checked_sub(w.tick)
            .filter(|t| (1..=2 * MAX_SPAN as u64).contains(t))
        else {
            return Some(None);
        };
        r.spend(u32::try_from(ticks).unwrap_or(u32::MAX))?;
        while w.tick < tick {
            // Where the server held the player after the tick before.
            let own = r.seen.get(w.tick).and_then(|then| {
                let i = then.players.binary_search_by_key(&r.id, |p| p.0).ok()?;
                Some(then.players[i].1)
            });
            let Some(state) = own else {
                return Some(None);
            };
            let last_command = MoveCommand::default();
            w.players.insert(
                r.id,
                PlayerSlot {
                    state,
                    last_command,
                },
            );
            self.sim.advance_movers(w, s);
            w.tick += 1;
        }
        let mut poses = Vec::new();
        self.sim.poses(&w.movers, &mut poses);
        let others: Vec<PlayerBox> = w
            .players
            .iter()
            .filter(|(id, _)| **id != r.id)
            .filter_map(|(id, p)| self.sim.player_box(*id, &p.state))
            .collect();
        let view = TickView {
            poses: &poses,
            others: &others,
            ..r.view
        };
        r.accepted(*self, view, s)
    }

    /// Judges a claim against the world as the client saw it, once it failed against the
    /// world as it is: the others where a snapshot showed them (the one it acknowledged,
    /// or for an older copy of the claim one of the few before: a claim honest there is
    /// honest, the players it met there have moved on since), then the movers as it may
    /// have run them. The accepted outcome, if any.
    fn as_the_client_saw(&self, r: &Retry, s: &mut SimScratch) -> Option<ClaimOutcome> {
        let mut others = Vec::new();
        for t in (r.first()..=r.claim.seen).rev() {
            r.spend(1)?;
            r.seen.boxes(self.sim, t, r.id, &mut others);
            if others.is_empty() {
                continue;
            }
            let then = TickView {
                others: &others,
                ..r.view
            };
            if let Some(o) = r.accepted(*self, then, s)? {
                return Some(o);
            }
        }
        self.with_the_clients_movers(r, s)
    }

    /// Judges a claim against the movers as the client may have run them, two ways:
    ///
    /// - late: a mover that another player set going where the client could not see it
    ///   yet starts late on the client's side, so there it stands where the server's stood
    ///   some ticks ago (no earlier than a little before the snapshot it acknowledged);
    /// - run on: from a snapshot the client takes the movers' states and runs them on with
    ///   the others standing where it showed them, so a mover that others rode or blocked
    ///   since stands where the server's never stood.
    ///
    /// Only the movers near the claim count, and a set of poses that leaves them where
    /// they were tried last is not tried again (nothing is tried when none of them moved),
    /// against the others where they stand and where the acknowledged snapshot showed
    /// them. The accepted outcome, if any.
    fn with_the_clients_movers(&self, r: &Retry, s: &mut SimScratch) -> Option<ClaimOutcome> {
        let Retry {
            id,
            prev,
            claim,
            view,
            seen,
            ..
        } = *r;
        let stand = self.sim.movement().stand().bounds();
        let zone =
            super::claims::judged_zone(self, stand.offset(prev.origin()), claim.state.origin());
        let mut near = Vec::new();
        self.sim.movers_near(&zone, view.poses, &mut near);
        let now: Vec<usize> = near.iter().map(|&(i, _)| i).collect();
        let mut acked = Vec::new();
        seen.boxes(self.sim, claim.seen, id, &mut acked);
        let first = r.first();
        let late = (first..view.tick).rev().map(|t| (t, false));
        // Running on costs a mover tick per tick since the snapshot: not past a long span.
        let run_on = (first.max(view.tick.saturating_sub(2 * u64::from(MAX_SPAN)))..=claim.seen)
            .rev()
            .map(|t| (t, true));
        let (mut poses, mut tried) = (Vec::new(), view.poses.to_vec());
        let mut any_near = !now.is_empty();
        for (t, run_on) in late.chain(run_on) {
            // Running the movers on costs a mover tick per tick since the snapshot.
            let ticks = if run_on {
                view.tick.saturating_sub(t)
            } else {
                1
            };
            r.spend(u32::try_from(ticks).unwrap_or(u32::MAX))?;
            let Some(then) = seen.get(t) else {
                continue;
            };
            if run_on {
                // No mover came near the claim at any tick kept: none ran on will.
                if !any_near {
                    break;
                }
                let states = self.run_movers_on(id, prev, then, zone, view.tick, s);
                self.sim.poses(&states, &mut poses);
            } else {
                self.sim.poses(&then.movers, &mut poses);
            }
            self.sim.movers_near(&zone, &poses, &mut near);
            any_near |= !near.is_empty();
            let moved = now
                .iter()
                .chain(near.iter().map(|(i, _)| i))
                .any(|&i| poses.get(i) != tried.get(i));
            if !moved {
                continue;
            }
            let acked = (!acked.is_empty()).then_some(&acked[..]);
            for others in [Some(view.others), acked].into_iter().flatten() {
                let then = TickView {
                    poses: &poses,
                    others,
                    ..view
                };
                if let Some(o) = r.accepted(*self, then, s)? {
                    return Some(o);
                }
            }
            tried.clone_from(&poses);
        }
        None
    }

    /// The movers' states after `tick` as a client runs them on from the snapshot of
    /// `from`: the others standing where it showed them, player `id` where it was. Only
    /// the others within [`RUN_ON_REACH`] of `zone` ride or block them (a thousand
    /// players would make each tick of it a crowd's).
    fn run_movers_on(
        &self,
        id: PlayerId,
        at: &PlayerState,
        from: &Seen,
        zone: Aabb,
        tick: u64,
        s: &mut SimScratch,
    ) -> Vec<MoverState> {
        let slot = |state: PlayerState| PlayerSlot {
            state,
            last_command: MoveCommand::default(),
        };
        let reach = zone.expand(RUN_ON_REACH);
        let mut players: BTreeMap<PlayerId, PlayerSlot> = from
            .players
            .iter()
            .filter(|(p, state)| {
                self.sim
                    .player_box(*p, state)
                    .is_some_and(|b| b.bounds.overlaps(&reach))
            })
            .map(|&(p, state)| (p, slot(state)))
            .collect();
        players.insert(id, slot(*at));
        let mut w = WorldState {
            tick: from.tick,
            players,
            movers: from.movers.clone(),
            entities: Default::default(),
        };
        while w.tick < tick {
            self.sim.advance_movers(&mut w, s);
            w.tick += 1;
        }
        w.movers
    }
}

/// One player's trusted-client validation on its own, with the map's movers running as
/// in [`Sim::step`] (what `expel validate` runs).
#[derive(Debug)]
pub struct ClaimValidator {
    world: WorldState,
    scratch: SimScratch,
    probes: ContactHulls,
}

/// The player id the standalone validator uses (as `expel sim` does).
const SOLO: PlayerId = PlayerId(0);

impl ClaimValidator {
    /// A player starting at `start`.
    pub fn new(sim: &Sim, start: PlayerState) -> Result<ClaimValidator, crate::sim::SimError> {
        let mut world = sim.new_state();
        sim.add_player(&mut world, SOLO, start)?;
        Ok(ClaimValidator {
            world,
            scratch: SimScratch::new(),
            probes: ContactHulls::new(sim.movement()),
        })
    }

    /// The last accepted (or corrected) state.
    pub fn state(&self) -> PlayerState {
        self.world.players[&SOLO].state
    }

    /// Advances the movers one tick and judges the claim for it.
    pub fn check(&mut self, sim: &Sim, claim: &PlayerState) -> ClaimOutcome {
        let claims = BTreeMap::from([(
            SOLO,
            TickClaim {
                state: *claim,
                span: 1,
                seen: 0,
            },
        )]);
        let reports = Judge::new(sim).step_claims_with(
            &self.probes,
            &mut self.world,
            &claims,
            &SeenWorld::default(),
            &mut NoRecords,
            &mut self.scratch,
        );
        // The player never leaves this world, so its claim is always judged.
        let judged = reports.into_iter().find_map(|r| r.outcome);
        judged.unwrap_or_else(|| ClaimOutcome {
            state: self.state(),
            accepted: false,
            violation: None,
        })
    }

    /// A tick whose claim could not be read: the movers advance, the player stays, at rest.
    pub fn refuse(&mut self, sim: &Sim, kind: ViolationKind, evidence: String) -> ClaimOutcome {
        sim.advance_movers(&mut self.world, &mut self.scratch);
        self.world.tick = self.world.tick.wrapping_add(1);
        let state = PlayerState {
            velocity: [0; 3],
            ..self.state()
        };
        self.set(state);
        ClaimOutcome {
            state,
            accepted: false,
            violation: Some(Violation {
                kind,
                tick: self.world.tick,
                evidence,
            }),
        }
    }

    fn set(&mut self, state: PlayerState) {
        if let Some(slot) = self.world.players.get_mut(&SOLO) {
            slot.state = state;
        }
    }
}
