//! The simulation API as a server and a predicting client use it: a world state that
//! crosses a wire, the per-player tick, the player–player rule and prediction that matches
//! the server bit for bit.

use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, MapData, MoveCommand, MoveConfig, Obstacle, PlayerState, Sim, SimScratch,
    WorldState,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

fn arena_sim() -> Sim {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let map = MapData::parse_map(&text).unwrap();
    let movement = MoveConfig::default().validate().unwrap();
    let (sim, warnings) = Sim::from_map(Arc::new(CollisionModel::build(&map)), &map, movement);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(!sim.movers().is_empty(), "the arena has movers");
    sim
}

/// A crowd near the arena's door and platform, close enough to bump into each other.
fn crowd(sim: &Sim, n: u32) -> WorldState {
    let mut w = sim.new_state();
    let door = sim.movers()[0].trigger.center();
    for i in 0..n {
        let at = DVec3::new(
            door.x - 150.0 + 36.0 * (i % 6) as f64,
            door.y - 100.0 + 36.0 * (i / 6) as f64,
            60.0,
        );
        sim.add_player(&mut w, PlayerId(i), PlayerState::at(at))
            .unwrap();
    }
    w
}

fn commands(rng: &mut ChaCha8Rng, n: u32, prev: &mut BTreeMap<PlayerId, MoveCommand>) {
    for i in 0..n {
        if rng.gen_bool(0.1) || !prev.contains_key(&PlayerId(i)) {
            let b = if rng.gen_bool(0.2) { buttons::JUMP } else { 0 };
            prev.insert(
                PlayerId(i),
                MoveCommand::new(
                    1.0,
                    rng.gen_range(-1.0..1.0),
                    0.0,
                    rng.gen_range(0.0..360.0),
                    0.0,
                )
                .with_buttons(b),
            );
        }
    }
}

/// A client restores the world from its serialized form and predicts its own player with
/// the public API alone: every prediction equals the server's step bit for bit, except on
/// ticks where the server reverted the player for a conflict with a lower id (the one
/// thing a client cannot know).
#[test]
fn a_client_predicts_from_a_serialized_snapshot_bit_for_bit() {
    let sim = arena_sim();
    let n = 18;
    let mut server = crowd(&sim, n);
    let mut s = SimScratch::new();
    let mut client_scratch = SimScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut cmds = BTreeMap::new();
    let (mut checked, mut with_players, mut reverted) = (0, 0, 0);
    for tick in 0..1800 {
        commands(&mut rng, n, &mut cmds);
        // The snapshot the client received: the exact bytes a server would send.
        let snapshot = postcard::to_allocvec(&server).unwrap();
        let reports = sim.step(&mut server, &cmds, &mut s);
        let me = tick % n;
        let mut client: WorldState = postcard::from_bytes(&snapshot).unwrap();
        sim.validate_state(&client).unwrap();
        let predicted = sim
            .predict(
                &mut client,
                PlayerId(me),
                &cmds[&PlayerId(me)],
                &mut client_scratch,
            )
            .unwrap();
        let report = reports.iter().find(|r| r.id == PlayerId(me)).unwrap();
        assert_eq!(predicted.events, report.events, "tick {tick}");
        assert_eq!(client.movers, server.movers, "tick {tick}: movers differ");
        assert_eq!(client.tick, server.tick);
        if report.reverted {
            reverted += 1;
            continue;
        }
        assert_eq!(
            predicted.state,
            *server.player(PlayerId(me)).unwrap(),
            "tick {tick}: prediction of player {me} differs"
        );
        checked += 1;
        if report.events.touched.any_player() {
            with_players += 1;
        }
    }
    assert!(checked > 1600, "{checked} predictions checked");
    assert!(
        with_players > 20,
        "only {with_players} predictions involved other players"
    );
    eprintln!("{checked} predictions equal, {with_players} touching players, {reverted} reverted");
}

