use super::crowd::*;
use super::decoder::*;
use super::encoder::*;
use super::fit::*;
use super::*;
use expel_core::movement::MoveCommand;
use expel_core::sim::PlayerSlot;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The simulation of the embedded arena.
fn arena_sim() -> Sim {
    let text = include_str!("../../../maps/arena.map");
    let map = expel_core::MapData::parse_map(text).unwrap();
    let model = std::sync::Arc::new(expel_core::CollisionModel::build(&map));
    let movement = expel_core::MoveConfig::default().validate().unwrap();
    Sim::from_map(model, &map, movement).0
}

/// Clients that joined together, all of one snapshot parity (even ids: the server
/// writes their snapshots on the same ticks), choose their players afresh on their own
/// turns: each once every `VIEW_REFRESH` snapshots, and about a quarter of them at
/// each snapshot, never all at once, not even when someone leaves.
#[test]
fn clients_that_joined_together_choose_their_players_on_turns_of_their_own() {
    let sim = arena_sim();
    let mut world = sim.new_state();
    world.tick = 1;
    let ids: Vec<PlayerId> = (0..400).map(|i| PlayerId(2 * i)).collect();
    for &id in &ids {
        let p = DVec3::new(
            f64::from(id.0 % 40) * 40.0,
            f64::from(id.0 / 40) * 40.0,
            0.0,
        );
        let slot = PlayerSlot {
            state: PlayerState::at(p),
            last_command: MoveCommand::default(),
        };
        world.players.insert(id, slot);
    }
    let mut crowd = Crowd::new(&sim, &world, 16);
    let mut encoders: Vec<SnapshotEncoder> = ids.iter().map(|_| SnapshotEncoder::new()).collect();
    let mut chosen = vec![0u32; ids.len()];
    let rounds = 8 * VIEW_REFRESH;
    // The last client leaves halfway (the crowd's membership changes).
    let (leaver, leaves_at) = (ids[ids.len() - 1], rounds / 2);
    for round in 0..rounds {
        world.tick = 1 + u64::from(round);
        if round == leaves_at {
            world.remove_player(leaver);
            crowd.renew(&sim, &world, 16);
        }
        let mut now = 0;
        for (i, (&id, e)) in ids.iter().zip(&mut encoders).enumerate() {
            if id == leaver && round >= leaves_at {
                continue;
            }
            e.encode_in(
                &world,
                &crowd,
                id,
                Feedback::default(),
                16,
                Room::datagram(1200),
            )
            .unwrap();
            // A choice made for this snapshot has served it alone.
            if e.view.uses == 1 && round > 0 {
                now += 1;
                chosen[i] += 1;
            }
        }
        if round > 0 {
            let even = ids.len() / VIEW_REFRESH as usize;
            assert!(
                now > even / 2 && now < even * 3 / 2,
                "snapshot {round}: {now} of {} clients chose afresh",
                ids.len()
            );
        }
    }
    // Every client once per turn (the first choice, at round 0, not counted).
    for (c, id) in chosen.iter().zip(&ids).filter(|(_, id)| **id != leaver) {
        assert!(
            (rounds / VIEW_REFRESH - 1..=rounds / VIEW_REFRESH).contains(c),
            "client {id} chose {c} times in {rounds} snapshots"
        );
    }
}

