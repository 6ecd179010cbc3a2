//! The numeric contract at the edges of the supported range (±2^20 units).

mod common;

use common::*;
use expel_core::{CollisionModel, Contents, Hull, TraceScratch, EXPEL, MAX_COORD};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn traces_stay_exact_far_from_the_origin() {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let mut s = TraceScratch::new();
    let (mn, mx) = (
        DVec3::new(-16.0, -16.0, -24.0),
        DVec3::new(16.0, 16.0, 32.0),
    );
    let hull = Hull::aabb(mn, mx).unwrap();
    let oh = OHull::aabb(mn, mx);
    for corner in [
        DVec3::splat(MAX_COORD - 600.0),
        DVec3::new(-MAX_COORD + 600.0, MAX_COORD - 600.0, -MAX_COORD + 600.0),
        DVec3::new(32768.0, -32768.0, 32768.0),
        DVec3::ZERO,
    ] {
        // A slanted slab and a wedge near the corner.
        let n = DVec3::new(0.3, -0.5, 0.8).normalize();
        let mut slab = box_planes(corner - DVec3::splat(500.0), corner + DVec3::splat(500.0));
        slab.push((n, n.dot(corner)));
        slab.push((-n, -n.dot(corner) + 0.25));
        let wedge = random_brush(&mut rng, corner + DVec3::new(200.0, 0.0, 100.0), 80.0);
        let scene = Scene::new(vec![slab, wedge]);
        let model = CollisionModel::build(&scene.map);
        let mut hits = 0;
        for _ in 0..400 {
            let start = corner + n * rng.gen_range(40.0..300.0) + unit(&mut rng) * 100.0;
            if scene.min_separation(&oh, start) < 0.0 {
                continue;
            }
            let end = start + unit(&mut rng) * rng.gen_range(1.0..1000.0);
            let t = model.sweep(&hull, start, end, Contents::ALL, &mut s);
            let sep = scene.min_separation(&oh, t.end);
            assert!(sep >= -1e-6, "ends {} inside at {:?}", -sep, t.end);
            assert!(scene
                .first_overlap(&oh, start, t.end - start, 1e-6)
                .is_none());
            if t.fraction < 1.0 {
                hits += 1;
                assert!(sep <= 3.5 * EXPEL, "stopped {sep} short near {corner:?}");
            }
        }
        assert!(hits > 40, "only {hits} hits near {corner:?}");
    }
}

#[test]
fn moves_across_the_whole_range_stop_at_the_first_wall() {
    let mut s = TraceScratch::new();
    let wall = box_planes(
        DVec3::new(-0.125, -1000.0, -1000.0),
        DVec3::new(0.125, 1000.0, 1000.0),
    );
    let scene = Scene::new(vec![wall]);
    let model = CollisionModel::build(&scene.map);
    let hull = Hull::point();
    let t = model.sweep(
        &hull,
        DVec3::new(-MAX_COORD, 0.0, 0.0),
        DVec3::new(MAX_COORD, 1.0, -1.0),
        Contents::ALL,
        &mut s,
    );
    assert!(t.fraction < 1.0);
    assert!(
        t.end.x <= -0.125 - EXPEL + 1e-6 && t.end.x > -0.125 - 2.0 * EXPEL,
        "{:?}",
        t.end
    );
}