#[test]
fn world_state_round_trips_and_hashes_alike() {
    let sim = arena_sim();
    let mut w = crowd(&sim, 12);
    let mut s = SimScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut cmds = BTreeMap::new();
    for _ in 0..120 {
        commands(&mut rng, 12, &mut cmds);
        sim.step(&mut w, &cmds, &mut s);
    }
    let bytes = postcard::to_allocvec(&w).unwrap();
    let back: WorldState = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, w);
    assert_eq!(back.hash(), w.hash());
    // Both continue identically.
    let (mut a, mut b) = (w.clone(), back);
    for _ in 0..120 {
        commands(&mut rng, 12, &mut cmds);
        sim.step(&mut a, &cmds, &mut s);
        sim.step(&mut b, &cmds, &mut s);
    }
    assert_eq!(a.hash(), b.hash());
    // A state for another map's movers is refused; stepping it anyway is safe.
    let mut wrong = a.clone();
    wrong.movers.pop();
    assert!(sim.validate_state(&wrong).is_err());
    sim.step(&mut wrong, &cmds, &mut s);
    assert_eq!(wrong.movers.len(), sim.movers().len());
}

/// Two players walking into each other's start boxes: the lower id keeps its move, the
/// other stays where it stood; over a crowd's long run (around the door, which a lift
/// stands beside) no players' moves make two boxes overlap. A lift that lowers a player
/// standing on it and on another's head carries it into that one: such a pair starts its
/// moves entangled (see the `sim` module docs), and only such a pair may still overlap.
#[test]
fn conflicts_go_to_the_lower_id_and_boxes_never_overlap() {
    let sim = arena_sim();
    let mut s = SimScratch::new();
    let mut w = sim.new_state();
    let mut a = PlayerState::at(DVec3::new(-400.0, -300.0, 24.03125));
    let mut b = PlayerState::at(DVec3::new(-400.0 + 34.0, -300.0, 24.03125));
    a.set_velocity(DVec3::new(300.0, 0.0, 0.0));
    b.set_velocity(DVec3::new(-300.0, 0.0, 0.0));
    a.flags = expel_core::movement::flags::ON_GROUND;
    b.flags = a.flags;
    sim.add_player(&mut w, PlayerId(7), a).unwrap();
    sim.add_player(&mut w, PlayerId(9), b).unwrap();
    let mut c = BTreeMap::new();
    c.insert(PlayerId(7), MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0));
    c.insert(PlayerId(9), MoveCommand::new(1.0, 0.0, 0.0, 180.0, 0.0));
    let r = sim.step(&mut w, &c, &mut s);
    assert!(!r[0].reverted && r[1].reverted, "{r:?}");
    assert_eq!(w.player(PlayerId(9)).unwrap().origin, b.origin);
    assert_eq!(w.player(PlayerId(9)).unwrap().velocity, [0; 3]);
    assert!(w.player(PlayerId(7)).unwrap().origin()[0] > a.origin()[0]);

    let n = 24;
    let mut w = crowd(&sim, n);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut cmds = BTreeMap::new();
    let mut touches = 0;
    let boxes = |w: &WorldState| -> Vec<_> {
        w.players
            .iter()
            .map(|(id, p)| sim.player_box(*id, &p.state).unwrap().bounds.expand(-1e-6))
            .collect()
    };
    let (mut carried_into, mut movers_only) = (0, SimScratch::new());
    for tick in 0..1200 {
        commands(&mut rng, n, &mut cmds);
        // The boxes as the players start to move: after the movers' phase.
        let mut moved = w.clone();
        sim.advance_movers(&mut moved, &mut movers_only);
        let start = boxes(&moved);
        let reports = sim.step(&mut w, &cmds, &mut s);
        touches += reports
            .iter()
            .filter(|r| {
                r.events
                    .touched
                    .as_slice()
                    .iter()
                    .any(|o| matches!(o, Obstacle::Player(_)))
            })
            .count();
        let end = boxes(&w);
        for i in 0..end.len() {
            for j in i + 1..end.len() {
                if end[i].overlaps(&end[j]) {
                    assert!(
                        start[i].overlaps(&start[j]),
                        "tick {tick}: the moves of {i} and {j} made them overlap"
                    );
                    carried_into += 1;
                }
            }
        }
    }
    assert!(touches > 50, "the crowd hardly met: {touches}");
    println!("{touches} touches; {carried_into} pair-ticks carried into each other by the lift");
}