/// The crowd's nearest players are exactly those measuring everyone gives, in the same
/// order (ties by id), for crowds packed, spread, stacked on one spot and split far
/// apart, and any `k`.
#[test]
fn the_crowd_finds_exactly_the_nearest_players() {
    let sim = arena_sim();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut out = Vec::new();
    for round in 0..200 {
        let n = rng.gen_range(1..400);
        let spread: f64 = [0.0, 64.0, 1000.0, 20000.0][round % 4];
        let mut world = sim.new_state();
        world.tick = 1;
        for _ in 0..n {
            let id = rng.gen_range(0..100_000u32);
            // Some pairs share a spot (ties), some stand in a far cluster.
            let far = if rng.gen_bool(0.1) { 50_000.0 } else { 0.0 };
            let p = DVec3::new(
                (rng.gen_range(-1.0..1.0f64) * spread + far).round(),
                (rng.gen_range(-1.0..1.0f64) * spread).round(),
                (rng.gen_range(-1.0..1.0f64) * spread * 0.1).round(),
            );
            world.players.insert(
                PlayerId(id),
                PlayerSlot {
                    state: PlayerState::at(p),
                    last_command: MoveCommand::default(),
                },
            );
        }
        let crowd = Crowd::new(&sim, &world, rng.gen_range(0..64));
        let ids: Vec<PlayerId> = world.players.keys().copied().collect();
        for q in 0..6 {
            // Mostly from a player; once from anywhere, by someone not in the world.
            let (me, o) = if q < 5 {
                let me = ids[rng.gen_range(0..ids.len())];
                (me, world.player(me).unwrap().origin())
            } else {
                let far = [0.0, 1000.0, 100_000.0, 1e300][rng.gen_range(0..4)];
                let mut at = || (rng.gen_range(-1.0..1.0f64) * (spread + far)).round();
                (PlayerId(u32::MAX), DVec3::new(at(), at(), at()))
            };
            let k = rng.gen_range(0..64);
            let mut want: Vec<(f64, PlayerId)> = world
                .players
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, p)| ((p.state.origin() - o).length_squared(), *id))
                .collect();
            want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            want.truncate(k);
            crowd.nearest(me, o, k, &mut out);
            assert_eq!(out, want, "round {round}: {n} players, k {k}");
        }
    }
}

