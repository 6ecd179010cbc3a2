//! Trace benchmark: Expel against parry3d's `cast_shapes` (a cuboid against a `TriMesh` of
//! the same polygons), on the same seeded player-hull moves.
//!
//! Prints, per map and move class (random moves, and player-like kinds: walks along
//! floors, walk-downs, short falls, and the three interleaved), the median ns per trace
//! (medians of 256-trace batch averages), the ratio, and how often each engine's result
//! penetrates by the independent separating-axis oracle of the test suite.
//!
//! `cargo run --release -p expel-bench [random] [player] [rotate]` (all three sets when
//! none is named; real maps are read from `../shared/maps` when present).
//!
//! For profiling the player set: `EXPEL_BENCH_MAP` (part of a map's path) and
//! `EXPEL_BENCH_KIND` (`walk`, `walk-down`, `fall` or `all`) pick the rows, and
//! `EXPEL_BENCH_PROFILE_SECS` runs only Expel's traces of each row, at least once and for
//! that long, and prints only their mean time (for `perf record` or `valgrind
//! --tool=callgrind`, or a quick comparison of two builds).

#[path = "../../core/tests/common/mod.rs"]
mod oracle;

use anyhow::Result;
use expel_core::collision::rotate::Rotation;
use expel_core::{CollisionModel, Contents, Hull, MapData, TraceScratch};
use glam::DVec3;
use oracle::{overlap_interval, separation, OBrush, OHull};
use parry3d::math::{Pose, Vector};
use parry3d::query::{cast_shapes, cast_shapes_nonlinear, NonlinearRigidMotion, ShapeCastOptions};
use parry3d::shape::{Cuboid, TriMesh};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MINS: DVec3 = DVec3::new(-16.0, -16.0, -24.0);
const MAXS: DVec3 = DVec3::new(16.0, 16.0, 32.0);
/// Overlap deeper than this (units) counts as a penetration (well above f32 rounding).
const PENETRATION: f64 = 1e-3;

struct Move {
    start: DVec3,
    end: DVec3,
}

struct Scene {
    name: String,
    model: CollisionModel,
    trimesh: TriMesh,
    brushes: Vec<(OBrush, DVec3, DVec3)>,
}

fn load(path: &Path) -> Result<Scene> {
    let map = MapData::parse_any(&std::fs::read(path)?)?;
    let model = CollisionModel::build(&map);
    let mut verts = Vec::new();
    let mut tris = Vec::new();
    for i in 0..model.polygons().len() {
        let pts: Vec<DVec3> = model.polygon_points(i).collect();
        let base = verts.len() as u32;
        verts.extend(
            pts.iter()
                .map(|p| Vector::new(p.x as f32, p.y as f32, p.z as f32)),
        );
        for k in 1..pts.len() as u32 - 1 {
            tris.push([base, base + k, base + k + 1]);
        }
    }
    let trimesh = TriMesh::new(verts, tris)?;
    let brushes = oracle::map_brushes(&map);
    Ok(Scene {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        model,
        trimesh,
        brushes,
    })
}

/// How many of `ends` lie more than [`PENETRATION`] inside a brush, by the oracle.
fn penetrating(sc: &Scene, oh: &OHull, ends: &[DVec3]) -> usize {
    ends.iter()
        .filter(|e| -min_separation(sc, oh, **e) > PENETRATION)
        .count()
}

/// parry3d's cast of the cuboid along a move against the map's triangles: where it ends.
fn parry_cast(sc: &Scene, cuboid: &Cuboid, centre: DVec3, m: &Move) -> DVec3 {
    let c = m.start + centre;
    let pos = Pose::from_translation(Vector::new(c.x as f32, c.y as f32, c.z as f32));
    let d = m.end - m.start;
    let vel = Vector::new(d.x as f32, d.y as f32, d.z as f32);
    let hit = cast_shapes(
        &pos,
        vel,
        cuboid,
        &Pose::IDENTITY,
        Vector::ZERO,
        &sc.trimesh,
        ShapeCastOptions::with_max_time_of_impact(1.0),
    )
    .ok()
    .flatten();
    let toi = hit.map_or(1.0, |h| h.time_of_impact as f64);
    m.start + d * toi
}

