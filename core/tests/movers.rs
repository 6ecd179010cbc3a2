//! Movers push and carry players, never trap them, and replay exactly.

mod common;

use common::*;
use expel_core::mover::{Mover, MoverState, Phase};
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch, WorldState,
};
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A simulation and its state, stepped the way a server does.
struct World {
    sim: Sim,
    state: WorldState,
    scratch: SimScratch,
}

impl World {
    fn new(model: Arc<CollisionModel>, map: &MapData) -> World {
        let (sim, warnings) = Sim::from_map(model, map, Movement::default());
        assert!(warnings.is_empty(), "{warnings:?}");
        World {
            state: sim.new_state(),
            sim,
            scratch: SimScratch::new(),
        }
    }

    fn add_player(&mut self, id: u32, p: PlayerState) {
        self.sim
            .add_player(&mut self.state, PlayerId(id), p)
            .unwrap();
    }

    fn step(&mut self, c: &BTreeMap<PlayerId, MoveCommand>) {
        self.sim.step(&mut self.state, c, &mut self.scratch);
    }

    fn player(&self, id: u32) -> Option<&PlayerState> {
        self.state.player(PlayerId(id))
    }

    fn movers(&self) -> impl Iterator<Item = (&Mover, &MoverState)> {
        self.sim.movers().iter().zip(&self.state.movers)
    }

    fn movement(&self) -> &Movement {
        self.sim.movement()
    }
}

fn world_with(entity: &str) -> (World, MapData) {
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n{entity}",
        brush(
            DVec3::new(-512.0, -512.0, -16.0),
            DVec3::new(512.0, 512.0, 0.0)
        )
    );
    let map = MapData::parse_map(&text).unwrap();
    let w = World::new(Arc::new(CollisionModel::build(&map)), &map);
    (w, map)
}

/// Separation of the player's box from the mover's brush (the oracle's view), posed.
fn player_vs_mover(p: &PlayerState, w: &World, local_min: DVec3, local_max: DVec3) -> f64 {
    let (m, s) = w.movers().next().unwrap();
    let pose = m.pose(s);
    let corners: Vec<DVec3> = (0..8)
        .map(|i| {
            let l = DVec3::new(
                if i & 1 == 0 { local_min.x } else { local_max.x },
                if i & 2 == 0 { local_min.y } else { local_max.y },
                if i & 4 == 0 { local_min.z } else { local_max.z },
            );
            m.to_world(l - m.pivot, &pose)
        })
        .collect();
    let b = w.movement().hull(p).bounds();
    let o = p.origin();
    let placed = b.offset(o);
    let player = OBrush::new(box_planes(placed.min, placed.max)).unwrap();
    separation(&OHull::new(corners), DVec3::ZERO, &player)
}

fn idle() -> BTreeMap<PlayerId, MoveCommand> {
    let mut c = BTreeMap::new();
    c.insert(PlayerId(1), MoveCommand::default());
    c
}

#[test]
fn a_door_closing_on_a_player_turns_back_and_never_traps_it() {
    let (dmin, dmax) = (DVec3::new(-8.0, -64.0, 0.0), DVec3::new(8.0, 64.0, 128.0));
    let door = format!(
        "{{\n\"classname\" \"func_door\"\n\"angle\" \"-1\"\n\"speed\" \"200\"\n\"wait\" \"1\"\n{}}}\n",
        brush(dmin, dmax)
    );
    let (mut w, _) = world_with(&door);
    w.add_player(1, PlayerState::at(DVec3::new(-60.0, 0.0, 24.03125)));
    let mut reopened = false;
    let mut last = Phase::Closed;
    for tick in 0..900 {
        // Wait for the door to open, walk into the doorway, and stand there.
        let mut c = idle();
        if (60..70).contains(&tick) {
            c.insert(PlayerId(1), MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0));
        }
        w.step(&c);
        let p = *w.player(1).unwrap();
        let sep = player_vs_mover(&p, &w, dmin, dmax);
        assert!(
            sep >= -1e-6,
            "tick {tick}: the door overlaps the player by {}",
            -sep
        );
        let (_, s) = w.movers().next().unwrap();
        if last == Phase::Closing && s.phase == Phase::Opening {
            reopened = true;
        }
        last = s.phase;
    }
    let p = w.player(1).unwrap().origin();
    assert!(p.x.abs() < 23.0, "the player left the doorway: {p:?}");
    assert!(reopened, "the door never turned back on the player");
}

