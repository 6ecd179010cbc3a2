//! Whom each client sees: one tick's players binned by where they stand, searched for each client's nearest.

use super::*;

/// The players of one tick, binned by where they stand, so each client's nearest
/// `interest` others are found from the cells around it rather than by measuring
/// everyone: built once per tick for every client's snapshot, with each player's
/// snapshot fields.
pub struct Crowd {
    /// Each player's origin, named by its index in `players`.
    grid: Grid<Point>,
    /// Each player's id and fields, in id order.
    pub(super) players: Vec<(PlayerId, PlayerFields)>,
    /// Largest distance across (x, y) between any two players (bounds the search).
    span: f64,
    /// Each mover's centre at its pose, index and fields, in mover order.
    pub(super) movers: Vec<(DVec3, u32, MoverFields)>,
    /// Names the players' membership and order: the same while the same ids stand at the
    /// same indices, unique otherwise (a client's choice of players, kept as indices, is
    /// good for the crowds of its generation only).
    pub(super) generation: u64,
    points: Vec<Point>,
    poses: Vec<expel_core::mover::Pose>,
    /// The game's entities: id, where, who may see it, owner and fields, in id order.
    entities: Vec<CrowdEntity>,
    /// The game's own state of players (who may see it, its fields) and of entities, in
    /// id order.
    player_states: Vec<(PlayerId, Scope, StateFields)>,
    entity_states: Vec<(EntityId, StateFields)>,
    /// How far a client's player may close on the others in a tick of its prediction
    /// (which holds them where its snapshot shows them), units: twice the run speed, for
    /// one knocked back or falling; see [`exact_reach`].
    pub(super) closing: f64,
    /// The entities that ended lately, oldest first.
    ends: Vec<Ended>,
}