/// The game's entities in a snapshot: one at rest costs nothing once acknowledged, nor
/// does a rocket flying straight (its baseline carried on at its pace); a changed field
/// costs only itself; the client decodes the server's entities exactly, and an entity
/// out of every client's scope or over the budget is not sent.
#[test]
fn an_unchanged_entity_costs_no_byte_and_a_changed_field_only_its_own() {
    use expel_core::sim::{EntityState, Motion};
    let sim = arena_sim();
    let mut w = sim.new_state();
    let spawn = sim.spawns()[0];
    sim.add_player(&mut w, PlayerId(1), expel_core::PlayerState::at(spawn))
        .unwrap();
    let mut s = expel_core::SimScratch::new();
    let none = std::collections::BTreeMap::new();
    sim.step(&mut w, &none, &mut s);
    let mut enc = SnapshotEncoder::new();
    let mut dec = SnapshotDecoder::new();
    // Each snapshot acknowledged at once, a tick apart.
    let send = |w: &WorldState, enc: &mut SnapshotEncoder, dec: &mut SnapshotDecoder| {
        let b = enc
            .encode(&sim, w, PlayerId(1), Feedback::default(), 32, 1200)
            .unwrap();
        let snap = dec.decode(&b).unwrap().unwrap();
        enc.ack(snap.tick);
        (b.len(), snap)
    };
    let step = |w: &mut WorldState, s: &mut expel_core::SimScratch| {
        sim.step(w, &none, s);
    };
    for _ in 0..3 {
        send(&w, &mut enc, &mut dec);
        step(&mut w, &mut s);
    }
    let (bare, _) = send(&w, &mut enc, &mut dec);
    // A pickup at rest near the player, and a rocket flying away from it.
    let pickup = EntityState::fixed(spawn + glam::DVec3::new(40.0, 0.0, 0.0)).with_kind(3);
    w.entities.insert(EntityId(10), pickup);
    let rocket = EntityState::launched(
        spawn + glam::DVec3::new(0.0, 0.0, 200.0),
        glam::DVec3::Z,
        0.0,
        Motion::POINT,
        Some(PlayerId(1)),
    )
    .unwrap();
    w.entities.insert(
        EntityId(11),
        EntityState {
            velocity: [16 * 300, 0, 0],
            ..rocket
        },
    );
    step(&mut w, &mut s);
    let (first, snap) = send(&w, &mut enc, &mut dec);
    assert!(
        first > bare,
        "new entities are sent: {first} against {bare}"
    );
    assert_eq!(snap.entities.len(), 2);
    for (id, e) in &w.entities {
        let v = snap.entities[id];
        assert_eq!((v.origin, v.kind, v.owner), (e.origin, e.kind, e.owner));
        assert_eq!((v.at_rest, v.moving), (e.at_rest, e.motion.is_some()));
    }
    // Two ticks to learn the rocket's pace; then neither costs a byte.
    for _ in 0..2 {
        step(&mut w, &mut s);
        send(&w, &mut enc, &mut dec);
    }
    for _ in 0..5 {
        step(&mut w, &mut s);
        let (len, snap) = send(&w, &mut enc, &mut dec);
        assert_eq!(len, bare, "unchanged and steady entities cost nothing");
        assert_eq!(
            snap.entities[&EntityId(11)].origin,
            w.entities[&EntityId(11)].origin
        );
    }
    // The pickup's kind changes: with nothing to say the game's lists cost their mask's
    // byte; now the entities' list is there: its two counts, then the id gap, the mask
    // and one small value.
    w.entities.get_mut(&EntityId(10)).unwrap().kind = 4;
    step(&mut w, &mut s);
    let (len, snap) = send(&w, &mut enc, &mut dec);
    assert_eq!(
        len,
        bare + 5,
        "the list's two counts, its id, its mask and one value"
    );
    assert_eq!(snap.entities[&EntityId(10)].kind, 4);
    // Out of scope: only its owner sees an owner-scoped entity, nobody a far one.
    let mut crowd = Crowd::new(&sim, &w, 32);
    let mut spawned = std::collections::BTreeMap::new();
    let scope = |scope| Spawned {
        scope,
        start: crate::game::ends::EntityStart {
            kind: 0,
            owner: None,
            born: 7,
            from: [0; 3],
        },
    };
    spawned.insert(EntityId(11), scope(Scope::Owner));
    crowd.set_spawned(&spawned);
    let (mut near, mut out) = (Vec::new(), Entities::default());
    let ids = |out: &Entities<ENTITY_FIELDS>| out.iter().map(|e| e.0).collect::<Vec<_>>();
    crowd.entities_for(
        PlayerId(2),
        spawn,
        &Entities::default(),
        &mut near,
        &mut out,
    );
    assert_eq!(ids(&out), [10]);
    crowd.entities_for(
        PlayerId(1),
        spawn,
        &Entities::default(),
        &mut near,
        &mut out,
    );
    assert_eq!(ids(&out), [10, 11]);
    // Far off: its own, not the near one.
    crowd.entities_for(
        PlayerId(1),
        spawn + glam::DVec3::splat(10_000.0),
        &Entities::default(),
        &mut near,
        &mut out,
    );
    assert_eq!(ids(&out), [11]);
    assert_eq!(out.0[0].1[6], 7, "the tick it was spawned for");
    spawned.insert(EntityId(10), scope(Scope::Everyone));
    crowd.set_spawned(&spawned);
    crowd.entities_for(
        PlayerId(2),
        spawn + glam::DVec3::splat(10_000.0),
        &Entities::default(),
        &mut near,
        &mut out,
    );
    assert_eq!(ids(&out), [10]);
    assert_eq!(out.0[0].1[6], 0, "the spawn tick goes to the owner alone");
    // Over the budget: the nearest go.
    for id in 100..100 + 2 * ENTITY_BUDGET as u32 {
        let at = spawn + glam::DVec3::new(f64::from(id), 0.0, 0.0);
        w.entities.insert(EntityId(id), EntityState::fixed(at));
    }
    crowd.renew(&sim, &w, 32);
    crowd.entities_for(
        PlayerId(1),
        spawn,
        &Entities::default(),
        &mut near,
        &mut out,
    );
    // Its own rocket first wherever it is, the pickup 40 units off, then those 100 units
    // off and on, one a unit further each.
    let nearest: Vec<u32> = [10, 11]
        .into_iter()
        .chain(100..100 + ENTITY_BUDGET as u32 - 2)
        .collect();
    assert_eq!(ids(&out), nearest);
    // One the client holds already stays within twice the distance of the last chosen.
    let far = 100 + ENTITY_BUDGET as u32 + 5;
    let mut held = Entities::default();
    held.0.push((far, [0; ENTITY_FIELDS]));
    crowd.entities_for(PlayerId(1), spawn, &held, &mut near, &mut out);
    assert_eq!(out.0.len(), ENTITY_BUDGET);
    assert!(ids(&out).contains(&far), "kept: {:?}", ids(&out));
}

