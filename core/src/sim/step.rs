//! The tick itself: one player's move ([`Sim::player_tick`]), the world's
//! ([`Sim::step`], in the order the module explains) and one player's alone
//! ([`Sim::predict`]).

use super::*;
use crate::collision::Target;
use crate::movement::Collider;

impl Sim {
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
        if let Some(me) = self.player_box(id, player) {
            let zone = around.expand(EXPEL);
            s.boxes.extend(others.iter().filter(|b| {
                b.id != id && b.bounds.overlaps(&zone) && !entangled(&me.bounds, &b.bounds)
            }));
        }
        let region = s
            .regions
            .get(&self.map, id, around, self.movement.stand(), &mut s.trace);
        self.movers_near(&around, poses, &mut s.movers);
        let zone = self.close_zone(player);
        s.close.clear();
        s.close
            .extend(s.boxes.iter().filter(|b| b.bounds.overlaps(&zone)));
        let mut col = SimCollider {
            sim: self,
            mask: Contents::PLAYER,
            scratch: &mut s.trace,
            region,
            boxes: &s.boxes,
            close: (!s.all_boxes).then_some((zone, s.close.as_slice())),
            poses,
            movers: &s.movers,
            blocked_by: None,
        };
        let (state, mut events) = pmove(player, cmd, &self.movement, &mut col);
        if let Some(id) = col.blocked_by {
            events.touched.add(crate::movement::Obstacle::Player(id));
        }
        PlayerTick { state, events }
    }

    /// Advances the world one tick (see the module docs for the order). Players without a
    /// command in `commands` repeat their last one; commands for unknown ids are ignored.
    /// Returns a report per player, in id order ([`Sim::step_world`] tells the entities'
    /// impacts too).
    pub fn step(
        &self,
        world: &mut WorldState,
        commands: &BTreeMap<PlayerId, MoveCommand>,
        s: &mut SimScratch,
    ) -> Vec<PlayerReport> {
        self.step_world(world, commands, s).players
    }

    /// [`Sim::step`], with what the tick did to the entities.
    pub fn step_world(
        &self,
        world: &mut WorldState,
        commands: &BTreeMap<PlayerId, MoveCommand>,
        s: &mut SimScratch,
    ) -> StepReport {
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
        // The entities move against the players as they stand now, like every player.
        let start_boxes = std::mem::take(&mut s.start_boxes);
        let (impacts, lost) = self.step_entities(world, &poses, &start_boxes, s);
        s.start_boxes = start_boxes;
        // How far across (x, y) a player's box reaches from its centre: the grid bins by
        // centre.
        let half_xy = [self.movement.stand(), self.movement.crouch()]
            .iter()
            .map(|h| (h.bounds().size() * 0.5).truncate().max_element())
            .fold(0.0, f64::max);
        // One player's move: others stand where they started, so only their start boxes
        // that reach into this player's zone matter (what `player_tick` keeps).
        let one =
            |grid: &PlayerGrid,
             s: &mut SimScratch,
             (id, p, cmd, repeated): &(PlayerId, PlayerState, MoveCommand, bool)| {
                let mut near = std::mem::take(&mut s.near);
                near.clear();
                if p.mode == MoveMode::Walk {
                    let zone = self.around(p).expand(EXPEL);
                    grid.near(&zone, half_xy, &mut near);
                }
                let t = self.player_tick(*id, p, cmd, &poses, &near, s);
                s.near = near;
                (*id, t, *repeated)
            };
        let moved: Vec<(PlayerId, PlayerTick, bool)> = match s.spreading() {
            Some(pool) if start.len() >= 2 * PLAYERS_PER_WORKER => {
                // Short runs of the id order, joined in order: a worker the system
                // deschedules (its core shared with other processes) holds up the run it
                // is on, not its share of the tick, whose other runs the others take.
                use rayon::prelude::*;
                let (grid, workers) = (&s.grid, &s.workers);
                let runs: Vec<Vec<_>> = pool.install(|| {
                    start
                        .par_chunks(PLAYERS_PER_WORKER)
                        .map(|run| {
                            let i = rayon::current_thread_index().unwrap_or(0) % workers.len();
                            let mut ws = workers[i].lock().unwrap_or_else(PoisonError::into_inner);
                            run.iter().map(|x| one(grid, &mut ws, x)).collect()
                        })
                        .collect()
                });
                runs.concat()
            }
            _ => {
                let grid = std::mem::take(&mut s.grid);
                let moved = start.iter().map(|x| one(&grid, s, x)).collect();
                s.grid = grid;
                moved
            }
        };
        s.poses = poses;
        // Conflicts: lower ids keep their moves; see the module docs.
        let ends: Vec<Option<Aabb>> = moved
            .iter()
            .map(|(id, t, _)| self.player_box(*id, &t.state).map(|b| b.bounds))
            .collect();
        let mut partners: Vec<Vec<usize>> = vec![Vec::new(); moved.len()];
        let start_box = |i: usize| self.player_box(start[i].0, &start[i].1);
        for (a, b) in overlapping_pairs(&ends) {
            // A pair already entangled at the start moved through each other freely.
            if let (Some(sa), Some(sb)) = (start_box(a), start_box(b)) {
                if entangled(&sa.bounds, &sb.bounds) {
                    continue;
                }
            }
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
        for w in &mut s.workers {
            let w = w.get_mut().unwrap_or_else(PoisonError::into_inner);
            w.regions.prune(world);
        }
        world.tick = world.tick.wrapping_add(1);
        StepReport {
            players: reports,
            impacts,
            lost,
        }
    }

    /// Moves every entity that has a motion one tick (each against the same boxes, so in
    /// any order and on any number of threads to the same bits), applies the results in
    /// id order and drops the lost.
    pub(crate) fn step_entities(
        &self,
        world: &mut WorldState,
        poses: &[Pose],
        boxes: &[PlayerBox],
        s: &mut SimScratch,
    ) -> (Vec<Impact>, Vec<EntityId>) {
        let moving: Vec<(EntityId, EntityState)> = world
            .entities
            .iter()
            .filter(|(_, e)| e.motion.is_some())
            .map(|(id, e)| (*id, *e))
            .collect();
        let ticks: Vec<(EntityId, EntityTick)> = match s.spreading() {
            Some(pool) if moving.len() >= 2 * PLAYERS_PER_WORKER => {
                use rayon::prelude::*;
                let workers = &s.workers;
                let runs: Vec<Vec<_>> = pool.install(|| {
                    moving
                        .par_chunks(PLAYERS_PER_WORKER)
                        .map(|run| {
                            let i = rayon::current_thread_index().unwrap_or(0) % workers.len();
                            let mut ws = workers[i].lock().unwrap_or_else(PoisonError::into_inner);
                            run.iter()
                                .map(|(id, e)| {
                                    (*id, self.entity_tick(*id, e, poses, boxes, &mut ws))
                                })
                                .collect()
                        })
                        .collect()
                });
                runs.concat()
            }
            _ => moving
                .iter()
                .map(|(id, e)| (*id, self.entity_tick(*id, e, poses, boxes, s)))
                .collect(),
        };
        let (mut impacts, mut lost) = (Vec::new(), Vec::new());
        for (id, t) in ticks {
            impacts.extend_from_slice(&t.impacts);
            if t.lost {
                world.entities.remove(&id);
                lost.push(id);
            } else if let Some(e) = world.entities.get_mut(&id) {
                *e = t.entity;
            }
        }
        (impacts, lost)
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

    /// Moves entity `id` one tick (see the module docs) against the map, the movers at
    /// `poses` and the players' boxes `players` (its owner's ignored). The world's step
    /// calls exactly this for every moving entity, so a client that passes the same
    /// inputs gets the same bits.
    pub fn entity_tick(
        &self,
        id: EntityId,
        e: &EntityState,
        poses: &[Pose],
        players: &[PlayerBox],
        s: &mut SimScratch,
    ) -> EntityTick {
        entity::entity_tick(self, id, e, poses, players, s)
    }

    /// What `hull` moving straight from `start` to `end` meets first: the map (solid
    /// brushes and patches; clip brushes let shots through), the movers at `poses`, the
    /// players' boxes `players` but `passes`' (the shooter's own), as a projectile's
    /// tick meets them. A hitscan shot is a point swept along its ray. Returns the sweep
    /// and what it met, if anything. Nothing is moved: a query.
    #[allow(clippy::too_many_arguments)]
    pub fn shot(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        poses: &[Pose],
        players: &[PlayerBox],
        passes: Option<PlayerId>,
        s: &mut SimScratch,
    ) -> (
        crate::collision::Sweep,
        Option<(Struck, crate::collision::Hit)>,
    ) {
        let swept = hull.swept_bounds(start, end);
        self.movers_near(&swept, poses, &mut s.movers);
        s.entity_boxes.clear();
        s.entity_boxes.extend(players.iter().filter(|b| {
            Some(b.id) != passes && b.bounds.overlaps(&swept.expand(collider::SWEEP_MARGIN))
        }));
        let region = Region::default();
        let mut col = SimCollider {
            sim: self,
            mask: Contents::SOLID,
            scratch: &mut s.trace,
            region: &region,
            boxes: &s.entity_boxes,
            close: None,
            poses,
            movers: &s.movers,
            blocked_by: None,
        };
        let sweep = col.sweep(hull, start, end);
        let struck = sweep.hit.map(|h| {
            let what = match h.target {
                Target::Model(_) => Struck::World,
                Target::Mover { mover, .. } => Struck::Mover(mover),
                Target::Player(p) => Struck::Player(p),
            };
            (what, h)
        });
        (sweep, struck)
    }

    /// Advances every mover one tick, carrying its riders and pushing the players in its
    /// way; a mover that cannot push a player does not move and turns back if its kind
    /// does, so nobody is ever left inside it.
    pub fn advance_movers(&self, world: &mut WorldState, s: &mut SimScratch) {
        push::advance_movers(self, world, s)
    }
}