#[test]
fn a_platform_carries_a_player_for_ten_thousand_ticks() {
    let (pmin, pmax) = (DVec3::new(-64.0, -64.0, 0.0), DVec3::new(64.0, 64.0, 128.0));
    let plat = format!(
        "{{\n\"classname\" \"func_plat\"\n\"speed\" \"150\"\n\"wait\" \"0.5\"\n{}}}\n",
        brush(pmin, pmax)
    );
    let (mut w, _) = world_with(&plat);
    w.add_player(
        1,
        PlayerState::at(DVec3::new(10.0, -5.0, 128.0 + 24.0 + 1.0)),
    );
    let cmds = idle();
    for _ in 0..60 {
        w.step(&cmds);
    }
    let (mut lowest, mut highest) = (f64::MAX, f64::MIN);
    for tick in 0..10_000 {
        w.step(&cmds);
        let p = *w.player(1).unwrap();
        let (m, s) = w.movers().next().unwrap();
        let top = m.pivot.z + m.pose(s).offset.z + (pmax.z - m.pivot.z);
        let above = p.origin().z - 24.0 - top;
        assert!(
            (-1e-6..=1.0).contains(&above),
            "tick {tick}: the player is {above} above the platform top"
        );
        assert!(
            (p.origin().x - 10.0).abs() < 0.01 && (p.origin().y + 5.0).abs() < 0.01,
            "slid off: {p:?}"
        );
        assert!(player_vs_mover(&p, &w, pmin, pmax) >= -1e-6);
        lowest = lowest.min(top);
        highest = highest.max(top);
    }
    assert!(
        highest - lowest > 100.0,
        "the platform hardly moved: {lowest}..{highest}"
    );
}

#[test]
fn a_rotating_fan_sweeps_a_player_aside() {
    let (bmin, bmax) = (DVec3::new(0.0, -8.0, 0.0), DVec3::new(200.0, 8.0, 64.0));
    let fan = format!(
        "{{\n\"classname\" \"func_rotating\"\n\"origin\" \"0 0 32\"\n\"speed\" \"90\"\n{}}}\n",
        brush(bmin, bmax)
    );
    let (mut w, _) = world_with(&fan);
    let start = DVec3::new(120.0, 60.0, 24.03125);
    w.add_player(1, PlayerState::at(start));
    let cmds = idle();
    for tick in 0..400 {
        w.step(&cmds);
        let p = *w.player(1).unwrap();
        let sep = player_vs_mover(&p, &w, bmin, bmax);
        assert!(
            sep >= -1e-6,
            "tick {tick}: the blade overlaps the player by {}",
            -sep
        );
    }
    let end = w.player(1).unwrap().origin();
    assert!(
        (end - start).length() > 50.0,
        "the blade did not sweep the player: {end:?}"
    );
}

#[test]
fn a_scene_with_movers_replays_to_the_same_hash() {
    let plat = format!(
        "{{\n\"classname\" \"func_plat\"\n{}}}\n",
        brush(DVec3::new(-64.0, -64.0, 0.0), DVec3::new(64.0, 64.0, 128.0))
    );
    let fan = format!(
        "{{\n\"classname\" \"func_rotating\"\n\"origin\" \"200 0 32\"\n{}}}\n",
        brush(DVec3::new(200.0, -8.0, 0.0), DVec3::new(400.0, 8.0, 64.0))
    );
    let run = || {
        let (mut w, _) = world_with(&(plat.clone() + &fan));
        w.add_player(1, PlayerState::at(DVec3::new(0.0, 0.0, 160.0)));
        w.add_player(2, PlayerState::at(DVec3::new(300.0, 80.0, 30.0)));
        let mut hashes = Vec::new();
        for t in 0..1200u32 {
            let mut c = BTreeMap::new();
            c.insert(PlayerId(1), MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0));
            c.insert(
                PlayerId(2),
                MoveCommand::new(((t / 60) % 2) as f64, 0.0, 0.0, (t % 360) as f64, 0.0),
            );
            w.step(&c);
            hashes.push(w.state.hash());
        }
        hashes
    };
    assert_eq!(run(), run());
}

