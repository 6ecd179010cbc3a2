//! What a game reads and sends through the client, beside the machine itself (`mod.rs`):
//! the world drawn (its player, the others, the movers: `draw.rs` does the work), its
//! entities drawn, the game's own state of players and entities, its own projectiles
//! predicted, its messages (`messages.rs`) and its shots as it saw them (`shots.rs`).

use super::{draw, messages, shots, ClientMachine, Release};
use crate::game::launched::{DrawnLaunch, LaunchStats, Launcher};
use crate::game::state::{read_state, Replicated, StateError, StateOf};
use crate::messages::{Channel, Letter, MessageError};
use crate::snapshot::interp::Drawn;
use crate::snapshot::interp::DrawnEntity;
use crate::snapshot::EntityView;
use crate::time::Instant;
use expel_core::collision::hull::Hull;
use expel_core::collision::Hit;
use expel_core::movement::PlayerState;
use expel_core::mover::MoverState;
use expel_core::sim::{EntityId, PlayerId};
use expel_core::sim::{PlayerBox, ShotView, Struck};
use glam::DVec3;
use std::collections::BTreeMap;

impl ClientMachine {
    /// The game's entities as a game draws them at server tick `at` (see
    /// [`ClientMachine::render_tick`]): interpolated like other players, but our own
    /// projectiles where their prediction has them now (see [`ClientMachine::launched`]).
    pub fn entities_drawn(&self, at: f64) -> BTreeMap<EntityId, DrawnEntity> {
        let Some(p) = self.play.as_ref() else {
            return BTreeMap::new();
        };
        let mut drawn = p.interp.entities(at);
        // Our own projectiles where their flights are drawn, and not after their end.
        for id in &self.launched.ended {
            drawn.remove(id);
        }
        for l in self.launched.drawn() {
            let Some(id) = l.twin else {
                continue;
            };
            let e = &l.entity;
            let view = EntityView {
                origin: e.origin,
                kind: e.kind,
                owner: e.owner,
                at_rest: e.at_rest,
                moving: e.motion.is_some(),
                born: 0,
            };
            let d = drawn.entry(id).or_insert(DrawnEntity {
                origin: l.origin,
                view,
            });
            d.origin = l.origin;
        }
        drawn
    }

    /// The game's entities as the newest snapshot showed them (every client keeps
    /// them, a light one too).
    pub fn snapshot_entities(&self) -> &BTreeMap<EntityId, EntityView> {
        static NONE: BTreeMap<EntityId, EntityView> = BTreeMap::new();
        self.play.as_ref().map_or(&NONE, |p| &p.game.entities)
    }

    /// The game's own state of a player (its postcard bytes; the server's rules set it),
    /// as the newest snapshot showed it: the client's own, and others' as the rules'
    /// scope lets it see them.
    pub fn player_state_bytes(&self, player: PlayerId) -> Option<&[u8]> {
        let states = &self.play.as_ref()?.game.player_states;
        states.get(&player).map(Vec::as_slice)
    }

    /// The game's own state of an entity in view (its postcard bytes).
    pub fn entity_state_bytes(&self, id: EntityId) -> Option<&[u8]> {
        let states = &self.play.as_ref()?.game.entity_states;
        states.get(&id).map(Vec::as_slice)
    }

    /// The game's own state of a player as its type, the one the welcome named
    /// ([`Replicated::NAME`]): `Ok(None)` when the newest snapshot showed none.
    pub fn player_state<T: Replicated>(&self, player: PlayerId) -> Result<Option<T>, StateError> {
        self.read_state(StateOf::Player, self.player_state_bytes(player))
    }

    /// Every player's state the newest snapshot showed, as its type, in id order.
    pub fn player_states<T: Replicated>(&self) -> Result<BTreeMap<PlayerId, T>, StateError> {
        let Some(p) = self.play.as_ref() else {
            return Ok(BTreeMap::new());
        };
        let servers = self.state_name(StateOf::Player);
        let states = p.game.player_states.iter();
        states
            .map(|(id, b)| Ok((*id, read_state(StateOf::Player, servers, b)?)))
            .collect()
    }

    /// The game's own state of an entity in view as its type, like
    /// [`ClientMachine::player_state`].
    pub fn entity_state<T: Replicated>(&self, id: EntityId) -> Result<Option<T>, StateError> {
        self.read_state(StateOf::Entity, self.entity_state_bytes(id))
    }

    fn read_state<T: Replicated>(
        &self,
        of: StateOf,
        bytes: Option<&[u8]>,
    ) -> Result<Option<T>, StateError> {
        let servers = self.state_name(of);
        bytes.map(|b| read_state(of, servers, b)).transpose()
    }

    /// The name of the server's state type for `of`, as its welcome told it.
    fn state_name(&self, of: StateOf) -> Option<&str> {
        self.join.welcome().and_then(|w| w.states.get(of))
    }