/// A random point of the map's bounds where the hull is free, if the draw found one.
fn free_point(
    sc: &Scene,
    hull: &Hull,
    rng: &mut ChaCha8Rng,
    s: &mut TraceScratch,
) -> Option<DVec3> {
    let b = sc.model.bounds();
    let p = DVec3::new(
        rng.gen_range(b.min.x..b.max.x),
        rng.gen_range(b.min.y..b.max.y),
        rng.gen_range(b.min.z..b.max.z),
    );
    (!sc.model.position_solid(hull, p, Contents::ALL, s)).then_some(p)
}

/// Seeded moves from free positions: half of them resting on the floor below.
fn moves(sc: &Scene, hull: &Hull, n: usize, max_len: f64, seed: u64) -> Vec<Move> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = TraceScratch::new();
    let mut out = Vec::new();
    while out.len() < n {
        let Some(p) = free_point(sc, hull, &mut rng, &mut s) else {
            continue;
        };
        let mut start = p;
        if rng.gen_bool(0.5) {
            let t = sc
                .model
                .sweep(hull, p, p - DVec3::Z * 512.0, Contents::ALL, &mut s);
            if t.hit.is_none() {
                continue;
            }
            start = t.end;
        }
        let mut d = DVec3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
        );
        if rng.gen_bool(0.5) {
            d.z = -d.z.abs() * 0.3; // walking moves: mostly level, pressing down
        }
        let d = d.normalize_or_zero() * rng.gen_range(1.0..max_len);
        out.push(Move {
            start,
            end: start + d,
        });
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Times `f` over all moves in batches; returns median ns per trace and the end points.
fn time_engine(mv: &[Move], mut f: impl FnMut(&Move) -> DVec3) -> (f64, Vec<DVec3>) {
    let ends: Vec<DVec3> = mv.iter().map(&mut f).collect();
    let mut batches = Vec::new();
    for _ in 0..5 {
        for chunk in mv.chunks(256) {
            let t0 = Instant::now();
            for m in chunk {
                std::hint::black_box(f(m));
            }
            batches.push(t0.elapsed().as_nanos() as f64 / chunk.len() as f64);
        }
    }
    (median(batches), ends)
}

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths = vec![root.join("maps/arena.map"), root.join("maps/terrain.map")];
    let real = root.join("../shared/maps");
    for m in ["lq_e0m3.map", "oa_fan.bsp", "oa_q3dm6ish.bsp"] {
        if real.join(m).exists() {
            paths.push(real.join(m));
        } else {
            println!("({} absent: skipped)", real.join(m).display());
        }
    }
    let hull = Hull::aabb(MINS, MAXS)?;
    let oh = OHull::aabb(MINS, MAXS);
    let half = (MAXS - MINS) * 0.5;
    let centre = (MAXS + MINS) * 0.5;
    let cuboid = Cuboid::new(Vector::new(half.x as f32, half.y as f32, half.z as f32));
    let sets: Vec<String> = std::env::args().skip(1).collect();
    if let Some(bad) = sets
        .iter()
        .find(|a| !["random", "player", "rotate"].contains(&a.as_str()))
    {
        anyhow::bail!("unknown set {bad:?}: name random, player or rotate (or none for all)");
    }
    let wants = |set: &str| sets.is_empty() || sets.iter().any(|a| a == set);
    if wants("random") {
        random_moves(&paths, &hull, &oh, &cuboid, centre)?;
    }
    if wants("player") {
        player_like(&paths)?;
    }
    if wants("rotate") {
        rotations(&paths, &hull, &cuboid, centre)?;
    }
    Ok(())
}

