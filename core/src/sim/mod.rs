//! The deterministic simulation, split the way a server and a predicting client use it:
//!
//! * [`Sim`]: immutable and validated (the map's collision model, the [`Movement`], the
//!   movers, the spawn points); share it by `Arc` between threads (a client's predictor,
//!   the server's tick, its live view).
//! * [`WorldState`]: plain `Clone + Serialize` data (tick, players with their last command,
//!   mover states), what a snapshot carries and a client restores.
//! * [`Sim::player_tick`]: one player, one command, against the map, the movers at their
//!   poses and a given set of other players' boxes; returns the new state and its
//!   [`MoveEvents`].
//! * [`Sim::step`]: the world's tick, built on `player_tick`, and [`Sim::predict`], the
//!   same tick for one player alone.
//!
//! # The order of one tick
//!
//! 1. Movers advance in map order. A mover carries the players standing on it and pushes
//!    the players in its way along its motion; a mover that cannot push a player (it would
//!    crush it against the world) does not move this tick and turns back if its kind does.
//! 2. Every entity with a [`Motion`] moves (see [`entity`]) against the map, the movers at
//!    their new poses and the players' boxes as they stand after step 1.
//! 3. Every player with a command moves, and every player without one repeats its last
//!    command. Each moves against the map, the movers at their new poses, and the other
//!    players' boxes **as they stand after step 1** — never against a player that already
//!    moved this tick. So the order in which players are processed does not matter, and a
//!    client that knows the others' boxes at the start of the tick computes its own move
//!    exactly as the server does.
//! 4. Conflicts: two players may each move into space the other just left. In ascending id
//!    order, a player whose new box overlaps the new box of a lower-id player that kept
//!    its move is reverted: it stays where it stood after step 1 with zero velocity. A
//!    reverted box never overlaps anyone (everyone moved against it), so one pass settles
//!    every conflict. Only walking players are solid to each other; noclip and spectator
//!    players pass through everyone.
//!
//!    Two players whose boxes already overlap as they start to move (`players::entangled`: a
//!    mover pushed one into the other, a lift lowered one standing on it and on the
//!    other's head, a respawn put one on the other) are not solid to
//!    each other until they part, and their pair is no conflict. Held solid, neither
//!    could move: every spot a tick reaches would still be inside the other.
//! 5. A player whose origin left the map's bounds (grown by [`OUT_OF_BOUNDS_MARGIN`]) is
//!    respawned at a spawn point, at rest; an entity is removed.
//!
//! The state hash ([`WorldState::hash`]) is FNV-1a (64-bit) over the tick, each mover's
//! state in map order, each player's id and [`PlayerState::hash_bytes`] in id order and
//! each entity's id and [`EntityState::hash_bytes`] in id order: stable across platforms,
//! builds, runs and thread counts.

use crate::collision::TraceScratch;
use crate::collision::{hull::Hull, CollisionModel, Contents, Region};
use crate::geom::{Aabb, EXPEL, MAX_COORD};
use crate::map::{MapData, MapWarning};
use crate::movement::{
    pmove, MoveCommand, MoveConfig, MoveEvents, MoveMode, Movement, PlayerState,
};
use crate::mover::{Mover, MoverState, Pose};
use glam::DVec3;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use thiserror::Error;

pub(crate) mod collider;
pub mod entity;
pub mod history;
pub mod players;
mod push;
mod step;

pub(crate) use collider::SimCollider;
use players::{entangled, overlapping_pairs, PlayerGrid};

pub use crate::id::{EntityId, PlayerId};
pub use entity::{EntityState, EntityTick, Impact, Motion, MotionError, Struck};
pub use history::{History, ShotView};

/// How far outside the map's solid bounds a player may go before it is respawned.
pub const OUT_OF_BOUNDS_MARGIN: f64 = 1024.0;

/// Space kept between a joining player's box and every other player's, units.
pub const JOIN_CLEARANCE: f64 = 4.0;

