//! What a patch-heavy map costs: a generated Quake 3 map of 235 curved patches of the kinds
//! real maps are made of (pipes, arches, rolling terrain, bowls), or the maps named on the
//! command line. Prints per map: patches, patch polygons, the build time, the cache file's
//! size, the model's heap bytes part by part, and bytes per polygon and per brush.
//!
//! `cargo run --release -p expel-bench --bin patch-bench [MAP...]`

use anyhow::{Context, Result};
use expel_core::{CollisionModel, MapData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt::Write;
use std::time::Instant;

/// Patches in the generated map (the field's patch-heavy map had 235).
const PATCHES: usize = 235;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut maps: Vec<(String, Vec<u8>)> = Vec::new();
    if args.is_empty() {
        maps.push((
            format!("generated ({PATCHES} patches)"),
            patch_heavy_map(PATCHES, 7).into_bytes(),
        ));
    }
    for a in args {
        let bytes = std::fs::read(&a).with_context(|| format!("reading {a}"))?;
        maps.push((a, bytes));
    }
    for (name, bytes) in maps {
        let map = MapData::parse_any(&bytes).with_context(|| format!("parsing {name}"))?;
        let t = Instant::now();
        let model = CollisionModel::build(&map);
        let build = t.elapsed();
        let cache = model.to_cache_bytes(&[0; 32]).len();
        let st = model.stats();
        let parts = model.memory();
        let total: usize = parts.iter().map(|p| p.1).sum();
        let brush_parts = [
            "brushes",
            "brush_planes",
            "brush_points",
            "brush_axes",
            "brush_sat",
            "brush_grid",
        ];
        let brush_bytes: usize = parts
            .iter()
            .filter(|p| brush_parts.contains(&p.0))
            .map(|p| p.1)
            .sum();
        let poly_bytes = total - brush_bytes;
        let brushes = model.brushes().len();
        let polygons = st.polygons;
        println!("{name}");
        println!(
            "  patches {}  patch polygons {}  polygons {}  brushes (with sheets) {}  deviation {:.3}",
            st.patches, st.patch_polygons, polygons, brushes, st.patch_deviation
        );
        println!(
            "  build {:.0} ms  cache {:.1} MB  heap {:.1} MB",
            build.as_secs_f64() * 1e3,
            cache as f64 / 1e6,
            total as f64 / 1e6
        );
        let mut line = String::from("  heap by part (MB):");
        for (k, v) in &parts {
            let _ = write!(line, " {k} {:.1}", *v as f64 / 1e6);
        }
        println!("{line}");
        println!(
            "  bytes per polygon {:.0} (vertices, edges, polygons, their bounds and tree)  per brush {:.0} (brushes, planes, points, axes, grid)",
            poly_bytes as f64 / polygons.max(1) as f64,
            brush_bytes as f64 / brushes.max(1) as f64
        );
    }
    Ok(())
}

/// A Quake 3 `.map` with a floor and `n` patches: pipes (a full circle of four quadratic
/// arcs around, along a straight run), arches (half circles), rolling terrain (a 9 × 9
/// grid of random heights) and bowls.
fn patch_heavy_map(n: usize, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = String::from("{\n\"classname\" \"worldspawn\"\n");
    out.push_str(
        "{\n( -4096 -4096 -64 ) ( -4096 4096 -64 ) ( 4096 -4096 -64 ) floor 0 0 0 1 1\n\
         ( -4096 -4096 0 ) ( 4096 -4096 0 ) ( -4096 4096 0 ) floor 0 0 0 1 1\n\
         ( -4096 -4096 -64 ) ( 4096 -4096 -64 ) ( -4096 -4096 0 ) floor 0 0 0 1 1\n\
         ( 4096 4096 -64 ) ( -4096 4096 -64 ) ( 4096 4096 0 ) floor 0 0 0 1 1\n\
         ( -4096 4096 -64 ) ( -4096 -4096 -64 ) ( -4096 4096 0 ) floor 0 0 0 1 1\n\
         ( 4096 -4096 -64 ) ( 4096 4096 -64 ) ( 4096 -4096 0 ) floor 0 0 0 1 1\n}\n",
    );
    for _ in 0..n {
        let c = [
            rng.gen_range(-3500.0..3500.0f64).round(),
            rng.gen_range(-3500.0..3500.0f64).round(),
            rng.gen_range(0.0..512.0f64).round(),
        ];
        let grid: Vec<Vec<[f64; 3]>> = match rng.gen_range(0..4) {
            // Pipe along x: 9 points around, 3 along.
            0 => {
                let (r, len) = (rng.gen_range(16.0..96.0f64), rng.gen_range(128.0..768.0));
                let ring = ring_points(r, 4);
                (0..3)
                    .map(|i| {
                        let x = c[0] + len * i as f64 / 2.0;
                        ring.iter().map(|&(y, z)| [x, c[1] + y, c[2] + z]).collect()
                    })
                    .collect()
            }
            // Arch over y: a half circle, 5 points across, 3 deep.
            1 => {
                let (r, depth) = (rng.gen_range(64.0..256.0f64), rng.gen_range(32.0..128.0));
                let ring = ring_points(r, 2);
                (0..3)
                    .map(|i| {
                        let y = c[1] + depth * i as f64 / 2.0;
                        ring.iter().map(|&(x, z)| [c[0] + x, y, c[2] + z]).collect()
                    })
                    .collect()
            }
            // Rolling terrain: 9 × 9, 512 units square.
            2 => (0..9)
                .map(|i| {
                    (0..9)
                        .map(|j| {
                            let h = rng.gen_range(-12.0..12.0f64).round();
                            [c[0] + 64.0 * i as f64, c[1] + 64.0 * j as f64, c[2] + h]
                        })
                        .collect()
                })
                .collect(),
            // Bowl: 5 × 5, its middle ring sunk.
            _ => {
                let (size, depth) = (rng.gen_range(128.0..384.0f64), rng.gen_range(32.0..128.0));
                (0..5)
                    .map(|i| {
                        (0..5)
                            .map(|j| {
                                let edge = i == 0 || i == 4 || j == 0 || j == 4;
                                let z = if edge { 0.0 } else { -depth };
                                let x = c[0] + size * (i as f64 / 4.0 - 0.5);
                                [x, c[1] + size * (j as f64 / 4.0 - 0.5), c[2] + z]
                            })
                            .collect()
                    })
                    .collect()
            }
        };
        let _ = write!(
            out,
            "{{\npatchDef2\n{{\ncurve\n( {} {} 0 0 0 )\n(\n",
            grid.len(),
            grid[0].len()
        );
        for row in &grid {
            out.push('(');
            for p in row {
                let _ = write!(out, " ( {} {} {} 0 0 )", p[0], p[1], p[2]);
            }
            out.push_str(" )\n");
        }
        out.push_str(")\n}\n}\n");
    }
    out.push_str("}\n{\n\"classname\" \"info_player_deathmatch\"\n\"origin\" \"0 0 64\"\n}\n");
    out
}

/// Control points of `quarters` quadratic quarter-circle arcs of radius `r` (as Quake 3's
/// editors write a cylinder): corners on the circle, middles at the square's corners.
fn ring_points(r: f64, quarters: usize) -> Vec<(f64, f64)> {
    let corners = [(r, 0.0), (0.0, r), (-r, 0.0), (0.0, -r)];
    let mids = [(r, r), (-r, r), (-r, -r), (r, -r)];
    let mut v = vec![corners[0]];
    for q in 0..quarters {
        v.push(mids[q]);
        v.push(corners[(q + 1) % 4]);
    }
    v
}
