//! The client's side: snapshots rebuilt from deltas against the baselines it kept.

use super::*;

/// A list's ids from the gaps they are sent as (see [`SnapshotMsg`]), refusing ids
/// beyond `u32`.
///
/// [`SnapshotMsg`]: crate::wire::SnapshotMsg
pub(super) fn ids_from_gaps<'a>(
    ids: impl Iterator<Item = &'a mut u32>,
) -> Result<(), ProtocolError> {
    let mut prev = 0u32;
    for id in ids {
        prev = prev
            .checked_add(*id)
            .ok_or_else(|| ProtocolError::Invalid {
                what: "snapshot",
                detail: format!("an id past {prev} by {id} overflows"),
            })?;
        *id = prev;
    }
    Ok(())
}

/// Field lists as typed entities, refusing out-of-range values.
pub(super) fn typed<const N: usize, K: From<u32> + Ord, T>(
    fields: &Entities<N>,
    from: fn(&[i64; N]) -> Option<T>,
    what: &str,
) -> Result<BTreeMap<K, T>, ProtocolError> {
    fields
        .iter()
        .map(|(id, f)| {
            from(f)
                .map(|t| (K::from(id), t))
                .ok_or_else(|| out_of_range(what, id))
        })
        .collect()
}

/// [`typed`]'s checks alone.
pub(super) fn checked<const N: usize, T>(
    fields: &Entities<N>,
    from: fn(&[i64; N]) -> Option<T>,
    what: &str,
) -> Result<(), ProtocolError> {
    match fields.iter().find(|(_, f)| from(f).is_none()) {
        Some((id, _)) => Err(out_of_range(what, id)),
        None => Ok(()),
    }
}

fn out_of_range(what: &str, id: u32) -> ProtocolError {
    ProtocolError::Invalid {
        what: "snapshot",
        detail: format!("{what} {id} has out-of-range fields"),
    }
}

/// A snapshot as the client sees it, every entity in full.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The server tick it shows.
    pub tick: u64,
    /// What the server says of our commands.
    pub feedback: Feedback,
    /// The client's own state.
    pub own: PlayerState,
    /// Other players in view.
    pub players: BTreeMap<PlayerId, PlayerState>,
    /// The way each of them faces: yaw and pitch as in its newest command
    /// ([`MoveCommand`](expel_core::MoveCommand)'s units).
    pub facing: BTreeMap<PlayerId, [u16; 2]>,
    /// Each of them's teleports' count (its low byte): a change between two snapshots
    /// says it went from one place to the other at once (a respawn, a place by the rules),
    /// and is drawn so, never slid between.
    pub leaps: BTreeMap<PlayerId, u8>,
    /// Our own player's teleports' count, the same way.
    pub own_leaps: u8,
    /// Movers in view, by index.
    pub movers: BTreeMap<u32, MoverState>,
    /// The game's entities in view, by id.
    pub entities: BTreeMap<EntityId, EntityView>,
    /// The game's own state of players (its postcard bytes), by player id: the client's
    /// own, and others' as the rules' scope has it.
    pub player_states: BTreeMap<PlayerId, Vec<u8>>,
    /// The game's own state of entities in view (its postcard bytes), by id.
    pub entity_states: BTreeMap<EntityId, Vec<u8>>,
    /// The game's entities in view that ended since the snapshot's baseline, oldest
    /// first (see [`ends`](crate::game::ends)): an end can come again in the
    /// next snapshots, until the server knows this one arrived.
    pub ends: Vec<EntityEnd>,
}

/// The client's snapshot state: recent snapshots kept as baselines.
#[derive(Debug, Default)]
pub struct SnapshotDecoder {
    history: VecDeque<Scene>,
    newest: u64,
    /// Snapshots dropped because their baseline was unknown.
    pub missing_baseline: u64,
    /// Snapshots older than one already received (reordered or duplicated).
    pub stale: u64,
    /// Other players are checked but not handed out (a light client uses none of them).
    no_others: bool,
}

impl SnapshotDecoder {
    /// A client that has received nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether decoded snapshots carry the other players (by default they do). Without
    /// them a snapshot still decodes, checks and keeps every player as a baseline; only
    /// its `players` stays empty, which spares a light client most of its decoding.
    pub fn set_others(&mut self, others: bool) {
        self.no_others = !others;
    }

