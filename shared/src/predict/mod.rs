//! Prediction and reconciliation, free of I/O: the client moves its own player with the
//! shared simulation as soon as it makes a command, and when a snapshot arrives it
//! restores the server's exact state for that tick and replays the commands the server
//! has not yet applied. A prediction that differed from the server is a correction; the
//! visual error it leaves is smoothed away over a few frames.

#[cfg(feature = "server")]
pub(super) mod replay;

use crate::snapshot::Snapshot;
use expel_core::mover::MoverState;
use expel_core::sim::PlayerSlot;
use expel_core::PlayerId;
use expel_core::{Aabb, MoveCommand, PlayerState, Sim, SimScratch, WorldState};
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Ticks of commands and predictions kept (beyond this the server is hopelessly behind).
const KEEP: u64 = 512;
/// How long a correction's visual error takes to fade to 1/e of itself, by default.
pub const SMOOTHING: std::time::Duration = std::time::Duration::from_millis(60);
/// Room added to every reach the replay skip measures (units): the expel zone's probes
/// and rounding, many times over.
const REACH_SLACK: f64 = 8.0;

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
    /// Snapshots whose replay was skipped: nothing they told could change the path.
    pub replays_skipped: u64,
}

/// The client's own player, predicted.
pub struct Predictor {
    sim: Arc<Sim>,
    id: PlayerId,
    /// Commands by the tick they are for.
    commands: BTreeMap<u64, MoveCommand>,
    /// Own state predicted after each tick.
    predicted: BTreeMap<u64, PlayerState>,
    /// Predicted ticks whose move touched another player (as the snapshot showed them).
    touched: BTreeMap<u64, ()>,
    /// The movers as predicted after each tick.
    movers_at: BTreeMap<u64, Vec<MoverState>>,
    /// The world at the newest predicted tick (the others from where the snapshot showed
    /// them, moved only by the movers).
    world: WorldState,
    /// The newest snapshot's tick.
    base_tick: u64,
    movers: Vec<MoverState>,
    scratch: SimScratch,
    /// Visual offset still to smooth away.
    error: DVec3,
    /// Our teleports' count as the newest snapshot had it (none before the first).
    leaps: Option<u8>,
    /// Teleports taken from the snapshots: each drawn at once, the error cleared.
    pub teleports: u64,
    /// Replays every snapshot (the skip's reference in tests).
    #[cfg(test)]
    always_replay: bool,
    /// Predicts nothing: the newest snapshot's state stands (see [`Predictor::set_light`]).
    light: bool,
    /// What happened.
    pub stats: PredictStats,
}