/// Two players that start a tick inside each other (a mover or a respawn put them there)
/// pass through each other until they part, then are solid again. Held solid, neither
/// could move: every spot a tick reaches would still be inside the other.
#[test]
fn entangled_players_walk_apart_then_block_again() {
    let sim = arena_sim();
    let mut s = SimScratch::new();
    let mut w = sim.new_state();
    let floor = 24.03125;
    let mut a = PlayerState::at(DVec3::new(-400.0, -300.0, floor));
    a.flags = expel_core::movement::flags::ON_GROUND;
    let mut b = a;
    b.origin = PlayerState::at(DVec3::new(-390.0, -300.0, floor)).origin;
    sim.add_player(&mut w, PlayerId(1), a).unwrap();
    sim.add_player(&mut w, PlayerId(2), b).unwrap();
    let overlap = |w: &WorldState| {
        let bx = |id| sim.player_box(id, w.player(id).unwrap()).unwrap().bounds;
        bx(PlayerId(1)).expand(-1e-6).overlaps(&bx(PlayerId(2)))
    };
    assert!(overlap(&w), "the two start inside each other");
    // Both walk apart along x; every tick both move.
    let mut c = BTreeMap::new();
    c.insert(PlayerId(1), MoveCommand::new(1.0, 0.0, 0.0, 180.0, 0.0));
    c.insert(PlayerId(2), MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0));
    let mut parted = None;
    for tick in 0..60 {
        let before = [1, 2].map(|id| w.player(PlayerId(id)).unwrap().origin()[0]);
        let r = sim.step(&mut w, &c, &mut s);
        assert!(
            r.iter().all(|r| !r.reverted && !r.events.unstuck),
            "tick {tick}: {r:?}"
        );
        let after = [1, 2].map(|id| w.player(PlayerId(id)).unwrap().origin()[0]);
        assert!(
            after[0] < before[0] && after[1] > before[1],
            "tick {tick}: stuck at {after:?}"
        );
        if !overlap(&w) {
            parted = Some(tick);
            break;
        }
    }
    assert!(parted.is_some(), "still inside each other after a second");
    // Apart, they are obstacles again: walking back, they meet and stop.
    c.insert(PlayerId(1), MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0));
    c.insert(PlayerId(2), MoveCommand::new(1.0, 0.0, 0.0, 180.0, 0.0));
    for tick in 0..120 {
        sim.step(&mut w, &c, &mut s);
        assert!(!overlap(&w), "tick {tick}: walked back into each other");
    }
    let gap =
        w.player(PlayerId(2)).unwrap().origin()[0] - w.player(PlayerId(1)).unwrap().origin()[0];
    assert!(gap > 0.0, "they passed each other: {gap}");
}

/// The scratch remembers each player's broad-phase region across ticks; results never
/// depend on what it remembers. A crowd stepped with one scratch, with a fresh scratch
/// every tick, and with one scratch shared with another world (same ids elsewhere) and
/// with a simulation of another model in between, ends in the same state.
#[test]
fn results_do_not_depend_on_what_the_scratch_remembers() {
    let sim = arena_sim();
    // Another map, whose brush indices mean other brushes: the scratch must not mix them.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/terrain.map"))
        .unwrap();
    let map = MapData::parse_map(&text).unwrap();
    let movement = MoveConfig::default().validate().unwrap();
    let (other, _) = Sim::from_map(Arc::new(CollisionModel::build(&map)), &map, movement);
    let n = 24;
    let run = |mode: u8| {
        let mut w = crowd(&sim, n);
        // The same ids at the same places, in the other map.
        let mut elsewhere = other.new_state();
        for (id, slot) in &w.players {
            other.add_player(&mut elsewhere, *id, slot.state).unwrap();
        }
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut cmds = BTreeMap::new();
        let mut kept = SimScratch::new();
        let mut hashes = Vec::new();
        for _ in 0..400 {
            commands(&mut rng, n, &mut cmds);
            match mode {
                0 => drop(sim.step(&mut w, &cmds, &mut kept)),
                1 => drop(sim.step(&mut w, &cmds, &mut SimScratch::new())),
                _ => {
                    other.step(&mut elsewhere, &cmds, &mut kept);
                    sim.step(&mut w, &cmds, &mut kept);
                }
            }
            hashes.push(w.hash());
        }
        hashes
    };
    let kept = run(0);
    assert_eq!(
        kept,
        run(1),
        "a fresh scratch every tick changed the results"
    );
    assert_eq!(
        kept,
        run(2),
        "a scratch shared with another world changed the results"
    );
}