/// Rings of places tried around the spawn points when players stand on all of them.
pub const JOIN_RINGS: i32 = 4;

/// A request the simulation refuses.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SimError {
    /// `add_player` with an id that is in use.
    #[error("player {0} is already in the world")]
    PlayerExists(PlayerId),
    /// A player placed outside the supported coordinates.
    #[error("player {id} at {origin:?} is outside the supported coordinate range")]
    OutOfRange {
        /// The player.
        id: PlayerId,
        /// Its origin.
        origin: [f64; 3],
    },
    /// An entity placed outside the supported coordinate range.
    #[error("entity {id} at {origin:?} is outside the supported coordinate range")]
    EntityOutOfRange {
        /// The entity.
        id: EntityId,
        /// Its origin.
        origin: [f64; 3],
    },
    /// An entity whose motion the simulation refuses.
    #[error("entity {id}: {why}")]
    Motion {
        /// The entity.
        id: EntityId,
        /// What is wrong with its motion.
        why: MotionError,
    },
    /// A restored state whose movers do not match this simulation's.
    #[error("world state has {got} mover states; this map has {want} movers")]
    MoverCount {
        /// Mover states in the world state.
        got: usize,
        /// Movers in the simulation.
        want: usize,
    },
}

/// One player's slot in the world.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerSlot {
    /// The player's quantized state.
    pub state: PlayerState,
    /// The last command the player sent; repeated on ticks without one.
    pub last_command: MoveCommand,
}

/// Everything that changes from tick to tick: what a snapshot carries and a client
/// restores. Any value is safe to step: mover states out of range are clamped, missing
/// ones start at rest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorldState {
    /// Ticks stepped since the world began.
    pub tick: u64,
    /// The players, by id.
    pub players: BTreeMap<PlayerId, PlayerSlot>,
    /// The movers' states, in the simulation's mover order.
    pub movers: Vec<MoverState>,
    /// The game's entities, by id (see [`entity`]).
    pub entities: BTreeMap<EntityId, EntityState>,
}

impl WorldState {
    /// A player's state.
    pub fn player(&self, id: PlayerId) -> Option<&PlayerState> {
        self.players.get(&id).map(|s| &s.state)
    }

    /// Removes a player, returning its last state.
    pub fn remove_player(&mut self, id: PlayerId) -> Option<PlayerState> {
        self.players.remove(&id).map(|s| s.state)
    }

    /// Stable hash of the tick, the movers and every player's state (see the module docs).
    pub fn hash(&self) -> u64 {
        let mut bytes = Vec::with_capacity(16 + self.movers.len() * 13 + self.players.len() * 30);
        bytes.extend_from_slice(&self.tick.to_le_bytes());
        for s in &self.movers {
            bytes.extend_from_slice(&s.progress.to_le_bytes());
            bytes.push(s.phase as u8);
            bytes.extend_from_slice(&s.timer.to_le_bytes());
        }
        for (id, p) in &self.players {
            bytes.extend_from_slice(&id.0.to_le_bytes());
            p.state.hash_bytes(&mut bytes);
        }
        // After the players, so a world without entities hashes as it always did.
        for (id, e) in &self.entities {
            bytes.extend_from_slice(&id.0.to_le_bytes());
            e.hash_bytes(&mut bytes);
        }
        fnv1a(&bytes)
    }
}

/// Another player as an obstacle: its id and world box.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlayerBox {
    /// The player.
    pub id: PlayerId,
    /// Its box in the world.
    pub bounds: Aabb,
}

/// The result of one player's tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlayerTick {
    /// The new state.
    pub state: PlayerState,
    /// What happened on the way.
    pub events: MoveEvents,
}

/// What one world step did to one player.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlayerReport {
    /// The player.
    pub id: PlayerId,
    /// What its move did (before any revert or respawn).
    pub events: MoveEvents,
    /// It had no command this tick and repeated its last one.
    pub repeated_command: bool,
    /// Its move ended inside a lower-id player's new box and was reverted.
    pub reverted: bool,
    /// It left the map's bounds and was respawned.
    pub respawned: bool,
}

