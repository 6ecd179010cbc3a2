//! Rotation traces against the oracle: exact static overlap tests at angular steps whose
//! chord error is below e/4, on random brush scenes.

mod common;

use common::*;
use expel_core::collision::rotate::Rotation;
use expel_core::{CollisionModel, Contents, Hull, TraceScratch, EXPEL};
use glam::{DQuat, DVec3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TOL: f64 = 1e-6;

/// The hull's corners placed at `pos` and turned by `a` about the rotation. The oracle uses
/// glam's own constructor on purpose: it must not share code with what it checks.
#[allow(clippy::disallowed_methods)]
fn posed(pts: &[DVec3], pos: DVec3, rot: &Rotation, a: f64) -> OHull {
    let q = DQuat::from_axis_angle(rot.axis.normalize(), a);
    OHull::new(
        pts.iter()
            .map(|v| rot.origin + q * (pos + *v - rot.origin))
            .collect(),
    )
}

/// Checks one rotation; returns (hit, stopped within the zone).
fn check(
    scene: &Scene,
    model: &CollisionModel,
    hull: &Hull,
    pos: DVec3,
    rot: &Rotation,
    s: &mut TraceScratch,
) -> Option<bool> {
    let pts = hull.vertices().to_vec();
    let start = posed(&pts, pos, rot, 0.0);
    let sep0 = scene.min_separation(&start, DVec3::ZERO);
    let t = model.rotate(hull, pos, rot, Contents::ALL, s);
    assert_eq!(
        t.start_solid,
        sep0 < -TOL,
        "start_solid vs oracle separation {sep0}"
    );
    if sep0 < TOL {
        return None;
    }
    let reached = rot.angle * t.fraction;
    // Sample densely enough that the arc between samples strays less than e/4 from its
    // chord, for the vertex farthest from the axis.
    let k = rot.axis.normalize();
    let radius = pts
        .iter()
        .map(|v| {
            let d = pos + *v - rot.origin;
            (d - k * d.dot(k)).length()
        })
        .fold(0.0, f64::max);
    let step = (2.0 * EXPEL / radius.max(1e-9)).sqrt().min(0.05);
    let n = (reached.abs() / step).ceil() as usize + 1;
    for i in 0..=n {
        let a = reached * i as f64 / n as f64;
        let sep = scene.min_separation(&posed(&pts, pos, rot, a), DVec3::ZERO);
        assert!(
            sep >= -TOL,
            "overlaps by {} at {:.5} of {:.5} rad (stopped at fraction {}, {rot:?}, pos {pos:?})",
            -sep,
            a,
            rot.angle,
            t.fraction
        );
    }
    if t.fraction < 1.0 {
        let end = scene.min_separation(&posed(&pts, pos, rot, reached), DVec3::ZERO);
        assert!(t.hit.is_some());
        return Some(end <= 3.5 * EXPEL + 1e-6);
    }
    Some(true)
}

#[test]
fn rotating_hulls_never_overlap_and_stop_at_the_zone() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let mut s = TraceScratch::new();
    let hulls = [
        Hull::aabb(
            DVec3::new(-16.0, -16.0, -24.0),
            DVec3::new(16.0, 16.0, 32.0),
        )
        .unwrap(),
        Hull::aabb(DVec3::new(-40.0, -2.0, -30.0), DVec3::new(40.0, 2.0, 30.0)).unwrap(),
        Hull::prism(5, 12.0, -10.0, 10.0).unwrap(),
    ];
    let (mut hits, mut far, mut total) = (0, 0, 0);
    for _ in 0..60 {
        let planes = (0..rng.gen_range(1..8))
            .map(|_| {
                let c = DVec3::new(
                    rng.gen_range(-60.0..60.0),
                    rng.gen_range(-60.0..60.0),
                    rng.gen_range(-60.0..60.0),
                );
                random_brush(&mut rng, c, 30.0)
            })
            .collect();
        let scene = Scene::new(planes);
        let model = CollisionModel::build(&scene.map);
        for _ in 0..40 {
            let hull = &hulls[rng.gen_range(0..hulls.len())];
            let pos = DVec3::new(
                rng.gen_range(-80.0..80.0),
                rng.gen_range(-80.0..80.0),
                rng.gen_range(-80.0..80.0),
            );
            let rot = Rotation {
                origin: pos
                    + DVec3::new(
                        rng.gen_range(-40.0..40.0),
                        rng.gen_range(-40.0..40.0),
                        rng.gen_range(-40.0..40.0),
                    ),
                axis: unit(&mut rng),
                angle: rng.gen_range(-3.5..3.5),
            };
            let before = model.rotate(hull, pos, &rot, Contents::ALL, &mut s);
            if let Some(near) = check(&scene, &model, hull, pos, &rot, &mut s) {
                total += 1;
                if before.fraction < 1.0 {
                    hits += 1;
                    if !near {
                        far += 1;
                    }
                }
            }
        }
    }
    assert!(hits > 200, "only {hits} hits of {total}");
    assert!(
        far * 100 <= hits,
        "{far} of {hits} stops were early by more than 3.5 e"
    );
}

