//! Model cache payloads: wrapped in a header whose map hash and checksum match (a fuzzer
//! cannot forge a BLAKE3 checksum, and a corrupted file stops there), so the decoding and
//! the structural check behind them are what is fuzzed.
#![no_main]

use expel_core::CollisionModel;
use glam::DVec3;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|payload: &[u8]| {
    let source = [7u8; 32];
    let mut file = Vec::with_capacity(76 + payload.len());
    file.extend_from_slice(b"EXPELMDL");
    file.extend_from_slice(&CollisionModel::FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&source);
    file.extend_from_slice(blake3::hash(payload).as_bytes());
    file.extend_from_slice(payload);
    if let Ok(model) = CollisionModel::from_cache_bytes(&file, &source) {
        // A model that passes its check must answer queries without a panic.
        let hull = expel_core::Hull::aabb(
            DVec3::new(-15.0, -15.0, -24.0),
            DVec3::new(15.0, 15.0, 32.0),
        );
        if let Ok(h) = hull {
            let mut s = expel_core::TraceScratch::default();
            let b = model.bounds();
            let _ = model.trace(&h, b.min, b.max, expel_core::Contents::ALL, &mut s);
        }
    }
});