/// A game entity of the crowd's tick.
#[derive(Clone, Copy, Debug)]
struct CrowdEntity {
    id: EntityId,
    at: DVec3,
    scope: Scope,
    owner: Option<PlayerId>,
    fields: EntityFields,
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
            entities: Vec::new(),
            player_states: Vec::new(),
            entity_states: Vec::new(),
            closing: 0.0,
            ends: Vec::new(),
        };
        crowd.renew(sim, world, interest);
        crowd
    }

    /// [`Crowd::new`] for a later tick, in place: the lists are reused, and the
    /// generation kept when the same players stand in the same order (so the clients'
    /// choices of players carry over).
    pub fn renew(&mut self, sim: &Sim, world: &WorldState, interest: usize) {
        let m = sim.movement();
        self.closing = 2.0 * m.config().max_speed * m.dt();
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
        self.entities.clear();
        self.entities
            .extend(world.entities.iter().map(|(id, e)| CrowdEntity {
                id: *id,
                at: e.origin(),
                scope: Scope::Near,
                owner: e.owner,
                fields: entity_fields(e),
            }));
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
    pub(super) fn index_of(&self, id: PlayerId) -> Option<u32> {
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

    /// Whom a client at `o` sees, nearest first: the nearest `interest`, and when those
    /// all stand within [`EXACT_REACH`], everyone within it, up to
    /// [`MAX_VIEW`](super::MAX_VIEW).
    pub(super) fn in_view(&self, me: Option<u32>, o: DVec3, interest: usize, out: &mut Vec<Near>) {
        self.nearest_indices(me, o, interest, out);
        let reach2 = EXACT_REACH * EXACT_REACH;
        // Nearest first: the last found is the farthest.
        if out.len() == interest && out.last().is_some_and(|n| n.distance2() <= reach2) {
            self.nearest_indices(me, o, super::MAX_VIEW.max(interest), out);
            let within = out.partition_point(|n| n.distance2() <= reach2);
            out.truncate(within.max(interest));
        }
    }

    /// [`Crowd::nearest`] by crowd index (the id order, so ties by index are ties by id).
    /// The grid's cells are read in rings around `o`'s cell, nearest ring first. Every
    /// player beyond the rings read so far is at least `gap` away (the distance from `o`
    /// across (x, y) to the square they cover), so once `k` found are nearer than that,
    /// no player left unread can take a place. Only the best `k` found are kept as it
    /// goes; a dense crowd stops after a ring or two, a sparse one reads further.
    pub(super) fn nearest_indices(&self, me: Option<u32>, o: DVec3, k: usize, out: &mut Vec<Near>) {
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
pub(super) struct Near(u128);

impl Near {
    fn new(distance2: f64, index: u32) -> Near {
        Near(u128::from(distance2.to_bits()) << 32 | u128::from(index))
    }

    fn distance2(self) -> f64 {
        f64::from_bits((self.0 >> 32) as u64)
    }

    pub(super) fn index(self) -> u32 {
        self.0 as u32
    }
}

impl Crowd {
    /// Sets the game's own state of players (each with who may see it: [`Scope::Near`],
    /// the clients that have the player in view; [`Scope::Everyone`]; [`Scope::Owner`],
    /// the player's own client) and of entities (seen with the entity), as the rules
    /// last set them.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
    pub(crate) fn set_states(
        &mut self,
        players: &BTreeMap<PlayerId, (Scope, StateFields)>,
        entities: &BTreeMap<EntityId, StateFields>,
    ) {
        self.player_states.clear();
        self.player_states
            .extend(players.iter().map(|(id, (s, f))| (*id, *s, *f)));
        self.entity_states.clear();
        self.entity_states
            .extend(entities.iter().map(|(id, f)| (*id, *f)));
    }

    /// Into `scene`, the game's states client `me` sees: its own, those of the players
    /// and entities in the scene as their scope allows, and those for everyone (up to
    /// [`ENTITY_BUDGET`] of the players not in view, in id order).
    pub(super) fn states_for(&self, me: PlayerId, scene: &mut Scene) {
        scene.player_states.0.clear();
        let mut extra = 0;
        for (id, scope, f) in &self.player_states {
            let shown = match scope {
                _ if *id == me => true,
                Scope::Owner => false,
                Scope::Near => scene.players.get(id.0).is_some(),
                Scope::Everyone if scene.players.get(id.0).is_some() => true,
                Scope::Everyone => {
                    extra += 1;
                    extra <= ENTITY_BUDGET
                }
            };
            if shown {
                scene.player_states.0.push((id.0, *f));
            }
        }
        scene.entity_states.0.clear();
        let mut states = self.entity_states.iter().peekable();
        for (id, _) in &scene.entities.0 {
            while states.next_if(|(s, _)| s.0 < *id).is_some() {}
            if let Some((_, f)) = states.next_if(|(s, _)| s.0 == *id) {
                scene.entity_states.0.push((*id, *f));
            }
        }
    }

    /// Sets each player's teleports' count (see [`Snapshot::leaps`]), in id order.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
    pub(crate) fn set_leaps(&mut self, leaps: impl Iterator<Item = (PlayerId, u8)>) {
        let mut leaps = leaps.peekable();
        for (id, f) in &mut self.players {
            while leaps.next_if(|(l, _)| l < id).is_some() {}
            let n = leaps.next_if(|(l, _)| l == id).map_or(0, |(_, n)| n);
            f[PLAYER_FLAGS] = flags_field(f[PLAYER_FLAGS] as u8, n);
        }
    }

    /// The teleports' count of the player at crowd index `i`.
    pub(super) fn leaps_of(&self, i: Option<u32>) -> u8 {
        let f = i.and_then(|i| self.players.get(i as usize));
        f.and_then(|(_, f)| flags_from(f[PLAYER_FLAGS]))
            .map_or(0, |(_, leaps)| leaps)
    }

    /// Sets the entities that ended lately (see [`ends`](crate::game::ends)).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
    pub(crate) fn set_ends(&mut self, log: &EndLog) {
        self.ends.clear();
        self.ends.extend(log.since(0, u64::MAX).copied());
    }

    /// Into `out`, the ends client `me` at `o` is told in a snapshot of `tick` written
    /// against a baseline of tick `since` (0: none) whose entities (carried on) are
    /// `held`: those in its scope that ended since, oldest first, at most
    /// [`ENDS_PER_SNAPSHOT`], each with its start where the baseline lacks the entity.
    /// How many more there were (left out).
    pub(super) fn ends_for(
        &self,
        me: PlayerId,
        o: DVec3,
        (since, tick): (u64, u64),
        held: &Entities<ENTITY_FIELDS>,
        out: &mut Vec<EntityEnd>,
    ) -> u64 {
        out.clear();
        let r2 = ENTITY_INTEREST_RADIUS * ENTITY_INTEREST_RADIUS;
        let from = self.ends.partition_point(|e| e.end.tick < since);
        let mut cut = 0;
        for e in self.ends[from..].iter().take_while(|e| e.end.tick < tick) {
            let near = || {
                let grid = |p| expel_core::movement::from_grid(p, POSITION_SCALE);
                grid(e.start.from).distance_squared(o) <= r2 || e.end.at().distance_squared(o) <= r2
            };
            let shown = match e.scope {
                _ if e.start.owner == Some(me) => true,
                Scope::Owner => false,
                Scope::Everyone => true,
                Scope::Near => near(),
            };
            if !shown {
                continue;
            }
            if out.len() >= ENDS_PER_SNAPSHOT {
                cut += 1;
                continue;
            }
            let mut end = e.end;
            if held.get(end.id.0).is_none() {
                end.start = Some(e.start);
            }
            out.push(end);
        }
        cut
    }

    /// Sets who may see each game entity and the tick it was spawned for (one not named
    /// is [`Scope::Near`], of tick 0).
    pub fn set_spawned(&mut self, spawned: &BTreeMap<EntityId, Spawned>) {
        // Both in id order: one merge.
        let mut named = spawned.iter().peekable();
        for e in &mut self.entities {
            while named.next_if(|(id, _)| **id < e.id).is_some() {}
            let (scope, born) = named
                .next_if(|(id, _)| **id == e.id)
                .map_or((Scope::Near, 0), |(_, s)| (s.scope, s.start.born));
            e.scope = scope;
            e.fields[6] = i64::try_from(born).unwrap_or(i64::MAX);
        }
    }

    /// Into `out`, the game entities client `me` at `o` sees: those in scope, nearest
    /// first up to [`ENTITY_BUDGET`] (its own and everyone's before any near one; the tick
    /// an entity was spawned for is sent to its owner alone; one the
    /// client holds already, in `held`, counts as half as far, so the choice does not
    /// churn as entities move: each one dropped and taken back costs its fields in full),
    /// in id order. `near` is scratch.
    pub(super) fn entities_for(
        &self,
        me: PlayerId,
        o: DVec3,
        held: &Entities<ENTITY_FIELDS>,
        near: &mut Vec<(f64, usize)>,
        out: &mut Entities<ENTITY_FIELDS>,
    ) {
        near.clear();
        let r2 = ENTITY_INTEREST_RADIUS * ENTITY_INTEREST_RADIUS;
        let mut helds = held.0.iter().peekable();
        for (i, e) in self.entities.iter().enumerate() {
            while helds.next_if(|(h, _)| *h < e.id.0).is_some() {}
            let kept = helds.next_if(|(h, _)| *h == e.id.0).is_some();
            let d2 = e.at.distance_squared(o);
            let d2 = if kept { d2 * 0.25 } else { d2 };
            let key = match e.scope {
                Scope::Owner if e.owner != Some(me) => continue,
                // Its owner's first (its client predicts its own projectiles).
                _ if e.owner == Some(me) => -1.0,
                Scope::Everyone => -1.0,
                Scope::Near if d2 <= r2 => d2,
                Scope::Near | Scope::Owner => continue,
            };
            near.push((key, i));
        }
        if near.len() > ENTITY_BUDGET {
            // Nearest first, ties by id (the index): the same choice at any thread count.
            near.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            near.truncate(ENTITY_BUDGET);
            near.sort_unstable_by_key(|n| n.1);
        }
        out.0.clear();
        out.0.extend(near.iter().map(|&(_, i)| {
            let e = &self.entities[i];
            let mut fields = e.fields;
            if e.owner != Some(me) {
                // Only its owner matches a prediction by the tick it was spawned for.
                fields[6] = 0;
            }
            (e.id.0, fields)
        }));
    }
}