/// The game's own state of a player, a serde type of the game's: sent in full once, then
/// nothing while it stays, and only the four-byte piece a changed field lies in; the
/// client reads it back exactly, and a state too large or out of shape is refused.
#[test]
fn a_games_state_costs_nothing_unchanged_and_a_changed_field_its_piece() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Kit {
        health: i32,
        armour: u8,
        ammo: [u16; 4],
        weapon: u8,
        name: String,
    }
    let sim = arena_sim();
    let mut w = sim.new_state();
    sim.add_player(
        &mut w,
        PlayerId(1),
        expel_core::PlayerState::at(sim.spawns()[0]),
    )
    .unwrap();
    let mut s = expel_core::SimScratch::new();
    let none = std::collections::BTreeMap::new();
    let mut enc = SnapshotEncoder::new();
    let mut dec = SnapshotDecoder::new();
    let mut kit = Kit {
        health: 100,
        armour: 50,
        ammo: [20, 0, 5, 200],
        weapon: 2,
        name: "rocketeer".into(),
    };
    let mut states = std::collections::BTreeMap::new();
    let mut send = |w: &mut WorldState, kit: Option<&Kit>| {
        sim.step(w, &none, &mut s);
        let mut crowd = Crowd::new(&sim, w, 32);
        if let Some(k) = kit {
            let bytes = postcard::to_allocvec(k).unwrap();
            states.insert(
                PlayerId(1),
                (Scope::Near, game_state_fields(&bytes).unwrap()),
            );
        }
        crowd.set_states(&states, &std::collections::BTreeMap::new());
        let b = enc
            .encode_in(
                w,
                &crowd,
                PlayerId(1),
                Feedback::default(),
                32,
                Room::datagram(1200),
            )
            .unwrap();
        let snap = dec.decode(&b).unwrap().unwrap();
        enc.ack(snap.tick);
        (b.len(), snap)
    };
    for _ in 0..3 {
        send(&mut w, None);
    }
    let (bare, _) = send(&mut w, None);
    let (first, snap) = send(&mut w, Some(&kit));
    let got: Kit = postcard::from_bytes(&snap.player_states[&PlayerId(1)]).unwrap();
    assert_eq!(got, kit);
    assert!(first > bare + 10, "sent in full: {first} against {bare}");
    let (same, _) = send(&mut w, Some(&kit));
    assert_eq!(same, bare, "an unchanged state costs nothing");
    kit.health = 90;
    let (changed, snap) = send(&mut w, Some(&kit));
    let got: Kit = postcard::from_bytes(&snap.player_states[&PlayerId(1)]).unwrap();
    assert_eq!(got, kit);
    // The states' list's two counts, then the id, the mask and one piece.
    assert!(changed <= bare + 6, "one piece: {changed} against {bare}");
    // Too large, and out of shape, are refused.
    assert!(game_state_fields(&[0; MAX_STATE_BYTES + 1]).is_none());
    let mut f = game_state_fields(&[1, 2, 3]).unwrap();
    f[1] |= 0xff << 24;
    assert!(game_state_from(&f).is_none(), "a byte past the length");
    f[0] = 99;
    assert!(game_state_from(&f).is_none(), "a length past the limit");
}