impl Predictor {
    /// A predictor for player `id`; the world starts empty until the first snapshot.
    pub fn new(sim: Arc<Sim>, id: PlayerId) -> Predictor {
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
            leaps: None,
            teleports: 0,
            #[cfg(test)]
            always_replay: false,
            light: false,
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

    /// Light: commands are recorded (and sent) but nothing is simulated; each snapshot's
    /// state is taken as ours with no replay and no correction. A bot swarm that must not
    /// cost as much as the server it loads plays this way.
    pub fn set_light(&mut self, light: bool) {
        self.light = light;
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
        if !self.ready() || self.light {
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
        let leapt = self.take_leaps(snap);
        let correction = match self.predicted.get(&snap.tick) {
            Some(p) if *p != snap.own && !self.light => {
                Some((p.origin() - snap.own.origin()).length())
            }
            _ => None,
        };
        if let Some(c) = correction {
            self.stats.corrections += 1;
            self.stats.max_correction = self.stats.max_correction.max(c);
        }
        #[cfg(test)]
        let skip = !self.always_replay;
        #[cfg(not(test))]
        let skip = true;
        if skip && !self.light && correction.is_none() && self.replay_changes_nothing(snap) {
            // Our state for the tick matches, and nothing the snapshot tells can reach
            // the ticks predicted since: replaying them would give the same states.
            self.stats.replays_skipped += 1;
            self.base_tick = snap.tick;
            merge_movers(&mut self.movers, snap);
            self.set_others(snap);
            return None;
        }
        // The server's world at the snapshot's tick, as far as we see it (light: our own
        // player, the others being there only to predict against).
        merge_movers(&mut self.movers, snap);
        let target = self.world.tick.max(snap.tick);
        self.world = seen_world(snap, self.id, self.movers.clone(), !self.light);
        self.base_tick = snap.tick;
        // What the server holds for its tick stands; what follows is predicted again.
        self.predicted.split_off(&snap.tick);
        self.predicted.insert(snap.tick, snap.own);
        // Replay what the server has not applied yet (light: nothing is predicted).
        if !self.light {
            self.advance_to(target);
        }
        // Keep what is drawn continuous: the jump becomes an error that fades. A teleport
        // is drawn at once: nothing of the old place is kept.
        if leapt {
            self.error = DVec3::ZERO;
        } else if correction.is_some() {
            if let Some(b) = before {
                self.error += b - self.origin();
            }
        }
        correction
    }

    /// Whether the snapshot tells of a teleport of ours since the last one.
    fn take_leaps(&mut self, snap: &Snapshot) -> bool {
        let leapt = self.leaps.is_some_and(|l| l != snap.own_leaps);
        self.leaps = Some(snap.own_leaps);
        self.teleports += u64::from(leapt);
        leapt
    }

    /// Takes a snapshot that leaves our own path standing (a trusted client's, when the
    /// server corrected nothing): nothing already predicted of our own changes, but the
    /// world the next ticks are predicted in is the snapshot's, run on to our newest tick:
    /// the movers from the states it shows and the other players from where it shows them
    /// (carried and pushed by the movers), with ourselves along our own path, tick by
    /// tick. Claims already sent must stay one consistent chain, but the next ones must
    /// stand on the server's movers (which others open and ride where we cannot see
    /// them), and the server, holding the snapshot and our path, can run the same ticks.
    pub fn observe(&mut self, snap: &Snapshot) {
        if snap.tick <= self.base_tick {
            self.stats.stale += 1;
            return;
        }
        self.stats.snapshots += 1;
        self.base_tick = snap.tick;
        if self.take_leaps(snap) {
            self.error = DVec3::ZERO;
        }
        let mut movers = self
            .movers_at
            .get(&snap.tick)
            .cloned()
            .unwrap_or_else(|| self.movers.clone());
        merge_movers(&mut movers, snap);
        self.movers.clone_from(&movers);
        let mut w = seen_world(snap, self.id, movers, true);
        while w.tick < self.world.tick {
            if let (Some(p), Some(me)) = (self.predicted.get(&w.tick), w.players.get_mut(&self.id))
            {
                me.state = *p;
            }
            self.sim.advance_movers(&mut w, &mut self.scratch);
            w.tick += 1;
            self.movers_at.insert(w.tick, w.movers.clone());
        }
        // Our own state stays the newest predicted.
        if let (Some(me), Some(ours)) = (
            w.players.get_mut(&self.id),
            self.world.players.get(&self.id),
        ) {
            me.state = ours.state;
        }
        self.world.players = w.players;
        self.world.movers = w.movers;
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
    /// exactly what is predicted now. A replay differs from the predictions only through
    /// its inputs: our state and the movers at the snapshot's tick (compared), our
    /// commands (the same), and the other players, held where the snapshot shows them
    /// instead of where we held them. A player held exactly where the snapshot shows it
    /// changes nothing unless a mover could push it (its box in a mover's reach). One that
    /// moved, appeared or left changes nothing when, where we held it and where it is
    /// shown, its box stays out of our moves' reach, every mover's trigger and every
    /// mover's reach. Otherwise the replay runs: this only saves work, it never guesses.
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
        let movement = self.sim.movement();
        let cfg = movement.config();
        // Our reach: the boxes along the path, grown by what one tick's sweeps can cover
        // (the fastest speed on the path plus what a tick can add, a step up, the ground
        // probe).
        let mut path = Aabb::EMPTY;
        let mut speed: f64 = 0.0;
        for p in self.predicted.range(snap.tick..).map(|(_, p)| p) {
            path = path.union(&movement.player_box(p));
            speed = speed.max(p.velocity().length());
        }
        if path.is_empty() {
            return false;
        }
        let dt = movement.dt();
        let gain = cfg.jump_velocity
            + cfg.gravity * dt
            + cfg.max_speed.max(cfg.fly_speed) * cfg.accelerate.max(cfg.air_accelerate) * dt;
        let travel = ((speed + gain) * dt).min(cfg.max_velocity * 3f64.sqrt() * dt);
        let ours = path.expand(travel + cfg.step_height + cfg.ground_distance + REACH_SLACK);
        // The movers' reach over the replayed ticks: where they stand, grown by how far
        // they look for riders and players to push.
        let push = cfg.ground_distance + expel_core::geom::EXPEL * 2.0 + REACH_SLACK;
        let mut reach: Vec<Aabb> = vec![Aabb::EMPTY; self.sim.movers().len()];
        for states in self.movers_at.range(snap.tick..).map(|(_, m)| m) {
            for ((r, m), st) in reach.iter_mut().zip(self.sim.movers()).zip(states) {
                *r = r.union(&m.world_bounds(&m.pose(st)).expand(push));
            }
        }
        let pushable = |b: &Aabb| reach.iter().any(|r| r.overlaps(b));
        let inert = |p: &PlayerState| {
            let b = movement.player_box(p);
            !b.overlaps(&ours)
                && !pushable(&b)
                && !self.sim.movers().iter().any(|m| m.trigger.overlaps(&b))
        };
        // Both lists in id order: merge them.
        let me = self.id;
        let mut held = self
            .world
            .players
            .iter()
            .filter(|(id, _)| **id != me)
            .peekable();
        let mut shown = snap.players.iter().filter(|(id, _)| **id != me).peekable();
        loop {
            let h = held.peek().map(|(id, p)| (**id, p.state));
            let s = shown.peek().map(|(id, p)| (**id, **p));
            let ok = match (h, s) {
                (None, None) => return true,
                (Some((a, hp)), Some((b, sp))) if a == b => {
                    held.next();
                    shown.next();
                    if hp == sp {
                        !pushable(&movement.player_box(&sp))
                    } else {
                        inert(&hp) && inert(&sp)
                    }
                }
                (Some((a, hp)), Some((b, _))) if a < b => {
                    held.next();
                    inert(&hp)
                }
                (Some((_, hp)), None) => {
                    held.next();
                    inert(&hp)
                }
                (_, Some((_, sp))) => {
                    shown.next();
                    inert(&sp)
                }
            };
            if !ok {
                return false;
            }
        }
    }

    /// The predicted origin at the newest tick.
    pub fn origin(&self) -> DVec3 {
        self.world
            .player(self.id)
            .map_or(DVec3::ZERO, |p| p.origin())
    }

    /// The player predicted.
    pub fn id(&self) -> PlayerId {
        self.id
    }

    /// The movers as predicted after tick `t`, while it is recent.
    pub fn movers_after(&self, t: u64) -> Option<&[MoverState]> {
        self.movers_at.get(&t).map(Vec::as_slice)
    }

    /// The newest predicted state.
    pub fn state(&self) -> Option<PlayerState> {
        self.world.player(self.id).copied()
    }

    /// Where to draw the player: the prediction plus the fading correction error.
    pub fn display_origin(&self) -> Option<DVec3> {
        self.ready().then(|| self.origin() + self.error)
    }

    /// Advances the smoothing by `elapsed` of `smoothing` (the time the error takes to
    /// fade to 1/e of itself): the same look at any tick rate.
    pub fn frame(&mut self, elapsed: std::time::Duration, smoothing: std::time::Duration) {
        let k = elapsed.as_secs_f64() / smoothing.as_secs_f64().max(1e-6);
        self.error *= libm::exp(-k);
        if self.error.length() < 1e-3 {
            self.error = DVec3::ZERO;
        }
    }

    /// The world as last predicted (the others from where the newest snapshot showed
    /// them, carried by the movers since).
    pub fn world(&self) -> &WorldState {
        &self.world
    }
}

/// The world a client predicts from once it takes `snap`: its own state and (with
/// `others`) the other players where the snapshot shows them, and `movers`, the movers
/// it holds with the snapshot's already merged in.
pub(crate) fn seen_world(
    snap: &Snapshot,
    me: PlayerId,
    movers: Vec<MoverState>,
    others: bool,
) -> WorldState {
    let slot = |state: PlayerState| PlayerSlot {
        state,
        last_command: MoveCommand::default(),
    };
    let mut players: BTreeMap<PlayerId, PlayerSlot> = snap
        .players
        .iter()
        .filter(|_| others)
        .map(|(id, p)| (*id, slot(*p)))
        .collect();
    players.insert(me, slot(snap.own));
    WorldState {
        tick: snap.tick,
        players,
        movers,
        entities: BTreeMap::new(),
    }
}

/// What a client's prediction for tick `snap.tick + commands.len()` is after it took
/// `snap`, holding `movers` (before the snapshot's are merged in), with `commands` for
/// the ticks after the snapshot's: the replay [`Predictor::snapshot`] runs, for a server
/// that checks what a client reports. `None` when `me` is not in the world.
pub fn replay(
    sim: &Sim,
    me: PlayerId,
    snap: &Snapshot,
    mut movers: Vec<MoverState>,
    commands: &[MoveCommand],
    scratch: &mut SimScratch,
) -> Option<PlayerState> {
    merge_movers(&mut movers, snap);
    let mut world = seen_world(snap, me, movers, true);
    let mut state = snap.own;
    for c in commands {
        state = sim.predict(&mut world, me, c, scratch)?.state;
    }
    Some(state)
}

/// The movers the snapshot shows, over `movers` (the others as they were).
fn merge_movers(movers: &mut [MoverState], snap: &Snapshot) {
    for (i, m) in &snap.movers {
        if let Some(slot) = movers.get_mut(*i as usize) {
            *slot = *m;
        }
    }
}

/// Forgets entries more than [`KEEP`] ticks older than `t`.
fn keep_recent<V>(m: &mut BTreeMap<u64, V>, t: u64) {
    while m.first_key_value().is_some_and(|(k, _)| k + KEEP < t) {
        m.pop_first();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expel_core::movement::buttons;
    use expel_core::{CollisionModel, MapData, MoveConfig, MoveMode};

    /// A server world of wandering, jumping and crouching players on the arena (movers
    /// included), and two predictors for player 1 fed the same snapshots: one skips the
    /// replays it judges idle, the other replays every snapshot. Their predictions must
    /// be equal after every snapshot, or the skip guessed. A third, light, predicts
    /// nothing: each snapshot's own state is where it stands, and its commands still go.
    #[test]
    fn skipping_a_replay_predicts_exactly_what_the_replay_would() {
        let bytes =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
        let map = MapData::parse_any(&bytes).unwrap();
        let movement = MoveConfig::default().validate().unwrap();
        let model = Arc::new(CollisionModel::build(&map));
        let sim = Arc::new(Sim::from_map(model, &map, movement).0);
        let mut world = sim.new_state();
        let players = 24u32;
        for id in 1..=players {
            let p = sim.join_state(&world, PlayerId(id), MoveMode::Walk);
            sim.add_player(&mut world, PlayerId(id), p).unwrap();
        }
        // Player i's command for tick t: a heading per second, some jumps and crouches;
        // half the players stop now and then (so some stand still between snapshots).
        let command = |i: u32, t: u64| {
            let k = (u64::from(i) * 2_654_435_761).wrapping_add((t / 60) * 40_503);
            let moving = i <= 2 || !(t / 90 + u64::from(i)).is_multiple_of(3);
            let mut c = MoveCommand::new(
                if moving { 1.0 } else { 0.0 },
                0.0,
                0.0,
                (k % 360) as f64,
                0.0,
            );
            if (t + u64::from(i) * 7) % 97 < 3 {
                c.buttons |= buttons::JUMP;
            }
            if (t / 120 + u64::from(i)).is_multiple_of(7) {
                c.buttons |= buttons::CROUCH;
            }
            c
        };
        let mut skip = Predictor::new(sim.clone(), PlayerId(1));
        let mut replay = Predictor::new(sim.clone(), PlayerId(1));
        replay.always_replay = true;
        let mut light = Predictor::new(sim.clone(), PlayerId(1));
        light.set_light(true);
        let mut scratch = SimScratch::new();
        let mut history = vec![world.clone()];
        let lead = 9; // the client's commands run this many ticks ahead of the server
        for t in 1..=1800u64 {
            let cmds: BTreeMap<PlayerId, MoveCommand> = (1..=players)
                .map(|i| (PlayerId(i), command(i, t)))
                .collect();
            sim.step(&mut world, &cmds, &mut scratch);
            history.push(world.clone());
            for p in [&mut skip, &mut replay] {
                p.command(t + lead, command(1, t + lead));
            }
            assert_eq!(light.command(t + lead, command(1, t + lead)), None);
            // A snapshot every other tick, of the world three ticks ago (delay).
            if t % 2 == 0 && t > 3 {
                let w = &history[(t - 3) as usize];
                let snap = Snapshot {
                    tick: w.tick,
                    feedback: Default::default(),
                    own: w.players[&PlayerId(1)].state,
                    players: w
                        .players
                        .iter()
                        .filter(|(id, _)| **id != PlayerId(1))
                        .map(|(id, p)| (*id, p.state))
                        .collect(),
                    facing: BTreeMap::new(),
                    entities: BTreeMap::new(),
                    player_states: BTreeMap::new(),
                    entity_states: BTreeMap::new(),
                    ends: Vec::new(),
                    leaps: BTreeMap::new(),
                    own_leaps: 0,
                    movers: w
                        .movers
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (i as u32, *m))
                        .collect(),
                };
                let a = skip.snapshot(&snap);
                let b = replay.snapshot(&snap);
                assert_eq!(a, b, "correction at tick {t}");
                assert_eq!(skip.predicted, replay.predicted, "predictions at tick {t}");
                assert_eq!(
                    skip.world.players[&PlayerId(1)],
                    replay.world.players[&PlayerId(1)],
                    "tick {t}"
                );
                assert_eq!(skip.world.movers, replay.world.movers, "tick {t}");
                assert_eq!(light.snapshot(&snap), None);
                assert_eq!(light.state(), Some(snap.own), "light, tick {t}");
                assert_eq!(light.world.players.len(), 1);
                assert_eq!(
                    light.commands_between(t, t + lead),
                    replay.commands_between(t, t + lead)
                );
            }
        }
        let s = skip.stats;
        assert_eq!(replay.stats.replays_skipped, 0);
        assert!(
            s.replays_skipped * 10 > s.snapshots && s.replays_skipped < s.snapshots,
            "{} of {} replays skipped: the test shows nothing",
            s.replays_skipped,
            s.snapshots
        );
        println!(
            "{} of {} replays skipped, {} corrections",
            s.replays_skipped, s.snapshots, s.corrections
        );
    }
}
