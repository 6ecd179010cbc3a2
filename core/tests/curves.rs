//! Curved surfaces (Quake 3 patches) in play, on the authored `maps/curves.map` (see
//! maps/generate.py): a concave ramp rising along +y at x -640..-512 from y -256 (z 0) to
//! a plateau at y 0 (z 64); a humped deck in the air over x 0..256, y -512..-256 (edges at
//! z 96, top at 128, nothing beneath); a half-cylinder wall of radius 128 about
//! (384, 256), z 0..192, open towards -y; a low arch over x -384..-128, y 256..512,
//! springing at z 8 and peaking at 88 (room to walk under, not to jump); and a water and a
//! trigger patch that are not solid.

mod common;

use common::*;
use expel_core::collision::patch::{evaluate, PATCH_TOLERANCE};
use expel_core::map::Patch;
use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch, WorldState,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

struct Curves {
    map: MapData,
    model: Arc<CollisionModel>,
    sim: Sim,
    /// The oracle's solids: brushes and the sheets of the patches.
    solids: Vec<(OBrush, DVec3, DVec3)>,
}

fn curves() -> &'static Curves {
    static C: OnceLock<Curves> = OnceLock::new();
    C.get_or_init(|| {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/curves.map"))
                .unwrap();
        let map = MapData::parse_map(&text).unwrap();
        let model = Arc::new(CollisionModel::build(&map));
        let mut solids = map_brushes(&map);
        solids.extend(model_sheets(&model));
        let sim = Sim::new(model.clone(), Movement::default(), Vec::new(), Vec::new());
        Curves {
            map,
            model,
            sim,
            solids,
        }
    })
}

/// The patch whose control grid contains `p`.
fn patch_at(p: DVec3) -> &'static Patch {
    curves().map.entities[0]
        .patches
        .iter()
        .find(|q| q.points.contains(&p))
        .expect("a patch with that control point")
}

/// Smallest oracle separation of the player's box from any solid or sheet near it.
fn clearance(p: &PlayerState) -> f64 {
    let c = curves();
    let hull = c.sim.movement().hull(p);
    let b = hull.bounds();
    let oh = OHull::aabb(b.min, b.max);
    let pos = p.origin();
    c.solids
        .iter()
        .filter(|(_, lo, hi)| {
            (pos - DVec3::splat(96.0)).cmple(*hi).all()
                && (pos + DVec3::splat(96.0)).cmpge(*lo).all()
        })
        .map(|(o, _, _)| separation(&oh, pos, o))
        .fold(f64::INFINITY, f64::min)
}

struct One {
    world: WorldState,
    scratch: SimScratch,
}

impl One {
    fn at(p: DVec3) -> One {
        let sim = &curves().sim;
        let mut world = sim.new_state();
        sim.add_player(&mut world, PlayerId(1), PlayerState::at(p))
            .unwrap();
        One {
            world,
            scratch: SimScratch::new(),
        }
    }

    fn p(&self) -> PlayerState {
        *self.world.player(PlayerId(1)).unwrap()
    }

    fn run(&mut self, n: usize, cmd: MoveCommand) -> Vec<PlayerState> {
        let cmds = BTreeMap::from([(PlayerId(1), cmd)]);
        (0..n)
            .map(|_| {
                curves().sim.step(&mut self.world, &cmds, &mut self.scratch);
                let p = self.p();
                assert!(
                    clearance(&p) >= -1e-6,
                    "player in solid or a patch at {:?}",
                    p.origin()
                );
                p
            })
            .collect()
    }

    /// Lets the player land and come to rest (a landing on a slope slides a little).
    fn settle(&mut self) {
        for _ in 0..200 {
            self.run(1, MoveCommand::default());
            if self.p().on_ground() && self.p().velocity() == DVec3::ZERO {
                return;
            }
        }
        panic!("did not come to rest: {:?}", self.p());
    }
}

fn walk(yaw: f64) -> MoveCommand {
    MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
}