/// What one world step did: to each player, and to the entities that moved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// A report per player, in id order.
    pub players: Vec<PlayerReport>,
    /// The entities' impacts, in entity id order and then as they came.
    pub impacts: Vec<Impact>,
    /// Entities that left the arena and were removed, in id order.
    pub lost: Vec<EntityId>,
}

/// Per-thread working memory of the simulation. Keep one per thread and reuse it.
#[derive(Default, Debug)]
pub struct SimScratch {
    trace: TraceScratch,
    region: Region,
    regions: RegionCache,
    boxes: Vec<PlayerBox>,
    close: Vec<PlayerBox>,
    /// Every query looks at all of a tick's boxes, not the close ones (for a test: the
    /// same bits either way).
    all_boxes: bool,
    near: Vec<PlayerBox>,
    grid: PlayerGrid,
    start_boxes: Vec<PlayerBox>,
    poses: Vec<Pose>,
    movers: Vec<(usize, Aabb)>,
    bodies: Vec<push::Body>,
    /// Entities' hulls by box, the few last used.
    entity_hulls: Vec<(entity::HullKey, Hull)>,
    /// The players' boxes an entity's sweep may meet.
    entity_boxes: Vec<PlayerBox>,
    /// The entities' impacts and losses of the last trusted-client tick
    /// ([`Judge::step_claims`](crate::validate::Judge::step_claims) returns the claims' reports).
    pub(crate) entity_report: (Vec<Impact>, Vec<EntityId>),
    /// Workers for the players' moves of a step (see [`SimScratch::with_threads`]).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Whether a tick's work goes to the workers now (see [`SimScratch::set_spread`]).
    spread: bool,
    /// One scratch per worker thread (each locks only its own).
    workers: Vec<Mutex<SimScratch>>,
}

impl SimScratch {
    /// The entities' impacts and the entities lost in the last [`Judge::step_claims`](crate::validate::Judge::step_claims)
    /// (taken: a second call gives none).
    pub fn take_entity_report(&mut self) -> (Vec<Impact>, Vec<EntityId>) {
        std::mem::take(&mut self.entity_report)
    }
}

/// Fewest players per worker worth handing out (below, a step runs on one thread; the
/// server's snapshots follow the same rule).
pub const PLAYERS_PER_WORKER: usize = 32;

impl SimScratch {
    /// Empty scratch; it grows to the map's size once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scratch whose steps move the players on `threads` worker threads (one: on the
    /// caller's). Each player's move depends only on the world at the tick's start (see
    /// the module docs), and the moves are merged in id order, so a step gives the same
    /// bits on any number of threads. Fails only if the threads cannot be started.
    pub fn with_threads(threads: usize) -> Result<Self, rayon::ThreadPoolBuildError> {
        let mut s = Self::default();
        if threads > 1 {
            s.pool = Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("expel-step-{i}"))
                    .build()?,
            ));
            s.workers = (0..threads).map(|_| Mutex::default()).collect();
            s.spread = true;
        }
        Ok(s)
    }

    /// The worker threads, if any: other per-player work of a tick may run on them too.
    /// A thread that steps the world from inside the pool (`install`) takes part in the
    /// work itself: a tick then waits at most for the run a descheduled worker holds.
    pub fn pool(&self) -> Option<&Arc<rayon::ThreadPool>> {
        self.pool.as_ref()
    }

    /// The workers to spread this tick's work over: the pool, unless spreading is off.
    pub fn spreading(&self) -> Option<&rayon::ThreadPool> {
        self.pool.as_deref().filter(|_| self.spread)
    }

    /// Runs `f` on each item: over the workers while spreading and there are enough
    /// items to share out, else on this thread. For per-player work whose items are
    /// independent (each touches its own player), so the outcome is the same either way.
    pub fn spread_each<T: Send>(&self, items: &mut [T], f: impl Fn(&mut T) + Sync + Send) {
        match self.spreading() {
            Some(pool) if items.len() >= 2 * PLAYERS_PER_WORKER => {
                use rayon::prelude::*;
                pool.install(|| items.par_iter_mut().for_each(f));
            }
            _ => items.iter_mut().for_each(f),
        }
    }

    /// Whether steps spread their work over the workers (on by default when there are
    /// any; the same bits either way). Off, a caller that owns workers keeps its ticks on
    /// its own thread.
    pub fn set_spread(&mut self, on: bool) {
        self.spread = on;
    }
}

