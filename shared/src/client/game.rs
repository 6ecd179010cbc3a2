//! The game's things as a game reads them from the client: its entities drawn, the
//! game's own state of players and entities, and its own projectiles, predicted.

use super::ClientMachine;
use crate::game::launched::{DrawnLaunch, LaunchStats, Launcher};
use crate::snapshot::interp::DrawnEntity;
use crate::snapshot::EntityView;
use expel_core::sim::{EntityId, PlayerId};
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
    pub fn player_state(&self, player: PlayerId) -> Option<&[u8]> {
        let states = &self.play.as_ref()?.game.player_states;
        states.get(&player).map(Vec::as_slice)
    }

    /// The game's own state of an entity in view (its postcard bytes).
    pub fn entity_state(&self, id: EntityId) -> Option<&[u8]> {
        let states = &self.play.as_ref()?.game.entity_states;
        states.get(&id).map(Vec::as_slice)
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
}
