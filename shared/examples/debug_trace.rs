#[path = "../tests/common/mod.rs"]
mod common;
use common::*;
use expel_shared::*;
use glam::DVec3;
fn main() {
    let map = MapData::parse_any(&std::fs::read("../shared/maps/oa_fan.bsp").unwrap()).unwrap();
    let model = CollisionModel::build(&map);
    let start = DVec3::new(-687.6855833887098, -187.87920658186664, 658.8342216070075);
    let end = DVec3::new(-1136.618282921967, 1868.5201175197158, 167.32332917863516);
    let e = &model.edges()[35];
    println!(
        "edge 35: {:?} a {:?} b {:?}",
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
    for (mn, mx) in [
        (
            DVec3::new(-15.0, -15.0, -24.0),
            DVec3::new(15.0, 15.0, 32.0),
        ),
        (DVec3::ZERO, DVec3::ZERO),
    ] {
        let hull = Hull::aabb(mn, mx).unwrap();
        let oh = OHull::aabb(mn, mx);
        let mut s = TraceScratch::new();
        let t = model.trace(&hull, start, end, Contents::ALL, &mut s);
        println!(
            "hull {mn:?}: f {} end {:?} feat {:?} n {:?} ss {}",
            t.fraction, t.end, t.feature, t.normal, t.start_solid
        );
        for (i, b) in map.world_solid_brushes().enumerate() {
            let Some(ob) = OBrush::new(
                b.faces
                    .iter()
                    .map(|f| (f.plane.normal, f.plane.dist))
                    .collect(),
            ) else {
                continue;
            };
            let sep = separation(&oh, t.end, &ob);
            let sep0 = separation(&oh, start, &ob);
            if sep < 0.1 {
                println!(
                    "  brush {i} sep end {sep} start {sep0} toi {:?}",
                    overlap_interval(&oh, start, end - start, &ob, 0.0)
                );
                for f in &b.faces {
                    println!("     {:?} {}", f.plane, f.texture);
                }
            }
        }
    }
}
#[allow(dead_code)]
fn unused() {}