/// How much a player's gathered region exceeds its reach, so that the next ticks reuse it.
const REGION_SLACK: f64 = 16.0;

/// Per player, the region its last tick gathered (with [`REGION_SLACK`] to spare): while
/// the player's reach stays inside it, later ticks reuse it. A larger region only adds
/// brushes that a query tests and finds apart, so results never depend on the cache.
#[derive(Default, Debug)]
struct RegionCache {
    /// The model the regions index, held so that comparing pointers is sound.
    model: Option<Arc<CollisionModel>>,
    by_player: BTreeMap<PlayerId, Region>,
}

impl RegionCache {
    /// A region of `map` around `around` for player `id`, gathered anew only when the
    /// cached one does not contain it.
    fn get(
        &mut self,
        map: &Arc<CollisionModel>,
        id: PlayerId,
        around: Aabb,
        hull: &Hull,
        s: &mut TraceScratch,
    ) -> &Region {
        if !self.model.as_ref().is_some_and(|m| Arc::ptr_eq(m, map)) {
            self.by_player.clear();
            self.model = Some(map.clone());
        }
        let r = self.by_player.entry(id).or_default();
        if !r.contains(&around) {
            map.gather_region(around.expand(REGION_SLACK), hull, r, s);
        }
        r
    }

    /// Forgets the players no longer in `world` once they are many.
    fn prune(&mut self, world: &WorldState) {
        if self.by_player.len() > 2 * world.players.len() + 64 {
            self.by_player
                .retain(|id, _| world.players.contains_key(id));
        }
    }
}

/// The immutable simulation of one map. `Send + Sync`.
#[derive(Debug)]
pub struct Sim {
    map: Arc<CollisionModel>,
    movement: Movement,
    movers: Vec<Mover>,
    spawns: Vec<DVec3>,
    /// Players whose origin leaves this box are respawned.
    arena: Aabb,
}

impl Sim {
    /// A simulation of `map` with the given movers and spawn points (spawn points outside
    /// the supported range are dropped).
    pub fn new(
        map: Arc<CollisionModel>,
        movement: Movement,
        movers: Vec<Mover>,
        spawns: Vec<DVec3>,
    ) -> Sim {
        let mut bounds = map.bounds();
        for m in &movers {
            bounds = bounds.union(&m.world_bounds(&Pose::REST));
        }
        let arena = if bounds.is_empty() {
            Aabb {
                min: DVec3::splat(-OUT_OF_BOUNDS_MARGIN),
                max: DVec3::splat(OUT_OF_BOUNDS_MARGIN),
            }
        } else {
            bounds.expand(OUT_OF_BOUNDS_MARGIN)
        };
        let limit = DVec3::splat(MAX_COORD);
        Sim {
            map,
            movement,
            movers,
            spawns: spawns.into_iter().filter(|s| in_range(*s)).collect(),
            arena: Aabb {
                min: arena.min.max(-limit),
                max: arena.max.min(limit),
            },
        }
    }

    /// A simulation of a loaded map: its movers and `info_player_*` spawn points, with a
    /// warning for everything in the map that could not be used as written.
    pub fn from_map(
        model: Arc<CollisionModel>,
        map: &MapData,
        movement: Movement,
    ) -> (Sim, Vec<MapWarning>) {
        let (movers, mut warnings) = Mover::from_map(map);
        let (spawns, spawn_warnings) = map.checked_spawn_points();
        warnings.extend(spawn_warnings);
        (Sim::new(model, movement, movers, spawns), warnings)
    }