    /// Predicts the projectiles this client's own commands launch with `launcher` (the
    /// same launch function the server's rules use): they appear at once, in
    /// [`ClientMachine::launched`], until the server's twin has come and gone.
    pub fn set_launcher(&mut self, launcher: Box<dyn Launcher>) {
        self.launched.launcher = Some(launcher);
    }

    /// This client's own projectiles, predicted, as a game draws them now: those not yet
    /// matched to the server's twin, and those matched (whose twin
    /// [`ClientMachine::entities_drawn`] also draws at the same place).
    pub fn launched(&self) -> Vec<DrawnLaunch> {
        self.launched.drawn().collect()
    }

    /// How the predicted projectiles fared.
    pub fn launch_stats(&self) -> LaunchStats {
        self.launched.stats
    }

    /// Our player, predicted at the newest tick.
    pub fn local_player(&self) -> Option<PlayerState> {
        draw::local_player(self)
    }

    /// Where to draw our player: the prediction plus what is left of the last
    /// correction, fading.
    pub fn display_origin(&self) -> Option<DVec3> {
        draw::display_origin(self)
    }

    /// The server tick to draw others at, `now`: about the newest snapshot's tick
    /// advanced by the time since it came, less the interpolation delay, on a clock that
    /// never runs back (it runs with time, a tenth faster or slower while it closes on
    /// where it should be, so a late snapshot never steps the view back), and never more
    /// than 4 ticks past the newest snapshot.
    pub fn render_tick(&self, now: Instant) -> f64 {
        draw::render_tick(self, now)
    }

    /// The other players' positions at server tick `at` (see [`ClientMachine::render_tick`]).
    pub fn others(&self, at: f64) -> BTreeMap<PlayerId, DVec3> {
        draw::others(self, at)
    }

    /// The other players as a game draws them at server tick `at`: where they stand,
    /// which way they face, whether they crouch (see [`ClientMachine::render_tick`]).
    pub fn others_drawn(&self, at: f64) -> BTreeMap<PlayerId, Drawn> {
        draw::others_drawn(self, at)
    }

    /// The movers as the newest prediction has them.
    pub fn movers(&self) -> &[MoverState] {
        draw::movers(self)
    }

    /// Sends the game's message (its bytes) on `channel` at `now`: refused when too
    /// large, while not playing, or over the rate the server takes (try again later).
    pub fn send_message(
        &mut self,
        channel: Channel,
        bytes: &[u8],
        now: Instant,
    ) -> Result<(), MessageError> {
        messages::send_message(self, channel, bytes, now)
    }

    /// The oldest of the server's messages not yet taken that is due: its channel, the
    /// tick it was sent at and its bytes. On a channel released at once (the default)
    /// every message is due as it arrives; on one released with the drawn view
    /// ([`Release::Drawn`]), when the view drawn at the last [`ClientMachine::handle_timeout`]
    /// reached the message's tick: a frag told as the victim sees the rocket reach it.
    /// Messages of a channel go in order, one held holding those after it.
    pub fn poll_message(&mut self) -> Option<Letter> {
        messages::poll_message(self)
    }

    /// When the game is handed the server's messages on `channel` (see
    /// [`ClientMachine::poll_message`]).
    pub fn set_release(&mut self, channel: Channel, release: Release) {
        messages::set_release(self, channel, release)
    }

    /// A message taken was not of the game's type: counted as refused.
    pub fn message_malformed(&mut self, channel: Channel, now: Instant) {
        messages::message_malformed(self, channel, now)
    }

    /// The view the others were drawn at when the command for `tick` was made (while it
    /// is recent).
    pub fn view_of(&self, tick: u64) -> Option<ShotView> {
        shots::view_of(self, tick)
    }

    /// Our player as predicted after the tick before `tick`, as reported to the server
    /// (a shot of the command for `tick` leaves from there), while it is recent.
    pub fn made_from(&self, tick: u64) -> Option<PlayerState> {
        shots::made_from(self, tick)
    }

    /// The other players' boxes as this client drew them at `view` (empty once its
    /// snapshots are no longer held).
    pub fn boxes_at(&self, view: &ShotView) -> Vec<PlayerBox> {
        shots::boxes_at(self, view)
    }

    /// What `hull` from `start` to `end` met as this client drew the world when it made
    /// the command for `tick`: the map, the movers as predicted before that tick, and the
    /// others at that command's view (our own player passed through), exactly as the
    /// server's rules judge it from the same view. `None` also when the tick is no
    /// longer recent.
    pub fn trace_seen(
        &mut self,
        tick: u64,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
    ) -> Option<(Struck, Hit)> {
        shots::trace_seen(self, tick, hull, start, end)
    }
}