/// The random set: moves of up to 64 and up to 1,024 units from free points anywhere.
fn random_moves(
    paths: &[PathBuf],
    hull: &Hull,
    oh: &OHull,
    cuboid: &Cuboid,
    centre: DVec3,
) -> Result<()> {
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>11} {:>9} {:>7} {:>10} {:>10}",
        "map",
        "moves",
        "len",
        "sweep ns",
        "+solid ns",
        "parry ns",
        "ratio",
        "expel pen",
        "parry pen"
    );
    for p in paths {
        let sc = load(p)?;
        for (label, max_len) in [("<=64", 64.0), ("<=1024", 1024.0)] {
            let mv = moves(&sc, hull, 10_000, max_len, 42);
            let mut s = TraceScratch::new();
            let (expel_ns, expel_ends) = time_engine(&mv, |m| {
                sc.model
                    .trace(hull, m.start, m.end, Contents::ALL, &mut s)
                    .sweep
                    .end
            });
            let (sweep_ns, _) = time_engine(&mv, |m| {
                sc.model
                    .sweep(hull, m.start, m.end, Contents::ALL, &mut s)
                    .end
            });
            let (parry_ns, parry_ends) = time_engine(&mv, |m| parry_cast(&sc, cuboid, centre, m));
            println!(
                "{:<18} {:>6} {:>7} {:>9.0} {:>11.0} {:>9.0} {:>6.1}x {:>10} {:>10}",
                sc.name,
                mv.len(),
                label,
                sweep_ns,
                expel_ns,
                parry_ns,
                parry_ns / sweep_ns,
                penetrating(&sc, oh, &expel_ends),
                penetrating(&sc, oh, &parry_ends)
            );
        }
    }
    println!("sweep = Expel's continuous trace; +solid = with the start-solid test (what `expel map trace` runs); ratio = parry / sweep");
    println!("pen = moves ending more than {PENETRATION} units inside solid by the oracle");
    Ok(())
}

/// The same seeded rotations (up to 90° about random axes through points near the box)
/// with Expel's rotation trace and parry3d's `cast_shapes_nonlinear`.
fn rotations(paths: &[PathBuf], hull: &Hull, cuboid: &Cuboid, centre: DVec3) -> Result<()> {
    println!();
    println!(
        "{:<18} {:>6} {:>10} {:>10} {:>7} {:>12} {:>12}",
        "map", "turns", "expel ns", "parry ns", "ratio", "expel pen", "parry pen"
    );
    let corners: Vec<DVec3> = hull.vertices().to_vec();
    for p in paths {
        let sc = load(p)?;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut s = TraceScratch::new();
        let starts = moves(&sc, hull, 2000, 2.0, 43);
        let rots: Vec<(DVec3, Rotation)> = starts
            .iter()
            .map(|m| {
                let axis = DVec3::new(
                    rng.gen_range(-1.0..1.0),
                    rng.gen_range(-1.0..1.0),
                    rng.gen_range(-1.0..1.0),
                )
                .normalize_or(DVec3::Z);
                let origin = m.start
                    + DVec3::new(
                        rng.gen_range(-24.0..24.0),
                        rng.gen_range(-24.0..24.0),
                        rng.gen_range(-24.0..24.0),
                    );
                (
                    m.start,
                    Rotation {
                        origin,
                        axis,
                        angle: rng.gen_range(-1.5..1.5),
                    },
                )
            })
            .collect();
        let time = |f: &mut dyn FnMut(&(DVec3, Rotation)) -> f64| {
            let fr: Vec<f64> = rots.iter().map(&mut *f).collect();
            let mut batches = Vec::new();
            for _ in 0..3 {
                for chunk in rots.chunks(64) {
                    let t0 = Instant::now();
                    for r in chunk {
                        std::hint::black_box(f(r));
                    }
                    batches.push(t0.elapsed().as_nanos() as f64 / chunk.len() as f64);
                }
            }
            (median(batches), fr)
        };
        let (expel_ns, expel_f) = time(&mut |(pos, rot)| {
            sc.model
                .rotate(hull, *pos, rot, Contents::ALL, &mut s)
                .fraction
        });
        let (parry_ns, parry_f) = time(&mut |(pos, rot)| {
            let c = *pos + centre;
            let start = Pose::from_translation(Vector::new(c.x as f32, c.y as f32, c.z as f32));
            let lc = rot.origin - c;
            let w = rot.axis * rot.angle;
            let m1 = NonlinearRigidMotion::new(
                start,
                Vector::new(lc.x as f32, lc.y as f32, lc.z as f32),
                Vector::ZERO,
                Vector::new(w.x as f32, w.y as f32, w.z as f32),
            );
            let m2 =
                NonlinearRigidMotion::new(Pose::IDENTITY, Vector::ZERO, Vector::ZERO, Vector::ZERO);
            cast_shapes_nonlinear(&m1, cuboid, &m2, &sc.trimesh, 0.0, 1.0, true)
                .ok()
                .flatten()
                .map_or(1.0, |h| h.time_of_impact as f64)
        });
        let pen = |fr: &[f64]| {
            rots.iter()
                .zip(fr)
                .filter(|((pos, rot), f)| {
                    let q = glam::DQuat::from_axis_angle(rot.axis, rot.angle * **f);
                    let pts: Vec<DVec3> = corners
                        .iter()
                        .map(|v| rot.origin + q * (*pos + *v - rot.origin))
                        .collect();
                    let oh = OHull::new(pts.clone());
                    let (lo, hi) = pts
                        .iter()
                        .fold((DVec3::INFINITY, DVec3::NEG_INFINITY), |(l, h), p| {
                            (l.min(*p), h.max(*p))
                        });
                    sc.brushes
                        .iter()
                        .filter(|(_, blo, bhi)| lo.cmple(*bhi).all() && hi.cmpge(*blo).all())
                        .any(|(b, _, _)| separation(&oh, DVec3::ZERO, b) < -PENETRATION)
                })
                .count()
        };
        println!(
            "{:<18} {:>6} {:>10.0} {:>10.0} {:>6.1}x {:>12} {:>12}",
            sc.name,
            rots.len(),
            expel_ns,
            parry_ns,
            parry_ns / expel_ns,
            pen(&expel_f),
            pen(&parry_f)
        );
    }
    Ok(())
}

