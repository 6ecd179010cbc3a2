//! The game's own code in the server: its rules ([`GameRules`]), told of players joining
//! and leaving and run once a tick, and its messages both ways ([`Game`]). They run
//! inside the machine, at fixed points of the tick, in player order: the same inputs
//! give the same state and the same messages.

use crate::code::Code;
use crate::game::ends::{EndCause, EntityEnd, EntityStart};
use crate::game::state::{Replicated, StateError, StateOf, StateTypes};
use crate::messages::outbox::Sender;
use crate::messages::{decode_message, encode_message, Channel, MessageError};
use crate::record::Call;
use crate::server::{log, replaying, ServerMachine};
use crate::shots::server::{SeenShot, ShotError};
use crate::snapshot::{game_state_fields, EndLog, Ended, Scope, Spawned, StateFields};
use crate::time::Instant;
use crate::wire::MovementAuthority;
use expel_core::collision::hull::Hull;
use expel_core::collision::{Contents, TraceScratch};
use expel_core::movement::{flags, MoveCommand, MoveMode, PlayerState};
use expel_core::sim::{in_range, EntityId, EntityState, Impact, PlayerId, SimError, WorldState};
use glam::DVec3;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A game's rules, run by the server's machine (see the module docs).
pub trait GameRules: Send + Sync {
    /// A player entered the world (its map has arrived).
    fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
        let _ = (game, player);
    }

    /// A player left the world (its reason given).
    fn left(&mut self, game: &mut Game<'_>, player: PlayerId, reason: &str) {
        let _ = (game, player, reason);
    }

    /// Once a tick, before the simulation steps it: take the players' messages, read the
    /// world, send messages.
    fn tick(&mut self, game: &mut Game<'_>);

    /// The game's own state types of players and of entities (none by default): each
    /// client is told their names when it joins, and [`Game::set_player_state`] and
    /// [`Game::set_entity_state`] take these types alone. Read once, when the rules are
    /// installed.
    fn states(&self) -> StateTypes {
        StateTypes::new()
    }

    /// The game's state for operators (JSON), when it changed since the last call: the
    /// server shows it at `/game.json` and in the live view.
    fn summary(&mut self) -> Option<String> {
        None
    }
}

/// Why the rules could not do what they asked to a player.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The player is not in the world (it left, or never joined).
    #[error("player {0} is not in the world")]
    NotPlaying(PlayerId),
    /// The place asked for cannot hold the player.
    #[error("player {player} cannot stand at {at:?}: {why}")]
    Blocked {
        /// The player.
        player: PlayerId,
        /// The place asked for.
        at: [f64; 3],
        /// What is in the way.
        why: &'static str,
    },
}

/// What happened to players while the rules were busy, for them once they are free.
pub(crate) enum Notice {
    Joined(PlayerId),
    Left(PlayerId, String),
}

/// The game's rules as the server holds them, and what waits for them.
#[derive(Default)]
pub(crate) struct Hosted {
    pub(super) rules: Option<Box<dyn GameRules>>,
    /// The rules' state types ([`GameRules::states`]).
    pub(super) types: StateTypes,
    /// The rules are running (taken out of `rules`): notices wait for them to return.
    running: bool,
    notices: VecDeque<Notice>,
    /// Players with messages waiting for the game.
    pub(super) mail_waiting: BTreeSet<PlayerId>,
    /// The player whose message the game took last: the next is the next player's, so
    /// the rules read the players' messages in turns, whatever their ids.
    pub(super) last_taken: Option<PlayerId>,
    /// The commands that arrived for the tick being stepped, while the rules run.
    pub(super) commands: BTreeMap<PlayerId, MoveCommand>,
    /// Who may see each entity, and the tick it was spawned for.
    pub(super) spawned: BTreeMap<EntityId, Spawned>,
    /// The game's own state of players (with who may see it) and of entities.
    pub(super) player_states: BTreeMap<PlayerId, (Scope, StateFields)>,
    pub(super) entity_states: BTreeMap<EntityId, StateFields>,
    /// The next entity id to hand out.
    next_entity: EntityId,
    /// The entities' impacts of the last tick stepped, and the entities it lost.
    impacts: Vec<Impact>,
    lost: Vec<EntityId>,
    /// The entities that ended lately, told to the clients that would have seen them.
    pub(super) ends: EndLog,
}

