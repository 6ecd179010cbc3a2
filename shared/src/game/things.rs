//! The game's things as the snapshots show them: its entities and its own state of
//! players and of entities, the events when they come, change and go, and what a game
//! reads of them.

use super::ends::EndsSeen;
use super::state::{StateOf, StateType, StateTypes};
use crate::report::client::{push_event, ClientEvent, EndCounts};
use crate::snapshot::{EntityView, Snapshot};
use expel_core::sim::{EntityId, PlayerId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Entities a client remembers having shown after they went from its snapshots: an end
/// may come for one a snapshot or two after it left.
const GONE_KEPT: usize = 256;

/// The game's things as the newest snapshot showed them.
#[derive(Debug, Default)]
pub(crate) struct Things {
    pub(crate) entities: BTreeMap<EntityId, EntityView>,
    /// The game's own state of players and of entities (postcard bytes).
    pub(crate) player_states: BTreeMap<PlayerId, Vec<u8>>,
    pub(crate) entity_states: BTreeMap<EntityId, Vec<u8>>,
    /// The ends taken, each once.
    seen_ends: EndsSeen,
    /// Entities shown once and gone since, newest last.
    gone: VecDeque<EntityId>,
}

impl Things {
    /// The states of `snap`, new or changed since the newest, that do not decode as the
    /// types registered for them (a server of another build, or a broken one): counted,
    /// and kept as they came (a read of one says why it fails).
    pub(crate) fn undecodable(&self, snap: &Snapshot, types: &StateTypes) -> u64 {
        fn count<K: Ord>(
            was: &BTreeMap<K, Vec<u8>>,
            now: &BTreeMap<K, Vec<u8>>,
            ty: Option<&StateType>,
        ) -> u64 {
            let Some(ty) = ty else { return 0 };
            let changed = now.iter().filter(|(k, v)| was.get(k) != Some(v));
            changed.filter(|(_, v)| !ty.decodes(v)).count() as u64
        }
        let players = count(
            &self.player_states,
            &snap.player_states,
            types.get(StateOf::Player),
        );
        let entities = count(
            &self.entity_states,
            &snap.entity_states,
            types.get(StateOf::Entity),
        );
        players + entities
    }

    /// Takes a snapshot's things, raising the events for what came, changed (other than
    /// by moving) or went, in id order.
    pub(crate) fn take(
        &mut self,
        snap: &Snapshot,
        events: &mut VecDeque<ClientEvent>,
        counts: &mut EndCounts,
    ) {
        // The ends first: a brief entity is told as spawned (from its start), then ended;
        // one that ended is not also told as despawned.
        let mut ended = BTreeSet::new();
        for end in &snap.ends {
            if !self.seen_ends.first(end) {
                counts.repeated += 1;
                continue;
            }
            let shown = self.entities.contains_key(&end.id) || self.gone.contains(&end.id);
            match end.start {
                _ if shown => {}
                Some(s) => {
                    counts.brief += 1;
                    let entity = EntityView::from(s);
                    push_event(events, ClientEvent::EntitySpawned { id: end.id, entity });
                }
                None => {
                    // An end of something never started: nothing to end.
                    counts.unknown += 1;
                    continue;
                }
            }
            counts.taken += 1;
            ended.insert(end.id);
            push_event(events, ClientEvent::EntityEnded { end: *end });
        }
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
            if !ended.contains(id) {
                push_event(events, ClientEvent::EntityDespawned { id: *id });
            }
            self.gone.push_back(*id);
            if self.gone.len() > GONE_KEPT {
                self.gone.pop_front();
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::ends::{EndCause, EntityEnd, EntityStart};
    use expel_core::sim::Struck;

    fn snap(tick: u64, ends: Vec<EntityEnd>) -> Snapshot {
        Snapshot {
            tick,
            feedback: Default::default(),
            own: Default::default(),
            players: BTreeMap::new(),
            facing: BTreeMap::new(),
            leaps: BTreeMap::new(),
            own_leaps: 0,
            movers: BTreeMap::new(),
            entities: BTreeMap::new(),
            player_states: BTreeMap::new(),
            entity_states: BTreeMap::new(),
            ends,
        }
    }

    fn end(id: EntityId, start: bool) -> EntityEnd {
        EntityEnd {
            id,
            tick: 9,
            at: [2560, 0, 0],
            cause: EndCause::Impact(Struck::World),
            start: start.then_some(EntityStart {
                kind: 3,
                owner: Some(PlayerId(1)),
                born: 9,
                from: [0; 3],
            }),
        }
    }

    #[test]
    fn a_brief_entity_is_told_started_then_ended_once_and_an_end_of_nothing_is_refused() {
        let (mut things, mut events, mut counts) =
            (Things::default(), VecDeque::new(), EndCounts::default());
        let brief = end(EntityId(5), true);
        things.take(
            &snap(10, vec![brief, end(EntityId(6), false)]),
            &mut events,
            &mut counts,
        );
        // Sent again (not yet acknowledged): taken once.
        things.take(&snap(12, vec![brief]), &mut events, &mut counts);
        let got: Vec<_> = events.drain(..).collect();
        assert!(
            matches!(got[0], ClientEvent::EntitySpawned { id: EntityId(5), entity } if entity.kind == 3)
        );
        assert_eq!(got[1], ClientEvent::EntityEnded { end: brief });
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            counts,
            EndCounts {
                taken: 1,
                brief: 1,
                repeated: 1,
                unknown: 1
            }
        );
    }

    #[test]
    fn an_entity_shown_then_ended_is_told_ended_not_despawned() {
        let (mut things, mut events, mut counts) =
            (Things::default(), VecDeque::new(), EndCounts::default());
        let mut shown = snap(8, Vec::new());
        shown.entities.insert(EntityId(6), EntityView::default());
        things.take(&shown, &mut events, &mut counts);
        things.take(
            &snap(10, vec![end(EntityId(6), false)]),
            &mut events,
            &mut counts,
        );
        let got: Vec<_> = events.drain(..).collect();
        assert!(matches!(
            got[0],
            ClientEvent::EntitySpawned {
                id: EntityId(6),
                ..
            }
        ));
        assert!(matches!(got[1], ClientEvent::EntityEnded { end } if end.id == EntityId(6)));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(counts.unknown, 0);
    }
}