/// Kinds of player-like moves.
const KINDS: [&str; 3] = ["walk", "walk-down", "fall"];

/// Smallest oracle separation between the hull at `pos` and the brushes near it (negative:
/// the depth of the deepest overlap).
fn min_separation(sc: &Scene, oh: &OHull, pos: DVec3) -> f64 {
    let (lo, hi) = (
        pos + MINS - DVec3::splat(2.0),
        pos + MAXS + DVec3::splat(2.0),
    );
    sc.brushes
        .iter()
        .filter(|(_, blo, bhi)| lo.cmple(*bhi).all() && hi.cmpge(*blo).all())
        .map(|(b, _, _)| separation(oh, pos, b))
        .fold(f64::INFINITY, f64::min)
}

/// Seeded player-like moves of `kind` from free starts near floors: walks of 1–40 units
/// along the floor from rest (0.0005–0.004 units up, inside the zone, where a previous
/// move leaves a player), walk-downs (the same with a drop of up to 18 units), and short
/// falls (1–64 units down with a little drift, from up to 64 units above a floor).
fn player_moves(sc: &Scene, hull: &Hull, oh: &OHull, kind: usize, n: usize) -> Vec<Move> {
    let mut rng = ChaCha8Rng::seed_from_u64(77 + kind as u64);
    let mut s = TraceScratch::new();
    let mut out = Vec::new();
    while out.len() < n {
        let Some(p) = free_point(sc, hull, &mut rng, &mut s) else {
            continue;
        };
        let down = sc
            .model
            .sweep(hull, p, p - DVec3::Z * 512.0, Contents::ALL, &mut s);
        // Floors only (walkable normals), as a player stands on.
        if !down.hit.is_some_and(|h| h.normal.z >= 0.7) {
            continue;
        }
        let a = rng.gen_range(0.0..std::f64::consts::TAU);
        let flat = DVec3::new(libm::cos(a), libm::sin(a), 0.0);
        let (start, d) = match kind {
            0 | 1 => {
                let start =
                    down.end - DVec3::Z * (expel_core::EXPEL - rng.gen_range(0.0005..0.004));
                let drop = if kind == 1 {
                    rng.gen_range(0.0..18.0)
                } else {
                    0.0
                };
                (start, flat * rng.gen_range(1.0..40.0) - DVec3::Z * drop)
            }
            _ => {
                let up = rng.gen_range(0.0..64.0f64).min((p - down.end).z);
                let start = down.end + DVec3::Z * up;
                (
                    start,
                    flat * rng.gen_range(0.0..8.0) - DVec3::Z * rng.gen_range(1.0..64.0),
                )
            }
        };
        if min_separation(sc, oh, start) <= 0.0 {
            continue;
        }
        out.push(Move {
            start,
            end: start + d,
        });
    }
    out
}

/// Whether a move that stopped at `end` stopped early: going on to its target, the hull
/// would never come nearer to any brush than the expel zone (or than it already is, when
/// inside the zone), so nothing the exact path meets explains the stop.
fn early_stop(sc: &Scene, oh: &OHull, m: &Move, end: DVec3) -> bool {
    if end == m.end {
        return false;
    }
    sc.brushes.iter().all(|(b, _, _)| {
        let keep = separation(oh, end, b).min(expel_core::EXPEL) - 1e-4;
        overlap_interval(oh, end, m.end - end, b, -keep).is_none()
    })
}