/// A box resting in the zone above a floor: turning a bottom edge down stops at once;
/// spinning about the vertical keeps its height and turns freely; tilting away is free.
#[test]
fn start_inside_the_zone_rules() {
    let scene = Scene::new(vec![box_planes(
        DVec3::new(-500.0, -500.0, -64.0),
        DVec3::new(500.0, 500.0, 0.0),
    )]);
    let model = CollisionModel::build(&scene.map);
    let hull = Hull::aabb(
        DVec3::new(-16.0, -16.0, -24.0),
        DVec3::new(16.0, 16.0, 32.0),
    )
    .unwrap();
    let mut s = TraceScratch::new();
    let pos = DVec3::new(0.0, 0.0, 24.0 + EXPEL * 0.5);
    // About a horizontal axis through the centre: one bottom edge goes down at once.
    let tilt = Rotation {
        origin: pos,
        axis: DVec3::X,
        angle: 0.3,
    };
    let t = model.rotate(&hull, pos, &tilt, Contents::ALL, &mut s);
    assert_eq!(t.fraction, 0.0, "turned deeper into the floor");
    // About the vertical: every corner keeps its height.
    let spin = Rotation {
        origin: pos,
        axis: DVec3::Z,
        angle: 2.5,
    };
    let t = model.rotate(&hull, pos, &spin, Contents::ALL, &mut s);
    assert_eq!(t.fraction, 1.0);
    // About the bottom edge at y = -16: turning about +x lifts the +y side off the floor
    // (free); about -x it would dig in.
    let hinge = DVec3::new(0.0, -16.0, EXPEL * 0.5);
    let up = Rotation {
        origin: hinge,
        axis: DVec3::X,
        angle: 1.0,
    };
    let t = model.rotate(&hull, pos, &up, Contents::ALL, &mut s);
    assert_eq!(t.fraction, 1.0, "lifting off was blocked: {t:?}");
    let down = Rotation {
        origin: hinge,
        axis: -DVec3::X,
        angle: 1.0,
    };
    let t = model.rotate(&hull, pos, &down, Contents::ALL, &mut s);
    assert_eq!(t.fraction, 0.0, "dug into the floor: {t:?}");
}

/// A long bar swung through a wall: it stops on the wall's face, edge against face or
/// edge against edge, however fast it turns.
#[test]
fn a_swinging_bar_stops_at_a_wall() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let mut s = TraceScratch::new();
    let wall = box_planes(
        DVec3::new(30.0, -200.0, -200.0),
        DVec3::new(30.25, 200.0, 200.0),
    );
    let scene = Scene::new(vec![wall]);
    let model = CollisionModel::build(&scene.map);
    let hull = Hull::aabb(DVec3::new(-1.0, 0.0, -1.0), DVec3::new(1.0, 80.0, 1.0)).unwrap();
    for _ in 0..200 {
        let rot = Rotation {
            origin: DVec3::ZERO,
            axis: (DVec3::Z + unit(&mut rng) * 0.3).normalize(),
            angle: -rng.gen_range(0.5..6.0),
        };
        let t = model.rotate(&hull, DVec3::ZERO, &rot, Contents::ALL, &mut s);
        assert!(t.fraction < 1.0, "swung through the wall: {rot:?}");
        check(&scene, &model, &hull, DVec3::ZERO, &rot, &mut s);
    }
}
