//! Real maps from `../shared/maps` (skipped when that folder is absent): every file loads,
//! solid brush counts agree between a map and its compiled `.bsp`, spawn points are free,
//! and random traces from the spawn points never end in solid nor pass a patch by the oracle.

mod common;

use common::*;
use expel_core::map::MapData;
use expel_core::{Aabb, CollisionModel, Contents, Hull, TraceScratch, EXPEL};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;

fn maps_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/maps");
    d.is_dir().then_some(d)
}

fn load(path: &std::path::Path) -> MapData {
    MapData::parse_any(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn map_files() -> Vec<PathBuf> {
    let Some(d) = maps_dir() else {
        eprintln!("../shared/maps is absent: skipping real-map tests");
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("map" | "bsp")))
        .collect();
    v.sort();
    v
}

fn min_sep(brushes: &[(OBrush, DVec3, DVec3)], oh: &OHull, pos: DVec3, reach: f64) -> f64 {
    brushes
        .iter()
        .filter(|(_, lo, hi)| {
            (pos - DVec3::splat(reach)).cmple(*hi).all()
                && (pos + DVec3::splat(reach)).cmpge(*lo).all()
        })
        .map(|(b, _, _)| separation(oh, pos, b))
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn every_map_loads_and_builds() {
    for p in map_files() {
        let map = load(&p);
        let model = CollisionModel::build(&map);
        let st = model.stats();
        assert!(
            st.solid_brushes > 0 && st.polygons > 0,
            "{}: empty model",
            p.display()
        );
        assert_eq!(st.degenerate_brushes, 0, "{}", p.display());
        // Each patch counted once: collided, or skipped.
        assert_eq!(st.patches + st.patches_skipped, map.patch_count());
        if p.file_name().unwrap() == "oa_am_underworks.map" {
            assert_eq!((st.patches, st.patches_skipped), (56, 0));
            assert!(st.patch_polygons >= 56, "{st:?}");
            assert!(st.patch_deviation <= expel_core::collision::patch::PATCH_TOLERANCE);
        }
    }
}

#[test]
fn bsp_brushes_match_their_map_sources() {
    for p in map_files() {
        if p.extension().unwrap() != "bsp" {
            continue;
        }
        let src = p.with_extension("map");
        if !src.exists() {
            continue;
        }
        let (b, m) = (load(&p), load(&src));
        let world = |d: &MapData| -> usize {
            d.entities
                .iter()
                .filter(|e| {
                    e.classname() == "worldspawn" || e.classname().starts_with("func_group")
                })
                .map(|e| e.brushes.len())
                .sum()
        };
        // The compiler folds func_group into the world: brush for brush.
        assert_eq!(world(&b), world(&m), "{}: world brush count", p.display());
        // Solid brushes by the one rule agree, except where the compiler re-shaded a side
        // with a liquid (the rule then rightly calls the compiled brush non-solid).
        let liquid_sides = b
            .world_solid_brushes()
            .count()
            .abs_diff(m.world_solid_brushes().count());
        let relabelled = b
            .entities
            .iter()
            .flat_map(|e| e.brushes.iter())
            .filter(|br| {
                br.faces
                    .iter()
                    .any(|f| expel_core::map::solidity::is_liquid_texture(&f.texture))
                    && br.faces.iter().any(|f| f.texture.contains("skies"))
            })
            .count();
        assert!(
            liquid_sides <= relabelled,
            "{}: solid brushes {} (bsp) vs {} (map)",
            p.display(),
            b.world_solid_brushes().count(),
            m.world_solid_brushes().count()
        );
    }
}

#[test]
fn spawn_points_are_free_and_traces_from_them_never_end_in_solid() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (mn, mx) = (
        DVec3::new(-15.0, -15.0, -24.0),
        DVec3::new(15.0, 15.0, 32.0),
    );
    let boxes = (Hull::aabb(mn, mx).unwrap(), OHull::aabb(mn, mx));
    let points = (Hull::point(), OHull::aabb(DVec3::ZERO, DVec3::ZERO));
    let mut s = TraceScratch::new();
    for p in map_files() {
        let map = load(&p);
        let model = CollisionModel::build(&map);
        // Solids and patch sheets alike (the sheets exact per polygon of the model).
        let mut brushes = map_brushes(&map);
        brushes.extend(model_sheets(&model));
        let spawns = map.spawn_points();
        assert!(!spawns.is_empty(), "{}: no spawn points", p.display());
        let mut box_walks = 0;
        for sp in &spawns {
            let sep = min_sep(&brushes, &points.1, *sp, 1.0);
            assert!(sep > 0.0, "{}: spawn {sp:?} is in solid", p.display());
            assert!(!model.position_solid(&points.0, *sp, Contents::ALL, &mut s));
            // The player box stands at the spawn (Quake) or 9 units above it (Quake 3)
            // where the map's author left room for it.
            let box_start = [*sp, *sp + DVec3::Z * 9.0]
                .into_iter()
                .find(|q| min_sep(&brushes, &boxes.1, *q, 64.0) > -1e-6);
            let mut walks = vec![(&points, *sp)];
            if let Some(b) = box_start {
                assert!(!model.position_solid(&boxes.0, b, Contents::ALL, &mut s));
                walks.push((&boxes, b));
                box_walks += 1;
            }
            for ((hull, oh), start) in walks {
                let mut pos = start;
                for _ in 0..300 {
                    let len = [8.0, 64.0, 512.0, 4096.0][rng.gen_range(0..4)];
                    let end = pos + unit(&mut rng) * rng.gen_range(0.0..len);
                    let full = model.trace(hull, pos, end, Contents::ALL, &mut s);
                    assert!(!full.start_solid, "{}: {pos:?} became solid", p.display());
                    let t = full.sweep;
                    let sep = min_sep(&brushes, oh, t.end, 64.0);
                    assert!(
                        sep >= -1e-6,
                        "{}: trace {pos:?} -> {end:?} ended {} inside solid",
                        p.display(),
                        -sep
                    );
                    // Nothing crossed on the way, not even a sheet thinner than any box.
                    let (lo, hi) = (pos.min(t.end), pos.max(t.end));
                    for (b, blo, bhi) in &brushes {
                        let reach = DVec3::splat(64.0);
                        if (lo - reach).cmple(*bhi).all() && (hi + reach).cmpge(*blo).all() {
                            assert!(
                                overlap_interval(oh, pos, t.end - pos, b, 1e-6).is_none(),
                                "{}: trace {pos:?} -> {end:?} passes through solid or a patch",
                                p.display()
                            );
                        }
                    }
                    pos = t.end;
                }
            }
        }
        assert!(
            box_walks * 2 >= spawns.len(),
            "{}: most spawns fit no player box",
            p.display()
        );
    }
}

/// The maps the walkers run on: the repository's own and the real ones when present.
fn walker_maps() -> Vec<PathBuf> {
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../maps");
    let mut v: Vec<PathBuf> = ["arena.map", "terrain.map", "curves.map", "stress.map"]
        .iter()
        .map(|n| own.join(n))
        .collect();
    v.extend(map_files());
    v
}

/// What a chain of resting walkers found on one map.
#[derive(Debug, Default)]
struct WalkFigures {
    moves: usize,
    early: usize,
    early_at_zero: usize,
    resting_starts: usize,
    respawns: usize,
}

/// Drift into a zone the box is in that counts as rounding, not as going deeper: a move
/// along a slanted face between endpoints rounded to `f32` closes its gap by up to about
/// 1e-5 over the move (the trace allows a little more: `STEADY_EPS` in `clip.rs`).
const STEADY: f64 = 2e-5;

/// The first fraction of the move `pos -> pos + d` at which the box would go deeper than
/// it starts, or into the zone of a brush it starts outside: by the oracle, per brush, the
/// first time its separation falls below the lesser of its starting value and the zone.
/// A box in a brush's zone whose separation never falls more than [`STEADY`] below where
/// it started is not going deeper into it.
fn first_deeper(
    brushes: &[(OBrush, DVec3, DVec3)],
    oh: &OHull,
    pos: DVec3,
    d: DVec3,
) -> (f64, bool) {
    let reach = DVec3::splat(64.0);
    let (lo, hi) = (pos.min(pos + d) - reach, pos.max(pos + d) + reach);
    let mut first = 1.0f64;
    let mut resting = false;
    for (b, blo, bhi) in brushes {
        if !(lo.cmple(*bhi).all() && hi.cmpge(*blo).all()) {
            continue;
        }
        let g0 = separation(oh, pos, b);
        resting |= g0 <= EXPEL + 1e-6;
        // (1e-9 of slack for rounding: a move that grazes a brush's zone closes its gap by
        // a millionth over a hundredth of a unit.)
        let c = g0.min(EXPEL) - 1e-9;
        let steady = g0 < EXPEL && overlap_interval(oh, pos, d, b, -(g0 - STEADY)).is_none();
        if steady {
            continue;
        }
        if let Some((t, _)) = overlap_interval(oh, pos, d, b, -c) {
            first = first.min(t);
        }
    }
    (first, resting)
}

/// Walkers move in chains on one map, each move starting where the last one ended (so
/// mostly resting in the zone against whatever stopped it): random directions, walks,
/// slides along the face last hit and moves a hair off it, falls, long and short. Counts the
/// moves that stop more than 0.01 units before the oracle's first deeper point. Positions
/// are rounded to `f32`, as a client's or a tool's are (where the rounded start is still
/// clear of every brush), and so are the moves' ends.
fn walk_chains(path: &std::path::Path, walkers: usize, rounds: usize, seed: u64) -> WalkFigures {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mn, mx) = (
        DVec3::new(-15.0, -15.0, -24.0),
        DVec3::new(15.0, 15.0, 32.0),
    );
    let (hull, oh) = (Hull::aabb(mn, mx).unwrap(), OHull::aabb(mn, mx));
    let map = load(path);
    let model = CollisionModel::build(&map);
    let mut brushes = map_brushes(&map);
    brushes.extend(model_sheets(&model));
    let mut s = TraceScratch::new();
    let spawns: Vec<DVec3> = map
        .spawn_points()
        .into_iter()
        .flat_map(|sp| [sp, sp + DVec3::Z * 9.0])
        .filter(|q| min_sep(&brushes, &oh, *q, 64.0) > 1e-3)
        .collect();
    assert!(!spawns.is_empty(), "{}: no free spawn", path.display());
    let bounds = model.bounds();
    let mut fig = WalkFigures::default();
    for _ in 0..walkers {
        let mut pos = spawns[rng.gen_range(0..spawns.len())];
        let mut normal: Option<DVec3> = None;
        for _ in 0..rounds {
            let len = [2.0, 16.0, 64.0, 512.0][rng.gen_range(0..4)] * rng.gen_range(0.05..1.0);
            let a = rng.gen_range(0.0..std::f64::consts::TAU);
            let level = DVec3::new(libm::cos(a), libm::sin(a), 0.0);
            // (In the air, a walker falls first.)
            let dir = match (rng.gen_range(0..4), normal) {
                (_, None) => -DVec3::Z,
                (0, _) => unit(&mut rng),
                (1, _) => level,
                (k, Some(n)) => {
                    // Along the face last hit; or a hair off it, away or into it.
                    let along = level - n * level.dot(n);
                    if along.length() < 1e-3 {
                        unit(&mut rng)
                    } else {
                        let tilt = if k == 2 {
                            0.0
                        } else {
                            rng.gen_range(1e-4..1e-2) * if rng.gen_bool(0.5) { 1.0 } else { -1.0 }
                        };
                        (along.normalize() + n * tilt).normalize()
                    }
                }
            };
            let len = if normal.is_none() { 4096.0 } else { len };
            let rounded = pos.as_vec3().as_dvec3();
            if min_sep(&brushes, &oh, rounded, 64.0) > 1e-6 {
                pos = rounded;
            }
            let d = (pos + dir * len).as_vec3().as_dvec3() - pos;
            let t = model.trace(&hull, pos, pos + d, Contents::ALL, &mut s);
            assert!(!t.start_solid, "{}: {pos:?} became solid", path.display());
            let (deeper, resting) = first_deeper(&brushes, &oh, pos, d);
            fig.moves += 1;
            fig.resting_starts += resting as usize;
            if (deeper - t.sweep.fraction) * len > 0.01 {
                fig.early += 1;
                fig.early_at_zero += (t.sweep.fraction == 0.0) as usize;
                if fig.early <= 3 {
                    eprintln!(
                        "{}: early stop {pos:?} -> {:?} at {} (oracle {deeper}): {:?}",
                        path.display(),
                        pos + d,
                        t.sweep.fraction,
                        t.sweep.hit
                    );
                }
            }
            let sep = min_sep(&brushes, &oh, t.sweep.end, 64.0);
            assert!(
                sep >= -1e-6,
                "{}: {pos:?} -> {:?} ended {} inside solid",
                path.display(),
                pos + d,
                -sep
            );
            pos = t.sweep.end;
            normal = t.sweep.normal();
            if !bounds.overlaps(&Aabb::from_points([&pos])) {
                pos = spawns[rng.gen_range(0..spawns.len())];
                normal = None;
                fig.respawns += 1;
            }
        }
    }
    fig
}

/// No snags from resting positions: walkers chained from the trace's own end positions, on
/// every map at hand, stop early (before the oracle's first deeper point) on under 0.05%
/// of moves. `EXPEL_WALKERS` sets the walkers per map (25 rounds each).
#[test]
fn chained_resting_walkers_stop_only_where_they_would_go_deeper() {
    let walkers = std::env::var("EXPEL_WALKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut failed = Vec::new();
    for (i, p) in walker_maps().iter().enumerate() {
        let f = walk_chains(p, walkers, 25, 40 + i as u64);
        eprintln!("{}: {f:?}", p.display());
        assert!(
            f.resting_starts * 5 > f.moves,
            "{}: too few resting: {f:?}",
            p.display()
        );
        if f.early * 2000 >= f.moves {
            failed.push(format!("{}: {f:?}", p.display()));
        }
    }
    assert!(failed.is_empty(), "early stops over 0.05%: {failed:#?}");
}
