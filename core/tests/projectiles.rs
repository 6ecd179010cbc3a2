//! Projectiles swept by the core: at 500 to 20,000 units a second, with and without
//! gravity and bounce, as points and boxes, they never pass through anything solid. Every
//! path is checked against the independent separating-axis oracle in `common` (the map's
//! brushes, the movers' brushes at their poses, the players' boxes), not against the
//! projectile code or the trace it calls.

mod common;

use common::*;
use expel_core::map::solidity::{is_player_clip_texture, is_tool_texture};
use expel_core::sim::entity::{EntityState, Motion, Struck};
use expel_core::EntityId;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch, WorldState,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Overlap the path checks allow: the state's rounding to 1/256 units moves a tick's end
/// by at most √3/512 (0.0034), far below the thinnest wall here (0.25 units).
const TOL: f64 = 0.004;

fn sim_of(map: &MapData) -> Sim {
    Sim::from_map(
        Arc::new(CollisionModel::build(map)),
        map,
        Movement::default(),
    )
    .0
}

/// A random projectile motion: a point or a small box, straight or falling, stopping or
/// bouncing.
fn random_motion(rng: &mut ChaCha8Rng) -> Motion {
    let half = [0.0, 0.0, 1.0, 4.0, 8.0][rng.gen_range(0..5)];
    let gravity = [0.0, 800.0][rng.gen_range(0..2)];
    let bounce = [0.0, 0.5, 0.65, 1.0][rng.gen_range(0..4)];
    Motion::new(DVec3::splat(-half), DVec3::splat(half), gravity, bounce).unwrap()
}

fn oracle_hull(m: &Motion) -> OHull {
    OHull::aabb(m.box_mins(), m.box_maxs())
}

/// One entity's flight: every place it was (tick ends and impact points, in order), the
/// impacts, and whether it was lost.
struct Flight {
    path: Vec<DVec3>,
    /// Tick-end positions only (the rounded states).
    ends: Vec<DVec3>,
    struck: Vec<Struck>,
    lost: bool,
}

fn fly(sim: &Sim, world: &mut WorldState, ticks: usize, s: &mut SimScratch) -> Flight {
    fly_with(sim, world, ticks, s, |_, _| {})
}

/// Flies entity 0 for `ticks`, calling `each` after every tick with the world and the
/// path so far (movers' poses change per tick).
fn fly_with(
    sim: &Sim,
    world: &mut WorldState,
    ticks: usize,
    s: &mut SimScratch,
    mut each: impl FnMut(&WorldState, &[DVec3]),
) -> Flight {
    let mut f = Flight {
        path: vec![world.entities[&EntityId(0)].origin()],
        ends: Vec::new(),
        struck: Vec::new(),
        lost: false,
    };
    let none = BTreeMap::new();
    for _ in 0..ticks {
        let start = f.path.len() - 1;
        let r = sim.step_world(world, &none, s);
        for i in r.impacts.iter().filter(|i| i.entity == EntityId(0)) {
            f.path.push(i.point);
            f.struck.push(i.struck);
        }
        match world.entities.get(&EntityId(0)) {
            Some(e) => {
                f.path.push(e.origin());
                f.ends.push(e.origin());
            }
            None => {
                f.lost = true;
                break;
            }
        }
        each(world, &f.path[start..]);
    }
    f
}

/// The oracle's solids with their bounds (a segment is checked against those its box
/// reaches).
struct Solids(Vec<(OBrush, DVec3, DVec3)>);

impl Solids {
    fn of(brushes: Vec<OBrush>) -> Solids {
        Solids(
            brushes
                .into_iter()
                .map(|b| {
                    let lo = b.pts.iter().fold(DVec3::INFINITY, |a, p| a.min(*p));
                    let hi = b.pts.iter().fold(DVec3::NEG_INFINITY, |a, p| a.max(*p));
                    (b, lo, hi)
                })
                .collect(),
        )
    }