/// The arena with the client, player 0, in a corner; and where it stands.
fn client_in_a_corner() -> (Sim, WorldState, DVec3) {
    let sim = arena_sim();
    let mut w = sim.new_state();
    let me = DVec3::new(-800.0, -800.0, 120.0);
    sim.add_player(&mut w, PlayerId(0), PlayerState::at(me))
        .unwrap();
    (sim, w, me)
}

/// A player seen from afar, walking a circle and turning as it goes, is sent on its
/// turns and held between where the client's baseline carries it (within the held
/// tolerance), while one beside the client, turning on the spot, is sent exactly in
/// every snapshot; and the boxes a shot is judged against are where the client drew
/// both, between the snapshots it decoded.
#[test]
fn a_far_player_is_sent_on_its_turns_and_shots_meet_it_where_it_was_drawn() {
    let (sim, mut w, me) = client_in_a_corner();
    sim.add_player(
        &mut w,
        PlayerId(1),
        PlayerState::at(me + DVec3::new(48.0, 0.0, 0.0)),
    )
    .unwrap();
    sim.add_player(
        &mut w,
        PlayerId(2),
        PlayerState::at(DVec3::new(0.0, 0.0, 120.0)),
    )
    .unwrap();
    let mut s = expel_core::SimScratch::new();
    let mut enc = SnapshotEncoder::new();
    let mut dec = SnapshotDecoder::new();
    let mut decoded = BTreeMap::new();
    let (mut exact, mut held) = (0, 0);
    for tick in 0..600u32 {
        let yaw = f64::from(tick % 360);
        let cmds = BTreeMap::from([
            (PlayerId(1), MoveCommand::new(0.0, 0.0, 0.0, -yaw, 0.0)),
            (PlayerId(2), MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)),
        ]);
        sim.step(&mut w, &cmds, &mut s);
        if tick % 2 == 1 {
            continue;
        }
        let bytes = enc
            .encode(&sim, &w, PlayerId(0), Feedback::default(), 16, 1200)
            .unwrap();
        let snap = dec.decode(&bytes).unwrap().unwrap();
        enc.ack(snap.tick);
        let shown = |id| {
            let t = w.player(id).unwrap();
            (
                snap.players[&id],
                PlayerState {
                    velocity: [0; 3],
                    ..*t
                },
            )
        };
        let (near, truth) = shown(PlayerId(1));
        assert_eq!(near, truth, "tick {}: the near player", snap.tick);
        let (far, truth) = shown(PlayerId(2));
        let d = truth
            .origin()
            .distance(w.player(PlayerId(0)).unwrap().origin());
        assert!(d > EXACT_REACH, "tick {}: {d} units off", snap.tick);
        if far == truth {
            exact += 1;
        } else {
            held += 1;
            let off = (0..3)
                .map(|k| (far.origin[k] - truth.origin[k]).abs())
                .max();
            assert!(
                f64::from(off.unwrap_or(0)) <= held_tolerance(d) * POSITION_SCALE,
                "tick {}: {far:?} for {truth:?}, {d} units off",
                snap.tick
            );
        }
        decoded.insert(snap.tick, snap);
    }
    // Sent once in six snapshots at that distance, or sooner when it strays or turns.
    println!("the far player: sent in {exact} snapshots, held in {held}");
    assert!(held >= 120 && exact >= 50, "held {held}, sent {exact}");
    // The boxes at views between snapshots the client decoded: on the line between
    // the two places it was shown.
    let ticks: Vec<u64> = decoded.keys().copied().collect();
    let stand = sim.movement().stand().bounds();
    let mut boxes = Vec::new();
    for pair in ticks[ticks.len() - 40..].windows(2) {
        for k in [0u8, 100, 255] {
            let view = ShotView {
                from: pair[0],
                to: pair[1],
                k,
            };
            assert!(enc.drawn_boxes(&sim, &view, &mut boxes));
            assert_eq!(boxes.iter().map(|b| b.id.0).collect::<Vec<_>>(), [1, 2]);
            for b in &boxes {
                let (a, z) = (
                    &decoded[&pair[0]].players[&b.id],
                    &decoded[&pair[1]].players[&b.id],
                );
                let at = expel_core::sim::history::between(a.origin(), z.origin(), view.fraction());
                assert_eq!(b.bounds, stand.offset(at), "{view:?}: player {}", b.id);
            }
        }
    }
    // A view of a snapshot no longer held draws nothing.
    assert!(!enc.drawn_boxes(&sim, &ShotView::at(ticks[0]), &mut boxes));
    assert!(boxes.is_empty());
}

