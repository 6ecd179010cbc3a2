//! Property tests of translational traces against the independent oracle in `common`.

mod common;

use common::*;
use expel_core::{CollisionModel, Contents, Hull, Trace, TraceScratch, EXPEL};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Overlap allowed by the checks (rounding only: far below the expel zone).
const TOL: f64 = 1e-6;
/// A stopped trace ends within this of what it hit (the mitred zone is at most 3.25 e).
const NEAR: f64 = 3.5 * EXPEL + 1e-6;

struct Stats {
    traces: usize,
    hits: usize,
    tight: usize,
}

impl Stats {
    fn add(&mut self, o: Outcome) {
        self.traces += 1;
        self.hits += o.hit as usize;
        self.tight += o.tight as usize;
    }

    /// A hull that approaches a surface head-on stops at the zone, not at the surface: a
    /// stop much closer than e is only right for the rare grazing entry past an edge.
    fn assert_stops_at_the_zone(&self) {
        assert!(
            self.tight * 50 <= self.hits,
            "{} of {} head-on stops ended closer than e/4 to the geometry",
            self.tight,
            self.hits
        );
    }
}

#[derive(Default)]
struct Outcome {
    hit: bool,
    tight: bool,
}

/// Which sweep a check runs: the model's own choice, or the polygon sweep for any hull.
#[derive(Clone, Copy)]
enum Path {
    Default,
    Polygons,
}

/// Runs the invariants for one trace.
fn check_trace(
    scene: &Scene,
    model: &CollisionModel,
    hull: &Hull,
    oh: &OHull,
    start: DVec3,
    end: DVec3,
    s: &mut TraceScratch,
) -> Outcome {
    check_trace_by(Path::Default, scene, model, hull, oh, start, end, s)
}

#[allow(clippy::too_many_arguments)]
fn check_trace_by(
    path: Path,
    scene: &Scene,
    model: &CollisionModel,
    hull: &Hull,
    oh: &OHull,
    start: DVec3,
    end: DVec3,
    s: &mut TraceScratch,
) -> Outcome {
    let sep0 = scene.min_separation(oh, start);
    let full = match path {
        Path::Default => model.trace(hull, start, end, Contents::ALL, s),
        Path::Polygons => {
            let sweep = model.sweep_polygons(hull, start, end, Contents::ALL, s);
            let start_solid = model.position_solid(hull, start, Contents::ALL, s);
            let all_solid = start_solid && model.position_solid(hull, sweep.end, Contents::ALL, s);
            Trace {
                sweep,
                start_solid,
                all_solid,
            }
        }
    };
    let t = full.sweep;
    assert_eq!(
        full.start_solid,
        sep0 < -TOL,
        "start_solid disagrees with the oracle (separation {sep0}) at {start:?}"
    );
    if sep0 < -TOL {
        // Starting inside solid. A box never goes deeper into a brush it starts in, nor
        // into one it does not; `allsolid` says it ends inside (so never left).
        if matches!(path, Path::Default) && hull.is_box() {
            check_inside_start(scene, oh, start, end, &full);
        }
        return Outcome::default();
    }
    let d = t.end - start;
    let sep1 = scene.min_separation(oh, t.end);
    assert!(
        sep1 >= -TOL,
        "trace {start:?} -> {end:?} ends overlapping by {} at fraction {}",
        -sep1,
        t.fraction
    );
    if let Some(tt) = scene.first_overlap(oh, start, d, TOL) {
        panic!(
            "trace {start:?} -> {end:?} passes through solid at t={tt} of its travelled part (fraction {})",
            t.fraction
        );
    }
    if t.fraction < 1.0 {
        assert!(
            sep1 <= NEAR,
            "trace {start:?} -> {end:?} stopped at fraction {} with {sep1} units of clearance ({:?}, normal {:?})",
            t.fraction, t.hit.map(|h| h.target), t.normal()
        );
        let n = t.normal().expect("a stopped trace has a normal");
        assert!((n.length() - 1.0).abs() < 1e-9);
        assert!(n.dot(end - start) <= 1e-9, "normal faces along the motion");
    }
    let head_on = t
        .normal()
        .is_some_and(|n| -n.dot((end - start).normalize()) > 0.5);
    // Inside the zone the hull may move away, never deeper, from each brush.
    for b in &scene.brushes {
        let before = separation(oh, start, b);
        if (-TOL..EXPEL).contains(&before) {
            let after = separation(oh, t.end, b);
            assert!(
                after >= before - TOL,
                "hull in the zone moved deeper: {before} -> {after} ({start:?} -> {end:?})"
            );
        }
    }
    // Clearance from what lies ahead: the brushes that going on by 2e would run into (a
    // box may slide along another brush in exact contact, which is no stop at all).
    let ahead = (end - start).normalize_or_zero() * (2.0 * EXPEL);
    let clearance = scene
        .brushes
        .iter()
        .filter(|b| overlap_interval(oh, t.end, ahead, b, TOL).is_some())
        .map(|b| separation(oh, t.end, b))
        .fold(f64::INFINITY, f64::min);
    Outcome {
        hit: t.hit.is_some(),
        tight: head_on && t.fraction > 0.0 && clearance < EXPEL / 4.0,
    }
}

/// The rule for a box that starts inside solid, against the oracle: no brush gets deeper
/// (those it starts outside it never enters), a move that stops at once goes deeper into
/// one it starts in, and `allsolid` is ending inside.
fn check_inside_start(scene: &Scene, oh: &OHull, start: DVec3, end: DVec3, full: &Trace) {
    let t = full.sweep;
    for b in &scene.brushes {
        let before = separation(oh, start, b);
        let after = separation(oh, t.end, b);
        assert!(
            after >= before.min(0.0) - TOL,
            "a box starting in solid went deeper: {before} -> {after} ({start:?} -> {end:?}, fraction {})",
            t.fraction
        );
    }
    let inside_at_end = scene.min_separation(oh, t.end) < -TOL;
    assert_eq!(
        full.all_solid, inside_at_end,
        "allsolid disagrees with the oracle at the end of {start:?} -> {end:?} (fraction {})",
        t.fraction
    );
    if t.fraction == 0.0 && end != start {
        // Stopped at once: a step along the move would take it deeper into a brush it
        // starts in, or closer to one whose zone it is in.
        let step = start + (end - start).normalize() * 1e-3;
        let justified = scene.brushes.iter().any(|b| {
            let before = separation(oh, start, b);
            before < NEAR && separation(oh, step, b) <= before + 1e-9
        });
        assert!(
            justified,
            "{start:?} -> {end:?} stopped at once for nothing"
        );
    }
}

