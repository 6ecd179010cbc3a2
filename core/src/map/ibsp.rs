//! Brushes and entities of a compiled Quake 3 `.bsp` (IBSP version 46).
//!
//! The compiler keeps every brush as plane-bounded sides (plus bevel planes, which cut
//! nothing and so produce no polygons). Model 0 holds the world (func_group and detail
//! brushes merged in); model `*N` holds the brushes of the entity whose `model` is `*N`.
//! Curved patches come from the models' patch surfaces: their control grids (drawn vertices)
//! and their shaders' contents.

use super::lumps::{assign_models, err, f32_at, i32_at, unit_plane};
use super::{parse, Brush, Face, MapData, MapError, Patch};
use crate::geom::{planes_to_polygons, Plane};
use glam::DVec3;

const LUMP_ENTITIES: usize = 0;
const LUMP_SHADERS: usize = 1;
const LUMP_PLANES: usize = 2;
const LUMP_MODELS: usize = 7;
const LUMP_BRUSHES: usize = 8;
const LUMP_BRUSHSIDES: usize = 9;
const LUMP_DRAWVERTS: usize = 10;
const LUMP_SURFACES: usize = 13;
/// Surface type of a patch (`MST_PATCH`).
const SURFACE_PATCH: i32 = 2;
const LUMP_COUNT: usize = 17;

fn index(v: i32, count: usize, what: &str, owner: usize) -> Result<usize, MapError> {
    if v < 0 || v as usize >= count {
        return err(format!(
            "{what} index {v} of record {owner} is out of range (0..{count})"
        ));
    }
    Ok(v as usize)
}

/// The shader lump's names and content flags, in lump order (a name is NUL-padded to 64
/// bytes; the contents follow the surface flags).
fn read_shaders(shaders: &[u8]) -> (Vec<String>, Vec<u32>) {
    shaders
        .chunks_exact(72)
        .map(|s| {
            let name = &s[..64];
            let end = name.iter().position(|&c| c == 0).unwrap_or(64);
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            (name, i32_at(s, 68) as u32)
        })
        .unzip()
}

