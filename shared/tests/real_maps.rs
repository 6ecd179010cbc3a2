//! Real maps from `../shared/maps` (skipped when that folder is absent): every file loads,
//! solid brush counts agree between a map and its compiled `.bsp`, spawn points are free,
//! and random traces from the spawn points never end in solid nor pass a patch by the oracle.

mod common;

use common::*;
use expel_shared::map::MapData;
use expel_shared::{CollisionModel, Contents, Hull, TraceScratch};
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
        if p.file_name().unwrap() == "oa_am_underworks.map" {
            assert_eq!((st.patches, st.patches_skipped), (56, 0));
            assert!(st.patch_polygons >= 56, "{st:?}");
            assert!(st.patch_deviation <= expel_shared::collision::patch::PATCH_TOLERANCE);
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
                    .any(|f| expel_shared::map::solidity::is_liquid_texture(&f.texture))
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
