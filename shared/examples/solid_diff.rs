fn main() {
    let b = std::env::args().nth(1).unwrap();
    let mb = expel_shared::MapData::parse_any(&std::fs::read(b).unwrap()).unwrap();
    for e in &mb.entities {
        for b in &e.brushes {
            if b.faces.iter().any(|f| f.texture.contains("nitesky")) && b.faces.iter().any(|f| f.texture.contains("lava")) {
                for f in &b.faces { println!("{:?} {}", f.plane, f.texture); }
            }
        }
    }
}