/// The player-like set: per kind and for the kinds interleaved (`all`, the issue's
/// "player-like" row), medians for Expel and parry3d from one run, the oracle's
/// penetrations, and Expel's early stops (see [`early_stop`]).
fn player_like(paths: &[PathBuf]) -> Result<()> {
    // Quake 3's player box.
    let (mins, maxs) = (
        DVec3::new(-15.0, -15.0, -24.0),
        DVec3::new(15.0, 15.0, 32.0),
    );
    let hull = &Hull::aabb(mins, maxs)?;
    let oh = &OHull::aabb(mins, maxs);
    let half = (maxs - mins) * 0.5;
    let centre = (maxs + mins) * 0.5;
    let cuboid = &Cuboid::new(Vector::new(half.x as f32, half.y as f32, half.z as f32));
    println!();
    println!(
        "{:<18} {:<10} {:>6} {:>9} {:>11} {:>9} {:>7} {:>10} {:>10} {:>6}",
        "map",
        "player",
        "moves",
        "sweep ns",
        "+solid ns",
        "parry ns",
        "ratio",
        "expel pen",
        "parry pen",
        "early"
    );
    for p in paths {
        if std::env::var("EXPEL_BENCH_MAP").is_ok_and(|m| !p.to_string_lossy().contains(&m)) {
            continue;
        }
        let sc = load(p)?;
        let mut sets: Vec<(&str, Vec<Move>)> = KINDS
            .iter()
            .enumerate()
            .map(|(kind, label)| (*label, player_moves(&sc, hull, oh, kind, 10_000)))
            .collect();
        // The whole set, its kinds interleaved (what a server's tick mixes).
        let all = (0..10_000)
            .map(|i| {
                let m = &sets[i % KINDS.len()].1[i / KINDS.len()];
                Move {
                    start: m.start,
                    end: m.end,
                }
            })
            .collect();
        sets.push(("all", all));
        for (label, mv) in &sets {
            if std::env::var("EXPEL_BENCH_KIND").is_ok_and(|k| *label != k) {
                continue;
            }
            let mut s = TraceScratch::new();
            if let Ok(secs) = std::env::var("EXPEL_BENCH_PROFILE_SECS") {
                let secs: f64 = secs.parse()?;
                let t0 = Instant::now();
                let mut n = 0usize;
                loop {
                    for m in mv {
                        std::hint::black_box(sc.model.trace(
                            hull,
                            m.start,
                            m.end,
                            Contents::ALL,
                            &mut s,
                        ));
                    }
                    n += mv.len();
                    if t0.elapsed().as_secs_f64() >= secs {
                        break;
                    }
                }
                let ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
                println!("{} {label}: {n} traces, {ns:.1} ns per trace", sc.name);
                continue;
            }
            let (trace_ns, ends) = time_engine(mv, |m| {
                sc.model
                    .trace(hull, m.start, m.end, Contents::ALL, &mut s)
                    .sweep
                    .end
            });
            let (sweep_ns, _) = time_engine(mv, |m| {
                sc.model
                    .sweep(hull, m.start, m.end, Contents::ALL, &mut s)
                    .end
            });
            let (parry_ns, parry_ends) = time_engine(mv, |m| parry_cast(&sc, cuboid, centre, m));
            let early = mv
                .iter()
                .zip(&ends)
                .filter(|(m, e)| early_stop(&sc, oh, m, **e))
                .count();
            println!(
                "{:<18} {:<10} {:>6} {:>9.0} {:>11.0} {:>9.0} {:>6.1}x {:>10} {:>10} {:>6}",
                sc.name,
                label,
                mv.len(),
                sweep_ns,
                trace_ns,
                parry_ns,
                parry_ns / trace_ns,
                penetrating(&sc, oh, &ends),
                penetrating(&sc, oh, &parry_ends),
                early
            );
        }
    }
    println!("player: box ±15 × −24..32; ratio = parry / (+solid); early = stops the exact path does not explain (moves ending short of their target with nothing within the zone ahead)");
    Ok(())
}