/// Players join where nobody stands: two whose ids share a spawn point, and a crowd larger
/// than the spawn points, all get places whose boxes meet no other and no solid, so idle
/// they are never pushed apart (a push is a move no client predicts).
#[test]
fn players_join_where_nobody_stands() {
    let sim = arena_sim();
    let n = sim.spawns().len() as u32;
    assert!(n > 1 && n < 64, "{n} spawn points");
    let mut w = sim.new_state();
    let mut s = SimScratch::new();
    // Ids that share a spawn point join first, then a crowd of 64 in all.
    let ids: Vec<PlayerId> = [3, 3 + n]
        .into_iter()
        .chain(100..162)
        .map(PlayerId)
        .collect();
    for id in &ids {
        let p = sim.join_state(&w, *id, expel_core::MoveMode::Walk);
        sim.add_player(&mut w, *id, p).unwrap();
    }
    let a = w.players[&PlayerId(3)].state.origin();
    let b = w.players[&PlayerId(3 + n)].state.origin();
    assert!(
        a != b,
        "ids 3 and {} share a spawn point: {a} and {b}",
        3 + n
    );
    let boxes: Vec<(PlayerId, expel_core::Aabb)> = w
        .players
        .iter()
        .map(|(id, p)| (*id, sim.movement().player_box(&p.state)))
        .collect();
    for (i, (ia, ba)) in boxes.iter().enumerate() {
        assert!(
            !sim.map().position_solid(
                sim.movement().stand(),
                w.players[ia].state.origin(),
                expel_core::Contents::PLAYER,
                &mut expel_core::TraceScratch::new()
            ),
            "player {ia} joined inside solid"
        );
        for (ib, bb) in &boxes[i + 1..] {
            assert!(
                !ba.overlaps(bb),
                "players {ia} and {ib} overlap: {ba:?} {bb:?}"
            );
        }
    }
    // Idle for a second: they settle onto the floor, and nobody is pushed sideways.
    let before: BTreeMap<PlayerId, DVec3> = w
        .players
        .iter()
        .map(|(id, p)| (*id, p.state.origin()))
        .collect();
    for _ in 0..60 {
        let reports = sim.step(&mut w, &BTreeMap::new(), &mut s);
        for r in reports {
            assert!(!r.reverted && !r.events.touched.any_player(), "{}", r.id);
        }
    }
    for (id, p) in &w.players {
        let d = p.state.origin() - before[id];
        assert!(
            d.x == 0.0 && d.y == 0.0,
            "player {id} pushed by {d} from where it joined"
        );
    }
}

/// The same world on one thread and on several: a crowd of 200 jostling players (with
/// players leaving and joining mid-run) gives the same state hash every tick whether the
/// step moves them on the caller's thread or on 2, 3 or 4 workers, or on workers now and
/// then (spreading turned on and off, as a server does by its tick times).
#[test]
fn a_crowd_steps_to_the_same_hash_on_one_thread_or_many() {
    let sim = arena_sim();
    let n = 200;
    let run = |threads: usize, toggle: bool| {
        let mut w = crowd(&sim, n);
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        let mut cmds = BTreeMap::new();
        let mut s = SimScratch::with_threads(threads).unwrap();
        let mut hashes = Vec::new();
        for tick in 0..300 {
            commands(&mut rng, n, &mut cmds);
            if tick == 100 {
                for id in (0..n).step_by(7) {
                    w.players.remove(&PlayerId(id));
                }
            }
            if tick == 200 {
                for id in (0..n).step_by(7) {
                    let _ = sim.add_player(
                        &mut w,
                        PlayerId(id),
                        PlayerState::at(DVec3::new(0.0, 0.0, 60.0)),
                    );
                }
            }
            if toggle {
                s.set_spread(tick % 50 < 25);
            }
            sim.step(&mut w, &cmds, &mut s);
            hashes.push(w.hash());
        }
        hashes
    };
    let two = SimScratch::with_threads(2).unwrap();
    assert!(two.pool().is_some() && two.spreading().is_some());
    let one = run(1, false);
    for threads in [2, 3, 4] {
        assert_eq!(
            one,
            run(threads, false),
            "{threads} threads changed the results"
        );
    }
    assert_eq!(
        one,
        run(2, true),
        "turning spreading on and off changed the results"
    );
}