impl Hosted {
    /// A tick was stepped: its impacts and losses, for the rules' next look.
    pub(super) fn stepped(&mut self, impacts: Vec<Impact>, lost: &[EntityId], tick: u64) {
        for id in lost {
            if let Some(s) = self.spawned.remove(id) {
                // Its last place lay outside the map: told where it started.
                let at = (tick.saturating_sub(1), s.start.from);
                self.ended(*id, &s, s.start, at, EndCause::Lost);
            }
            self.entity_states.remove(id);
        }
        self.lost.clear();
        self.lost.extend_from_slice(lost);
        self.impacts = impacts;
    }

    /// Keeps the end of entity `id` (spawned as `s`), standing at `at` at `tick`.
    fn ended(
        &mut self,
        id: EntityId,
        s: &Spawned,
        start: EntityStart,
        (tick, at): (u64, [i32; 3]),
        cause: EndCause,
    ) {
        let end = EntityEnd {
            id,
            tick,
            at,
            cause,
            start: None,
        };
        self.ends.push(Ended {
            end,
            scope: s.scope,
            start,
        });
    }
}

/// Why the rules could not spawn an entity.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpawnError {
    /// Its state is not one the simulation takes (a motion out of range, a place
    /// outside the coordinates).
    #[error("entity refused: {0}")]
    Invalid(#[from] SimError),
    /// The world holds [`MAX_ENTITIES`] already.
    #[error("the world holds {MAX_ENTITIES} entities already")]
    Full,
}

/// A state's fields from its postcard encoding, if `T` is the type registered for `of`.
fn state_of<T: Replicated>(
    types: &StateTypes,
    of: StateOf,
    state: &T,
) -> Result<StateFields, StateError> {
    types.check::<T>(of)?;
    let ty = std::any::type_name::<T>();
    let bytes = postcard::to_allocvec(state).map_err(|e| StateError::Codec {
        ty,
        detail: e.to_string(),
    })?;
    game_state_fields(&bytes).ok_or(StateError::TooLarge {
        ty,
        bytes: bytes.len(),
    })
}

/// Most entities the world holds at once: bounded work and memory a tick, whatever the
/// rules do.
pub const MAX_ENTITIES: usize = 16_384;

/// What the game's rules may do: the server, as the game sees it.
pub struct Game<'a> {
    server: &'a mut ServerMachine,
    now: Instant,
}

