//! Map file bytes in any format (`.map` text of every dialect, each `.bsp` kind): parsed,
//! and when they parse, compiled into a collision model.
#![no_main]

use expel_core::{CollisionModel, MapData};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(map) = MapData::parse_any(data) {
        let _ = CollisionModel::build(&map);
    }
});
