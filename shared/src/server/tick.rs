//! The machine's ticks: when they are due, catching up on those it owes, the deadlines
//! looked at with them, and each tick's step and snapshots.

use super::{
    ConnId, Output, Player, ServerMachine, Stage, DEFAULT_DATAGRAM, MAX_BACKLOG, MAX_CATCH_UP,
};
use crate::code::Code;
use crate::input::InputStats;
use crate::predict::{self, replay::Replayer};
use crate::snapshot::{Crowd, Room};
use crate::time::Instant;
use crate::wire::MovementAuthority;
use expel_core::movement::{MoveCommand, Obstacle, PlayerState};
use expel_core::mover::MoverState;
use expel_core::sim::{PlayerId, PlayerReport, Sim, WorldState};
use expel_core::validate::{ClientRecords, TickClaim, Violation};
use std::collections::BTreeMap;

impl ServerMachine {
    /// Steps the ticks due by `now` (and closes connections past their deadlines).
    /// A server behind its clock runs every tick it owes, up to `MAX_CATCH_UP` a call:
    /// all but the last on movement alone (their snapshots would be stale before they were
    /// sent), so catching up costs a fraction of the ticks. Its lateness is its own: the
    /// ticks keep their times, and clients' commands meet the ticks they were made for.
    /// Deadlines are seconds long: they are looked at when a tick is due, not on every
    /// call (the shell calls this for its transport's timers too).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.wall.called(now);
        if self.poll_timeout() > now {
            return;
        }
        let shorter = self.settings.hello_timeout.min(self.settings.input_timeout);
        if self.pace.deadlines_due(now, shorter) {
            self.deadlines(now);
        }
        let due = self.wall.tick(now);
        let backlog = (MAX_BACKLOG.as_secs_f64() * f64::from(self.rate())) as u64;
        if due > self.world.tick + backlog {
            self.skip(due - self.world.tick - 1);
        }
        let last = due.min(self.world.tick + MAX_CATCH_UP);
        let next = self.world.tick + 1;
        self.pace.set_due(due, next, self.wall.tick_at(next), now);
        while self.world.tick < last {
            if self.world.tick + 1 < due {
                self.stats.ticks_late += 1;
            }
            let snapshots = self.world.tick + 1 == last;
            self.step(snapshots);
        }
        if let Some(caught_up) = self.pace.stepped_to(self.world.tick, now) {
            self.events.push_back(caught_up);
        }
    }

    /// Skips `n` ticks the server cannot catch up on: their number passes, nothing moves.
    /// Clients predicted their players through them, so each is corrected; none is judged
    /// for it (its validator stands down over the gap, a trusted claim's span covers it).
    pub(crate) fn skip(&mut self, n: u64) {
        super::log::skipped(self, n);
        self.stats.ticks_skipped += n;
        self.world.tick += n;
        let tick = self.world.tick;
        for s in self.players.values_mut() {
            s.validator.moved_by_server(tick);
            s.unjudged = s
                .unjudged
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            s.expected.retain(|t, _| *t > tick);
        }
    }

    /// Refuses connections that sent no hello in time and kicks players whose input
    /// stopped (when [`Pace::deadlines_due`](super::pace::Pace::deadlines_due) says).
    fn deadlines(&mut self, now: Instant) {
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.stage, Stage::Hello { deadline } if deadline <= now))
            .map(|(id, _)| *id)
            .collect();
        let t = self.settings.hello_timeout.as_secs_f64();
        for conn in late {
            self.refuse(conn, Code::HelloTimeout, format!("no hello within {t} s"));
        }
        let timeout = self.settings.input_timeout;
        // Silence while the server itself was away is not the client's.
        let back = self.wall.back();
        let silent: Vec<ConnId> = self
            .players
            .values()
            .filter(|s| s.last_input.max(back) + timeout <= now)
            .map(|s| s.conn)
            .collect();
        for conn in silent {
            let why = format!("no input for {} s", timeout.as_secs_f64());
            self.kick(conn, Code::InputTimeout, why);
        }
    }

    /// One tick: commands taken, the world stepped (or claims judged), and snapshots
    /// encoded unless `snapshots` is false (a tick caught up on).
    pub(super) fn step(&mut self, snapshots: bool) {
        let now = self.wall.last_call();
        let rate = f64::from(self.rate());
        let refill = self.settings.client_budget as f64 / rate;
        let cap = self.budget_cap();
        let next = self.world.tick + 1;
        // Gathered in id order, then built in one go (no insert walks the tree).
        let mut commands: Vec<(PlayerId, MoveCommand)> = Vec::with_capacity(self.players.len());
        let mut gaps = Vec::new();
        for (id, s) in self.players.iter_mut() {
            s.budget = (s.budget + refill).min(cap);
            if let Some(c) = s.inputs.take(next) {
                commands.push((*id, c));
            }
            let st = s.inputs.stats;
            if st.skipped > s.counted.skipped {
                gaps.extend(
                    s.aim
                        .skipped(next, self.sim.config().tick_rate)
                        .map(|v| (*id, v)),
                );
            }
            add_inputs(&mut self.stats.inputs, &st, &s.counted);
            s.counted = st;
        }
        super::log::commands(self, next, &mut commands);
        for (id, v) in gaps {
            self.violation(id, &v);
        }
        super::replaying::drain(self);
        // The game's rules next, with the commands the tick steps (their buttons): what
        // they do to the world, this tick steps.
        self.game.commands = commands.into_iter().collect();
        super::game::with_rules(self, now, |r, g| r.tick(g));
        let commands = std::mem::take(&mut self.game.commands);
        if self.settings.movement == MovementAuthority::Client {
            self.by_claims();
        } else {
            self.authoritative(&commands);
        }
        super::replaying::drain(self);
        self.stats.ticks += 1;
        self.count_leaps();
        let players = self.players.iter().map(|(id, p)| (*id, p.conn));
        (self.roster).send((self.world.tick, self.rate()), players, &mut self.outputs);
        if snapshots {
            self.send_snapshots();
        }
        super::log::hash(self);
    }

    /// Counts each player's teleport of the tick just stepped (see [`Leaps`]). Movement
    /// moves a player at most its velocity's cap on every axis a tick, a mover's push
    /// as much again at most (every shipped mover is far slower).
    fn count_leaps(&mut self) {
        let m = self.sim.movement();
        let limit = 2.0 * m.config().max_velocity * 3f64.sqrt() * m.dt() + 1.0;
        let mut world = self.world.players.iter().peekable();
        for (id, s) in self.players.iter_mut() {
            while world.next_if(|(w, _)| *w < id).is_some() {}
            if let Some((_, slot)) = world.next_if(|(w, _)| *w == id) {
                s.leaps.stepped(slot.state.origin, limit);
            }
        }
    }

    /// A trusted-client tick: each player's claim for the tick is judged; a rejected one
    /// is a violation and a correction (the snapshot carries the state that stands).
    fn by_claims(&mut self) {
        let next = self.world.tick + 1;
        let mut claims = BTreeMap::new();
        for (id, s) in self.players.iter_mut() {
            if let Some((state, seen)) = s.take_expected(next) {
                let span = s.unjudged + 1;
                claims.insert(*id, TickClaim { state, span, seen });
            }
        }
        self.replayer.renew(self.players.len());
        let mut records = Records {
            sim: &self.sim,
            players: &self.players,
            replayer: &mut self.replayer,
        };
        let reports = expel_core::validate::Judge::new(&self.sim).step_claims(
            &mut self.world,
            &claims,
            &self.seen,
            &mut records,
            &mut self.scratch,
        );
        let (impacts, lost) = self.scratch.take_entity_report();
        self.game.stepped(impacts, &lost, self.world.tick);
        self.seen.record(&self.world);
        self.history.record(&self.world);
        let tick = self.world.tick;
        for r in reports {
            let Some(s) = self.players.get_mut(&r.id) else {
                continue;
            };
            match r.outcome {
                None => {
                    s.unjudged = s.unjudged.saturating_add(1);
                    s.feedback.missed = tick;
                    s.feedback.missed_total += 1;
                    self.stats.claims_missing += 1;
                }
                Some(o) if o.accepted => {
                    s.unjudged = 0;
                    self.stats.claims_accepted += 1;
                }
                Some(o) => {
                    s.unjudged = 0;
                    s.feedback.corrected = tick;
                    s.correcting = true;
                    // Claims already here were made before the client could know.
                    s.expected.clear();
                    self.stats.corrections += 1;
                    self.stats.claims_rejected += 1;
                    if let Some(v) = &o.violation {
                        self.violation(r.id, v);
                    }
                }
            }
        }
    }

    /// An authoritative tick: every player moves by its command; the predictions clients
    /// reported for the tick are compared with the result. Each player's comparison is
    /// its own (over the workers); a report the server's state does
    /// not bear out waits for the ordered pass, where the client's own prediction may be
    /// re-run (under one budget for all), so the outcome does not hang on the threads.
    fn authoritative(&mut self, commands: &BTreeMap<PlayerId, MoveCommand>) {
        let step = self
            .sim
            .step_world(&mut self.world, commands, &mut self.scratch);
        self.game.stepped(step.impacts, &step.lost, self.world.tick);
        self.history.record(&self.world);
        let reports = step.players;
        let tick = self.world.tick;
        let spacing = (super::REPLAY_SPACING * f64::from(self.rate())).max(1.0) as u64;
        self.replayer.renew(self.players.len());
        let (sim, world) = (&*self.sim, &self.world);
        // Players, reports and the world's players all come in id order: one merge, no
        // search per player.
        let mut work: Vec<Compared> = Vec::with_capacity(self.players.len());
        let mut reports = reports.iter().peekable();
        let mut players = world.players.iter().peekable();
        for (id, s) in self.players.iter_mut() {
            while reports.next_if(|r| r.id < *id).is_some() {}
            let report = reports.next_if(|r| r.id == *id);
            while players.next_if(|(p, _)| *p < id).is_some() {}
            let state = players
                .next_if(|(p, _)| *p == id)
                .map(|(_, slot)| &slot.state);
            work.push(Compared {
                id: *id,
                s,
                report,
                state,
                outcome: Outcome::Nothing,
            });
        }
        self.scratch
            .spread_each(&mut work, |c| c.compare(sim, world, tick));
        let mut found = Vec::new();
        for c in work {
            let (claim, ack, contact) = match c.outcome {
                Outcome::Nothing => continue,
                Outcome::Flagged(v) => {
                    found.push((c.id, v));
                    continue;
                }
                Outcome::Apart {
                    claim,
                    ack,
                    contact,
                } => (claim, ack, contact),
            };
            let (id, s) = (c.id, c.s);
            // A report the server's state does not bear out: the client's own prediction
            // says whether an unmodified client would have made it.
            self.stats.corrections += 1;
            let own = (tick >= s.replay_at)
                .then(|| {
                    s.replay_at = tick + spacing;
                    let sent = (&s.snapshots, &s.commands);
                    let (movers, stats) = (&world.movers, &mut self.stats);
                    self.replayer
                        .own_prediction(sim, id, sent, ack, tick, &claim, movers, stats)
                })
                .flatten();
            if let Some(v) = s
                .validator
                .claim(sim, world, id, &claim, contact, own.as_ref())
            {
                found.push((id, v));
            }
        }
        for (id, v) in found {
            self.violation(id, &v);
        }
    }

    /// The most of a client's byte budget it may save up (a quarter second's worth, at
    /// least a datagram), and the most it may spend ahead.
    fn budget_cap(&self) -> f64 {
        (self.settings.client_budget as f64 / 4.0).max(1200.0)
    }

    /// Encodes each due client's snapshot within its byte budget. Clients are spread over
    /// the ticks between snapshots by id, so each tick encodes a share of them; each still
    /// gets one every `rate / snapshot_rate` ticks (or at the end of a catch-up).
    fn send_snapshots(&mut self) {
        let every = u64::from((self.rate() / self.settings.snapshot_rate).max(1));
        let budget_cap = self.budget_cap();
        let tick = self.world.tick;
        let behind = u32::try_from(self.pace.due().saturating_sub(tick)).unwrap_or(u32::MAX);
        // Ticks caught up on sent nothing: whoever was due in them is due now.
        let span = self.pace.snapshots(tick);
        let (interest, trusted) = (
            self.settings.interest,
            self.settings.movement == MovementAuthority::Client,
        );
        let due = |id: PlayerId| (tick + u64::from(id.0)) % every < span;
        if !(self.players.keys()).any(|id| due(*id)) {
            return;
        }
        super::messages::flush_outboxes(self, self.wall.last_call(), due);
        let crowd = match &mut self.crowd {
            Some(c) => {
                c.renew(&self.sim, &self.world, interest);
                c
            }
            None => self
                .crowd
                .insert(Crowd::new(&self.sim, &self.world, interest)),
        };
        crowd.set_spawned(&self.game.spawned);
        crowd.set_ends(&self.game.ends);
        self.stats.entity_ends_cut += self.game.ends.take_overflowed();
        crowd.set_leaps(self.players.iter().map(|(id, s)| (*id, s.leaps.count)));
        crowd.set_states(&self.game.player_states, &self.game.entity_states);
        let crowd = &*crowd;
        let mut due: Vec<(&PlayerId, &mut Player)> = self
            .players
            .iter_mut()
            .filter(|(id, _)| due(**id))
            .collect();
        let (world, conns) = (&self.world, &self.conns);
        // Each client's snapshot from its own encoder: independent, so the workers may
        // share them out; the datagrams still go out in id order.
        let one = |(id, s): &mut (&PlayerId, &mut Player)| {
            let room = conns
                .get(&s.conn)
                .map_or(DEFAULT_DATAGRAM, |c| c.max_datagram);
            let room = Room {
                budget: s.budget.max(0.0) as usize,
                datagram: room,
            };
            s.feedback.last_command = s.inputs.last_applied();
            if !trusted {
                s.feedback.missed_total = s.inputs.stats.missing;
            }
            s.feedback.input_lead = s.inputs.take_lead();
            s.feedback.behind = behind;
            s.snapshots
                .encode_in(world, crowd, **id, s.feedback, interest, room)
        };
        let encoded: Vec<Option<Vec<u8>>> = match self.scratch.spreading() {
            Some(pool) if due.len() >= 2 * expel_core::sim::PLAYERS_PER_WORKER => {
                use rayon::prelude::*;
                pool.install(|| due.par_iter_mut().map(one).collect())
            }
            _ => due.iter_mut().map(one).collect(),
        };
        for ((_, s), bytes) in due.into_iter().zip(encoded) {
            let held = s.snapshots.take_held();
            self.stats.players_held += held.held;
            self.stats.snapshots_squeezed += held.squeezed;
            self.stats.entity_ends_cut += held.ends_cut;
            self.stats.entity_ends_left += held.ends_left;
            let Some(bytes) = bytes else {
                self.stats.snapshot_drops += 1;
                continue;
            };
            // A snapshot over the budget (players within the exact reach are never
            // left out for it) spends it ahead, at most a refill's cap.
            s.budget = (s.budget - bytes.len() as f64).max(-budget_cap);
            if s.correcting {
                s.correcting = false;
                s.correction_snapshot = tick;
            }
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += bytes.len() as u64;
            self.outputs.push_back(Output::Datagram {
                conn: s.conn,
                bytes,
            });
        }
    }
}