    /// The newest snapshot received, to acknowledge (0: none).
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// Decodes a snapshot datagram. `Ok(None)` for a stale or undecodable-baseline one
    /// (counted); an error for malformed bytes.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Option<Snapshot>, ProtocolError> {
        let ServerDatagram::Snapshot(mut msg) = decode("snapshot", bytes)? else {
            return Err(ProtocolError::Invalid {
                what: "snapshot",
                detail: "a message, not a snapshot".into(),
            });
        };
        ids_from_gaps(msg.players.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.removed.iter_mut())?;
        ids_from_gaps(msg.movers.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.removed_movers.iter_mut())?;
        ids_from_gaps(msg.game.entities.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.game.removed_entities.iter_mut())?;
        ids_from_gaps(msg.game.player_states.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.game.removed_player_states.iter_mut())?;
        ids_from_gaps(msg.game.entity_states.iter_mut().map(|d| &mut d.id))?;
        ids_from_gaps(msg.game.removed_entity_states.iter_mut())?;
        if msg.tick <= self.newest {
            self.stale += 1;
            return Ok(None);
        }
        let empty = Scene::default();
        let bad_tick = |what: &str| ProtocolError::Invalid {
            what: "snapshot",
            detail: format!("{what} reaches before tick 1"),
        };
        let baseline = tick_from_gap(msg.tick, msg.baseline).ok_or_else(|| bad_tick("baseline"))?;
        let feedback = msg
            .feedback
            .off_wire(msg.tick)
            .ok_or_else(|| bad_tick("feedback"))?;
        let base = if baseline == 0 {
            &empty
        } else {
            match self.history.iter().find(|f| f.tick == baseline) {
                Some(f) => f,
                None => {
                    self.missing_baseline += 1;
                    return Ok(None);
                }
            }
        };
        let mut ahead = Scene::default();
        base.carried_to(msg.tick, &mut ahead);
        let own = apply(ahead.own.get(0), &msg.own)?;
        let held = |id| {
            let f = ahead.entities.get(id)?;
            Some([
                i32::try_from(f[0]).ok()?,
                i32::try_from(f[1]).ok()?,
                i32::try_from(f[2]).ok()?,
            ])
        };
        let ends = (msg.game.ends.iter())
            .map(|w| {
                w.end(msg.tick, held(w.id().0))
                    .filter(|e| e.tick < msg.tick)
            })
            .collect::<Option<Vec<EntityEnd>>>()
            .ok_or_else(|| ProtocolError::Invalid {
                what: "snapshot",
                detail: "an entity's end out of range, before tick 1, or of nothing".into(),
            })?;
        let mut scene = Scene {
            tick: msg.tick,
            players: ahead.players.clone(),
            movers: ahead.movers.clone(),
            own: Entities(vec![(0, own)]),
            entities: ahead.entities.clone(),
            player_states: ahead.player_states.clone(),
            entity_states: ahead.entity_states.clone(),
            ends,
            ..Scene::default()
        };
        scene.player_states.remove(&msg.game.removed_player_states);
        scene.entity_states.remove(&msg.game.removed_entity_states);
        for d in &msg.game.player_states {
            let f = apply(ahead.player_states.get(d.id), d)?;
            scene.player_states.set(d.id, f);
        }
        for d in &msg.game.entity_states {
            let f = apply(ahead.entity_states.get(d.id), d)?;
            scene.entity_states.set(d.id, f);
        }
        scene.players.remove(&msg.removed);
        scene.movers.remove(&msg.removed_movers);
        scene.entities.remove(&msg.game.removed_entities);
        for d in &msg.game.entities {
            let f = apply(ahead.entities.get(d.id), d)?;
            scene.entities.set(d.id, f);
        }
        for d in &msg.players {
            let f = apply(ahead.players.get(d.id), d)?;
            scene.players.set(d.id, f);
        }
        for d in &msg.movers {
            let f = apply(ahead.movers.get(d.id), d)?;
            scene.movers.set(d.id, f);
        }
        let snapshot = scene.snapshot(feedback, !self.no_others)?;
        scene.set_motion(base);
        self.newest = msg.tick;
        self.history.push_back(scene);
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        Ok(Some(snapshot))
    }
}