#[test]
fn solid_patches_collide_and_water_and_tool_patches_are_skipped() {
    let st = curves().model.stats();
    assert_eq!((st.patches, st.patches_skipped), (4, 2));
    assert!(st.patch_polygons > 100, "{st:?}");
    assert!(st.patch_deviation > 0.0 && st.patch_deviation <= PATCH_TOLERANCE);
    // The sheets' corners are points of the true surfaces (within the weld).
    let deck = patch_at(DVec3::new(128.0, -384.0, 224.0));
    for (o, _, _) in model_sheets(&curves().model) {
        for q in &o.pts {
            if (0.0..=256.0).contains(&q.x) && (-512.0..=-256.0).contains(&q.y) && q.z > 90.0 {
                let s = evaluate(deck, q.x / 256.0, (q.y + 512.0) / 256.0);
                assert!(
                    (s.z - q.z).abs() < 0.01,
                    "deck corner {q:?} off the surface {s:?}"
                );
            }
        }
    }
}

/// Up the concave ramp onto the plateau: on the ground all the way, never slowed by the
/// seams between its polygons, never dipping.
#[test]
fn walks_up_the_curved_ramp_onto_the_plateau_smoothly() {
    let mut one = One::at(DVec3::new(-576.0, -400.0, 30.0));
    one.settle();
    let states = one.run(100, walk(90.0));
    let last = states.last().unwrap();
    assert!(
        last.origin().y > 20.0 && (last.origin().z - 88.0).abs() < 0.1 && last.on_ground(),
        "did not reach the plateau: {last:?}"
    );
    let on_ramp: Vec<&PlayerState> = states
        .iter()
        .filter(|s| (-256.0..-16.0).contains(&s.origin().y))
        .collect();
    assert!(on_ramp.len() > 10);
    let top = on_ramp
        .iter()
        .map(|s| s.velocity().truncate().length())
        .fold(0.0, f64::max);
    for w in on_ramp.windows(2) {
        let (a, b) = (w[0], w[1]);
        assert!(b.on_ground(), "left the ramp at {:?}", b.origin());
        assert!(
            b.origin().z >= a.origin().z - 1e-6,
            "dipped at {:?}",
            b.origin()
        );
        assert!(
            b.velocity().truncate().length() > 0.8 * top,
            "snagged at {:?}: speed {} of {top}",
            b.origin(),
            b.velocity().truncate().length()
        );
    }
}

/// On the humped deck (nothing beneath it) a player lands, stands still to the bit on top
/// and on its slope, and never sinks through.
#[test]
fn stands_on_the_humped_deck_without_jitter() {
    let deck = patch_at(DVec3::new(128.0, -384.0, 224.0));
    for (x, y) in [(128.0, -384.0), (60.0, -330.0), (200.0, -450.0)] {
        let mut one = One::at(DVec3::new(x, y, 300.0));
        one.settle();
        let rest = one.p();
        let surface = evaluate(deck, x / 256.0, (y + 512.0) / 256.0).z;
        let feet = rest.origin().z - 24.0;
        assert!(
            feet > surface - PATCH_TOLERANCE && feet < surface + 16.0,
            "landed with feet at {feet}, surface at {surface}"
        );
        for s in one.run(120, MoveCommand::default()) {
            assert!(s.on_ground());
            assert_eq!(
                s.origin(),
                rest.origin(),
                "moved while standing at ({x}, {y})"
            );
        }
    }
}

/// A jump under the arch hits it from below and comes down; a free jump goes far higher.
#[test]
fn the_arch_stops_a_jump_from_below() {
    let arch = patch_at(DVec3::new(-256.0, 384.0, 88.0));
    let jump = MoveCommand::default().with_buttons(buttons::JUMP);
    let apex = |x: f64| {
        let mut one = One::at(DVec3::new(x, 384.0, 30.0));
        one.settle();
        let states = one.run(50, jump);
        let top = states.iter().map(|s| s.origin().z).fold(f64::MIN, f64::max);
        (top, states)
    };
    let (free, _) = apex(0.0);
    let (cut, states) = apex(-256.0);
    assert!(
        cut + 8.0 < free,
        "jump under the arch peaked at {cut}, free at {free}"
    );
    // The head never gets above the arch over it.
    for s in states {
        let head = s.origin() + DVec3::new(0.0, 0.0, 32.0);
        // The arch's cross-section is a function of x alone: find its height at the head.
        let mut best = (f64::INFINITY, 0.0);
        for k in 0..=2000 {
            let u = k as f64 / 1000.0;
            let p = evaluate(arch, u, 0.0);
            if (p.x - head.x).abs() < best.0 {
                best = ((p.x - head.x).abs(), p.z);
            }
        }
        assert!(
            head.z <= best.1 + PATCH_TOLERANCE,
            "head {head:?} above the arch ({})",
            best.1
        );
    }
}

