//! Prediction and reconciliation, free of I/O: the client moves its own player with the
//! shared simulation as soon as it makes a command, and when a snapshot arrives it
//! restores the server's exact state for that tick and replays the commands the server
//! has not yet applied. A prediction that differed from the server is a correction; the
//! visual error it leaves is smoothed away over a few frames.

use super::snapshot::Snapshot;
use crate::mover::MoverState;
use crate::sim::PlayerSlot;
use crate::{Aabb, MoveCommand, PlayerState, Sim, SimScratch, WorldState};
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Ticks of commands and predictions kept (beyond this the server is hopelessly behind).
const KEEP: u64 = 512;
/// Fraction of the remaining visual error removed per rendered frame.
const SMOOTHING: f64 = 0.25;
/// How near our predicted path another player must come before a snapshot's news of it
/// can change the path (units): a player box's width and height, a step and the ground
/// probe, with room to spare.
const PLAYER_REACH: f64 = 128.0;

/// Prediction statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PredictStats {
    /// Snapshots reconciled.
    pub snapshots: u64,
    /// Snapshots whose state for their tick differed from the prediction.
    pub corrections: u64,
    /// Largest correction, in units.
    pub max_correction: f64,
    /// Snapshots older than one already reconciled.
    pub stale: u64,
}

/// The client's own player, predicted.
pub struct Predictor {
    sim: Arc<Sim>,
    id: u32,
    /// Commands by the tick they are for.
    commands: BTreeMap<u64, MoveCommand>,
    /// Own state predicted after each tick.
    predicted: BTreeMap<u64, PlayerState>,
    /// Predicted ticks whose move touched another player (as the snapshot showed them).
    touched: BTreeMap<u64, ()>,
    /// The movers as predicted after each tick.
    movers_at: BTreeMap<u64, Vec<MoverState>>,
    /// The world at the newest predicted tick (others held where the snapshot showed them).
    world: WorldState,
    /// The newest snapshot's tick.
    base_tick: u64,
    movers: Vec<MoverState>,
    scratch: SimScratch,
    /// Visual offset still to smooth away.
    error: DVec3,
    /// What happened.
    pub stats: PredictStats,
}

impl Predictor {
    /// A predictor for player `id`; the world starts empty until the first snapshot.
    pub fn new(sim: Arc<Sim>, id: u32) -> Predictor {
        let world = sim.new_state();
        Predictor {
            movers: world.movers.clone(),
            sim,
            id,
            commands: BTreeMap::new(),
            predicted: BTreeMap::new(),
            touched: BTreeMap::new(),
            movers_at: BTreeMap::new(),
            world,
            base_tick: 0,
            scratch: SimScratch::new(),
            error: DVec3::ZERO,
            stats: PredictStats::default(),
        }
    }