/// The client in its corner (player 0), two players beside it and twelve far off.
fn two_near_and_twelve_far() -> (Sim, WorldState) {
    let (sim, mut w, me) = client_in_a_corner();
    for i in 1..15u32 {
        let at = if i < 3 {
            me + DVec3::new(40.0 * f64::from(i), 0.0, 0.0)
        } else {
            DVec3::new(-400.0 + 60.0 * f64::from(i), 300.0, 120.0)
        };
        sim.add_player(&mut w, PlayerId(i), PlayerState::at(at))
            .unwrap();
    }
    (sim, w)
}

/// Players 1 to 14 walking on, each turning at its own pace.
fn turning_walkers(tick: u32) -> BTreeMap<PlayerId, MoveCommand> {
    (1..15u32)
        .map(|i| {
            let yaw = f64::from((tick * (i + 2) + 40 * i) % 360);
            (PlayerId(i), MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0))
        })
        .collect()
}

/// A snapshot over its client's bytes holds far players where the baseline carries them,
/// farthest first, each within `SQUEEZED_DRIFT` times its tolerance, before it leaves
/// any out: with room for the near players' news and little more, every player is still
/// shown, the near ones exactly, and the snapshot fits; with room to spare the far ones
/// are sent.
#[test]
fn a_snapshot_over_its_bytes_holds_far_players_before_leaving_any_out() {
    let (sim, mut w) = two_near_and_twelve_far();
    let mut s = expel_core::SimScratch::new();
    let run = |max: usize, w: &mut WorldState, s: &mut expel_core::SimScratch| {
        let (mut enc, mut dec) = (SnapshotEncoder::new(), SnapshotDecoder::new());
        let (mut sizes, mut far_sent) = (Vec::new(), 0);
        let mut w = w.clone();
        for tick in 0..300u32 {
            sim.step(&mut w, &turning_walkers(tick), s);
            if tick % 2 == 1 {
                continue;
            }
            // The first snapshot sends everyone whole, whatever the room.
            let room = if tick == 0 { 1200 } else { max };
            let bytes = enc
                .encode(&sim, &w, PlayerId(0), Feedback::default(), 16, room)
                .unwrap();
            let snap = dec.decode(&bytes).unwrap().unwrap();
            enc.ack(snap.tick);
            assert_eq!(
                snap.players.len(),
                14,
                "tick {tick}: every player shown ({} in the world, room {room}, {} bytes)",
                w.players.len(),
                bytes.len()
            );
            let own = w.player(PlayerId(0)).unwrap().origin();
            for (id, p) in &snap.players {
                let truth = w.player(*id).unwrap();
                let exact = PlayerState {
                    velocity: [0; 3],
                    ..*truth
                };
                let d = truth.origin().distance(own);
                if d <= EXACT_NEAR {
                    assert_eq!(*p, exact, "tick {tick}: near player {id}");
                } else {
                    far_sent += usize::from(*p == exact);
                    // Held to fit, within its bound of where it stands.
                    let off = (0..3).map(|k| (p.origin[k] - exact.origin[k]).abs()).max();
                    let most = SQUEEZED_DRIFT * held_tolerance(d) * POSITION_SCALE;
                    assert!(
                        f64::from(off.unwrap_or(0)) <= most + 1.0,
                        "tick {tick}: {id}"
                    );
                }
            }
            sizes.push(bytes.len());
        }
        (sizes, far_sent, enc.take_held())
    };
    let (roomy, sent_roomy, held_roomy) = run(1200, &mut w, &mut s);
    // Room for the smaller snapshots of the roomy run only.
    let mut sorted = roomy[1..].to_vec();
    sorted.sort_unstable();
    let tight = sorted[sorted.len() / 4];
    let (squeezed, sent_squeezed, held_tight) = run(tight, &mut w, &mut s);
    println!(
        "far players sent: {sent_roomy} with room, {sent_squeezed} within {tight} bytes; \
         {} and {} bytes in all",
        roomy.iter().sum::<usize>(),
        squeezed.iter().sum::<usize>()
    );
    assert!(squeezed[1..].iter().all(|b| *b <= tight));
    assert!(
        sent_squeezed * 4 < sent_roomy * 3,
        "{sent_squeezed} of {sent_roomy}"
    );
    assert!(squeezed.iter().sum::<usize>() * 4 < roomy.iter().sum::<usize>() * 3);
    // Counted for the operator: squeezed snapshots only where room was short.
    println!("{held_roomy:?} with room, {held_tight:?} within {tight} bytes");
    assert_eq!(held_roomy.squeezed, 0);
    assert!(held_tight.squeezed > 0 && held_tight.held > held_roomy.held);
}

