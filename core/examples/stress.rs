//! Long randomized check of traces on a map against the test oracle (not part of the suite):
//! `cargo run --release -p expel-core --example stress -- MAP [TRACES] [SEED]`.
#[path = "../tests/common/mod.rs"]
mod common;
use common::*;
use expel_core::*;
use glam::DVec3;
use rand::{Rng, SeedableRng};

fn main() {
    let path = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100000);
    let map = MapData::parse_any(&std::fs::read(&path).unwrap()).unwrap();
    let model = CollisionModel::build(&map);
    let mut brushes = map_brushes(&map);
    brushes.extend(model_sheets(&model));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        std::env::args()
            .nth(3)
            .map(|s| s.parse().unwrap())
            .unwrap_or(1),
    );
    let hulls = [
        (
            DVec3::new(-16.0, -16.0, -24.0),
            DVec3::new(16.0, 16.0, 32.0),
        ),
        (DVec3::ZERO, DVec3::ZERO),
        (DVec3::new(-4.0, -4.0, -4.0), DVec3::new(4.0, 4.0, 4.0)),
    ];
    let b = model.bounds();
    let mut s = TraceScratch::new();
    let (mut bad_solid, mut pen, mut cross, mut far, mut hits, mut traces, mut ss_mismatch) =
        (0, 0, 0, 0, 0, 0, 0);
    while traces < n {
        let (mn, mx) = hulls[rng.gen_range(0..3)];
        let hull = Hull::aabb(mn, mx).unwrap();
        let oh = OHull::aabb(mn, mx);
        let start = DVec3::new(
            rng.gen_range(b.min.x..b.max.x),
            rng.gen_range(b.min.y..b.max.y),
            rng.gen_range(b.min.z..b.max.z),
        );
        let near = |p: DVec3, r: f64| {
            brushes.iter().filter(move |(_, lo, hi)| {
                (p + mn - DVec3::splat(r)).cmple(*hi).all()
                    && (p + mx + DVec3::splat(r)).cmpge(*lo).all()
            })
        };
        let sep0 = near(start, 1.0)
            .map(|(o, _, _)| separation(&oh, start, o))
            .fold(f64::INFINITY, f64::min);
        let len = [1.0, 16.0, 64.0, 512.0, 8192.0][rng.gen_range(0..5)];
        let mut d = unit(&mut rng);
        if rng.gen_bool(0.3) {
            d = DVec3::AXES[rng.gen_range(0..3)] * if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
        }
        let end = start + d * rng.gen_range(0.0..len);
        let full = model.trace(&hull, start, end, Contents::ALL, &mut s);
        let t = full.sweep;
        if full.start_solid != (sep0 < -1e-6) && sep0.abs() > 1e-5 {
            ss_mismatch += 1;
            if ss_mismatch < 5 {
                println!("startsolid mismatch sep {sep0} at {start:?}");
            }
        }
        if sep0 < 0.0 {
            continue;
        }
        traces += 1;
        let sep1 = near(t.end, 1.0)
            .map(|(o, _, _)| separation(&oh, t.end, o))
            .fold(f64::INFINITY, f64::min);
        if sep1 < -1e-6 {
            pen += 1;
            if pen < 5 {
                println!(
                    "PEN {} {start:?} -> {end:?} f {} {:?}",
                    -sep1, t.fraction, t.hit
                );
            }
        }
        let dd = t.end - start;
        for (o, lo, hi) in &brushes {
            let bl = start.min(t.end) + mn;
            let bh = start.max(t.end) + mx;
            if bl.cmple(*hi).all()
                && bh.cmpge(*lo).all()
                && overlap_interval(&oh, start, dd, o, 1e-6).is_some()
            {
                cross += 1;
                if cross < 5 {
                    println!("CROSS {start:?} -> {end:?} f {}", t.fraction);
                }
                break;
            }
        }
        if t.fraction < 1.0 {
            hits += 1;
            if sep1 > 3.5 * EXPEL {
                far += 1;
                if far < 5 {
                    println!(
                        "FAR {sep1} {start:?} -> {end:?} f {} {:?} n {:?}",
                        t.fraction,
                        t.hit,
                        t.normal()
                    );
                }
            }
        }
        let _ = &mut bad_solid;
    }
    println!("{path}: {traces} traces, {hits} hits, {pen} penetrations, {cross} crossings, {far} stopped far, {ss_mismatch} startsolid mismatches");
}
