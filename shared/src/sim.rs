//! The deterministic simulation, split the way a server and a predicting client use it:
//!
//! * [`Sim`]: immutable and validated (the map's collision model, the [`Movement`], the
//!   movers, the spawn points); share it by `Arc` between connection tasks and the tick.
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
//! 2. Every player with a command moves, and every player without one repeats its last
//!    command. Each moves against the map, the movers at their new poses, and the other
//!    players' boxes **as they stand after step 1** — never against a player that already
//!    moved this tick. So the order in which players are processed does not matter, and a
//!    client that knows the others' boxes at the start of the tick computes its own move
//!    exactly as the server does.
//! 3. Conflicts: two players may each move into space the other just left. In ascending id
//!    order, a player whose new box overlaps the new box of a lower-id player that kept
//!    its move is reverted: it stays where it stood after step 1 with zero velocity. A
//!    reverted box never overlaps anyone (everyone moved against it), so one pass settles
//!    every conflict. Only walking players are solid to each other; noclip and spectator
//!    players pass through everyone.
//! 4. A player whose origin left the map's bounds (grown by [`OUT_OF_BOUNDS_MARGIN`]) is
//!    respawned at a spawn point, at rest.
//!
//! The state hash ([`WorldState::hash`]) is FNV-1a (64-bit) over the tick, each mover's
//! state in map order and each player's id and [`PlayerState::hash_bytes`] in id order:
//! stable across platforms, builds and runs.

use crate::collision::TraceScratch;
use crate::collision::{hull::Hull, CollisionModel, Contents, Hit, Region, Sweep, Target};
use crate::geom::{Aabb, EXPEL, MAX_COORD, POSITION_EPS};
use crate::map::{MapData, MapWarning};
use crate::movement::{
    pmove, Collider, MoveCommand, MoveConfig, MoveEvents, MoveMode, Movement, PlayerState,
};
use crate::mover::{Mover, MoverState, Pose};
use glam::DVec3;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// A player's id, unique within a world.
pub type PlayerId = u32;

/// How far outside the map's solid bounds a player may go before it is respawned.
pub const OUT_OF_BOUNDS_MARGIN: f64 = 1024.0;

/// Space kept between a joining player's box and every other player's, units.
pub const JOIN_CLEARANCE: f64 = 4.0;

/// Rings of places tried around the spawn points when players stand on all of them.
pub const JOIN_RINGS: i32 = 4;

/// Cell size of the per-tick grid that finds nearby players.
const PLAYER_CELL: f64 = 32.0;

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
            bytes.extend_from_slice(&id.to_le_bytes());
            p.state.hash_bytes(&mut bytes);
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

/// Per-thread working memory of the simulation. Keep one per thread and reuse it.
#[derive(Default, Debug)]
pub struct SimScratch {
    trace: TraceScratch,
    region: Region,
    regions: RegionCache,
    boxes: Vec<PlayerBox>,
    near: Vec<PlayerBox>,
    grid: PlayerGrid,
    start_boxes: Vec<PlayerBox>,
    poses: Vec<Pose>,
}