/// Rockets that flew and ended while the client's snapshot was under way: over the
/// client's bytes, those it never saw that began and ended beyond its exact reach are
/// left out (farthest first, counted), while the near ones and its own far one are told;
/// with room, every one is.
#[test]
fn far_ends_the_client_never_saw_give_way_to_its_bytes_and_near_ones_never_do() {
    use crate::game::ends::{EndCause, EntityStart};
    let (sim, mut w, me) = client_in_a_corner();
    let mut s = expel_core::SimScratch::new();
    let none = BTreeMap::new();
    let grid = |p: DVec3| (p * POSITION_SCALE).round().to_array().map(|v| v as i32);
    let run = |room: usize, w: &mut WorldState, s: &mut expel_core::SimScratch| {
        let mut w = w.clone();
        let (mut enc, mut dec) = (SnapshotEncoder::new(), SnapshotDecoder::new());
        sim.step(&mut w, &none, s);
        let mut crowd = Crowd::new(&sim, &w, 16);
        let first = enc.encode_in(
            &w,
            &crowd,
            PlayerId(0),
            Feedback::default(),
            16,
            Room::datagram(1200),
        );
        enc.ack(dec.decode(&first.unwrap()).unwrap().unwrap().tick);
        let mut log = EndLog::default();
        // Ids 1 to 4 near (20 to 80 units), 5 to 12 far (380 to 940 units), 13 far
        // and the client's own.
        for id in 1..=13u32 {
            let d = match id {
                1..=4 => 20.0 * f64::from(id),
                _ => 300.0 + 80.0 * f64::from(id - 4),
            };
            let at = me + DVec3::new(d, 0.0, 0.0);
            let owner = (id == 13).then_some(PlayerId(0)).or(Some(PlayerId(7)));
            let start = EntityStart {
                kind: 1,
                owner,
                born: w.tick,
                from: grid(at + DVec3::new(0.0, 30.0, 0.0)),
            };
            let end = EntityEnd {
                id: EntityId(id),
                tick: w.tick,
                at: grid(at),
                cause: EndCause::Expired,
                start: None,
            };
            log.push(Ended {
                end,
                scope: Scope::Near,
                start,
            });
        }
        sim.step(&mut w, &none, s);
        crowd.renew(&sim, &w, 16);
        crowd.set_ends(&log);
        let room = Room {
            budget: room,
            datagram: 1200,
        };
        let bytes = enc
            .encode_in(&w, &crowd, PlayerId(0), Feedback::default(), 16, room)
            .unwrap();
        let snap = dec.decode(&bytes).unwrap().unwrap();
        let told: Vec<u32> = snap.ends.iter().map(|e| e.id.0).collect();
        (told, bytes.len(), enc.take_held())
    };
    let (all, roomy, held) = run(1200, &mut w, &mut s);
    assert_eq!(
        all,
        (1..=13).collect::<Vec<_>>(),
        "with room every end is told"
    );
    assert_eq!(held.ends_left, 0);
    let (some, tight, held) = run(roomy - 60, &mut w, &mut s);
    println!("told {some:?} in {tight} bytes (all: {roomy}); {held:?}");
    assert!(tight <= roomy - 60, "{tight} bytes");
    for must in [1, 2, 3, 4, 13] {
        assert!(some.contains(&must), "end {must} told: {some:?}");
    }
    let left: Vec<u32> = (5..=12).filter(|id| !some.contains(id)).collect();
    assert!(!left.is_empty());
    assert_eq!(held.ends_left, left.len() as u64);
    // The farthest go first (ids 5 to 12 lie ever farther).
    assert_eq!(left, (13 - left.len() as u32..=12).collect::<Vec<_>>());
    let (none_told, _, held) = run(1, &mut w, &mut s);
    assert_eq!(
        none_told,
        [1, 2, 3, 4, 13],
        "at no room, only the near ones and its own"
    );
    assert_eq!(held.ends_left, 8);
}

