use glam::DVec3;
fn main() {
    let b = std::env::args().nth(1).unwrap();
    let m = expel_shared::MapData::parse_any(&std::fs::read(b).unwrap()).unwrap();
    let p = DVec3::new(-192.0, 672.0, -152.0);
    for e in &m.entities {
        for b in &e.brushes {
            if !expel_shared::map::solidity::is_world_solid(e.classname(), b) {
                continue;
            }
            let d = b
                .faces
                .iter()
                .map(|f| f.plane.distance(p))
                .fold(f64::NEG_INFINITY, f64::max);
            if d < 40.0 {
                println!("{} line {} maxdist {d}", e.classname(), b.line);
                for f in &b.faces {
                    println!("   {:?} {}", f.plane, f.texture);
                }
            }
        }
    }
}
