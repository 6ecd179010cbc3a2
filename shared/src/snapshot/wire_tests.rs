//! The snapshot datagram against its oracle: written byte for byte as the message it
//! stands for, and decoded back to its scene (its entities' ends among it).

use super::decoder::*;
use super::encoder::*;
use super::*;
use crate::codec::encode;
use crate::wire::SnapshotMsg;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The message the datagram stands for, built the plain way (lookups by id): the
/// oracle of the writer's merge.
fn oracle(scene: &Scene, base: &Scene, fb: Feedback) -> SnapshotMsg {
    fn delta<const N: usize>(id: u32, o: Option<&[i64; N]>, f: &[i64; N]) -> Option<EntityDelta> {
        let mask = changed(o, f)?;
        let o = o.copied().unwrap_or([0; N]);
        let mut values = crate::wire::FieldValues::default();
        for i in (0..N).filter(|i| mask & 1 << i != 0) {
            values.push(f[i].wrapping_sub(o[i]));
        }
        Some(EntityDelta { id, mask, values })
    }
    fn deltas<const N: usize>(new: &Entities<N>, old: &Entities<N>) -> Vec<EntityDelta> {
        new.iter()
            .filter_map(|(id, f)| delta(id, old.get(id), f))
            .collect()
    }
    fn gone<const N: usize>(new: &Entities<N>, old: &Entities<N>) -> Vec<u32> {
        old.iter()
            .map(|(id, _)| id)
            .filter(|id| !new.contains(*id))
            .collect()
    }
    // On the wire each id is its gap from the one before.
    fn gaps<'a>(ids: impl Iterator<Item = &'a mut u32>) {
        let mut prev = 0;
        for id in ids {
            (*id, prev) = (*id - prev, *id);
        }
    }
    let mut msg = SnapshotMsg {
        tick: scene.tick,
        baseline: tick_gap(scene.tick, base.tick),
        feedback: fb.to_wire(scene.tick, base.tick),
        own: delta(0, base.own.get(0), scene.own.get(0).unwrap()).unwrap_or(EntityDelta {
            id: 0,
            mask: 0,
            values: Default::default(),
        }),
        players: deltas(&scene.players, &base.players),
        removed: gone(&scene.players, &base.players),
        movers: deltas(&scene.movers, &base.movers),
        removed_movers: gone(&scene.movers, &base.movers),
        game: crate::wire::GameLists {
            entities: deltas(&scene.entities, &base.entities),
            removed_entities: gone(&scene.entities, &base.entities),
            player_states: deltas(&scene.player_states, &base.player_states),
            removed_player_states: gone(&scene.player_states, &base.player_states),
            entity_states: deltas(&scene.entity_states, &base.entity_states),
            removed_entity_states: gone(&scene.entity_states, &base.entity_states),
            ends: (scene.ends.iter())
                .map(|e| {
                    let held = base
                        .entities
                        .get(e.id.0)
                        .map(|f| [f[0], f[1], f[2]].map(|v| v as i32));
                    crate::game::ends::WireEnd::of(e, scene.tick, held)
                })
                .collect(),
        },
    };
    gaps(msg.players.iter_mut().map(|d| &mut d.id));
    gaps(msg.removed.iter_mut());
    gaps(msg.movers.iter_mut().map(|d| &mut d.id));
    gaps(msg.removed_movers.iter_mut());
    gaps(msg.game.entities.iter_mut().map(|d| &mut d.id));
    gaps(msg.game.removed_entities.iter_mut());
    gaps(msg.game.player_states.iter_mut().map(|d| &mut d.id));
    gaps(msg.game.removed_player_states.iter_mut());
    gaps(msg.game.entity_states.iter_mut().map(|d| &mut d.id));
    gaps(msg.game.removed_entity_states.iter_mut());
    msg
}