/// One player's side of an authoritative tick.
struct Compared<'a> {
    id: PlayerId,
    s: &'a mut Player,
    report: Option<&'a PlayerReport>,
    /// Its state after the tick.
    state: Option<&'a PlayerState>,
    outcome: Outcome,
}

/// What comparing a player's reported prediction with the tick's result came to.
enum Outcome {
    /// Nothing reported for the tick, or a report that matched and was judged sound.
    Nothing,
    /// A report that matched but that the validator flags.
    Flagged(Violation),
    /// A report the server's state does not bear out, for the ordered pass.
    Apart {
        claim: PlayerState,
        ack: u64,
        contact: bool,
    },
}

impl Compared<'_> {
    /// Notes what the move did for the client's feedback and compares its report.
    fn compare(&mut self, sim: &Sim, world: &WorldState, tick: u64) {
        let s = &mut *self.s;
        if let Some(r) = self.report {
            if r.reverted || r.events.touched.any_player() {
                s.feedback.contact = tick;
            }
            if r.repeated_command {
                s.feedback.missed = tick;
            }
            if r.respawned {
                s.validator.relocated(tick);
            }
        }
        let (Some((claim, ack)), Some(p)) = (s.take_expected(tick), self.state) else {
            return;
        };
        // Contact with players, and with movers (whose state may hang on triggers by
        // players outside this client's view), explains a divergence.
        let contact = self.report.is_some_and(|r| {
            r.reverted
                || r.events
                    .touched
                    .as_slice()
                    .iter()
                    .any(|o| matches!(o, Obstacle::Player(_) | Obstacle::Mover(_)))
        });
        self.outcome = if claim != *p {
            Outcome::Apart {
                claim,
                ack,
                contact,
            }
        } else {
            match s
                .validator
                .claim(sim, world, self.id, &claim, contact, None)
            {
                Some(v) => Outcome::Flagged(v),
                None => Outcome::Nothing,
            }
        };
    }
}