fn random_scene(rng: &mut ChaCha8Rng, n: usize, spread: f64, size: f64) -> Scene {
    let planes = (0..n)
        .map(|_| {
            let c = DVec3::new(
                rng.gen_range(-spread..spread),
                rng.gen_range(-spread..spread),
                rng.gen_range(-spread..spread),
            );
            random_brush(rng, c, size)
        })
        .collect();
    Scene::new(planes)
}

fn random_point(rng: &mut ChaCha8Rng, r: f64) -> DVec3 {
    DVec3::new(
        rng.gen_range(-r..r),
        rng.gen_range(-r..r),
        rng.gen_range(-r..r),
    )
}

fn run_scenes(seed: u64, scenes: usize, traces: usize, hulls: &[(Hull, OHull)]) -> Stats {
    run_scenes_by(Path::Default, seed, scenes, traces, hulls)
}

fn run_scenes_by(
    path: Path,
    seed: u64,
    scenes: usize,
    traces: usize,
    hulls: &[(Hull, OHull)],
) -> Stats {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = TraceScratch::new();
    let mut st = Stats {
        traces: 0,
        hits: 0,
        tight: 0,
    };
    for _ in 0..scenes {
        let count = rng.gen_range(1..12);
        let scene = random_scene(&mut rng, count, 48.0, 24.0);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..traces {
            let (hull, oh) = &hulls[rng.gen_range(0..hulls.len())];
            let start = random_point(&mut rng, 80.0);
            if scene.min_separation(oh, start) < 0.0 && rng.gen_bool(0.9) {
                continue;
            }
            let len = [4.0, 32.0, 128.0, 1e4][rng.gen_range(0..4)];
            let end = start + unit(&mut rng) * rng.gen_range(0.0..len);
            st.add(check_trace_by(
                path, &scene, &model, hull, oh, start, end, &mut s,
            ));
        }
    }
    st
}

#[test]
fn boxes_that_start_in_solid_never_go_deeper_and_say_allsolid() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let mut s = TraceScratch::new();
    let (hull, oh) = player_box();
    let small = OHull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0));
    let small_hull = Hull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)).unwrap();
    let (mut inside, mut stopped, mut all_solid, mut left) = (0, 0, 0, 0);
    for _ in 0..120 {
        let count = rng.gen_range(1..8);
        let scene = random_scene(&mut rng, count, 32.0, 24.0);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..300 {
            let (h, o) = if rng.gen_bool(0.5) {
                (&hull, &oh)
            } else {
                (&small_hull, &small)
            };
            let start = random_point(&mut rng, 48.0);
            if scene.min_separation(o, start) >= -TOL {
                continue;
            }
            inside += 1;
            let len = [2.0, 16.0, 64.0, 1e3][rng.gen_range(0..4)];
            let end = start + unit(&mut rng) * rng.gen_range(0.0..len);
            let t = model.trace(h, start, end, Contents::ALL, &mut s);
            assert!(t.start_solid);
            check_inside_start(&scene, o, start, end, &t);
            stopped += (t.sweep.fraction == 0.0) as usize;
            all_solid += t.all_solid as usize;
            left += (!t.all_solid) as usize;
        }
    }
    println!("{inside} traces from inside solid: {stopped} stopped at once, {all_solid} allsolid, {left} left");
    assert!(
        inside > 5000 && stopped > 500 && left > 500,
        "{inside} {stopped} {left}"
    );
}

#[test]
fn a_box_stuck_in_a_wall_leaves_by_the_nearer_side_and_never_through() {
    // A wall 8 units thick, x from 0 to 8; the player box overlaps it by 3 from the west.
    let wall = box_planes(DVec3::new(0.0, -256.0, -64.0), DVec3::new(8.0, 256.0, 64.0));
    let scene = Scene::new(vec![wall]);
    let model = CollisionModel::build(&scene.map);
    let mut s = TraceScratch::new();
    let (hull, oh) = player_box();
    let start = DVec3::new(-13.0, 0.0, 0.0);
    let go =
        |d: DVec3, s: &mut TraceScratch| model.trace(&hull, start, start + d, Contents::ALL, s);
    // Through the wall, however long the move: it does not start.
    for len in [1.0, 20.0, 1000.0] {
        let t = go(DVec3::new(len, 0.0, 0.0), &mut s);
        assert_eq!(t.sweep.fraction, 0.0, "{len}");
        assert!(t.start_solid && t.all_solid);
        assert_eq!(t.sweep.normal(), Some(DVec3::NEG_X));
    }
    // Diagonally through: still deeper.
    let t = go(DVec3::new(50.0, 50.0, 0.0), &mut s);
    assert_eq!((t.sweep.fraction, t.all_solid), (0.0, true));
    // Back out west: it leaves, and the trace says so.
    let t = go(DVec3::new(-40.0, 0.0, 0.0), &mut s);
    assert_eq!(t.sweep.fraction, 1.0);
    assert!(t.start_solid && !t.all_solid);
    assert!(scene.min_separation(&oh, t.sweep.end) > 0.0);
    // Along the wall: as deep all the way, so it never left.
    let t = go(DVec3::new(0.0, 100.0, 0.0), &mut s);
    assert_eq!((t.sweep.fraction, t.all_solid), (1.0, true));
    assert!((separation(&oh, t.sweep.end, &scene.brushes[0]) + 3.0).abs() < 1e-9);
}