/// Running straight at the half-cylinder wall from inside: stopped at it, never beyond.
#[test]
fn runs_into_the_curved_wall_and_never_passes_it() {
    for yaw in [60.0, 90.0, 120.0, 0.0, 180.0] {
        let mut one = One::at(DVec3::new(384.0, 280.0, 30.0));
        one.settle();
        for s in one.run(80, walk(yaw)) {
            let d = (s.origin().truncate() - glam::DVec2::new(384.0, 256.0)).length();
            // The box's corner reaches 16√2 from its centre; the wall is a circle of 128
            // within the tessellation and the quadratic arc's own bulge.
            assert!(
                d < 128.0,
                "yaw {yaw}: centre {d} from the axis at {:?}",
                s.origin()
            );
        }
    }
}

/// A crowd of players on random inputs (as `expel sim` and the server run them): no tick
/// ends with a player in a patch, and nobody on the deck ever ends up beneath it.
#[test]
fn random_play_never_ends_a_tick_inside_or_beyond_a_patch() {
    let c = curves();
    let deck = patch_at(DVec3::new(128.0, -384.0, 224.0));
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let mut world = c.sim.new_state();
    let n = 24u32;
    for i in 0..n {
        let at = if i % 2 == 0 {
            DVec3::new(
                rng.gen_range(20.0..236.0),
                rng.gen_range(-492.0..-276.0),
                200.0,
            )
        } else {
            DVec3::new(
                rng.gen_range(-700.0..700.0),
                rng.gen_range(-700.0..700.0),
                200.0,
            )
        };
        c.sim
            .add_player(&mut world, PlayerId(i), PlayerState::at(at))
            .unwrap();
    }
    let mut s = SimScratch::new();
    let mut cmds = BTreeMap::new();
    let mut above: BTreeMap<u32, bool> = BTreeMap::new();
    let mut deck_ticks = 0;
    for _ in 0..1500 {
        for i in 0..n {
            if rng.gen_bool(0.05) || !cmds.contains_key(&PlayerId(i)) {
                let b = if rng.gen_bool(0.3) { buttons::JUMP } else { 0 };
                let cmd = MoveCommand::new(
                    rng.gen_range(-1.0..1.0),
                    rng.gen_range(-1.0..1.0),
                    0.0,
                    rng.gen_range(0.0..360.0),
                    0.0,
                );
                cmds.insert(PlayerId(i), cmd.with_buttons(b));
            }
        }
        c.sim.step(&mut world, &cmds, &mut s);
        for i in 0..n {
            let p = *world.player(PlayerId(i)).unwrap();
            assert!(
                clearance(&p) >= -1e-6,
                "player {i} in a patch or solid: {p:?}"
            );
            let o = p.origin();
            let over_deck = (16.0..240.0).contains(&o.x) && (-496.0..-272.0).contains(&o.y);
            if !over_deck {
                above.remove(&i);
                continue;
            }
            let surface = evaluate(deck, o.x / 256.0, (o.y + 512.0) / 256.0).z;
            let is_above = o.z - 24.0 > surface - PATCH_TOLERANCE;
            if let Some(&was) = above.get(&i) {
                assert_eq!(was, is_above, "player {i} went through the deck at {o:?}");
            }
            deck_ticks += is_above as usize;
            above.insert(i, is_above);
        }
    }
    assert!(
        deck_ticks > 1000,
        "too little play on the deck: {deck_ticks}"
    );
}