/// The movers of the real maps (doors, platforms, a fan) build and run with players
/// wandering among them: nobody ends in the world's solid or inside a mover.
#[test]
fn real_map_movers_run_with_players() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/maps");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        eprintln!("../shared/maps is absent: skipping");
        return;
    };
    let mut paths: Vec<_> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "map" || e == "bsp"))
        .collect();
    paths.sort();
    let mut total_movers = 0;
    for p in paths {
        let map = MapData::parse_any(&std::fs::read(&p).unwrap()).unwrap();
        let (sim, _) = Sim::from_map(
            Arc::new(CollisionModel::build(&map)),
            &map,
            Movement::default(),
        );
        total_movers += sim.movers().len();
        let brushes = map_brushes(&map);
        let mut w = World {
            state: sim.new_state(),
            sim,
            scratch: SimScratch::new(),
        };
        for (i, sp) in map.spawn_points().iter().enumerate().take(8) {
            w.add_player(i as u32, PlayerState::at(*sp + DVec3::Z * 9.0));
        }
        for t in 0..600u32 {
            let c: BTreeMap<PlayerId, MoveCommand> = (0..8)
                .map(|i| {
                    (
                        PlayerId(i),
                        MoveCommand::new(
                            1.0,
                            0.0,
                            0.0,
                            ((t / 90 + i * 47) % 360 * 37 % 360) as f64,
                            0.0,
                        ),
                    )
                })
                .collect();
            w.step(&c);
            for pl in w.state.players.values().map(|s| &s.state) {
                let b = w.movement().hull(pl).bounds();
                let o = pl.origin();
                let oh = OHull::aabb(b.min, b.max);
                let sep = brushes
                    .iter()
                    .filter(|(_, lo, hi)| {
                        let placed = b.offset(o);
                        placed.min.cmple(*hi).all() && placed.max.cmpge(*lo).all()
                    })
                    .map(|(ob, _, _)| separation(&oh, o, ob))
                    .fold(f64::INFINITY, f64::min);
                assert!(
                    sep >= -1e-6,
                    "{}: tick {t}: a player ends {} in solid",
                    p.display(),
                    -sep
                );
                let mut s = expel_core::TraceScratch::new();
                for (m, ms) in w.movers() {
                    assert!(
                        !m.overlaps(w.movement().hull(pl), o, &m.pose(ms), &mut s),
                        "{}: tick {t}: a player is inside a {}",
                        p.display(),
                        m.classname
                    );
                }
            }
        }
    }
    assert!(total_movers > 0 || !dir.exists());
}

/// A train follows its path corners in a loop and carries a rider along.
#[test]
fn a_train_follows_its_path_and_carries_a_rider() {
    let train = format!(
        "{{\n\"classname\" \"func_train\"\n\"target\" \"c1\"\n\"speed\" \"120\"\n{}}}\n\
         {{\n\"classname\" \"path_corner\"\n\"targetname\" \"c1\"\n\"target\" \"c2\"\n\"origin\" \"-64 -64 0\"\n}}\n\
         {{\n\"classname\" \"path_corner\"\n\"targetname\" \"c2\"\n\"target\" \"c1\"\n\"origin\" \"136 -64 0\"\n}}\n",
        brush(DVec3::new(-64.0, -64.0, 0.0), DVec3::new(64.0, 64.0, 16.0))
    );
    let (mut w, _) = world_with(&train);
    w.add_player(1, PlayerState::at(DVec3::new(0.0, 0.0, 16.0 + 24.0 + 1.0)));
    let cmds = idle();
    let mut xs = Vec::new();
    let mut stand: Option<f64> = None;
    for tick in 0..600 {
        w.step(&cmds);
        let (m, s) = w.movers().next().unwrap();
        let off = m.pose(s).offset;
        let p = w.player(1).unwrap().origin();
        // Once landed, the rider stays on the train, where it stood.
        if tick >= 30 {
            let rel = *stand.get_or_insert(p.x - off.x);
            assert!(
                (p.x - off.x - rel).abs() < 0.01 && (p.z - 16.0 - 24.0).abs() < 1.0,
                "tick {tick}: rider {p:?} vs train {off:?}"
            );
        }
        xs.push(off.x);
    }
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
    assert!(
        lo.abs() < 1.0 && (hi - 200.0).abs() < 1.0,
        "train range {lo}..{hi}"
    );
}