/// The datagram written from a scene and its baseline is byte for byte postcard's
/// encoding of the message built by lookups, and decodes back to the scene, for
/// random scenes: overlapping and disjoint ids, unchanged, zero, huge and negative
/// fields, with and without a baseline.
#[test]
fn snapshots_are_written_as_the_message_they_stand_for() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let field = |rng: &mut ChaCha8Rng| match rng.gen_range(0..4) {
        0 => 0,
        1 => rng.gen_range(-3..3),
        2 => rng.gen_range(-100_000..100_000),
        _ => i64::from(rng.gen::<i32>()),
    };
    for round in 0..2000 {
        // Now and then a crowd: more than 127 deltas take a longer count.
        let many = round % 7 == 0;
        let ids_up_to = if many { 1000 } else { 64 };
        let entities = |rng: &mut ChaCha8Rng, n: usize| -> Vec<(u32, [i64; PLAYER_FIELDS])> {
            let mut ids: Vec<u32> = (0..n).map(|_| rng.gen_range(0..ids_up_to)).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .map(|id| (id, std::array::from_fn(|_| field(rng))))
                .collect()
        };
        let n = rng.gen_range(0..if many { 400 } else { 40 });
        let base_players = entities(&mut rng, n);
        // Some of the baseline's entities again, some changed, some new.
        let mut players = Vec::new();
        for &(id, f) in &base_players {
            match rng.gen_range(0..3) {
                0 => {}
                1 => players.push((id, f)),
                _ => players.push((id, f.map(|v| v ^ 1))),
            }
        }
        let n = rng.gen_range(0..if many { 300 } else { 10 });
        players.extend(entities(&mut rng, n));
        players.sort_by_key(|e| e.0);
        players.dedup_by_key(|e| e.0);
        let three = |v: Vec<(u32, [i64; PLAYER_FIELDS])>| -> Vec<(u32, [i64; 3])> {
            v.into_iter()
                .map(|(id, f)| (id, [f[0], f[1], f[2]]))
                .collect()
        };
        let entity_like =
            |v: &Vec<(u32, [i64; PLAYER_FIELDS])>| -> Vec<(u32, [i64; ENTITY_FIELDS])> {
                v.iter()
                    .map(|(id, f)| {
                        (
                            *id,
                            std::array::from_fn(|i| f[i % PLAYER_FIELDS] ^ i as i64),
                        )
                    })
                    .collect()
            };
        let state_like = |v: &Vec<(u32, [i64; PLAYER_FIELDS])>| -> Vec<(u32, [i64; STATE_FIELDS])> {
            v.iter()
                .map(|(id, f)| {
                    (
                        *id,
                        std::array::from_fn(|i| f[i % PLAYER_FIELDS] ^ (3 * i as i64)),
                    )
                })
                .collect()
        };
        let has_base = round % 5 != 0;
        let base = Scene {
            tick: if has_base { 100 } else { 0 },
            players: Entities::sorted(if has_base {
                base_players.clone()
            } else {
                vec![]
            }),
            entities: Entities::sorted(if has_base {
                entity_like(&base_players)
            } else {
                vec![]
            }),
            player_states: Entities::sorted(if has_base {
                state_like(&base_players)
            } else {
                vec![]
            }),
            movers: Entities::sorted(if has_base {
                three(base_players)
            } else {
                vec![]
            }),
            own: Entities::sorted(if has_base {
                vec![(0, std::array::from_fn(|_| field(&mut rng)))]
            } else {
                vec![]
            }),
            ..Scene::default()
        };
        // The own state unchanged now and then: a delta with no field.
        let own = match (round % 3, base.own.get(0)) {
            (0, Some(o)) => *o,
            _ => std::array::from_fn(|_| field(&mut rng)),
        };
        let scene = Scene {
            tick: 104,
            movers: Entities::sorted(three(players.clone())),
            entities: Entities::sorted(entity_like(&players)),
            player_states: Entities::sorted(state_like(&players)),
            players: Entities::sorted(players),
            own: Entities::sorted(vec![(0, own)]),
            ends: (0..rng.gen_range(0..4u32))
                .map(|k| random_end(&mut rng, 100 + u64::from(k), &base))
                .collect(),
            ..Scene::default()
        };
        let fb = Feedback {
            last_command: rng.gen(),
            input_lead: rng.gen_bool(0.5).then(|| rng.gen()),
            ..Feedback::default()
        };
        let want = encode(&ServerDatagram::Snapshot(oracle(&scene, &base, fb)));
        let got = write_snapshot(&scene, &base, fb);
        assert_eq!(got, want, "round {round}");
        let Ok(ServerDatagram::Snapshot(mut msg)) = decode("snapshot", &got) else {
            panic!("not a snapshot");
        };
        ids_from_gaps(msg.players.iter_mut().map(|d| &mut d.id)).unwrap();
        ids_from_gaps(msg.removed.iter_mut()).unwrap();
        let mut back = base.players.clone();
        back.remove(&msg.removed);
        for d in &msg.players {
            back.set(d.id, apply(base.players.get(d.id), d).unwrap());
        }
        assert_eq!(back.0, scene.players.0, "round {round}");
        ids_from_gaps(msg.game.entities.iter_mut().map(|d| &mut d.id)).unwrap();
        ids_from_gaps(msg.game.removed_entities.iter_mut()).unwrap();
        let mut back = base.entities.clone();
        back.remove(&msg.game.removed_entities);
        for d in &msg.game.entities {
            back.set(d.id, apply(base.entities.get(d.id), d).unwrap());
        }
        assert_eq!(back.0, scene.entities.0, "round {round}");
        ids_from_gaps(msg.game.player_states.iter_mut().map(|d| &mut d.id)).unwrap();
        ids_from_gaps(msg.game.removed_player_states.iter_mut()).unwrap();
        let mut back = base.player_states.clone();
        back.remove(&msg.game.removed_player_states);
        for d in &msg.game.player_states {
            back.set(d.id, apply(base.player_states.get(d.id), d).unwrap());
        }
        assert_eq!(back.0, scene.player_states.0, "round {round}");
        assert_eq!(
            apply(base.own.get(0), &msg.own).unwrap(),
            own,
            "round {round}"
        );
        let held = |id| {
            base.entities
                .get(id)
                .map(|f| [f[0], f[1], f[2]].map(|v| v as i32))
        };
        let ends: Vec<_> = (msg.game.ends.iter())
            .map(|w| w.end(scene.tick, held(w.id().0)).unwrap())
            .collect();
        assert_eq!(ends, scene.ends, "round {round}");
    }
}