/// The curves map compiled to a `.bsp` (its brushes as planes, its patches as q3map2
/// writes patch surfaces, non-solid ones by their contents flags): the same model, so every
/// trace gives the same result bit for bit. Malformed patch surfaces are refused by name.
#[test]
fn bsp_patch_surfaces_collide_exactly_like_their_map_source() {
    let c = curves();
    let brushes: Vec<Vec<(DVec3, f64)>> = c
        .map
        .world_solid_brushes()
        .map(|b| {
            b.faces
                .iter()
                .map(|f| (f.plane.normal, f.plane.dist))
                .collect()
        })
        .collect();
    let patches: Vec<BspPatch> = c.map.entities[0]
        .patches
        .iter()
        .map(|p| BspPatch {
            patch: p,
            shader: &p.texture,
            // Water (0x20) and trigger (0x40000000) contents, as q3map2 records them.
            contents: match p.texture.as_str() {
                "expel/water" => 0x20,
                "common/trigger" => 0x4000_0000,
                _ => 1,
            },
        })
        .collect();
    let bytes = ibsp_file(&brushes, &patches);
    let bsp = MapData::parse_any(&bytes).unwrap();
    let model = CollisionModel::build(&bsp);
    let (a, b) = (model.stats(), c.model.stats());
    assert_eq!(
        (a.patches, a.patches_skipped, a.patch_polygons, a.polygons),
        (b.patches, b.patches_skipped, b.patch_polygons, b.polygons)
    );
    let hull = expel_core::Hull::aabb(
        DVec3::new(-15.0, -15.0, -24.0),
        DVec3::new(15.0, 15.0, 32.0),
    )
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut s = expel_core::TraceScratch::new();
    let mut hits = 0;
    for _ in 0..2000 {
        let p = |rng: &mut ChaCha8Rng| {
            DVec3::new(
                rng.gen_range(-700.0..700.0),
                rng.gen_range(-700.0..700.0),
                rng.gen_range(30.0..350.0),
            )
        };
        let (from, to) = (p(&mut rng), p(&mut rng));
        let x = model.trace(&hull, from, to, expel_core::Contents::ALL, &mut s);
        let y = c
            .model
            .trace(&hull, from, to, expel_core::Contents::ALL, &mut s);
        assert_eq!(x, y, "{from:?} -> {to:?}");
        hits += x.sweep.hit.is_some() as usize;
    }
    assert!(hits > 300, "{hits}");

    // A patch surface of even width, or whose vertices run past the lump, is refused.
    let mut even = c.map.entities[0].patches[0].clone();
    even.width = 4;
    even.points.extend(vec![DVec3::ZERO; 3]);
    let bad = [BspPatch {
        patch: &even,
        shader: "x",
        contents: 1,
    }];
    let e = MapData::parse_any(&ibsp_file(&brushes, &bad))
        .unwrap_err()
        .to_string();
    assert!(e.contains("surface 0") && e.contains("width 4"), "{e}");
    let mut bytes = ibsp_file(&brushes, &patches);
    let lump13 = 8 + 13 * 8;
    let surf = i32::from_le_bytes(bytes[lump13..lump13 + 4].try_into().unwrap()) as usize;
    bytes[surf + 12..surf + 16].copy_from_slice(&1_000_000i32.to_le_bytes());
    let e = MapData::parse_any(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("surface 0") && e.contains("drawn vertices"),
        "{e}"
    );
}

/// A hostile patch (the largest grid, control points thrown across the map) builds within
/// the triangle budget, quickly, and says how far its polygons may stray from the surface.
#[test]
fn a_wild_patch_is_cut_within_the_budget_and_reports_its_deviation() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let n = expel_core::map::MAX_PATCH_GRID;
    let wild = Patch {
        width: n,
        height: n,
        points: (0..n * n)
            .map(|_| {
                DVec3::new(
                    rng.gen_range(-1e5..1e5),
                    rng.gen_range(-1e5..1e5),
                    rng.gen_range(-1e5..1e5),
                )
            })
            .collect(),
        texture: "wild".into(),
        contents: None,
        line: 7,
    };
    let mut map = curves().map.clone();
    map.entities[0].patches.push(wild);
    #[allow(clippy::disallowed_methods)] // a wall-time figure
    let t = std::time::Instant::now();
    let model = CollisionModel::build(&map);
    let st = model.stats();
    assert_eq!(st.patches, 5);
    assert!(st.patch_polygons <= expel_core::collision::patch::MAX_PATCH_TRIANGLES + 2000);
    assert!(
        st.patch_deviation > PATCH_TOLERANCE,
        "{}",
        st.patch_deviation
    );
    assert!(t.elapsed().as_secs() < 60, "took {:?}", t.elapsed());
}