fn player_box() -> (Hull, OHull) {
    let (mn, mx) = (
        DVec3::new(-16.0, -16.0, -24.0),
        DVec3::new(16.0, 16.0, 32.0),
    );
    (Hull::aabb(mn, mx).unwrap(), OHull::aabb(mn, mx))
}

#[test]
fn boxes_never_penetrate_random_brushes() {
    let small = (
        Hull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)).unwrap(),
        OHull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)),
    );
    let (fmin, fmax) = (DVec3::new(-8.0, -6.0, 0.0), DVec3::new(8.0, 6.0, 0.0));
    let flat = (Hull::aabb(fmin, fmax).unwrap(), OHull::aabb(fmin, fmax));
    let st = run_scenes(1, 150, 150, &[player_box(), small, flat]);
    st.assert_stops_at_the_zone();
    assert!(
        st.hits > 1000,
        "too few hits to mean anything: {} of {}",
        st.hits,
        st.traces
    );
}

/// The polygon sweep, which every hull but an upright box takes, holds for boxes too (it
/// stands beside the box sweep in the bench and `sweep_polygons`).
#[test]
fn boxes_never_penetrate_random_brushes_by_the_polygon_sweep_either() {
    let small = (
        Hull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)).unwrap(),
        OHull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)),
    );
    let st = run_scenes_by(Path::Polygons, 2, 80, 150, &[player_box(), small]);
    st.assert_stops_at_the_zone();
    assert!(st.hits > 500, "{} hits of {}", st.hits, st.traces);
}

/// Random curved patches (gentle to wild, any orientation), alone and among brushes:
/// boxes, flat boxes and points at any speed never end in nor pass through a sheet, from
/// either side, and start in one exactly when the oracle says so.
#[test]
fn hulls_never_pass_through_random_curved_patches() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut s = TraceScratch::new();
    let small = (
        Hull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)).unwrap(),
        OHull::aabb(DVec3::splat(-2.0), DVec3::new(3.0, 1.0, 4.0)),
    );
    let (fmin, fmax) = (DVec3::new(-8.0, -6.0, 0.0), DVec3::new(8.0, 6.0, 0.0));
    let flat = (Hull::aabb(fmin, fmax).unwrap(), OHull::aabb(fmin, fmax));
    let point = (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO));
    let hulls = [player_box(), small, flat, point];
    let mut st = Stats {
        traces: 0,
        hits: 0,
        tight: 0,
    };
    let mut sheet_hits = 0;
    for k in 0..40 {
        let brushes = rng.gen_range(0..4);
        let mut scene = random_scene(&mut rng, brushes.max(1), 48.0, 24.0);
        if brushes == 0 {
            scene.brushes.clear();
            scene.map.entities[0].brushes.clear();
        }
        let bend = [2.0, 16.0, 48.0][k % 3];
        let patches = (0..rng.gen_range(1..5))
            .map(|_| {
                let c = random_point(&mut rng, 32.0);
                random_patch(&mut rng, c, 96.0, bend)
            })
            .collect();
        let model = scene.with_patches(patches);
        assert!(model.stats().patches >= 1 && model.stats().patch_polygons >= 1);
        for _ in 0..150 {
            let (hull, oh) = &hulls[rng.gen_range(0..hulls.len())];
            let start = random_point(&mut rng, 80.0);
            if scene.min_separation(oh, start) < 0.0 && rng.gen_bool(0.9) {
                continue;
            }
            let len = [4.0, 32.0, 128.0, 1e4][rng.gen_range(0..4)];
            // Half the moves head for the patches, at any speed.
            let aim = if rng.gen_bool(0.5) {
                (random_point(&mut rng, 40.0) - start).normalize_or(DVec3::X)
            } else {
                unit(&mut rng)
            };
            let end = start + aim * rng.gen_range(0.0..len);
            let o = check_trace(&scene, &model, hull, oh, start, end, &mut s);
            let t = model.trace(hull, start, end, Contents::ALL, &mut s).sweep;
            if let Some(h) = t.hit {
                let sheet = match h.target {
                    expel_core::Target::Model(expel_core::Feature::HullVertex {
                        polygon, ..
                    }) => model.polygons()[polygon as usize].sheet,
                    expel_core::Target::Model(expel_core::Feature::BoxBrush { brush }) => {
                        model.polygons().iter().any(|p| p.sheet && p.brush == brush)
                    }
                    _ => false,
                };
                sheet_hits += sheet as usize;
            }
            st.add(o);
        }
    }
    st.assert_stops_at_the_zone();
    eprintln!(
        "{} hits of {} traces, {sheet_hits} on a sheet's face",
        st.hits, st.traces
    );
    assert!(st.hits > 1000, "{} hits of {}", st.hits, st.traces);
    assert!(
        sheet_hits > 500,
        "only {sheet_hits} stops on a sheet's face"
    );
}

#[test]
fn points_never_penetrate_random_brushes() {
    let p = (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO));
    let st = run_scenes(2, 100, 150, &[p]);
    st.assert_stops_at_the_zone();
    assert!(st.hits > 300, "{} hits of {}", st.hits, st.traces);
}

#[test]
fn prisms_and_convex_hulls_never_penetrate_random_brushes() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let prism = Hull::prism(6, 16.0, -24.0, 32.0).unwrap();
    let prism_o = OHull::new(prism.vertices().to_vec());
    let pts: Vec<DVec3> = (0..10).map(|_| unit(&mut rng) * 12.0).collect();
    let blob = Hull::convex(&pts).unwrap();
    let blob_o = OHull::new(pts.clone());
    let st = run_scenes(4, 60, 100, &[(prism, prism_o), (blob, blob_o)]);
    st.assert_stops_at_the_zone();
    assert!(st.hits > 300, "{} hits of {}", st.hits, st.traces);
}