/// Adds what an input buffer saw since `counted` to `total`.
pub(super) fn add_inputs(total: &mut InputStats, now: &InputStats, counted: &InputStats) {
    total.received += now.received - counted.received;
    total.applied += now.applied - counted.applied;
    total.missing += now.missing - counted.missing;
    total.skipped += now.skipped - counted.skipped;
    total.late += now.late - counted.late;
    total.duplicate += now.duplicate - counted.duplicate;
    total.too_far_ahead += now.too_far_ahead - counted.too_far_ahead;
}

/// The server's records of its clients (the snapshots each was sent, the commands it
/// sent), for judging trusted clients' claims exactly as they were made.
struct Records<'a> {
    sim: &'a Sim,
    players: &'a BTreeMap<PlayerId, Player>,
    replayer: &'a mut Replayer,
}

impl ClientRecords for Records<'_> {
    fn shown(&mut self, id: PlayerId, tick: u64, world: &mut WorldState) -> bool {
        let Some(s) = self.players.get(&id) else {
            return false;
        };
        let Some(snap) = s.snapshots.seen(tick, &mut world.movers) else {
            return false;
        };
        *world = predict::seen_world(&snap, id, std::mem::take(&mut world.movers), true);
        true
    }

    fn replayed(
        &mut self,
        id: PlayerId,
        from: u64,
        tick: u64,
        movers: &[MoverState],
    ) -> Option<PlayerState> {
        let s = self.players.get(&id)?;
        let sent = (&s.snapshots, &s.commands);
        self.replayer
            .replay(self.sim, id, sent, from, tick, movers)?
    }
}
