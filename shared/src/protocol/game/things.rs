//! The game's things as the snapshots show them: its entities and its own state of
//! players and of entities, the events when they come, change and go, and what a game
//! reads of them.

use crate::protocol::client::push_event;
use crate::protocol::client::{Client, ClientEvent};
use crate::protocol::snapshot::interp::DrawnEntity;
use crate::protocol::snapshot::{EntityView, Snapshot};
use crate::sim::{EntityId, PlayerId};
use std::collections::{BTreeMap, VecDeque};

/// The game's things as the newest snapshot showed them.
#[derive(Debug, Default)]
pub(in crate::protocol) struct Things {
    entities: BTreeMap<EntityId, EntityView>,
    /// The game's own state of players and of entities (postcard bytes).
    player_states: BTreeMap<PlayerId, Vec<u8>>,
    entity_states: BTreeMap<EntityId, Vec<u8>>,
}

impl Things {
    /// Takes a snapshot's things, raising the events for what came, changed (other than
    /// by moving) or went, in id order.
    pub(in crate::protocol) fn take(
        &mut self,
        snap: &Snapshot,
        events: &mut VecDeque<ClientEvent>,
    ) {
        for (id, e) in &snap.entities {
            let entity = *e;
            // A state that changed (one gone is no change of it).
            let state_changed = || {
                let (was, now) = (self.entity_states.get(id), snap.entity_states.get(id));
                was.zip(now).is_some_and(|(w, n)| w != n)
            };
            match self.entities.get(id) {
                None => push_event(events, ClientEvent::EntitySpawned { id: *id, entity }),
                Some(o)
                    if (o.kind, o.owner, o.at_rest, o.moving)
                        != (e.kind, e.owner, e.at_rest, e.moving)
                        || state_changed() =>
                {
                    push_event(events, ClientEvent::EntityChanged { id: *id, entity })
                }
                Some(_) => {}
            }
        }
        for id in self
            .entities
            .keys()
            .filter(|id| !snap.entities.contains_key(id))
        {
            push_event(events, ClientEvent::EntityDespawned { id: *id });
        }
        for (player, st) in &snap.player_states {
            if self.player_states.get(player) != Some(st) {
                push_event(events, ClientEvent::PlayerStateChanged { player: *player });
            }
        }
        self.entities.clone_from(&snap.entities);
        self.player_states.clone_from(&snap.player_states);
        self.entity_states.clone_from(&snap.entity_states);
    }
}

impl Client {
    /// The game's entities as a game draws them at server tick `at` (see
    /// [`Client::render_tick`]): interpolated like other players, but our own
    /// projectiles where their prediction has them now (see [`Client::launched`]).
    pub fn entities_drawn(&self, at: f64) -> BTreeMap<EntityId, DrawnEntity> {
        let Some(p) = self.play.as_ref() else {
            return BTreeMap::new();
        };
        let mut drawn = p.interp.entities(at);
        for l in self.launched.drawn() {
            if let Some(d) = l.twin.and_then(|id| drawn.get_mut(&id)) {
                d.origin = l.origin;
            }
        }
        drawn
    }

    /// The game's entities as the newest snapshot showed them (every client keeps
    /// them, a light one too).
    pub fn entities(&self) -> &BTreeMap<EntityId, EntityView> {
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
}