/// Thin walls (0.25 units) and moves of 10^5 units: the first wall always stops the hull.
#[test]
fn long_moves_stop_at_thin_walls() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut s = TraceScratch::new();
    let hulls = [
        player_box(),
        (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO)),
    ];
    for _ in 0..40 {
        // A stack of thin slabs at random orientations and offsets.
        let mut planes = Vec::new();
        let n = unit(&mut rng);
        for k in 0..6 {
            let d = k as f64 * 500.0 + rng.gen_range(0.0..100.0);
            let mut p = vec![(n, d + 0.25), (-n, -d)];
            // Bound the slab sideways by a big box.
            for (a, b) in common::box_planes(DVec3::splat(-60000.0), DVec3::splat(60000.0)) {
                p.push((a, b));
            }
            planes.push(p);
        }
        let scene = Scene::new(planes);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..50 {
            let (hull, oh) = &hulls[rng.gen_range(0..2)];
            let side = random_point(&mut rng, 2000.0);
            let start = n * rng.gen_range(-200.0..-50.0) + side - n * n.dot(side);
            let dir = (n + unit(&mut rng) * 0.5).normalize();
            let end = start + dir * 1e5;
            let t = model.sweep(hull, start, end, Contents::ALL, &mut s);
            assert!(t.fraction < 1.0, "a 10^5 move through six walls never hit");
            check_trace(&scene, &model, hull, oh, start, end, &mut s);
        }
    }
}

/// A hull resting exactly at contact distance and moving into the face does not move.
#[test]
fn resting_contact_does_not_move_into_the_face() {
    let scene = Scene::new(vec![box_planes(
        DVec3::new(-512.0, -512.0, -64.0),
        DVec3::new(512.0, 512.0, 0.0),
    )]);
    let model = CollisionModel::build(&scene.map);
    let (hull, _) = player_box();
    let mut s = TraceScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for _ in 0..1000 {
        let xy = DVec3::new(
            rng.gen_range(-400.0..400.0),
            rng.gen_range(-400.0..400.0),
            0.0,
        );
        // Let a trace put it at contact distance, then push into the floor.
        let drop = model.sweep(
            &hull,
            xy + DVec3::Z * 100.0,
            xy - DVec3::Z * 100.0,
            Contents::ALL,
            &mut s,
        );
        assert!(drop.fraction < 1.0);
        let rest = drop.end;
        assert!((rest.z - 24.0 - EXPEL).abs() < 1e-9, "rests at {}", rest.z);
        let into = DVec3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            -rng.gen_range(0.01..1.0),
        ) * 50.0;
        let t = model.sweep(&hull, rest, rest + into, Contents::ALL, &mut s);
        assert_eq!(t.fraction, 0.0, "moved into the face it rests on");
        assert_eq!(t.end, rest);
        // Exactly resting at e (constructed, not traced) behaves the same.
        let exact = DVec3::new(xy.x, xy.y, 24.0 + EXPEL);
        let t = model.sweep(&hull, exact, exact + into, Contents::ALL, &mut s);
        assert_eq!(t.fraction, 0.0);
    }
}

/// 10,000 chained slides along floors, ramps and into corners never sink.
#[test]
fn chained_slides_never_sink() {
    // A room: floor, four walls, a ramp and a wedge corner.
    let mut planes = vec![
        box_planes(
            DVec3::new(-512.0, -512.0, -64.0),
            DVec3::new(512.0, 512.0, 0.0),
        ),
        box_planes(
            DVec3::new(-576.0, -512.0, -64.0),
            DVec3::new(-512.0, 512.0, 256.0),
        ),
        box_planes(
            DVec3::new(512.0, -512.0, -64.0),
            DVec3::new(576.0, 512.0, 256.0),
        ),
        box_planes(
            DVec3::new(-512.0, -576.0, -64.0),
            DVec3::new(512.0, -512.0, 256.0),
        ),
        box_planes(
            DVec3::new(-512.0, 512.0, -64.0),
            DVec3::new(512.0, 576.0, 256.0),
        ),
    ];
    let mut ramp = box_planes(DVec3::new(0.0, -512.0, -1.0), DVec3::new(512.0, 0.0, 200.0));
    ramp.push((DVec3::new(-0.5, 0.0, 1.0).normalize(), 0.0));
    planes.push(ramp);
    let mut wedge = box_planes(
        DVec3::new(-512.0, 200.0, -1.0),
        DVec3::new(-200.0, 512.0, 256.0),
    );
    wedge.push((
        DVec3::new(-1.0, 1.0, 0.0).normalize(),
        400.0_f64.sqrt() * 0.0 + 300.0,
    ));
    planes.push(wedge);
    let scene = Scene::new(planes);
    let model = CollisionModel::build(&scene.map);
    let (hull, oh) = player_box();
    let mut s = TraceScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut pos = DVec3::new(-100.0, 0.0, 24.0 + EXPEL);
    let mut vel = DVec3::ZERO;
    for i in 0..10_000 {
        if i % 50 == 0 {
            vel = DVec3::new(rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0), 0.0) * 20.0;
        }
        vel.z -= 1.0; // gravity pulls into the floor every step
        let mut mv = vel;
        for _ in 0..4 {
            let full = model.trace(&hull, pos, pos + mv, Contents::ALL, &mut s);
            assert!(!full.start_solid, "step {i}: started in solid at {pos:?}");
            let t = full.sweep;
            let sep = scene.min_separation(&oh, t.end);
            assert!(
                sep >= -TOL,
                "step {i}: sank {} into solid at {:?}",
                -sep,
                t.end
            );
            pos = t.end;
            let Some(n) = t.normal() else { break };
            mv = (mv - n * mv.dot(n) * 1.001) * (1.0 - t.fraction);
            vel -= n * vel.dot(n).min(0.0) * 1.001;
        }
    }
}