impl Game<'_> {
    /// The tick about to be stepped.
    pub fn tick(&self) -> u64 {
        self.server.world.tick + 1
    }

    /// The world as the last tick left it (players and movers).
    pub fn world(&self) -> &WorldState {
        &self.server.world
    }

    /// The simulation: the map, its spawn points, the movement.
    pub fn sim(&self) -> &expel_core::Sim {
        &self.server.sim
    }

    /// The players in the world, in id order.
    pub fn players(&self) -> impl Iterator<Item = PlayerId> + '_ {
        self.server.players.keys().copied()
    }

    /// Sends the game's own `msg` to `player` on `channel`. It leaves with the player's
    /// next snapshot (in the same packet), or waits for the player's allowance in turn
    /// with the messages others send it (see
    /// [`outbox`](crate::messages::outbox)); a flood of the game's own drops its
    /// oldest first.
    pub fn send<T: Serialize>(
        &mut self,
        player: PlayerId,
        channel: Channel,
        msg: &T,
    ) -> Result<(), MessageError> {
        self.send_from(Sender::Game, player, channel, msg)
    }

    /// Sends `msg` to `player` on behalf of `from` (a chat line passed on): it takes
    /// `from`'s turn in the player's allowance, so no sender crowds out the others or the
    /// game's own messages, whatever its id or rate.
    pub fn send_from<T: Serialize>(
        &mut self,
        from: Sender,
        player: PlayerId,
        channel: Channel,
        msg: &T,
    ) -> Result<(), MessageError> {
        let bytes = encode_message(msg)?;
        self.server.send_from(from, player, channel, &bytes)
    }

    /// Sends the game's own `msg` to every player in the world on `channel`: how many it
    /// is queued for (those not in the game are left out).
    pub fn broadcast<T: Serialize>(
        &mut self,
        channel: Channel,
        msg: &T,
    ) -> Result<usize, MessageError> {
        self.broadcast_from(Sender::Game, channel, msg)
    }

    /// [`Game::broadcast`] on behalf of `from` (see [`Game::send_from`]).
    pub fn broadcast_from<T: Serialize>(
        &mut self,
        from: Sender,
        channel: Channel,
        msg: &T,
    ) -> Result<usize, MessageError> {
        let bytes = encode_message(msg)?;
        let players: Vec<PlayerId> = self.players().collect();
        Ok(players
            .into_iter()
            .filter(|p| (self.server.send_from(from, *p, channel, &bytes)).is_ok())
            .count())
    }

    /// Puts `player` at rest at `origin` (its mode and crouch kept). Refused where its box
    /// would meet solid or another player (the two would be pushed apart by a move no
    /// prediction makes), or lie outside the map. Its client is corrected to it, and
    /// neither validation mode holds its reports from before against it.
    pub fn place(&mut self, player: PlayerId, origin: DVec3) -> Result<(), RuleError> {
        let now = self.state(player)?;
        let mut to = PlayerState::at(origin);
        to.mode = now.mode;
        to.flags = now.flags & flags::CROUCHED;
        let blocked = |why| RuleError::Blocked {
            player,
            at: origin.to_array(),
            why,
        };
        let sim = &self.server.sim;
        if !in_range(origin) || !sim.in_arena(origin) {
            return Err(blocked("outside the map"));
        }
        let hull = sim.movement().hull(&to);
        let walks = sim.player_box(player, &to).is_some();
        let mut scratch = TraceScratch::new();
        if walks
            && sim
                .map()
                .position_solid(hull, to.origin(), Contents::PLAYER, &mut scratch)
        {
            return Err(blocked("solid"));
        }
        let mine = sim.movement().player_box(&to);
        let world = &self.server.world;
        let met = walks
            && world.players.iter().any(|(id, o)| {
                *id != player
                    && sim
                        .player_box(*id, &o.state)
                        .is_some_and(|b| b.bounds.overlaps(&mine))
            });
        if met {
            return Err(blocked("another player"));
        }
        self.set_state(player, to);
        Ok(())
    }

    /// Puts `player` back at a spawn point where nobody stands, at rest, as a player
    /// joining would be.
    pub fn respawn(&mut self, player: PlayerId) -> Result<(), RuleError> {
        let mode = self.state(player)?.mode;
        let to = self.server.sim.join_state(&self.server.world, player, mode);
        self.set_state(player, to);
        Ok(())
    }

    /// Sets `player`'s movement mode: [`MoveMode::Frozen`] holds it where it is, at rest,
    /// until the rules set another. Its client predicts it in the new mode at once.
    pub fn set_mode(&mut self, player: PlayerId, mode: MoveMode) -> Result<(), RuleError> {
        let mut to = self.state(player)?;
        if to.mode == mode {
            return Ok(());
        }
        to.mode = mode;
        if mode == MoveMode::Frozen {
            to.velocity = [0; 3];
        }
        self.set_state(player, to);
        Ok(())
    }

    /// The command `player`'s move this tick is stepped with, buttons and all: the one
    /// its client sent for [`Game::tick`], or (none having arrived in time) its last one
    /// repeated, as the simulation repeats it. `None` for a player not in the world.
    /// The game's buttons ([`MoveCommand::actions`], [`MoveCommand::weapon`]) are the
    /// rules' to check: a client may send any bits (count what the rules refuse with
    /// [`Game::refuse`]).
    pub fn command(&self, player: PlayerId) -> Option<MoveCommand> {
        if let Some(c) = self.server.game.commands.get(&player) {
            return Some(*c);
        }
        self.server.players.get(&player)?;
        self.server
            .world
            .players
            .get(&player)
            .map(|s| s.last_command)
    }

    /// Whether `player`'s command for this tick arrived (else [`Game::command`] is its
    /// last one, repeated).
    pub fn command_arrived(&self, player: PlayerId) -> bool {
        self.server.game.commands.contains_key(&player)
    }

    /// Counts a command (or a message) of `player`'s that the rules refused by their
    /// own checks (a button the game does not define, a weapon it lacks, firing faster
    /// than the weapon allows):
    /// [`ServerStats::rule_refusals`](crate::server::ServerStats), the
    /// operators' `expel_rule_refusals_total`.
    /// Kept up (ten a second for three seconds), refusals are a
    /// [`ViolationKind::Rules`](expel_core::validate::ViolationKind) violation.
    pub fn refuse(&mut self, player: PlayerId) {
        let (tick, rate) = (self.tick(), self.server.rate());
        if !self.server.players.contains_key(&player) {
            return;
        }
        let body = |server: &mut ServerMachine| {
            let Some(s) = server.players.get_mut(&player) else {
                return;
            };
            server.stats.rule_refusals += 1;
            if let Some(v) = s.aim.refused(tick, rate) {
                server.violation(player, &v);
            }
        };
        let called = Call::Refused { player: player.0 };
        replaying::call(self.server, "a refusal", called, body);
    }

    /// What `hull` moving straight from `start` to `end` meets first as `shooter` saw
    /// the world when it made this tick's command (lag compensation): the map as it is,
    /// the movers where they stand (a client predicts them in the present, as it saw
    /// them), and the players it was shown, each where it drew them at the view its
    /// command claimed, if the client could have had that view (else the nearest view
    /// it could have had: counted, and kept up a `backtrack` violation). The shot leaves
    /// from where the shooter's client had itself, if that is within
    /// [`SHOOTER_SLACK`](crate::server::SHOOTER_SLACK) of where the server has it with nothing
    /// solid between (a prediction a brush with another player put off). A player the ray
    /// passes through that the client was never shown is counted (kept up, an
    /// `unseen_target` violation). Nobody in the world moves: a query. At most
    /// [`MAX_SHOTS_PER_TICK`](crate::server::MAX_SHOTS_PER_TICK) a player a tick.
    pub fn shot_as_seen(
        &mut self,
        shooter: PlayerId,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
    ) -> Result<SeenShot, ShotError> {
        let tick = self.tick();
        if self.server.log.replaying() {
            let want = |c: &Call| matches!(c, Call::Shot { shooter: s, .. } if *s == shooter.0);
            return match replaying::replay_call(self.server, "a shot", want) {
                Some(Call::Shot { outcome, .. }) => outcome,
                _ => Err(ShotError::NotPlaying(shooter)),
            };
        }
        let judge = |server: &mut ServerMachine| {
            super::shot::shot_as_seen(server, tick, shooter, hull, (start, end))
        };
        log::recorded_call(self.server, judge, |outcome| {
            Some(Call::Shot {
                shooter: shooter.0,
                outcome: outcome.clone(),
            })
        })
    }

    /// Puts `entity` in the world, seen by the clients of `scope`: its id. A projectile
    /// (an entity with a [`Motion`](expel_core::sim::Motion)) moves from the next tick on; its
    /// impacts come in [`Game::impacts`] the tick after.
    pub fn spawn(&mut self, entity: EntityState, scope: Scope) -> Result<EntityId, SpawnError> {
        let world = &mut self.server.world;
        if world.entities.len() >= MAX_ENTITIES {
            return Err(SpawnError::Full);
        }
        let hosted = &mut self.server.game;
        // Ids are not reused while one is in the world (a wrap skips those in use).
        let mut id = hosted.next_entity;
        while world.entities.contains_key(&id) {
            id = EntityId(id.0.wrapping_add(1));
        }
        hosted.next_entity = EntityId(id.0.wrapping_add(1));
        expel_core::Sim::validate_entity(id, &entity)?;
        world.entities.insert(id, entity);
        // The rules run before the tick they are given is stepped: the entity's first.
        let tick = world.tick + 1;
        let start = EntityStart {
            kind: entity.kind,
            owner: entity.owner,
            born: tick,
            from: entity.origin,
        };
        let spawned = Spawned { scope, start };
        hosted.spawned.insert(id, spawned);
        Ok(id)
    }

    /// Sets `player`'s state in the game (its health, weapon, ammo, score: the type the
    /// rules registered, [`GameRules::states`], at most [`MAX_STATE_BYTES`](crate::snapshot::MAX_STATE_BYTES) encoded),
    /// seen by the clients of
    /// `scope` ([`Scope::Near`]: those that have the player in view; its own client
    /// always). Snapshots carry it as a delta against what each client acknowledged: a
    /// state that did not change costs nothing, a changed field its bytes.
    pub fn set_player_state<T: Replicated>(
        &mut self,
        player: PlayerId,
        state: &T,
        scope: Scope,
    ) -> Result<(), StateError> {
        if !self.server.players.contains_key(&player) {
            return Err(StateError::NotPlaying(player));
        }
        let f = state_of(&self.server.game.types, StateOf::Player, state)?;
        self.server.game.player_states.insert(player, (scope, f));
        Ok(())
    }

    /// Sets an entity's state in the game (the type the rules registered, at most
    /// [`MAX_STATE_BYTES`](crate::snapshot::MAX_STATE_BYTES) encoded), seen with the entity.
    pub fn set_entity_state<T: Replicated>(
        &mut self,
        id: EntityId,
        state: &T,
    ) -> Result<(), StateError> {
        if !self.server.world.entities.contains_key(&id) {
            return Err(StateError::NoEntity(id));
        }
        let f = state_of(&self.server.game.types, StateOf::Entity, state)?;
        self.server.game.entity_states.insert(id, f);
        Ok(())
    }

    /// Takes an entity out of the world: what it was. Its clients are told of its end
    /// where it stands, with every snapshot until they have it (see
    /// [`ends`](crate::game::ends)): as an impact with what it met the tick
    /// before, if it met something, else as removed by the rules.
    pub fn despawn(&mut self, id: EntityId) -> Option<EntityState> {
        let hit = (self.server.game.impacts.iter().rev()).find(|i| i.entity == id);
        let cause = hit.map_or(EndCause::Removed, |i| EndCause::Impact(i.struck));
        self.end(id, cause)
    }

    /// Takes an entity out of the world as expired (its time ran out): what it was. Its
    /// clients are told like [`Game::despawn`]'s.
    pub fn expire(&mut self, id: EntityId) -> Option<EntityState> {
        self.end(id, EndCause::Expired)
    }

    fn end(&mut self, id: EntityId, cause: EndCause) -> Option<EntityState> {
        let hosted = &mut self.server.game;
        let spawned = hosted.spawned.remove(&id);
        hosted.entity_states.remove(&id);
        let e = self.server.world.entities.remove(&id)?;
        if let Some(s) = spawned {
            // As what, and whose, it is now (the rules may have changed it).
            let start = EntityStart {
                kind: e.kind,
                owner: e.owner,
                ..s.start
            };
            // It stood there after the last tick stepped, and is gone from the next.
            let at = (self.server.world.tick, e.origin);
            hosted.ended(id, &s, start, at, cause);
        }
        Some(e)
    }

    /// An entity as the last tick left it.
    pub fn entity(&self, id: EntityId) -> Option<&EntityState> {
        self.server.world.entities.get(&id)
    }

    /// Changes an entity (moves it, stops it, gives it to another owner): the next tick
    /// steps it from there. Refused like [`Game::spawn`] for a state the simulation does
    /// not take.
    pub fn set_entity(&mut self, id: EntityId, entity: EntityState) -> Result<(), SpawnError> {
        expel_core::Sim::validate_entity(id, &entity)?;
        if let Some(e) = self.server.world.entities.get_mut(&id) {
            *e = entity;
        }
        Ok(())
    }

    /// The impacts of the tick stepped last, in entity id order and then as they came.
    pub fn impacts(&self) -> &[Impact] {
        &self.server.game.impacts
    }

    /// The entities the tick stepped last removed for leaving the map.
    pub fn lost(&self) -> &[EntityId] {
        &self.server.game.lost
    }

    /// Takes `player` out of the game: its connection is closed with `reason` (a kick),
    /// and the rules hear of it through [`GameRules::left`].
    pub fn remove(&mut self, player: PlayerId, reason: &str) -> Result<(), RuleError> {
        let conn = self
            .server
            .players
            .get(&player)
            .ok_or(RuleError::NotPlaying(player))?
            .conn;
        let kick = |server: &mut ServerMachine| server.kick(conn, Code::Removed, reason.into());
        let called = Call::Removed { player: player.0 };
        replaying::call(self.server, "a removal", called, kick);
        Ok(())
    }

    fn state(&self, player: PlayerId) -> Result<PlayerState, RuleError> {
        let playing = self.server.players.contains_key(&player);
        match self.server.world.player(player) {
            Some(p) if playing => Ok(*p),
            _ => Err(RuleError::NotPlaying(player)),
        }
    }

    /// Sets a player's state by the rules: the next tick steps it from there, and its
    /// client is corrected to it (see [`ServerMachine::moved_by_rules`]).
    fn set_state(&mut self, player: PlayerId, to: PlayerState) {
        if let Some(slot) = self.server.world.players.get_mut(&player) {
            slot.state = to;
        }
        moved_by_rules(self.server, player);
    }

    /// The next message from a player, in player order and then as they came. One that
    /// is not a `T` is counted as refused (a client that keeps sending such is kicked)
    /// and passed over.
    pub fn poll<T: DeserializeOwned>(&mut self) -> Option<(PlayerId, Channel, T)> {
        loop {
            let (player, channel, bytes) = super::messages::take_message(self.server)?;
            match decode_message::<T>(&bytes) {
                Ok(m) => return Some((player, channel, m)),
                Err(_) => {
                    super::messages::message_malformed(self.server, player, channel, self.now)
                }
            }
        }
    }
}

