//! Trace models: boxes, prisms, convex point sets, points; and contact gathering.

use expel_core::collision::hull::HullError;
use expel_core::map::MapData;
use expel_core::{CollisionModel, Contents, Hull, TraceScratch, EXPEL};
use glam::DVec3;

#[test]
fn hull_shapes_have_the_expected_topology() {
    let b = Hull::aabb(DVec3::splat(-1.0), DVec3::splat(1.0)).unwrap();
    assert_eq!(b.vertices().len(), 8);
    assert_eq!(b.planes().count(), 6);
    let p = Hull::prism(8, 16.0, 0.0, 56.0).unwrap();
    assert_eq!(p.vertices().len(), 16);
    assert_eq!(p.planes().count(), 10);
    let flat = Hull::aabb(DVec3::new(-1.0, -1.0, 0.0), DVec3::new(1.0, 1.0, 0.0)).unwrap();
    assert_eq!(flat.planes().count(), 2);
    let pt = Hull::aabb(DVec3::ONE, DVec3::ONE).unwrap();
    assert_eq!(pt.vertices(), &[DVec3::ONE]);
    // Interior points do not become vertices.
    let mut pts: Vec<DVec3> = (0..8)
        .map(|i| DVec3::new((i & 1) as f64, ((i >> 1) & 1) as f64, (i >> 2) as f64))
        .collect();
    pts.push(DVec3::splat(0.5));
    assert_eq!(Hull::convex(&pts).unwrap().vertices().len(), 8);
    assert!(matches!(
        Hull::aabb(DVec3::ONE, DVec3::ZERO),
        Err(HullError::InvertedBox { .. })
    ));
    assert!(matches!(
        Hull::convex(&[DVec3::ZERO, DVec3::X, DVec3::X * 2.0]),
        Err(HullError::Degenerate)
    ));
    assert!(Hull::convex(&vec![DVec3::ZERO; 65]).is_err());
}

fn arena() -> CollisionModel {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    CollisionModel::build(&MapData::parse_map(&text).unwrap())
}

#[test]
fn contacts_find_the_ground_under_a_resting_hull() {
    let model = arena();
    let hull = Hull::aabb(
        DVec3::new(-16.0, -16.0, -24.0),
        DVec3::new(16.0, 16.0, 32.0),
    )
    .unwrap();
    let mut s = TraceScratch::new();
    let mut out = Vec::new();
    let rest = model
        .sweep(
            &hull,
            DVec3::new(-300.0, -300.0, 60.0),
            DVec3::new(-300.0, -300.0, 0.0),
            Contents::ALL,
            &mut s,
        )
        .end;
    model.contacts(&hull, rest, 0.25, Contents::ALL, &mut s, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].normal, DVec3::Z);
    assert!((out[0].distance - EXPEL).abs() < 1e-9);
    // In the air, nothing within reach.
    model.contacts(
        &hull,
        rest + DVec3::Z * 10.0,
        0.25,
        Contents::ALL,
        &mut s,
        &mut out,
    );
    assert!(out.is_empty());
    // Beside a pillar (x in [-16, 16]) and on the floor: two contacts.
    let by = model
        .sweep(
            &hull,
            DVec3::new(-100.0, 0.0, 24.5),
            DVec3::new(0.0, 0.0, 24.5),
            Contents::ALL,
            &mut s,
        )
        .end;
    let by = model
        .sweep(&hull, by, by - DVec3::Z, Contents::ALL, &mut s)
        .end;
    model.contacts(&hull, by, 0.25, Contents::ALL, &mut s, &mut out);
    let mut normals: Vec<DVec3> = out.iter().map(|c| c.normal).collect();
    normals.sort_by(|a, b| a.x.total_cmp(&b.x));
    assert_eq!(normals, vec![-DVec3::X, DVec3::Z], "{out:?}");
}

#[test]
fn model_is_shared_across_threads() {
    let model = std::sync::Arc::new(arena());
    let hull = std::sync::Arc::new(Hull::prism(6, 16.0, -24.0, 32.0).unwrap());
    let results: Vec<f64> = (0..2)
        .map(|i| {
            let (m, h) = (model.clone(), hull.clone());
            std::thread::spawn(move || {
                let mut s = TraceScratch::new();
                let start = DVec3::new(-300.0 + i as f64, -300.0, 100.0);
                m.sweep(&h, start, start - DVec3::Z * 200.0, Contents::ALL, &mut s)
                    .fraction
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(results[0], results[1]);
    assert!(results[0] < 1.0);
}