/// Quake-like scenes: grid-snapped boxes that touch, share faces and make T-junctions,
/// with starts and moves often exactly on the grid (hull corners over seams).
#[test]
fn grid_scenes_with_seams_never_penetrate() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let mut s = TraceScratch::new();
    let hulls = [
        player_box(),
        (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO)),
    ];
    let mut st = Stats {
        traces: 0,
        hits: 0,
        tight: 0,
    };
    for _ in 0..60 {
        let mut planes = Vec::new();
        // A floor split into slabs, walls, and steps, all on an 8-unit grid.
        for _ in 0..rng.gen_range(6..20) {
            let g = |r: &mut ChaCha8Rng, lo: i32, hi: i32| (r.gen_range(lo..hi) * 8) as f64;
            let min = DVec3::new(
                g(&mut rng, -12, 10),
                g(&mut rng, -12, 10),
                g(&mut rng, -4, 4),
            );
            let size = DVec3::new(g(&mut rng, 1, 8), g(&mut rng, 1, 8), g(&mut rng, 1, 4));
            planes.push(box_planes(min, min + size));
        }
        let scene = Scene::new(planes);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..200 {
            let (hull, oh) = &hulls[rng.gen_range(0..2)];
            let snap = rng.gen_bool(0.5);
            let mut start = random_point(&mut rng, 100.0);
            if snap {
                start = (start / 8.0).round() * 8.0;
            }
            let dir = if rng.gen_bool(0.5) {
                DVec3::AXES[rng.gen_range(0..3)] * if rng.gen_bool(0.5) { 1.0 } else { -1.0 }
            } else {
                unit(&mut rng)
            };
            let end = start + dir * rng.gen_range(1.0..200.0);
            st.add(check_trace(&scene, &model, hull, oh, start, end, &mut s));
        }
    }
    assert!(st.hits > 1000, "{} hits", st.hits);
    st.assert_stops_at_the_zone();
}

/// Slabs and bars rotated about every axis, thinner than the hull, so that the first
/// contact is often a hull edge against a model edge (the case a box's own faces miss).
#[test]
fn rotated_thin_brushes_make_edge_contacts_that_never_penetrate() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut s = TraceScratch::new();
    let hulls = [
        player_box(),
        (
            Hull::prism(5, 10.0, -8.0, 8.0).unwrap(),
            OHull::new(Hull::prism(5, 10.0, -8.0, 8.0).unwrap().vertices().to_vec()),
        ),
    ];
    let mut edge_hits = 0;
    let mut st = Stats {
        traces: 0,
        hits: 0,
        tight: 0,
    };
    for _ in 0..120 {
        let mut planes = Vec::new();
        for _ in 0..rng.gen_range(1..5) {
            // A thin bar: a box of random size, rotated by a random frame.
            let (a, b) = (unit(&mut rng), unit(&mut rng));
            let x = a;
            let y = b.cross(x).normalize();
            let z = x.cross(y);
            let half = DVec3::new(
                rng.gen_range(0.125..40.0),
                rng.gen_range(0.125..6.0),
                rng.gen_range(0.125..6.0),
            );
            let c = random_point(&mut rng, 30.0);
            let mut p = Vec::new();
            for (axis, h) in [(x, half.x), (y, half.y), (z, half.z)] {
                p.push((axis, axis.dot(c) + h));
                p.push((-axis, -axis.dot(c) + h));
            }
            planes.push(p);
        }
        let scene = Scene::new(planes);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..150 {
            let (hull, oh) = &hulls[rng.gen_range(0..2)];
            let start = random_point(&mut rng, 90.0);
            // Aim at the scene so most traces hit something.
            let target = random_point(&mut rng, 20.0);
            let end = start + (target - start) * rng.gen_range(0.5..3.0);
            st.add(check_trace(&scene, &model, hull, oh, start, end, &mut s));
            let t = model.sweep(hull, start, end, Contents::ALL, &mut s);
            let target = t.hit.map(|h| h.target);
            if matches!(
                target,
                Some(expel_core::Target::Model(
                    expel_core::Feature::EdgeEdge { .. }
                ))
            ) {
                edge_hits += 1;
            }
        }
    }
    assert!(edge_hits > 500, "only {edge_hits} edge-edge first contacts");
    st.assert_stops_at_the_zone();
}

/// Boxes with zero or tiny thickness along one axis, moving exactly parallel to their flat
/// side (the motion has no component along the thin axis): their rim must still lead.
#[test]
fn flat_and_thin_boxes_moving_along_their_flat_side_never_pass_through() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut s = TraceScratch::new();
    for thickness in [0.0, 1e-9, 1e-4, 1e-3, 0.0019, 0.01, 0.5] {
        for axis in 0..3 {
            let mut lo = DVec3::new(-8.0, -6.0, -5.0);
            let mut hi = DVec3::new(8.0, 6.0, 7.0);
            lo[axis] = 0.0;
            hi[axis] = thickness;
            let hull = Hull::aabb(lo, hi).unwrap();
            let oh = OHull::aabb(lo, hi);
            let mut hits = 0;
            for _ in 0..12 {
                let n = rng.gen_range(2..10);
                let scene = random_scene(&mut rng, n, 40.0, 24.0);
                let model = CollisionModel::build(&scene.map);
                for _ in 0..60 {
                    let start = random_point(&mut rng, 80.0);
                    let target = random_point(&mut rng, 20.0);
                    let mut d = target - start;
                    d[axis] = 0.0;
                    let end = start + d * rng.gen_range(0.5..3.0);
                    let o = check_trace(&scene, &model, &hull, &oh, start, end, &mut s);
                    hits += o.hit as usize;
                }
            }
            assert!(hits > 100, "thickness {thickness} axis {axis}: {hits} hits");
        }
    }
}

/// No snags: a box resting inside the zone above a floor (0.0005 to 0.004 units up, where
/// a previous move can leave it) and moving along it stops only where the exact path meets
/// geometry, whatever convex rims (overhangs included) the floor has.
#[test]
fn a_box_resting_in_the_zone_slides_along_a_floor_without_snagging() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let (_, oh) = player_box();
    let mut s = TraceScratch::new();
    let (mut moves, mut over_rims) = (0, 0);
    for _ in 0..150 {
        let c = DVec3::new(0.0, 0.0, -16.0);
        let half = DVec3::new(64.0, 64.0, 16.0);
        let mut planes = box_planes(c - half, c + half);
        for _ in 0..rng.gen_range(1..4) {
            let mut n = unit(&mut rng);
            n.z *= 0.8;
            let n = n.normalize();
            planes.push((n, n.dot(c) + n.abs().dot(half) * rng.gen_range(0.3..0.9)));
        }
        let scene = Scene::new(vec![planes]);
        if scene.brushes.is_empty() {
            continue;
        }
        let model = CollisionModel::build(&scene.map);
        for _ in 0..100 {
            if let Some((_, end)) = walk_from_rest(&mut rng, &model, &scene, 70.0, &mut s) {
                moves += 1;
                over_rims += (scene.min_separation(&oh, end) > 1.0) as usize;
            }
        }
    }
    assert!(
        moves > 8000 && over_rims > 1000,
        "{moves} moves, {over_rims} off a rim"
    );
}