pub(super) fn parse(bytes: &[u8]) -> Result<MapData, MapError> {
    if bytes.len() < 8 + LUMP_COUNT * 8 || &bytes[..4] != b"IBSP" {
        return err("not an IBSP file (bad magic or truncated header)");
    }
    let version = i32_at(bytes, 4);
    if version != 46 {
        return err(format!(
            "IBSP version {version} is not supported (46 for Quake 3, 38 for Quake 2)"
        ));
    }
    let ent_text = super::lumps::lump(bytes, 8, LUMP_ENTITIES, 1, "entities")?;
    let ent_text = String::from_utf8_lossy(ent_text);
    let ent_text = ent_text.trim_end_matches('\0');
    let mut map = parse::parse(ent_text).map_err(|e| MapError::Bsp(format!("entities: {e}")))?;

    let shaders = super::lumps::lump(bytes, 8, LUMP_SHADERS, 72, "shaders")?;
    let (shader_names, shader_contents) = read_shaders(shaders);
    let surfaces = super::lumps::lump(bytes, 8, LUMP_SURFACES, 104, "surfaces")?;
    let nsurfaces = surfaces.len() / 104;
    let verts = super::lumps::lump(bytes, 8, LUMP_DRAWVERTS, 44, "drawverts")?;
    let nverts = verts.len() / 44;
    let planes: Vec<Plane> = super::lumps::lump(bytes, 8, LUMP_PLANES, 16, "planes")?
        .chunks_exact(16)
        .map(|p| Plane {
            normal: DVec3::new(f32_at(p, 0), f32_at(p, 4), f32_at(p, 8)),
            dist: f32_at(p, 12),
        })
        .collect();
    let sides = super::lumps::lump(bytes, 8, LUMP_BRUSHSIDES, 8, "brushsides")?;
    let nsides = sides.len() / 8;
    let brushes_raw = super::lumps::lump(bytes, 8, LUMP_BRUSHES, 12, "brushes")?;
    let nbrushes = brushes_raw.len() / 12;
    let models = super::lumps::lump(bytes, 8, LUMP_MODELS, 40, "models")?;

    let read_brush = |bi: usize| -> Result<Brush, MapError> {
        let b = &brushes_raw[bi * 12..];
        let range = super::lumps::brush_sides(bi, i32_at(b, 0), i32_at(b, 4), nsides)?;
        let mut faces = Vec::with_capacity(range.len());
        for si in range {
            let s = &sides[si * 8..];
            let pi = index(i32_at(s, 0), planes.len(), "plane", si)?;
            let p = planes[pi];
            let plane = unit_plane(
                p.normal,
                p.dist,
                &format!("plane {pi} (side {si} of brush {bi})"),
            )?;
            let shader = i32_at(s, 4);
            let texture = if shader < 0 {
                String::new()
            } else {
                shader_names[index(shader, shader_names.len(), "shader", si)?].clone()
            };
            faces.push(Face { plane, texture });
        }
        // Keep only the sides that bound the brush: the compiler's bevel sides cut nothing
        // but carry arbitrary shaders, which would mislead the solidity rule.
        let planes: Vec<Plane> = faces.iter().map(|f| f.plane).collect();
        let bounding = planes_to_polygons(&planes, 1e-6);
        if bounding.len() >= 4 {
            let mut keep = vec![false; faces.len()];
            for (i, _) in &bounding {
                keep[*i] = true;
            }
            let mut k = keep.iter();
            faces.retain(|_| *k.next().unwrap_or(&true));
        }
        Ok(Brush { faces, line: 0 })
    };

    let model_brushes = |mi: usize| -> Result<Vec<Brush>, MapError> {
        let m = &models[mi * 40..];
        let first = i32_at(m, 32);
        let n = i32_at(m, 36);
        if first < 0 || n < 0 || first as usize + n as usize > nbrushes {
            return err(format!(
                "model {mi} brushes {first}..{first}+{n} out of range (0..{nbrushes})"
            ));
        }
        (first as usize..first as usize + n as usize)
            .map(&read_brush)
            .collect()
    };

    // The patch surfaces of model `mi`: a grid of `width x height` drawn vertices, `width`
    // varying fastest.
    let model_patches = |mi: usize| -> Result<Vec<Patch>, MapError> {
        let m = &models[mi * 40..];
        let (first, n) = (i32_at(m, 24), i32_at(m, 28));
        if first < 0 || n < 0 || first as usize + n as usize > nsurfaces {
            return err(format!(
                "model {mi} surfaces {first}..{first}+{n} out of range (0..{nsurfaces})"
            ));
        }
        let mut out = Vec::new();
        for si in first as usize..first as usize + n as usize {
            let s = &surfaces[si * 104..];
            if i32_at(s, 8) != SURFACE_PATCH {
                continue;
            }
            let shader = index(i32_at(s, 0), shader_names.len(), "shader", si)?;
            let (fv, nv) = (i32_at(s, 12), i32_at(s, 16));
            let (w, h) = (i32_at(s, 96), i32_at(s, 100));
            let size = |v: i32| usize::try_from(v).unwrap_or(0);
            Patch::check_size(size(w), size(h)).or_else(|e| err(format!("surface {si}: {e}")))?;
            let (w, h) = (size(w), size(h));
            if fv < 0 || nv as usize != w * h || fv as usize + w * h > nverts {
                return err(format!(
                    "surface {si}: patch vertices {fv}..{fv}+{nv} do not hold its {w} x {h} \
                     grid within the {nverts} drawn vertices"
                ));
            }
            let at = |i: usize, j: usize| {
                let v = &verts[(fv as usize + j * w + i) * 44..];
                DVec3::new(f32_at(v, 0), f32_at(v, 4), f32_at(v, 8))
            };
            let patch = Patch {
                width: w,
                height: h,
                points: (0..w)
                    .flat_map(|i| (0..h).map(move |j| (i, j)))
                    .map(|(i, j)| at(i, j))
                    .collect(),
                texture: shader_names[shader].clone(),
                contents: Some(shader_contents[shader]),
                line: 0,
            };
            patch
                .check()
                .or_else(|e| err(format!("surface {si}: {e}")))?;
            out.push(patch);
        }
        Ok(out)
    };

    assign_models(&mut map, models.len() / 40, |mi| {
        Ok((model_brushes(mi)?, model_patches(mi)?))
    })?;
    Ok(map)
}