    /// The map's collision model.
    pub fn map(&self) -> &Arc<CollisionModel> {
        &self.map
    }

    /// The validated movement settings and hulls.
    pub fn movement(&self) -> &Movement {
        &self.movement
    }

    /// The movement settings.
    pub fn config(&self) -> &MoveConfig {
        self.movement.config()
    }

    /// The movers, in map order.
    pub fn movers(&self) -> &[Mover] {
        &self.movers
    }

    /// The spawn points.
    pub fn spawns(&self) -> &[DVec3] {
        &self.spawns
    }

    /// The box outside which players are respawned.
    pub fn arena(&self) -> Aabb {
        self.arena
    }

    /// A world at tick 0 with the movers at rest and no players.
    pub fn new_state(&self) -> WorldState {
        WorldState {
            tick: 0,
            players: BTreeMap::new(),
            movers: self.movers.iter().map(Mover::initial).collect(),
            entities: BTreeMap::new(),
        }
    }

    /// Checks a state restored from elsewhere (a snapshot, a file) against this map.
    pub fn validate_state(&self, state: &WorldState) -> Result<(), SimError> {
        if state.movers.len() != self.movers.len() {
            return Err(SimError::MoverCount {
                got: state.movers.len(),
                want: self.movers.len(),
            });
        }
        for (id, p) in &state.players {
            check_origin(*id, &p.state)?;
        }
        for (id, e) in &state.entities {
            Sim::validate_entity(*id, e)?;
        }
        Ok(())
    }

    /// Checks an entity received from elsewhere: its origin within the supported
    /// coordinates, its motion one the simulation takes.
    pub fn validate_entity(id: EntityId, e: &EntityState) -> Result<(), SimError> {
        if !in_range(e.origin()) {
            return Err(SimError::EntityOutOfRange {
                id,
                origin: e.origin().to_array(),
            });
        }
        if let Some(m) = &e.motion {
            m.validate().map_err(|why| SimError::Motion { id, why })?;
        }
        Ok(())
    }

    /// Adds a player; refuses an id in use and an origin outside the supported range.
    pub fn add_player(
        &self,
        world: &mut WorldState,
        id: PlayerId,
        state: PlayerState,
    ) -> Result<(), SimError> {
        check_origin(id, &state)?;
        if world.players.contains_key(&id) {
            return Err(SimError::PlayerExists(id));
        }
        world.players.insert(
            id,
            PlayerSlot {
                state,
                last_command: MoveCommand::default(),
            },
        );
        Ok(())
    }

    /// A player's spawn: spawn point `id mod count`, at rest (the centre of the map's
    /// bounds when the map has none).
    pub fn spawn_state(&self, id: PlayerId, mode: MoveMode) -> PlayerState {
        let at = if self.spawns.is_empty() {
            self.map.bounds().center()
        } else {
            self.spawns[id.0 as usize % self.spawns.len()]
        };
        let mut s = PlayerState::at(if in_range(at) { at } else { DVec3::ZERO });
        s.mode = mode;
        s
    }