/// No snags where brushes meet: a floor built of several brushes (neighbours of different
/// depths, partial overlaps, edges meeting at T-junctions, some a step lower) is walked from
/// rest inside the zone, and a move stops only where the exact path meets geometry. This is
/// how real maps are built; a face partly buried in its neighbour, or an edge its neighbour
/// shares only in part, used to leave a rim at floor level that caught the box.
#[test]
fn a_box_walks_across_seams_between_floor_brushes_without_snagging() {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let mut s = TraceScratch::new();
    let (mut moves, mut across) = (0, 0);
    for _ in 0..120 {
        let mut brushes = Vec::new();
        for _ in 0..rng.gen_range(2..6) {
            let lo = DVec3::new(
                rng.gen_range(-96.0..32.0f64).round(),
                rng.gen_range(-96.0..32.0f64).round(),
                -rng.gen_range(4.0..64.0f64).round(),
            );
            let size = DVec3::new(rng.gen_range(16.0..128.0), rng.gen_range(16.0..128.0), 0.0);
            // Most tops at floor level; some a step below, leaving a ledge.
            let top = if rng.gen_bool(0.8) { 0.0 } else { -8.0 };
            let hi = (lo + size).round().with_z(top);
            if lo.z < top {
                brushes.push(box_planes(lo, hi));
            }
        }
        let scene = Scene::new(brushes);
        if scene.brushes.is_empty() {
            continue;
        }
        let model = CollisionModel::build(&scene.map);
        for _ in 0..100 {
            if let Some((start, end)) = walk_from_rest(&mut rng, &model, &scene, 90.0, &mut s) {
                moves += 1;
                // Under the box's middle at the end: another brush than at the start.
                let under = |p: DVec3| {
                    scene.brushes.iter().position(|b| {
                        let point = OHull::aabb(DVec3::ZERO, DVec3::ZERO);
                        overlap_interval(&point, p - DVec3::Z * 24.5, DVec3::ZERO, b, 0.0).is_some()
                    })
                };
                across += (under(start) != under(end)) as usize;
            }
        }
    }
    assert!(
        moves > 5000 && across > 500,
        "{moves} moves, {across} from one brush onto another"
    );
}

/// No snags on convex creases: a ramp meets a floor (or a steeper ramp a gentler one) at a
/// convex edge, the scene turned to any heading. A box resting in the zone walks along the
/// plane under it, up and over the crease or down across it, and stops only where the
/// exact path meets geometry. Each brush alone has a zone around its rim at the crease;
/// the neighbour's plane is what keeps the box clear of it.
#[test]
fn a_box_walks_over_convex_creases_between_brushes_without_snagging() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let mut s = TraceScratch::new();
    let (mut moves, mut over) = (0, 0);
    for _ in 0..80 {
        let yaw = if rng.gen_bool(0.3) {
            0.0
        } else {
            rng.gen_range(0.0..std::f64::consts::TAU)
        };
        let turn = |v: DVec3| {
            let (c, sn) = (libm::cos(yaw), libm::sin(yaw));
            DVec3::new(c * v.x - sn * v.y, sn * v.x + c * v.y, v.z)
        };
        // Both brushes under z = 0 at the crease line x = 0: the far one sloping down at
        // `steep` towards -x, the near one level or sloping down towards +x more gently.
        let steep = rng.gen_range(0.05..0.7f64);
        let gentle = if rng.gen_bool(0.5) {
            0.0
        } else {
            rng.gen_range(0.0..steep * 0.8)
        };
        let slab = |x0: f64, x1: f64, top: DVec3| {
            let mut planes: Vec<(DVec3, f64)> = vec![
                (DVec3::X, x1),
                (-DVec3::X, -x0),
                (DVec3::Y, 96.0),
                (-DVec3::Y, 96.0),
                (-DVec3::Z, 256.0),
                (top.normalize(), 0.0),
            ];
            for p in &mut planes {
                p.0 = turn(p.0);
            }
            planes
        };
        let scene = Scene::new(vec![
            slab(
                -160.0,
                0.0,
                DVec3::new(-libm::sin(steep), 0.0, libm::cos(steep)),
            ),
            slab(
                0.0,
                160.0,
                DVec3::new(libm::sin(gentle), 0.0, libm::cos(gentle)),
            ),
        ]);
        if scene.brushes.len() < 2 {
            continue;
        }
        let model = CollisionModel::build(&scene.map);
        for _ in 0..100 {
            if let Some((start, end)) =
                walk_from_rest_on(&mut rng, &model, &scene, 48.0, true, &mut s)
            {
                moves += 1;
                // The crease's side, in the scene's own frame.
                let side = |p: DVec3| turn(DVec3::X).dot(p) > 0.0;
                over += (side(start) != side(end)) as usize;
            }
        }
    }
    assert!(
        moves > 3000 && over > 300,
        "{moves} moves, {over} over the crease"
    );
}