/// An entity's end of tick `tick`, anywhere, for any reason, to the unit: its start told,
/// or (half the time) not, for an entity of `base`'s (the receiver places it from there).
fn random_end(rng: &mut ChaCha8Rng, tick: u64, base: &Scene) -> crate::game::ends::EntityEnd {
    use crate::game::ends::{EndCause, EntityEnd, EntityStart};
    use expel_core::sim::Struck;
    let cause = match rng.gen_range(0..6) {
        0 => EndCause::Impact(Struck::World),
        1 => EndCause::Impact(Struck::Mover(rng.gen())),
        2 => EndCause::Impact(Struck::Player(PlayerId(rng.gen()))),
        3 => EndCause::Expired,
        4 => EndCause::Removed,
        _ => EndCause::Lost,
    };
    let place = |rng: &mut ChaCha8Rng| [0; 3].map(|_: i32| rng.gen_range(-8_000_000..8_000_000));
    let held = (base.entities.0)
        .get(rng.gen_range(0..base.entities.0.len().max(1)))
        .filter(|(_, f)| f[..3].iter().all(|v| i32::try_from(*v).is_ok()) && rng.gen_bool(0.5));
    let start = EntityStart {
        kind: rng.gen(),
        owner: rng.gen_bool(0.5).then(|| PlayerId(rng.gen())),
        born: tick - rng.gen_range(0..50),
        from: place(rng),
    };
    EntityEnd {
        id: EntityId(held.map_or_else(|| rng.gen(), |(id, _)| *id)),
        tick,
        at: place(rng),
        cause,
        start: held.is_none().then_some(start),
    }
    .rounded()
}

/// Ids whose gaps add up past `u32` are refused, not wrapped.
#[test]
fn a_snapshot_whose_id_gaps_overflow_is_refused() {
    let delta = |id| EntityDelta {
        id,
        mask: 0,
        values: Default::default(),
    };
    let msg = |players| SnapshotMsg {
        tick: 5,
        baseline: 0,
        feedback: Feedback::default(),
        own: delta(0),
        players,
        removed: vec![],
        movers: vec![],
        removed_movers: vec![],
        game: Default::default(),
    };
    let bytes = encode(&ServerDatagram::Snapshot(msg(vec![
        delta(u32::MAX),
        delta(1),
    ])));
    let err = SnapshotDecoder::new().decode(&bytes).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
    let bytes = encode(&ServerDatagram::Snapshot(msg(vec![delta(7), delta(3)])));
    let snap = SnapshotDecoder::new().decode(&bytes).unwrap().unwrap();
    assert_eq!(
        snap.players.keys().copied().collect::<Vec<_>>(),
        [PlayerId(7), PlayerId(10)]
    );
}
