use expel_shared::*;
use glam::DVec3;
use rand::{Rng, SeedableRng};
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap_or("maps/arena.map".into());
    let map = MapData::parse_any(&std::fs::read(path).unwrap()).unwrap();
    let model = CollisionModel::build(&map);
    let hull = Hull::aabb(
        DVec3::new(-16.0, -16.0, -24.0),
        DVec3::new(16.0, 16.0, 32.0),
    )
    .unwrap();
    let mut s = TraceScratch::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let b = model.bounds();
    let mut mv = Vec::new();
    while mv.len() < 10000 {
        let p = DVec3::new(
            rng.gen_range(b.min.x..b.max.x),
            rng.gen_range(b.min.y..b.max.y),
            rng.gen_range(b.min.z..b.max.z),
        );
        if model.position_solid(&hull, p, Contents::ALL, &mut s) {
            continue;
        }
        let d = DVec3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
        ) * 64.0;
        mv.push((p, p + d));
    }
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let t0 = Instant::now();
    let mut f = 0.0;
    for _ in 0..reps {
        for (a, b) in &mv {
            f += std::hint::black_box(model.sweep(&hull, *a, *b, Contents::ALL, &mut s)).fraction;
        }
    }
    let t1 = t0.elapsed().as_nanos() as f64 / (reps * mv.len()) as f64;
    let t0 = Instant::now();
    for _ in 0..reps {
        for (a, _) in &mv {
            f += std::hint::black_box(model.position_solid(&hull, *a, Contents::ALL, &mut s)) as u8
                as f64;
        }
    }
    let t2 = t0.elapsed().as_nanos() as f64 / (reps * mv.len()) as f64;

    println!("sweep {t1:.0} ns, position {t2:.0} ns ({f})");
}