    /// A joining player's state, at rest where nobody stands: the first spawn point, from
    /// `id mod count` on, whose place meets no other walking player's box (grown by
    /// [`JOIN_CLEARANCE`]); when players stand on every one, the nearest place on rings
    /// around them, a box's width and the clearance apart, that is free of solid and that
    /// the player's box reaches from its spawn point in a straight sweep (so never the far
    /// side of a wall). Only where nothing within [`JOIN_RINGS`] rings is free does it
    /// fall back to [`Sim::spawn_state`]. Placing a player on another would push the two
    /// apart by a move no prediction makes, which validation rightly takes for a teleport.
    pub fn join_state(&self, world: &WorldState, id: PlayerId, mode: MoveMode) -> PlayerState {
        let base = self.spawn_state(id, mode);
        if mode != MoveMode::Walk || self.spawns.is_empty() {
            return base;
        }
        let taken: Vec<Aabb> = world
            .players
            .iter()
            .filter(|(k, _)| **k != id)
            .filter_map(|(k, p)| self.player_box(*k, &p.state))
            .map(|b| b.bounds.expand(JOIN_CLEARANCE))
            .collect();
        let at_rest = |at: DVec3| {
            let mut p = PlayerState::at(at);
            p.mode = mode;
            p
        };
        let free = |at: DVec3| {
            let b = self.movement.player_box(&at_rest(at));
            !taken.iter().any(|t| t.overlaps(&b))
        };
        let hull = self.movement.stand();
        let size = hull.bounds().max - hull.bounds().min;
        let step = size.x.max(size.y) + JOIN_CLEARANCE;
        let n = self.spawns.len();
        let mut scratch = TraceScratch::new();
        for ring in 0..=JOIN_RINGS {
            for k in 0..n {
                let spawn = self.spawns[(id.0 as usize).wrapping_add(k) % n];
                if !in_range(spawn) {
                    continue;
                }
                for (i, j) in ring_offsets(ring) {
                    let at = spawn + DVec3::new(i as f64 * step, j as f64 * step, 0.0);
                    if !in_range(at) || !self.in_arena(at) || !free(at) {
                        continue;
                    }
                    if ring > 0 {
                        let sweep = self
                            .map
                            .sweep(hull, spawn, at, Contents::PLAYER, &mut scratch);
                        if sweep.hit.is_some()
                            || sweep.fraction < 1.0
                            || self
                                .map
                                .position_solid(hull, at, Contents::PLAYER, &mut scratch)
                        {
                            continue;
                        }
                    }
                    return at_rest(at);
                }
            }
        }
        base
    }

    /// The movers' poses for their states (missing states read as at rest).
    pub fn poses(&self, states: &[MoverState], out: &mut Vec<Pose>) {
        out.clear();
        out.extend(
            self.movers
                .iter()
                .enumerate()
                .map(|(i, m)| m.pose(&states.get(i).copied().unwrap_or_default())),
        );
    }

    /// The box a player occupies as an obstacle to others, if it is one.
    pub fn player_box(&self, id: PlayerId, p: &PlayerState) -> Option<PlayerBox> {
        matches!(p.mode, MoveMode::Walk | MoveMode::Frozen).then(|| PlayerBox {
            id,
            bounds: self.movement.player_box(p),
        })
    }

    /// The box every sweep of a player's tick stays within.
    fn around(&self, p: &PlayerState) -> Aabb {
        let stand = self.movement.stand().bounds().offset(p.origin());
        stand.expand(self.reach(p) + 1.0)
    }

    /// How far a player can move in one tick, generously: its capped speed, a tick of
    /// gravity and acceleration, a step, and slack.
    pub(crate) fn reach(&self, p: &PlayerState) -> f64 {
        let c = self.config();
        let dt = self.movement.dt();
        let gain = match p.mode {
            MoveMode::Walk => c.jump_velocity + c.max_speed * c.accelerate * dt,
            MoveMode::Noclip | MoveMode::Spectator => c.fly_speed,
            MoveMode::Frozen => 0.0,
        };
        let speed = p
            .velocity()
            .abs()
            .min(DVec3::splat(c.max_velocity))
            .length();
        (speed + c.gravity * dt + gain) * dt + c.step_height + 1.0
    }

    /// How far a player can move level in one tick, generously: its capped horizontal
    /// speed and a tick of acceleration, and slack (steps and falls are vertical).
    pub(crate) fn level_reach(&self, p: &PlayerState) -> f64 {
        let c = self.config();
        let dt = self.movement.dt();
        let gain = match p.mode {
            MoveMode::Walk => c.max_speed * c.accelerate * dt,
            MoveMode::Noclip | MoveMode::Spectator => c.fly_speed,
            MoveMode::Frozen => 0.0,
        };
        let v = p.velocity();
        let level = glam::DVec2::new(v.x, v.y).length().min(c.max_velocity);
        (level + gain) * dt + 1.0
    }