/// A box in the zone beside a wall far from the origin, slid along it the way movement
/// and validation clip a move (the part into the wall removed), is not stopped: the clipped
/// move's rate along the wall is rounding, of either sign.
#[test]
fn a_box_in_the_zone_slides_along_a_wall_far_from_the_origin() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let (hull, _) = player_box();
    let mut s = TraceScratch::new();
    let mut slides = 0;
    for _ in 0..200 {
        let far = DVec3::new(
            rng.gen_range(-4000.0..4000.0f64).round(),
            rng.gen_range(-4000.0..4000.0f64).round(),
            rng.gen_range(-1000.0..1000.0f64).round(),
        );
        let a = rng.gen_range(0.0..std::f64::consts::TAU);
        let n = DVec3::new(libm::cos(a), libm::sin(a), 0.0);
        // A wall through `far` facing along n, tall and wide.
        let t = n.cross(DVec3::Z);
        let planes = vec![
            (n, n.dot(far)),
            (-n, -n.dot(far) + 64.0),
            (t, t.dot(far) + 512.0),
            (-t, -t.dot(far) + 512.0),
            (DVec3::Z, far.z + 512.0),
            (-DVec3::Z, -far.z + 512.0),
        ];
        let scene = Scene::new(vec![planes]);
        let model = CollisionModel::build(&scene.map);
        let from = far + n * 100.0 + t * rng.gen_range(-200.0..200.0);
        let hit = model
            .trace(&hull, from, from - n * 200.0, Contents::ALL, &mut s)
            .sweep;
        let Some(wall) = hit.normal() else { continue };
        // In the zone: a little nearer than where the trace stopped.
        let start = hit.end - wall * rng.gen_range(0.0..EXPEL * 0.5);
        let want = (t * rng.gen_range(-1.0..1.0) - n) * rng.gen_range(1.0..40.0);
        let along = want - wall * want.dot(wall).min(0.0);
        let slid = model.trace(&hull, start, start + along, Contents::ALL, &mut s);
        assert!(!slid.start_solid);
        assert_eq!(
            slid.sweep.fraction, 1.0,
            "{start:?} + {along:?} stopped along the wall at {:?}",
            slid.sweep.hit
        );
        slides += 1;
    }
    assert!(slides > 150, "{slides} slides");
}

/// One walk of the player box from rest inside the zone above the floor at a random spot
/// within `reach` of the origin: 1–40 units level in a random direction. When the exact
/// path keeps at least h/2 from everything (h: the start's height in the zone), asserts
/// the trace is not stopped (any stop is a snag) and returns the move.
fn walk_from_rest(
    rng: &mut ChaCha8Rng,
    model: &CollisionModel,
    scene: &Scene,
    reach: f64,
    s: &mut TraceScratch,
) -> Option<(DVec3, DVec3)> {
    walk_from_rest_on(rng, model, scene, reach, false, s)
}

/// [`walk_from_rest`], and with `along_slope` the walk follows the plane of the floor under
/// the start (up or down a ramp) instead of the level.
fn walk_from_rest_on(
    rng: &mut ChaCha8Rng,
    model: &CollisionModel,
    scene: &Scene,
    reach: f64,
    along_slope: bool,
    s: &mut TraceScratch,
) -> Option<(DVec3, DVec3)> {
    let (hull, oh) = player_box();
    let h = rng.gen_range(0.0005..0.004);
    let xy = DVec3::new(
        rng.gen_range(-reach..reach),
        rng.gen_range(-reach..reach),
        0.0,
    );
    let top = xy + DVec3::Z * 200.0;
    let down = model.trace(&hull, top, xy - DVec3::Z * 200.0, Contents::ALL, s);
    down.sweep.hit?;
    let start = down.sweep.end - DVec3::Z * (EXPEL - h);
    if scene.min_separation(&oh, start) < h * 0.5 {
        return None;
    }
    let a = rng.gen_range(0.0..std::f64::consts::TAU);
    let mut dir = DVec3::new(libm::cos(a), libm::sin(a), 0.0);
    if along_slope {
        let n = down.sweep.normal()?;
        dir = (dir - n * dir.dot(n)).normalize();
    }
    let end = start + dir * rng.gen_range(1.0..40.0);
    let t = model.trace(&hull, start, end, Contents::ALL, s).sweep;
    let clear = scene
        .brushes
        .iter()
        .all(|b| overlap_interval(&oh, start, end - start, b, -h * 0.5).is_none());
    if !clear {
        return None;
    }
    assert_eq!(
        t.fraction, 1.0,
        "snag: {start:?} -> {end:?} stopped at {:?}",
        t.hit
    );
    Some((start, end))
}

/// No snags past a brush's far corner: a box resting at the zone's edge beyond a brush,
/// where the gap that keeps it out lies along one of the brush's planes turned the other way
/// (the brush's far side along that normal, reached at a corner), slides across that normal
/// from one side of the corner to the other and keeps its gap: it moves the whole way unless
/// the exact path enters the zone somewhere. (A box sliding along a wall, at the zone's
/// edge where the last move left it, past the corner of a brush set flush into the wall.)
#[test]
fn a_box_slides_past_a_brush_corner_along_the_gap_it_rests_in() {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let (hull, oh) = player_box();
    let mut s = TraceScratch::new();
    let (mut moves, mut close) = (0, 0);
    for _ in 0..400 {
        let c = DVec3::ZERO;
        let mut planes = random_brush(&mut rng, c, 64.0);
        // At least one slanted plane, so a far side that is no side of the bounds.
        let n = unit(&mut rng);
        planes.push((n, n.dot(c) + rng.gen_range(4.0..32.0)));
        let scene = Scene::new(vec![planes.clone()]);
        let Some(b) = scene.brushes.first() else {
            continue;
        };
        let model = CollisionModel::build(&scene.map);
        for _ in 0..40 {
            let (n, _) = planes[rng.gen_range(0..planes.len())];
            // The brush's far side along n: a corner of least extent there.
            let v = b
                .pts
                .iter()
                .copied()
                .min_by(|p, q| n.dot(*p).total_cmp(&n.dot(*q)))
                .unwrap();
            // The box's corner furthest along n, at the zone's edge (or a little beyond)
            // short of that corner, off to one side of it.
            let corner = DVec3::new(
                if n.x > 0.0 { 16.0 } else { -16.0 },
                if n.y > 0.0 { 16.0 } else { -16.0 },
                if n.z > 0.0 { 32.0 } else { -24.0 },
            );
            let g0 = EXPEL + rng.gen_range(0.0..0.004);
            let dir = unit(&mut rng);
            let dir = dir - n * dir.dot(n);
            if dir.length() < 0.1 {
                continue;
            }
            let dir = dir.normalize();
            let side = unit(&mut rng);
            let side = (side - n * side.dot(n)) * rng.gen_range(0.0..2.0);
            let back = rng.gen_range(0.0..24.0);
            let start = v - n * g0 - corner + side - dir * back;
            let d = dir * (back + rng.gen_range(0.5..24.0));
            // Outside the zone, and the exact path never enters it.
            if separation(&oh, start, b) < EXPEL
                || overlap_interval(&oh, start, d, b, -(EXPEL - 1e-9)).is_some()
            {
                continue;
            }
            moves += 1;
            let nearest = (0..=32)
                .map(|k| separation(&oh, start + d * (k as f64 / 32.0), b))
                .fold(f64::INFINITY, f64::min);
            close += (nearest < 2.0 * EXPEL) as usize;
            let t = model.trace(&hull, start, start + d, Contents::ALL, &mut s);
            assert!(!t.start_solid);
            assert_eq!(
                t.sweep.fraction,
                1.0,
                "snag: {start:?} -> {:?} (gap {g0}) stopped by {:?}",
                start + d,
                t.sweep.hit
            );
        }
    }
    assert!(
        moves > 2000 && close > 500,
        "{moves} moves, {close} passing close"
    );
}