impl SimScratch {
    /// Empty scratch; it grows to the map's size once.
    pub fn new() -> Self {
        Self::default()
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
            self.spawns[id as usize % self.spawns.len()]
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
                let spawn = self.spawns[(id as usize).wrapping_add(k) % n];
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
        (p.mode == MoveMode::Walk).then(|| PlayerBox {
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
        };
        let v = p.velocity();
        let level = glam::DVec2::new(v.x, v.y).length().min(c.max_velocity);
        (level + gain) * dt + 1.0
    }

    /// Moves one player one tick for `cmd` against the map, the movers at `poses` and the
    /// boxes of `others` (a box with the player's own id is ignored). The server's
    /// [`Sim::step`] calls exactly this for every player, so a client that passes the same
    /// boxes gets the same bits.
    pub fn player_tick(
        &self,
        id: PlayerId,
        player: &PlayerState,
        cmd: &MoveCommand,
        poses: &[Pose],
        others: &[PlayerBox],
        s: &mut SimScratch,
    ) -> PlayerTick {
        // Every sweep of this tick stays within the player's reach: one broad-phase query
        // serves them all, and only players whose boxes reach into it matter.
        let around = self.around(player);
        s.boxes.clear();
        if player.mode == MoveMode::Walk {
            let zone = around.expand(EXPEL);
            s.boxes.extend(
                others
                    .iter()
                    .filter(|b| b.id != id && b.bounds.overlaps(&zone)),
            );
        }
        let region = s
            .regions
            .get(&self.map, id, around, self.movement.stand(), &mut s.trace);
        let mut col = SimCollider {
            sim: self,
            scratch: &mut s.trace,
            region,
            boxes: &s.boxes,
            poses,
            blocked_by: None,
        };
        let (state, mut events) = pmove(player, cmd, &self.movement, &mut col);
        if let Some(id) = col.blocked_by {
            events.touched.add(crate::Obstacle::Player(id));
        }
        PlayerTick { state, events }
    }

    /// Advances the world one tick (see the module docs for the order). Players without a
    /// command in `commands` repeat their last one; commands for unknown ids are ignored.
    /// Returns a report per player, in id order.
    pub fn step(
        &self,
        world: &mut WorldState,
        commands: &BTreeMap<PlayerId, MoveCommand>,
        s: &mut SimScratch,
    ) -> Vec<PlayerReport> {
        self.advance_movers(world, s);
        let mut poses = std::mem::take(&mut s.poses);
        self.poses(&world.movers, &mut poses);
        // Each player's start state and command (a merge of two id-ordered maps: no
        // lookups per player).
        let mut given = commands.iter().peekable();
        let start: Vec<(PlayerId, PlayerState, MoveCommand, bool)> = world
            .players
            .iter()
            .map(|(id, slot)| {
                while given.next_if(|(c, _)| *c < id).is_some() {}
                match given.next_if(|(c, _)| *c == id) {
                    Some((_, cmd)) => (*id, slot.state, *cmd, false),
                    None => (*id, slot.state, slot.last_command, true),
                }
            })
            .collect();
        // A grid of the start boxes (no hash-map order anywhere).
        s.start_boxes.clear();
        s.start_boxes.extend(
            start
                .iter()
                .filter_map(|(id, p, ..)| self.player_box(*id, p)),
        );
        s.grid.build(&s.start_boxes);
        // How far across (x, y) a player's box reaches from its centre: the grid bins by
        // centre.
        let half_xy = [self.movement.stand(), self.movement.crouch()]
            .iter()
            .map(|h| (h.bounds().size() * 0.5).truncate().max_element())
            .fold(0.0, f64::max);
        let mut moved: Vec<(PlayerId, PlayerTick, bool)> = Vec::with_capacity(start.len());
        let mut near = std::mem::take(&mut s.near);
        for (id, p, cmd, repeated) in &start {
            // Others stand where they started, so only their start boxes that reach into
            // this player's zone matter (what `player_tick` keeps).
            near.clear();
            if p.mode == MoveMode::Walk {
                let zone = self.around(p).expand(EXPEL);
                s.grid.near(&zone, half_xy, &mut near);
            }
            let t = self.player_tick(*id, p, cmd, &poses, &near, s);
            moved.push((*id, t, *repeated));
        }
        s.near = near;
        s.poses = poses;
        // Conflicts: lower ids keep their moves; see the module docs.
        let ends: Vec<Option<Aabb>> = moved
            .iter()
            .map(|(id, t, _)| self.player_box(*id, &t.state).map(|b| b.bounds))
            .collect();
        let mut partners: Vec<Vec<usize>> = vec![Vec::new(); moved.len()];
        for (a, b) in overlapping_pairs(&ends) {
            partners[a.max(b)].push(a.min(b));
        }
        let mut reverted = vec![false; moved.len()];
        for i in 0..moved.len() {
            reverted[i] = partners[i].iter().any(|&j| !reverted[j]);
        }
        let mut reports = Vec::with_capacity(moved.len());
        let slots = world.players.values_mut();
        for (i, (((id, t, repeated), (_, before, cmd, _)), slot)) in
            moved.into_iter().zip(&start).zip(slots).enumerate()
        {
            let mut state = t.state;
            if reverted[i] {
                // Where it stood, at rest, keeping only the jump button's latch.
                let held = crate::movement::flags::JUMP_HELD;
                state = PlayerState {
                    velocity: [0; 3],
                    flags: (before.flags & !held) | (state.flags & held),
                    ..*before
                };
            }
            let respawned = self.respawn_if_lost(id, &mut state);
            slot.state = state;
            slot.last_command = *cmd;
            reports.push(PlayerReport {
                id,
                events: t.events,
                repeated_command: repeated,
                reverted: reverted[i],
                respawned,
            });
        }
        s.regions.prune(world);
        world.tick = world.tick.wrapping_add(1);
        reports
    }

    /// The tick of [`Sim::step`] for player `id` alone, as a client predicts it: movers
    /// advance (carrying and pushing every known player), then `id` moves for `cmd`
    /// against the others' boxes while the others stand still. With the others' states
    /// exact, the result equals the server's step for `id` unless another player's move
    /// conflicted with it. Returns `None` when `id` is not in the world.
    pub fn predict(
        &self,
        world: &mut WorldState,
        id: PlayerId,
        cmd: &MoveCommand,
        s: &mut SimScratch,
    ) -> Option<PlayerTick> {
        if !world.players.contains_key(&id) {
            return None;
        }
        self.advance_movers(world, s);
        let mut poses = std::mem::take(&mut s.poses);
        self.poses(&world.movers, &mut poses);
        let mut others = std::mem::take(&mut s.near);
        others.clear();
        others.extend(
            world
                .players
                .iter()
                .filter(|(k, _)| **k != id)
                .filter_map(|(k, v)| self.player_box(*k, &v.state)),
        );
        let me = world.players[&id].state;
        let mut t = self.player_tick(id, &me, cmd, &poses, &others, s);
        s.near = others;
        s.poses = poses;
        self.respawn_if_lost(id, &mut t.state);
        if let Some(slot) = world.players.get_mut(&id) {
            slot.state = t.state;
            slot.last_command = *cmd;
        }
        world.tick = world.tick.wrapping_add(1);
        Some(t)
    }

    /// Whether `p` lies in the arena (players leaving it respawn).
    pub(crate) fn in_arena(&self, p: DVec3) -> bool {
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
        SimCollider {
            sim: self,
            scratch: &mut s.trace,
            region: &s.region,
            boxes: others,
            poses,
            blocked_by: None,
        }
    }

    /// Respawns a player whose origin left the arena; returns whether it did.
    fn respawn_if_lost(&self, id: PlayerId, state: &mut PlayerState) -> bool {
        if self.in_arena(state.origin()) {
            return false;
        }
        *state = self.spawn_state(id, state.mode);
        true
    }

    /// Advances every mover one tick, carrying its riders and pushing the players in its
    /// way; a mover that cannot push a player does not move and turns back if its kind
    /// does, so nobody is ever left inside it.
    pub(crate) fn advance_movers(&self, world: &mut WorldState, s: &mut SimScratch) {
        world
            .movers
            .resize(self.movers.len(), MoverState::default());
        let rate = self.movement.tick_rate();
        let reach = self.config().ground_distance + EXPEL * 2.0;
        let walkable = self.config().walkable_normal_z;
        let s = &mut s.trace;
        for (i, mover) in self.movers.iter().enumerate() {
            let now = world.movers[i];
            let triggered = world.players.values().any(|p| {
                let o = p.state.origin();
                o.cmpge(mover.trigger.min).all() && o.cmple(mover.trigger.max).all()
            });
            let next = mover.advance(&now, triggered, rate);
            let (p0, p1) = (mover.pose(&now), mover.pose(&next));
            if p0 == p1 {
                world.movers[i] = next;
                continue;
            }
            let mut moves: Vec<(PlayerId, PlayerState)> = Vec::new();
            let mut blocked = false;
            // Only players near where the mover is, or goes, can ride or be pushed.
            let near = mover
                .world_bounds(&p0)
                .union(&mover.world_bounds(&p1))
                .expand(reach);
            for (id, slot) in &world.players {
                let p = &slot.state;
                if p.mode == MoveMode::Noclip {
                    continue;
                }
                let hull = self.movement.hull(p);
                let o = p.origin();
                if !near.overlaps(&hull.bounds().offset(o)) {
                    continue;
                }
                // Riding: standing on the mover as it was.
                let rides = p.on_ground()
                    && mover
                        .sweep(i as u32, hull, o, o - DVec3::Z * reach, &p0, s)
                        .normal()
                        .is_some_and(|n| n.z >= walkable);
                let hit = mover.overlaps(hull, o, &p1, s);
                if !rides && !hit {
                    continue;
                }
                // Where the mover takes the point under the player...
                let mut target = mover.to_world(mover.to_local(o, &p0), &p1);
                if hit && p0.rotation != p1.rotation {
                    // ...but a turning mover sweeps the far side of the player faster than
                    // its centre: come back along the sweep until just clear of it.
                    let d = (target - o).normalize_or_zero();
                    let out = target + d * hull.bounds().size().length();
                    let back = mover.sweep(i as u32, hull, out, o, &p1, s);
                    if back.hit.is_some() {
                        target = back.end;
                    }
                }
                let to = self.map.sweep(hull, o, target, Contents::PLAYER, s).end;
                if hit && mover.overlaps(hull, to, &p1, s) {
                    blocked = true;
                    break;
                }
                let mut np = *p;
                np.origin = PlayerState::at(to).origin;
                if mover.overlaps(hull, np.origin(), &p1, s)
                    || self
                        .map
                        .position_solid(hull, np.origin(), Contents::PLAYER, s)
                {
                    np.origin = p.origin;
                    if hit {
                        blocked = true;
                        break;
                    }
                }
                moves.push((*id, np));
            }
            if blocked {
                world.movers[i] = mover.blocked(&now);
                continue;
            }
            for (id, np) in moves {
                if let Some(slot) = world.players.get_mut(&id) {
                    slot.state = np;
                }
            }
            world.movers[i] = next;
        }
    }
}

/// Whether a point lies within the supported coordinates.
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

pub(crate) fn in_range(p: DVec3) -> bool {
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

/// The players' start boxes binned by the (x, y) cell of their centres: a flat grid,
/// counting-sorted once per tick, so a query reads a few cells directly. Boxes go in by
/// id, so each cell lists them in id order.
#[derive(Debug, Default)]
struct PlayerGrid {
    cell: f64,
    /// Cell coordinates of the grid's first cell.
    origin: [i64; 2],
    dims: [usize; 2],
    /// Per cell, where its boxes begin in `boxes` (one extra entry closes the last).
    starts: Vec<u32>,
    boxes: Vec<PlayerBox>,
}

impl PlayerGrid {
    /// Bins `input`, given in id order. The cell doubles from [`PLAYER_CELL`] until the
    /// grid holds at most 16 cells per box (players spread over a huge map).
    fn build(&mut self, input: &[PlayerBox]) {
        self.boxes.clear();
        self.starts.clear();
        if input.is_empty() {
            self.dims = [0, 0];
            return;
        }
        let mut cell = PLAYER_CELL;
        let cells_of = |cell: f64| {
            let mut lo = [i64::MAX; 2];
            let mut hi = [i64::MIN; 2];
            for b in input {
                let c = Self::coords(b.bounds.center(), cell);
                for a in 0..2 {
                    lo[a] = lo[a].min(c[a]);
                    hi[a] = hi[a].max(c[a]);
                }
            }
            (lo, hi)
        };
        let (lo, hi) = loop {
            let (lo, hi) = cells_of(cell);
            let n = (0..2)
                .map(|a| (hi[a] - lo[a] + 1) as u128)
                .product::<u128>();
            if n <= 16 * input.len() as u128 + 64 {
                break (lo, hi);
            }
            cell *= 2.0;
        };
        self.cell = cell;
        self.origin = lo;
        self.dims = [(hi[0] - lo[0] + 1) as usize, (hi[1] - lo[1] + 1) as usize];
        let n = self.dims[0] * self.dims[1];
        self.starts.resize(n + 1, 0);
        for b in input {
            let k = self.index(b);
            self.starts[k + 1] += 1;
        }
        for k in 0..n {
            self.starts[k + 1] += self.starts[k];
        }
        self.boxes.resize(input.len(), input[0]);
        let mut fill = self.starts.clone();
        for b in input {
            let k = self.index(b);
            self.boxes[fill[k] as usize] = *b;
            fill[k] += 1;
        }
    }

    fn coords(p: DVec3, cell: f64) -> [i64; 2] {
        // Origins are within ±2^23 (quantized i32), so cells fit easily.
        [(p.x / cell).floor() as i64, (p.y / cell).floor() as i64]
    }

    fn index(&self, b: &PlayerBox) -> usize {
        let c = Self::coords(b.bounds.center(), self.cell);
        let x = (c[0] - self.origin[0]) as usize;
        let y = (c[1] - self.origin[1]) as usize;
        x * self.dims[1] + y
    }

    /// The boxes that overlap `zone`, in cell order (the queries over them break ties by
    /// id, so nothing depends on it); `size` bounds how far a box reaches
    /// across (x, y) from its centre, so the centre of a box that overlaps lies within it
    /// of the zone.
    fn near(&self, zone: &Aabb, size: f64, out: &mut Vec<PlayerBox>) {
        out.clear();
        if self.boxes.is_empty() {
            return;
        }
        let lo = Self::coords(zone.min - DVec3::splat(size), self.cell);
        let hi = Self::coords(zone.max + DVec3::splat(size), self.cell);
        let clamp =
            |v: i64, a: usize| (v - self.origin[a]).clamp(0, self.dims[a] as i64 - 1) as usize;
        if hi[0] < self.origin[0]
            || hi[1] < self.origin[1]
            || lo[0] >= self.origin[0] + self.dims[0] as i64
            || lo[1] >= self.origin[1] + self.dims[1] as i64
        {
            return;
        }
        for x in clamp(lo[0], 0)..=clamp(hi[0], 0) {
            let row = x * self.dims[1];
            let (from, to) = (
                self.starts[row + clamp(lo[1], 1)] as usize,
                self.starts[row + clamp(hi[1], 1) + 1] as usize,
            );
            out.extend(
                self.boxes[from..to]
                    .iter()
                    .filter(|b| b.bounds.overlaps(zone)),
            );
        }
    }
}

/// Index pairs of boxes that overlap deeper than [`POSITION_EPS`] (sweep and prune on x).
fn overlapping_pairs(boxes: &[Option<Aabb>]) -> Vec<(usize, usize)> {
    let mut order: Vec<(usize, Aabb)> = boxes
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.map(|b| (i, b.expand(-POSITION_EPS))))
        .collect();
    order.sort_unstable_by(|a, b| a.1.min.x.total_cmp(&b.1.min.x).then(a.0.cmp(&b.0)));
    let mut pairs = Vec::new();
    for (k, (i, a)) in order.iter().enumerate() {
        for (j, b) in &order[k + 1..] {
            if b.min.x > a.max.x {
                break;
            }
            if a.overlaps(b) {
                pairs.push((*i, *j));
            }
        }
    }
    pairs
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

/// The map, the movers at their poses, and other players' boxes.
pub(crate) struct SimCollider<'a> {
    sim: &'a Sim,
    scratch: &'a mut TraceScratch,
    region: &'a Region,
    boxes: &'a [PlayerBox],
    poses: &'a [Pose],
    /// A player whose box made a position test fail (the move's outcome hung on where
    /// that player stands, though no sweep touched it).
    blocked_by: Option<PlayerId>,
}

impl Collider for SimCollider<'_> {
    fn sweep(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Sweep {
        let map = &self.sim.map;
        let mut t = map.sweep_in(
            self.region,
            hull,
            start,
            end,
            Contents::PLAYER,
            self.scratch,
        );
        let hb = hull.bounds();
        let swept = hull.swept_bounds(start, end).expand(EXPEL * 4.0);
        for (i, (m, pose)) in self.sim.movers.iter().zip(self.poses).enumerate() {
            if !m.world_bounds(pose).overlaps(&swept) {
                continue;
            }
            let mt = m.sweep(i as u32, hull, start, end, pose, self.scratch);
            if mt.hit.is_some() && mt.fraction < t.fraction {
                t = mt;
            }
        }
        for b in self.boxes.iter().filter(|b| b.bounds.overlaps(&swept)) {
            // The moving box against a standing one is a point against their sum.
            let sum = Aabb {
                min: b.bounds.min - hb.max,
                max: b.bounds.max - hb.min,
            };
            if let Some((f, n)) = point_vs_box(start, end - start, &sum) {
                // Of two players hit at once the lower id, whatever order they come in.
                let first = match t.hit {
                    Some(Hit {
                        target: Target::Player(other),
                        ..
                    }) => f < t.fraction || (f == t.fraction && b.id < other),
                    _ => f < t.fraction,
                };
                if first {
                    let at = start + (end - start) * f;
                    t = Sweep {
                        fraction: f,
                        end: at,
                        hit: Some(Hit {
                            normal: n,
                            // The nearest point of the other box to the hull's centre.
                            point: (at + hb.center()).clamp(b.bounds.min, b.bounds.max),
                            contents: Contents::PLAYER,
                            target: Target::Player(b.id),
                        }),
                    };
                }
            }
        }
        t
    }

    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool {
        let me = hull.bounds().offset(pos);
        let inner = me.expand(-POSITION_EPS);
        let blocking = self.boxes.iter().filter(|b| inner.overlaps(&b.bounds));
        if let Some(b) = blocking.min_by_key(|b| b.id) {
            self.blocked_by = Some(b.id);
            return true;
        }
        self.sim
            .map
            .position_solid_in(self.region, hull, pos, Contents::PLAYER, self.scratch)
            || self.sim.movers.iter().zip(self.poses).any(|(m, pose)| {
                m.world_bounds(pose).overlaps(&me) && m.overlaps(hull, pos, pose, self.scratch)
            })
    }
}

/// A point moving from `p` by `d` against box `b` with the expel zone of
/// [`EXPEL`] (the box inflated by e): the fraction where it enters, with the face normal.
/// A point already in the zone may move along or away, never deeper; a point inside the
/// box itself is left free to leave.
fn point_vs_box(p: DVec3, d: DVec3, b: &Aabb) -> Option<(f64, DVec3)> {
    let inflated = b.expand(EXPEL);
    let inside = |q: DVec3, bb: &Aabb| q.cmpgt(bb.min).all() && q.cmplt(bb.max).all();
    if inside(p, b) {
        return None;
    }
    if inside(p, &inflated) {
        // In the zone: blocked if moving towards the box on an axis where it is outside.
        for a in 0..3 {
            if p[a] >= b.max[a] && d[a] < 0.0 {
                return Some((0.0, DVec3::AXES[a]));
            }
            if p[a] <= b.min[a] && d[a] > 0.0 {
                return Some((0.0, -DVec3::AXES[a]));
            }
        }
        return None;
    }
    // Slab test against the inflated box.
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    let mut normal = DVec3::ZERO;
    for a in 0..3 {
        if d[a] == 0.0 {
            if p[a] <= inflated.min[a] || p[a] >= inflated.max[a] {
                return None;
            }
            continue;
        }
        let (mut lo, mut hi) = (
            (inflated.min[a] - p[a]) / d[a],
            (inflated.max[a] - p[a]) / d[a],
        );
        let mut n = -DVec3::AXES[a];
        if lo > hi {
            std::mem::swap(&mut lo, &mut hi);
            n = DVec3::AXES[a];
        }
        if lo > t0 {
            t0 = lo;
            normal = n;
        }
        t1 = t1.min(hi);
        if t0 >= t1 {
            return None;
        }
    }
    (normal != DVec3::ZERO).then_some((t0, normal))
}

/// Compile-time proof that a simulation can be shared between threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Sim>();
    assert_send_sync::<WorldState>();
};