/// The work of [`ServerMachine::game_summary`].
pub(super) fn game_summary(server: &mut ServerMachine) -> Option<String> {
    server.game.rules.as_mut()?.summary()
}

/// The work of [`ServerMachine::set_rules`].
pub(super) fn set_rules(server: &mut ServerMachine, rules: Box<dyn GameRules>) {
    let types = rules.states();
    if types != server.game.types {
        // Clients read the old states as the old types: none of them stays.
        server.game.player_states.clear();
        server.game.entity_states.clear();
        server.game.types = types;
    }
    server.game.rules = Some(rules);
}

/// Runs `f` on the rules with the game's view of the server (nothing when there are
/// no rules), then tells them of players who joined or left meanwhile (a player the
/// rules kicked, say), in order.
pub(super) fn with_rules(
    server: &mut ServerMachine,
    now: Instant,
    f: impl FnOnce(&mut dyn GameRules, &mut Game<'_>),
) {
    let Some(mut rules) = server.game.rules.take() else {
        return;
    };
    server.game.running = true;
    let mut game = Game { server, now };
    f(rules.as_mut(), &mut game);
    while let Some(n) = game.server.game.notices.pop_front() {
        match n {
            Notice::Joined(p) => rules.joined(&mut game, p),
            Notice::Left(p, reason) => rules.left(&mut game, p, &reason),
        }
    }
    server.game.running = false;
    server.game.rules.get_or_insert(rules);
}

/// Tells the rules (if any) that a player joined or left: now, or when they return
/// if they are running.
pub(super) fn notify(server: &mut ServerMachine, notice: Notice) {
    if server.game.rules.is_none() && !server.game.running {
        return;
    }
    server.game.notices.push_back(notice);
    if !server.game.running {
        with_rules(server, server.wall.last_call(), |_, _| {});
    }
}

/// The rules set `player`'s state: its client learns it from the next snapshot like a
/// correction, and nothing it reported or claimed from before counts against it.
fn moved_by_rules(server: &mut ServerMachine, player: PlayerId) {
    let tick = server.world.tick + 1;
    let trusted = server.settings.movement == MovementAuthority::Client;
    let Some(s) = server.players.get_mut(&player) else {
        return;
    };
    s.feedback.moved = tick;
    s.leaps.moved = true;
    s.validator.moved_by_server(tick);
    if trusted {
        s.correcting = true;
        s.feedback.corrected = tick;
        s.expected.clear();
    }
}