    /// Where a player's sweeps of one tick lie but for an unstick: its hulls where it
    /// stands, grown by its level reach across and its whole reach up and down, and by
    /// the margin a sweep looks past its own bounds. (Only a speed-up: a query outside it
    /// looks at every box of the tick.)
    fn close_zone(&self, p: &PlayerState) -> Aabb {
        let hulls = self
            .movement
            .stand()
            .bounds()
            .union(&self.movement.crouch().bounds());
        let level = self.level_reach(p);
        let grow = DVec3::new(level, level, self.reach(p)) + collider::SWEEP_MARGIN;
        let at = hulls.offset(p.origin());
        Aabb {
            min: at.min - grow,
            max: at.max + grow,
        }
    }

    /// Whether `p` lies in the arena (players leaving it respawn).
    pub fn in_arena(&self, p: DVec3) -> bool {
        p.cmpge(self.arena.min).all() && p.cmple(self.arena.max).all()
    }

    /// The collider a player's tick uses (map, movers at `poses`, the boxes `others`) for
    /// queries within `around`, as the validator needs them outside a tick.
    pub(crate) fn collider<'a>(
        &'a self,
        around: Aabb,
        poses: &'a [Pose],
        others: &'a [PlayerBox],
        s: &'a mut SimScratch,
    ) -> SimCollider<'a> {
        self.map
            .gather_region(around, self.movement.stand(), &mut s.region, &mut s.trace);
        self.movers_near(&around, poses, &mut s.movers);
        SimCollider {
            sim: self,
            mask: Contents::PLAYER,
            scratch: &mut s.trace,
            region: &s.region,
            boxes: others,
            close: None,
            poses,
            movers: &s.movers,
            blocked_by: None,
        }
    }

    /// Into `out`, the movers at `poses` whose bounds reach into `around` (with the
    /// margin a sweep adds to its own bounds), with those bounds, in mover order.
    pub(crate) fn movers_near(&self, around: &Aabb, poses: &[Pose], out: &mut Vec<(usize, Aabb)>) {
        let zone = around.expand(collider::SWEEP_MARGIN);
        out.clear();
        out.extend(
            self.movers
                .iter()
                .zip(poses)
                .map(|(m, pose)| m.world_bounds(pose))
                .enumerate()
                .filter(|(_, b)| b.overlaps(&zone)),
        );
    }

    /// Respawns a player whose origin left the arena; returns whether it did.
    fn respawn_if_lost(&self, id: PlayerId, state: &mut PlayerState) -> bool {
        if self.in_arena(state.origin()) {
            return false;
        }
        *state = self.spawn_state(id, state.mode);
        true
    }
}

/// The offsets, in steps, of ring `r` around a place (the place itself for 0), in a fixed
/// order: the square of side `2r + 1`'s border, nearest the centre first.
fn ring_offsets(r: i32) -> Vec<(i32, i32)> {
    let mut v: Vec<(i32, i32)> = (-r..=r)
        .flat_map(|i| (-r..=r).map(move |j| (i, j)))
        .filter(|(i, j)| i.abs().max(j.abs()) == r)
        .collect();
    v.sort_by_key(|(i, j)| (i * i + j * j, *i, *j));
    v
}

/// Whether a point lies within the supported coordinates.
pub fn in_range(p: DVec3) -> bool {
    p.is_finite() && p.abs().max_element() <= MAX_COORD
}

fn check_origin(id: PlayerId, p: &PlayerState) -> Result<(), SimError> {
    let o = p.origin();
    if in_range(o) {
        Ok(())
    } else {
        Err(SimError::OutOfRange {
            id,
            origin: o.to_array(),
        })
    }
}

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Compile-time proof that a simulation can be shared between threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Sim>();
    assert_send_sync::<WorldState>();
};