/// A baseline carried on lands where the 64-bit formula puts it (the step times the
/// ticks ahead over the step's span, truncated), for any step and span: both ends carry
/// with the 32-bit division, and a client built before it must agree bit for bit.
#[test]
fn a_carried_baseline_lands_where_the_wide_formula_puts_it() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for round in 0..20_000 {
        let step: [i16; 3] = match round {
            0 => [i16::MIN, i16::MAX, -1],
            _ => std::array::from_fn(|_| rng.gen()),
        };
        let ahead = rng.gen_range(1..=MOTION_REACH as i32);
        let span = match round % 3 {
            0 => ahead,
            1 => rng.gen_range(1..=64),
            _ => rng.gen_range(1..=i32::MAX),
        };
        let start: [i64; 4] = std::array::from_fn(|_| rng.gen_range(-1 << 40..1 << 40));
        let from = Entities(vec![(7, start)]);
        let mut out = Entities::default();
        carry(&from, &vec![step], &[0, 1, 3], ahead, span, &mut out);
        let wide = |k: usize, s: i16| start[k] + i64::from(s) * i64::from(ahead) / i64::from(span);
        let want = [
            wide(0, step[0]),
            wide(1, step[1]),
            start[2],
            wide(3, step[2]),
        ];
        assert_eq!(
            out.0,
            vec![(7, want)],
            "step {step:?} ahead {ahead} span {span}"
        );
    }
}

/// A client squeezed to the last step gets its far players back once its room grows: a
/// step every few snapshots (its probe turns), all of them within a second, and none
/// squeezed after.
#[test]
fn a_squeezed_client_whose_room_grows_gets_its_far_players_back() {
    let (sim, mut w) = two_near_and_twelve_far();
    let mut s = expel_core::SimScratch::new();
    let mut enc = SnapshotEncoder::new();
    let mut squeezed = Vec::new();
    for tick in 0..240u32 {
        sim.step(&mut w, &turning_walkers(tick), &mut s);
        if tick % 2 == 1 {
            continue;
        }
        // Whole first, then no room to spare for 60 snapshots, then plenty.
        let room = match tick {
            0 => Room::datagram(1200),
            1..120 => Room {
                budget: 0,
                datagram: 1200,
            },
            _ => Room::datagram(1200),
        };
        let crowd = Crowd::new(&sim, &w, 16);
        enc.encode_in(&w, &crowd, PlayerId(0), Feedback::default(), 16, room)
            .unwrap();
        enc.ack(w.tick);
        squeezed.push(enc.take_held().squeezed > 0);
    }
    assert!(squeezed[1..60].iter().all(|s| *s), "{squeezed:?}");
    // A step back every PROBE_EVERY (4) snapshots: from the last of 4 steps, within 16.
    let back = squeezed[60..].iter().position(|s| !s).unwrap();
    assert!(back <= 4 * 4, "{back} snapshots: {squeezed:?}");
    assert!(squeezed[60 + back..].iter().all(|s| !s), "{squeezed:?}");
}
