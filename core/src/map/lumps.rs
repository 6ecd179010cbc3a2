//! What the compiled-map readers share: little-endian fields, bounds-checked lumps, plane
//! checks, and handing each entity its model's geometry.

use super::{Brush, MapData, MapEntity, MapError, Patch};
use crate::geom::{Plane, MAX_COORD};
use glam::DVec3;

pub(super) fn err<T>(m: impl Into<String>) -> Result<T, MapError> {
    Err(MapError::Bsp(m.into()))
}

pub(super) fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

pub(super) fn i16_at(b: &[u8], off: usize) -> i16 {
    i16::from_le_bytes([b[off], b[off + 1]])
}

pub(super) fn f32_at(b: &[u8], off: usize) -> f64 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]) as f64
}

/// Lump `i` of a directory of (offset, length) pairs starting at byte `dir`, as a slice
/// of whole records of `rec` bytes. The caller has checked the directory fits.
pub(super) fn lump<'a>(
    bytes: &'a [u8],
    dir: usize,
    i: usize,
    rec: usize,
    name: &str,
) -> Result<&'a [u8], MapError> {
    let h = dir + i * 8;
    let (off, len) = (i32_at(bytes, h), i32_at(bytes, h + 4));
    if off < 0 || len < 0 {
        return err(format!("{name} lump has a negative offset or length"));
    }
    let (off, len) = (off as usize, len as usize);
    if off.checked_add(len).is_none_or(|end| end > bytes.len()) {
        return err(format!(
            "{name} lump (offset {off}, length {len}) runs past the end of the file ({} bytes)",
            bytes.len()
        ));
    }
    if len % rec != 0 {
        return err(format!(
            "{name} lump length {len} is not a multiple of its {rec}-byte record"
        ));
    }
    Ok(&bytes[off..off + len])
}

/// A stored plane made exactly unit, or an error naming it (`what`): its normal must be a
/// finite unit vector as `f32` stores one, its distance within the supported coordinates.
pub(super) fn unit_plane(normal: DVec3, dist: f64, what: &str) -> Result<Plane, MapError> {
    let len = normal.length();
    if !(len.is_finite() && (len - 1.0).abs() <= 1e-3) {
        return err(format!(
            "{what}: normal {:?} is not a unit vector",
            normal.to_array()
        ));
    }
    if !(dist.is_finite() && dist.abs() <= MAX_COORD) {
        return err(format!(
            "{what}: distance {dist} is outside the supported coordinates (±{MAX_COORD})"
        ));
    }
    Ok(Plane {
        normal: normal / len,
        dist: dist / len,
    })
}

/// Gives each entity its model's geometry (`worldspawn` model 0, others their `*N`), and
/// the map a world entity when the entity text had none.
pub(super) fn assign_models(
    map: &mut MapData,
    nmodels: usize,
    model: impl Fn(usize) -> Result<(Vec<Brush>, Vec<Patch>), MapError>,
) -> Result<(), MapError> {
    for e in map.entities.iter_mut() {
        let mi = if e.classname() == "worldspawn" {
            Some(0)
        } else {
            e.get("model")
                .and_then(|m| m.strip_prefix('*'))
                .and_then(|n| n.parse::<usize>().ok())
        };
        if let Some(mi) = mi.filter(|&m| m < nmodels) {
            (e.brushes, e.patches) = model(mi)?;
        }
    }
    if !map.entities.iter().any(|e| e.classname() == "worldspawn") && nmodels > 0 {
        let (brushes, patches) = model(0)?;
        map.entities.insert(
            0,
            MapEntity {
                properties: vec![("classname".into(), "worldspawn".into())],
                brushes,
                patches,
                line: 0,
            },
        );
    }
    Ok(())
}

/// The planes of a Quake 1 or 2 style planes lump (20-byte records: normal, distance,
/// type), each checked as [`unit_plane`] does.
pub(super) fn planes20(bytes: &[u8], dir: usize, i: usize) -> Result<Vec<Plane>, MapError> {
    lump(bytes, dir, i, 20, "planes")?
        .chunks_exact(20)
        .enumerate()
        .map(|(i, p)| {
            let n = DVec3::new(f32_at(p, 0), f32_at(p, 4), f32_at(p, 8));
            unit_plane(n, f32_at(p, 12), &format!("plane {i}"))
        })
        .collect()
}

/// The side indices of brush `bi` (`first`, `n` as stored), checked against the `nsides`
/// there are and the most faces a brush may have.
pub(super) fn brush_sides(
    bi: usize,
    first: i32,
    n: i32,
    nsides: usize,
) -> Result<std::ops::Range<usize>, MapError> {
    if first < 0 || n < 0 || first as usize + n as usize > nsides {
        return err(format!(
            "brush {bi} sides {first}..{first}+{n} out of range (0..{nsides})"
        ));
    }
    if n as usize > super::MAX_BRUSH_FACES {
        return err(format!(
            "brush {bi} has {n} sides; at most {} are supported",
            super::MAX_BRUSH_FACES
        ));
    }
    Ok(first as usize..first as usize + n as usize)
}