/// A box (or a point) anywhere in the zone of a slanted face slides along it: placed
/// between the face and the zone's edge (not only at the edge: a position the last move
/// left rounded lands anywhere in it), moved parallel to the face or up to 1e-3 rad
/// towards or away from it, short and long, between endpoints rounded to `f32` (as a
/// client's or a map tool's positions are). The exact reference (the oracle's separation
/// along the path) says whether the move ever goes deeper than rounding into the zone it
/// is in; one that does not must go the whole way. Before the steady allowance, a move
/// along a slanted face closed its gap by a rounding's worth and was stopped at once (the
/// field's 2.9% of early stops on one map).
#[test]
fn a_hull_in_a_slanted_faces_zone_slides_along_it_between_rounded_endpoints() {
    const SLACK: f64 = 2e-5;
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let hulls = [
        player_box(),
        (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO)),
    ];
    let mut s = TraceScratch::new();
    let (mut moves, mut deep, mut parallel) = (0, 0, 0);
    let f32_round = |v: DVec3| v.as_vec3().as_dvec3();
    for _ in 0..400 {
        let c = random_point(&mut rng, 512.0);
        let half = DVec3::new(
            rng.gen_range(48.0..160.0),
            rng.gen_range(48.0..160.0),
            rng.gen_range(48.0..160.0),
        );
        let mut planes = box_planes(c - half, c + half);
        // A slanted face at any orientation, cutting a corner off the box.
        let n = unit(&mut rng);
        let d = n.dot(c) + n.abs().dot(half) * rng.gen_range(0.3..0.6);
        planes.push((n, d));
        let scene = Scene::new(vec![planes.clone()]);
        let Some(brush) = scene.brushes.first() else {
            continue;
        };
        let model = CollisionModel::build(&scene.map);
        for _ in 0..30 {
            let (hull, oh) = &hulls[rng.gen_range(0..2)];
            // A point of the face (the slanted plane within the others), the hull its gap
            // beyond it.
            let mut t = unit(&mut rng);
            t = (t - n * t.dot(n)).normalize_or_zero();
            let on = c + n * (d - n.dot(c)) + t * rng.gen_range(0.0..96.0);
            if t == DVec3::ZERO || planes.iter().any(|(m, e)| m.dot(on) > *e + 1e-9) {
                continue;
            }
            let gap = if rng.gen_bool(0.2) {
                EXPEL - 1e-4
            } else {
                rng.gen_range(0.002..EXPEL - 1e-4)
            };
            // The hull's lowest point along the normal.
            let lo = oh
                .pts
                .iter()
                .map(|p| n.dot(*p))
                .fold(f64::INFINITY, f64::min);
            let start = f32_round(on + n * (gap - lo));
            let sep = separation(oh, start, brush);
            // In this face's zone (its plane the separating axis), clear of the brush.
            let off_plane = n.dot(start) + lo - d;
            if !(1e-3..EXPEL).contains(&sep) || (sep - off_plane).abs() > 1e-9 {
                continue;
            }
            let mut along = unit(&mut rng);
            along = (along - n * along.dot(n)).normalize_or_zero();
            let tilt = match rng.gen_range(0..3) {
                0 => 0.0,
                1 => rng.gen_range(-1e-3..1e-3),
                _ => rng.gen_range(-1e-5..1e-5),
            };
            let dir = along * libm::cos(tilt) + n * libm::sin(tilt);
            let len = if rng.gen_bool(0.5) {
                rng.gen_range(0.25..4.0)
            } else {
                rng.gen_range(8.0..64.0)
            };
            let end = f32_round(start + dir * len);
            // Over the face at the end too (its plane still the separating axis: a move
            // off the face's edge is another case).
            let end_off_plane = n.dot(end) + lo - d;
            if (separation(oh, end, brush) - end_off_plane).abs() > 1e-9 {
                continue;
            }
            // Never deeper than rounding into its zone along the exact path.
            let keeps_clear =
                overlap_interval(oh, start, end - start, brush, -(sep - SLACK)).is_none();
            if !keeps_clear {
                continue;
            }
            let tr = model.trace(hull, start, end, Contents::ALL, &mut s).sweep;
            assert_eq!(
                tr.fraction, 1.0,
                "stopped in the zone of {n:?}: {start:?} -> {end:?}, {sep} off, tilt {tilt}: {:?}",
                tr.hit
            );
            moves += 1;
            deep += (sep < EXPEL / 2.0) as usize;
            parallel += (tilt == 0.0) as usize;
        }
    }
    assert!(
        moves > 3000 && deep > 1000 && parallel > 1000,
        "{moves} moves, {deep} deep in the zone, {parallel} parallel"
    );
}
