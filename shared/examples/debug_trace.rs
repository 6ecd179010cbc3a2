#[path = "../tests/common/mod.rs"]
mod common;
use common::*;
use expel_shared::*;
use glam::DVec3;
fn v(s: &str) -> DVec3 {
    let p: Vec<f64> = s.split(',').map(|x| x.trim().parse().unwrap()).collect();
    DVec3::new(p[0], p[1], p[2])
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let map = MapData::parse_any(&std::fs::read(&a[1]).unwrap()).unwrap();
    let model = CollisionModel::build(&map);
    let (start, end) = (v(&a[2]), v(&a[3]));
    let hulls = [
        (
            DVec3::new(-16.0, -16.0, -24.0),
            DVec3::new(16.0, 16.0, 32.0),
        ),
        (DVec3::ZERO, DVec3::ZERO),
        (DVec3::splat(-4.0), DVec3::splat(4.0)),
    ];
    for (mn, mx) in hulls {
        let hull = Hull::aabb(mn, mx).unwrap();
        let oh = OHull::aabb(mn, mx);
        let mut s = TraceScratch::new();
        let t = model.trace(&hull, start, end, Contents::ALL, &mut s);
        let sep = map
            .world_solid_brushes()
            .filter_map(|b| {
                OBrush::new(
                    b.faces
                        .iter()
                        .map(|f| (f.plane.normal, f.plane.dist))
                        .collect(),
                )
            })
            .map(|o| separation(&oh, t.end, &o))
            .fold(f64::INFINITY, f64::min);
        println!(
            "hull {mn:?}: f {} end {:?} feat {:?} n {:?} point {:?} sep {sep}",
            t.fraction, t.end, t.feature, t.normal, t.point
        );
        if let Some(Feature::EdgeEdge { edge, .. }) = t.feature {
            let e = &model.edges()[edge as usize];
            println!(
                "  edge {edge}: {:?} a {:?} b {:?}",
                e,
                model.vertices()[e.v[0] as usize],
                model.vertices()[e.v[1] as usize]
            );
            for pi in e.polys {
                if pi != u32::MAX {
                    println!(
                        "  poly {pi}: {:?} pts {:?}",
                        model.polygons()[pi as usize].plane,
                        model.polygon_points(pi as usize).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