    fn near(&self, oh: &OHull, a: DVec3, b: DVec3) -> impl Iterator<Item = &OBrush> {
        let r = oh
            .pts
            .iter()
            .fold(0.0f64, |m, p| m.max(p.abs().max_element()))
            + 1.0;
        let (lo, hi) = (a.min(b) - r, a.max(b) + r);
        self.0
            .iter()
            .filter(move |(_, l, h)| l.cmple(hi).all() && h.cmpge(lo).all())
            .map(|(b, ..)| b)
    }
}

/// Asserts that no segment of the path overlaps any solid deeper than [`TOL`], and that
/// no tick's end overlaps one at all.
fn assert_never_in_solid(solids: &Solids, oh: &OHull, f: &Flight, what: &str) {
    for w in f.path.windows(2) {
        let (a, b) = (w[0], w[1]);
        for brush in solids.near(oh, a, b) {
            if let Some(t) = overlap_interval(oh, a, b - a, brush, TOL) {
                panic!("{what}: the segment {a:?} -> {b:?} enters solid at {t:?}");
            }
        }
    }
    for p in &f.ends {
        for brush in solids.near(oh, *p, *p) {
            let sep = separation(oh, *p, brush);
            assert!(
                sep >= -1e-6,
                "{what}: a tick ended {} deep in solid at {p:?}",
                -sep
            );
        }
    }
}

/// Stacks of thin slabs (0.25 to 1 unit) at random orientations: shots at 500 to 20,000
/// units a second from in front of the first never get past it, whatever they bounce
/// off, and never enter any slab.
#[test]
fn fast_projectiles_stop_at_thin_walls() {
    let mut rng = ChaCha8Rng::seed_from_u64(57);
    let mut s = SimScratch::new();
    let (mut shots, mut hits) = (0, 0);
    for scene_no in 0..24 {
        let n = unit(&mut rng);
        let mut planes = Vec::new();
        let first = rng.gen_range(100.0..300.0);
        for k in 0..4 {
            let d = first + k as f64 * 400.0;
            let t = rng.gen_range(0.25..1.0);
            let mut p = vec![(n, d + t), (-n, -d)];
            p.extend(box_planes(DVec3::splat(-6000.0), DVec3::splat(6000.0)));
            planes.push(p);
        }
        let scene = Scene::new(planes);
        let sim = sim_of(&scene.map);
        let solids = Solids::of(scene.brushes);
        for shot in 0..20 {
            let motion = random_motion(&mut rng);
            let oh = oracle_hull(&motion);
            let side = DVec3::new(
                rng.gen_range(-1500.0..1500.0),
                rng.gen_range(-1500.0..1500.0),
                rng.gen_range(-1500.0..1500.0),
            );
            let start = side - n * n.dot(side) + n * rng.gen_range(0.0..first - 20.0);
            let dir = (n + unit(&mut rng) * 0.7).normalize();
            let speed = rng.gen_range(500.0..20_000.0);
            let mut world = sim.new_state();
            let e = EntityState::launched(start, dir, speed, motion, None).unwrap();
            world.entities.insert(EntityId(0), e);
            let f = fly(&sim, &mut world, 120, &mut s);
            let what = format!("scene {scene_no} shot {shot} ({speed:.0} u/s, {motion:?})");
            assert_never_in_solid(&solids, &oh, &f, &what);
            // The first slab's near face, as far as the hull reaches along n.
            let reach = oh.pts.iter().map(|p| n.dot(*p)).fold(f64::MIN, f64::max);
            for p in &f.path {
                assert!(
                    n.dot(*p) + reach <= first + 1e-6,
                    "{what}: got past the first wall to {p:?}"
                );
            }
            shots += 1;
            hits += !f.struck.is_empty() as usize;
        }
    }
    assert!(
        hits * 10 >= shots * 8,
        "only {hits} of {shots} shots met a wall"
    );
}