    /// The command the server applies at tick `t` for us: ours for `t`, else the last one
    /// before it (the server repeats the last command on a tick without one).
    fn command_for(&self, t: u64) -> MoveCommand {
        self.commands
            .range(..=t)
            .next_back()
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    /// The newest snapshot's tick (0: none yet).
    pub fn base_tick(&self) -> u64 {
        self.base_tick
    }

    /// Whether a snapshot has arrived (prediction needs the server's state to start from).
    pub fn ready(&self) -> bool {
        self.base_tick != 0
    }

    /// The newest predicted tick.
    pub fn tick(&self) -> u64 {
        self.world.tick
    }

    /// Records `cmd` for tick `t` (the next tick to predict) and predicts it. Returns the
    /// predicted state, once a snapshot has arrived.
    pub fn command(&mut self, t: u64, cmd: MoveCommand) -> Option<PlayerState> {
        self.commands.insert(t, cmd);
        keep_recent(&mut self.commands, t);
        keep_recent(&mut self.predicted, t);
        keep_recent(&mut self.touched, t);
        keep_recent(&mut self.movers_at, t);
        if !self.ready() {
            return None;
        }
        // Catch up to `t` (ticks skipped by the clock use the repeat rule).
        self.advance_to(t);
        self.predicted.get(&t).copied()
    }

    /// Predicts tick after tick up to `t`, each with its command (or the repeated one).
    fn advance_to(&mut self, t: u64) {
        while self.world.tick < t {
            let next = self.world.tick + 1;
            let c = self.command_for(next);
            let Some(r) = self
                .sim
                .predict(&mut self.world, self.id, &c, &mut self.scratch)
            else {
                break; // our player is not in the world
            };
            self.predicted.insert(next, r.state);
            self.movers_at.insert(next, self.world.movers.clone());
            if r.events.touched.any_player() {
                self.touched.insert(next, ());
            } else {
                self.touched.remove(&next);
            }
        }
    }

    /// Whether the prediction of a tick in `after+1..=upto` touched another player: a
    /// prediction that met a player where the last snapshot showed it cannot know it
    /// moved on, so a correction there is explained.
    pub fn touched_player(&self, after: u64, upto: u64) -> bool {
        after < upto && self.touched.range(after + 1..=upto).next().is_some()
    }

    /// The commands for ticks `from..=to`, for an input datagram.
    pub fn commands_between(&self, from: u64, to: u64) -> Vec<MoveCommand> {
        (from..=to).map(|t| self.command_for(t)).collect()
    }

    /// The predicted states for ticks `from..=to` (the server's own for ticks it has
    /// confirmed), if every one is known: a trusted client's claims.
    pub fn states_between(&self, from: u64, to: u64) -> Option<Vec<PlayerState>> {
        (from..=to).map(|t| self.predicted_at(t)).collect()
    }

    /// The state predicted after tick `t` (the server's own once confirmed), if known.
    pub fn predicted_at(&self, t: u64) -> Option<PlayerState> {
        self.predicted.get(&t).copied()
    }

    /// Reconciles with a snapshot: restores the server's state at its tick and replays our
    /// commands after it. Returns the correction (units) when the prediction for that tick
    /// differed.
    pub fn snapshot(&mut self, snap: &Snapshot) -> Option<f64> {
        if snap.tick <= self.base_tick {
            self.stats.stale += 1;
            return None;
        }
        self.stats.snapshots += 1;
        let before = self.display_origin();
        let correction = match self.predicted.get(&snap.tick) {
            Some(p) if *p != snap.own => Some((p.origin() - snap.own.origin()).length()),
            _ => None,
        };
        if let Some(c) = correction {
            self.stats.corrections += 1;
            self.stats.max_correction = self.stats.max_correction.max(c);
        }
        if correction.is_none() && self.replay_changes_nothing(snap) {
            // Our state for the tick matches, and nothing the snapshot tells can reach
            // the ticks predicted since: replaying them would give the same states.
            self.base_tick = snap.tick;
            for (i, m) in &snap.movers {
                if let Some(slot) = self.movers.get_mut(*i as usize) {
                    *slot = *m;
                }
            }
            self.set_others(snap);
            return None;
        }
        // The server's world at the snapshot's tick, as far as we see it.
        for (i, m) in &snap.movers {
            if let Some(slot) = self.movers.get_mut(*i as usize) {
                *slot = *m;
            }
        }
        let mut players = BTreeMap::new();
        for (id, p) in &snap.players {
            players.insert(
                *id,
                PlayerSlot {
                    state: *p,
                    last_command: MoveCommand::default(),
                },
            );
        }
        players.insert(
            self.id,
            PlayerSlot {
                state: snap.own,
                last_command: self.command_for(snap.tick),
            },
        );
        let target = self.world.tick.max(snap.tick);
        self.world = WorldState {
            tick: snap.tick,
            players,
            movers: self.movers.clone(),
        };
        self.base_tick = snap.tick;
        // What the server holds for its tick stands; what follows is predicted again.
        self.predicted.split_off(&snap.tick);
        self.predicted.insert(snap.tick, snap.own);
        // Replay what the server has not applied yet.
        self.advance_to(target);
        // Keep what is drawn continuous: the jump becomes an error that fades.
        if correction.is_some() {
            if let Some(b) = before {
                self.error += b - self.origin();
            }
        }
        correction
    }

    /// Takes a snapshot that leaves our own path standing (a trusted client's, when the
    /// server corrected nothing): the other players move to where it shows them, for the
    /// ticks still to predict, and nothing already predicted changes. Claims already sent
    /// must stay one consistent chain.
    pub fn observe(&mut self, snap: &Snapshot) {
        if snap.tick <= self.base_tick {
            self.stats.stale += 1;
            return;
        }
        self.stats.snapshots += 1;
        self.base_tick = snap.tick;
        self.set_others(snap);
    }

    /// The other players where the snapshot shows them, for the ticks still to predict.
    fn set_others(&mut self, snap: &Snapshot) {
        let me = self.id;
        self.world.players.retain(|id, _| *id == me);
        for (id, p) in &snap.players {
            if *id != me {
                let slot = PlayerSlot {
                    state: *p,
                    last_command: MoveCommand::default(),
                };
                self.world.players.insert(*id, slot);
            }
        }
    }

    /// Whether replaying the ticks after `snap` (whose own state matched) would predict
    /// exactly what is predicted now. It would when the movers in the snapshot stand as
    /// predicted, and no other player, where we held it or where the snapshot shows it,
    /// comes near our path since or stands in a mover's trigger (a door it opens could
    /// reach us). Otherwise the replay runs: this only saves work, it never guesses.
    fn replay_changes_nothing(&self, snap: &Snapshot) -> bool {
        let Some(movers) = self.movers_at.get(&snap.tick) else {
            return false;
        };
        let merged_equal = snap
            .movers
            .iter()
            .all(|(i, m)| movers.get(*i as usize) == Some(m));
        let rest_equal = movers
            .iter()
            .enumerate()
            .all(|(i, m)| snap.movers.contains_key(&(i as u32)) || self.movers.get(i) == Some(m));
        if !merged_equal || !rest_equal {
            return false;
        }
        let path: Vec<_> = self
            .predicted
            .range(snap.tick..)
            .map(|(_, p)| p.origin())
            .collect();
        if path.is_empty() {
            return false;
        }
        let near = Aabb::from_points(&path).expand(PLAYER_REACH);
        let triggers: Vec<Aabb> = self.sim.movers().iter().map(|m| m.trigger).collect();
        let me = self.id;
        let held = self
            .world
            .players
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(_, p)| p.state.origin());
        let shown = snap.players.values().map(|p| p.origin());
        held.chain(shown).all(|o| {
            let b = Aabb::from_points(&[o]).expand(PLAYER_REACH);
            !b.overlaps(&near) && !triggers.iter().any(|t| t.overlaps(&b))
        })
    }

    /// The predicted origin at the newest tick.
    pub fn origin(&self) -> DVec3 {
        self.world
            .player(self.id)
            .map_or(DVec3::ZERO, |p| p.origin())
    }

    /// The newest predicted state.
    pub fn state(&self) -> Option<PlayerState> {
        self.world.player(self.id).copied()
    }

    /// Where to draw the player: the prediction plus the fading correction error.
    pub fn display_origin(&self) -> Option<DVec3> {
        self.ready().then(|| self.origin() + self.error)
    }

    /// Advances the smoothing by one rendered frame.
    pub fn frame(&mut self) {
        self.error *= 1.0 - SMOOTHING;
        if self.error.length() < 1e-3 {
            self.error = DVec3::ZERO;
        }
    }

    /// The world as last predicted (others as the newest snapshot showed them).
    pub fn world(&self) -> &WorldState {
        &self.world
    }
}

/// Forgets entries more than [`KEEP`] ticks older than `t`.
fn keep_recent<V>(m: &mut BTreeMap<u64, V>, t: u64) {
    while m.first_key_value().is_some_and(|(k, _)| k + KEEP < t) {
        m.pop_first();
    }
}
