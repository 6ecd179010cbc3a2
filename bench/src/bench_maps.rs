//! The maps a benchmark runs on: those named on the command line, else the embedded arena
//! and, when present, ../shared/maps/oa_q3dm6ish.bsp.

use std::path::PathBuf;

pub(crate) fn from_args() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut maps: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if maps.is_empty() {
        maps.push(root.join("maps/arena.map"));
        let real = root.join("../shared/maps/oa_q3dm6ish.bsp");
        if real.exists() {
            maps.push(real);
        }
    }
    maps
}