/// The issue's own case: 10,000 units a second at a 1-unit wall stops at the wall.
#[test]
fn ten_thousand_units_a_second_stop_at_a_one_unit_wall() {
    let scene = Scene::new(vec![box_planes(
        DVec3::new(500.0, -512.0, -512.0),
        DVec3::new(501.0, 512.0, 512.0),
    )]);
    let sim = sim_of(&scene.map);
    let mut s = SimScratch::new();
    for start_x in [0.0, 3.3, 170.0, 333.0, 499.0] {
        let mut world = sim.new_state();
        let e = EntityState::launched(
            DVec3::new(start_x, 10.0, 20.0),
            DVec3::X,
            10_000.0,
            Motion::POINT,
            None,
        )
        .unwrap();
        world.entities.insert(EntityId(0), e);
        let f = fly(&sim, &mut world, 60, &mut s);
        assert_eq!(f.struck, vec![Struck::World], "from x = {start_x}");
        let end = world.entities[&EntityId(0)].origin();
        assert!(
            end.x < 500.0 && end.x > 500.0 - 0.05,
            "from x = {start_x}: stopped at {end:?}, not at the wall"
        );
    }
}

/// Every shipped map (and the shared real maps, where present): shots in every direction
/// from the spawn points, 500 to 20,000 units a second, never enter a brush.
#[test]
fn projectiles_never_pass_through_the_shipped_maps() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut maps: Vec<std::path::PathBuf> = ["arena", "stress", "terrain", "curves"]
        .iter()
        .map(|m| std::path::Path::new(root).join(format!("maps/{m}.map")))
        .collect();
    let shared = std::path::Path::new(root).join("../shared/maps");
    if let Ok(dir) = std::fs::read_dir(&shared) {
        let mut extra: Vec<_> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "map"))
            .collect();
        extra.sort();
        maps.extend(extra);
    } else {
        eprintln!("{} is absent: the shipped maps only", shared.display());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(58);
    let mut s = SimScratch::new();
    for path in maps {
        let map = MapData::parse_map(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let model = Arc::new(CollisionModel::build(&map));
        let (sim, _) = Sim::from_map(model.clone(), &map, Movement::default());
        // The oracle's solids: the world's brushes but player clip (projectiles pass
        // clip brushes, as in Quake) and the patch sheets.
        let mut brushes: Vec<OBrush> = map
            .world_solid_brushes()
            .filter(|b| {
                !b.faces
                    .iter()
                    .all(|f| is_player_clip_texture(&f.texture) || is_tool_texture(&f.texture))
            })
            .filter_map(|b| {
                OBrush::new(
                    b.faces
                        .iter()
                        .map(|f| (f.plane.normal, f.plane.dist))
                        .collect(),
                )
            })
            .collect();
        brushes.extend(model_sheets(&model).into_iter().map(|b| b.0));
        let solids = Solids::of(brushes);
        let spawns: Vec<DVec3> = sim.spawns().to_vec();
        assert!(!spawns.is_empty(), "{}: no spawn points", path.display());
        let (mut hits, shots) = (0, 150);
        for shot in 0..shots {
            let motion = random_motion(&mut rng);
            let oh = oracle_hull(&motion);
            let start = spawns[shot % spawns.len()] + DVec3::new(0.0, 0.0, 16.0);
            if solids
                .near(&oh, start, start)
                .any(|b| separation(&oh, start, b) < 0.0)
            {
                continue;
            }
            let speed = rng.gen_range(500.0..20_000.0);
            let mut world = sim.new_state();
            let e = EntityState::launched(start, unit(&mut rng), speed, motion, None).unwrap();
            world.entities.insert(EntityId(0), e);
            let f = fly(&sim, &mut world, 240, &mut s);
            let what = format!(
                "{} shot {shot} ({speed:.0} u/s, {motion:?})",
                path.display()
            );
            assert_never_in_solid(&solids, &oh, &f, &what);
            hits += !f.struck.is_empty() as usize;
        }
        assert!(
            hits * 2 >= shots,
            "{}: only {hits} shots hit",
            path.display()
        );
    }
}

/// A door sliding across the line of fire: shots at it meet the door where it stands that
/// tick (the oracle's door at the tick's pose), never pass through it.
#[test]
fn projectiles_meet_a_moving_door_where_it_stands() {
    let (dmin, dmax) = (DVec3::new(-8.0, -256.0, 0.0), DVec3::new(8.0, 256.0, 512.0));
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n{{\n\"classname\" \"func_door\"\n\"angle\" \"90\"\n\"speed\" \"400\"\n\"wait\" \"0\"\n{}}}\n",
        brush(DVec3::new(-2048.0, -2048.0, -16.0), DVec3::new(2048.0, 2048.0, 0.0)),
        brush(dmin, dmax)
    );
    let map = MapData::parse_map(&text).unwrap();
    let sim = sim_of(&map);
    assert_eq!(sim.movers().len(), 1);
    let floor = Solids::of(
        Scene::new(vec![box_planes(
            DVec3::new(-2048.0, -2048.0, -16.0),
            DVec3::new(2048.0, 2048.0, 0.0),
        )])
        .brushes,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(59);
    let mut s = SimScratch::new();
    let mut mover_hits = 0;
    // The door opens when a player comes near: one stands by it the whole time.
    for shot in 0..60 {
        let mut world = sim.new_state();
        sim.add_player(
            &mut world,
            PlayerId(7),
            PlayerState::at(DVec3::new(-40.0, 300.0, 24.03125)),
        )
        .unwrap();
        let warmup = rng.gen_range(0..120);
        for _ in 0..warmup {
            sim.step(&mut world, &BTreeMap::new(), &mut s);
        }
        let motion = random_motion(&mut rng);
        let oh = oracle_hull(&motion);
        let start = DVec3::new(
            -rng.gen_range(40.0..400.0),
            rng.gen_range(-200.0..200.0),
            100.0,
        );
        let dir = DVec3::new(1.0, rng.gen_range(-0.3..0.3), rng.gen_range(-0.1..0.2));
        let speed = rng.gen_range(500.0..20_000.0);
        let e = EntityState::launched(start, dir, speed, motion, None).unwrap();
        world.entities.insert(EntityId(0), e);
        let what = format!("shot {shot} ({speed:.0} u/s, {motion:?})");
        let f = fly_with(&sim, &mut world, 90, &mut s, |w, seg| {
            // The door as it stands this tick, for the oracle.
            let (m, st) = (&sim.movers()[0], &w.movers[0]);
            let pose = m.pose(st);
            let lo = m.to_world(dmin - m.pivot, &pose);
            let hi = m.to_world(dmax - m.pivot, &pose);
            let door = Scene::new(vec![box_planes(lo.min(hi), lo.max(hi))]);
            for p in seg.windows(2) {
                assert!(
                    door.first_overlap(&oh, p[0], p[1] - p[0], TOL).is_none(),
                    "{what}: {:?} -> {:?} passes through the door at {lo:?}",
                    p[0],
                    p[1]
                );
            }
        });
        assert_never_in_solid(&floor, &oh, &f, &what);
        mover_hits += f.struck.contains(&Struck::Mover(0)) as usize;
    }
    assert!(mover_hits >= 10, "only {mover_hits} shots met the door");
}

/// Players' boxes stop projectiles (the owner's does not); the impact names the player
/// and the projectile ends outside its box.
#[test]
fn projectiles_hit_players_but_pass_through_their_owner() {
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n",
        brush(
            DVec3::new(-2048.0, -2048.0, -16.0),
            DVec3::new(2048.0, 2048.0, 0.0)
        )
    );
    let map = MapData::parse_map(&text).unwrap();
    let sim = sim_of(&map);
    let mut s = SimScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(60);
    for shot in 0..40 {
        let mut world = sim.new_state();
        let target = DVec3::new(
            rng.gen_range(100.0..1500.0),
            rng.gen_range(-50.0..50.0),
            24.03125,
        );
        let shooter = DVec3::new(0.0, 0.0, 24.03125);
        sim.add_player(&mut world, PlayerId(1), PlayerState::at(shooter))
            .unwrap();
        sim.add_player(&mut world, PlayerId(2), PlayerState::at(target))
            .unwrap();
        // Straight (no gravity): nothing but the target is in the way.
        let motion = Motion {
            gravity: 0.0,
            ..random_motion(&mut rng)
        };
        let oh = oracle_hull(&motion);
        // From inside the shooter's own box, at the target's middle.
        let from = shooter + DVec3::new(0.0, 0.0, 10.0);
        let aim = target + DVec3::new(0.0, 0.0, rng.gen_range(-8.0..8.0)) - from;
        let speed = rng.gen_range(500.0..20_000.0);
        let e = EntityState::launched(from, aim, speed, motion, Some(PlayerId(1))).unwrap();
        world.entities.insert(EntityId(0), e);
        let mut f = Flight {
            path: vec![from],
            ends: vec![],
            struck: vec![],
            lost: false,
        };
        let none: BTreeMap<PlayerId, MoveCommand> = BTreeMap::new();
        for _ in 0..200 {
            let r = sim.step_world(&mut world, &none, &mut s);
            for i in &r.impacts {
                f.path.push(i.point);
                f.struck.push(i.struck);
            }
            match world.entities.get(&EntityId(0)) {
                Some(e) => f.path.push(e.origin()),
                None => break,
            }
            if !f.struck.is_empty() {
                break;
            }
        }
        assert_eq!(
            f.struck.first(),
            Some(&Struck::Player(PlayerId(2))),
            "shot {shot} at {speed:.0} u/s: {f:?}",
            f = f.struck
        );
        let b = sim
            .movement()
            .player_box(world.player(PlayerId(2)).unwrap());
        let body = Scene::new(vec![box_planes(b.min, b.max)]);
        for w in f.path.windows(2) {
            assert!(
                body.first_overlap(&oh, w[0], w[1] - w[0], TOL).is_none(),
                "shot {shot}: {:?} -> {:?} passes into the target",
                w[0],
                w[1]
            );
        }
    }
}

/// Grenades bouncing around the arena among players: the same state hash stepped on one
/// thread and spread over four, run after run.
#[test]
fn a_crowd_of_projectiles_steps_to_the_same_bits_on_any_number_of_threads() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let map = MapData::parse_map(&text).unwrap();
    let sim = sim_of(&map);
    let run = |threads: usize| {
        let mut s = if threads > 1 {
            let mut s = SimScratch::with_threads(threads).unwrap();
            s.set_spread(true);
            s
        } else {
            SimScratch::new()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(61);
        let mut world = sim.new_state();
        let spawns = sim.spawns().to_vec();
        for id in 0..16u32 {
            let at =
                spawns[id as usize % spawns.len()] + DVec3::new(0.0, 0.0, (id / 7) as f64 * 60.0);
            let _ = sim.add_player(&mut world, PlayerId(id), PlayerState::at(at));
        }
        for id in 0..200u32 {
            let motion = random_motion(&mut rng);
            let from = spawns[id as usize % spawns.len()] + DVec3::new(0.0, 0.0, 40.0);
            let e = EntityState::launched(
                from,
                unit(&mut rng),
                rng.gen_range(300.0..3000.0),
                motion,
                Some(PlayerId(id % 16)),
            )
            .unwrap();
            world.entities.insert(EntityId(id), e);
        }
        let mut impacts = 0;
        for _ in 0..300 {
            let mut cmds = BTreeMap::new();
            for id in 0..16u32 {
                cmds.insert(
                    PlayerId(id),
                    MoveCommand::new(1.0, 0.0, 0.0, rng.gen_range(0.0..360.0), 0.0),
                );
            }
            impacts += sim.step_world(&mut world, &cmds, &mut s).impacts.len();
        }
        (world.hash(), impacts, world.entities.len())
    };
    let one = run(1);
    assert!(one.1 > 200, "too few impacts to mean anything: {one:?}");
    assert_eq!(one, run(4));
    assert_eq!(one, run(1));
}
