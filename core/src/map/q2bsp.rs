//! Brushes and entities of a compiled Quake 2 `.bsp`: IBSP version 38, and Qbism's `QBSP`
//! (the same lumps with 32-bit indices and float bounds, for maps past IBSP's limits).
//!
//! Like Quake 3's, the compiler keeps every brush as plane-bounded sides (plus bevels,
//! which bound nothing and are dropped). Quake 2's models do not list their brushes: a
//! model's brushes are those its BSP tree's leaves name (the leaf-brush lists), found by
//! walking the tree from the model's head node. A brush's contents decide whether it
//! collides: solid, window and player-clip brushes do; water, slime, lava, mist and the
//! rest do not, and are left out.

use super::bsp29::CELL_TEXTURE;
use super::lumps::{assign_models, brush_sides, err, i32_at, planes20};
use super::{parse, Brush, Face, MapData, MapError};
use crate::geom::planes_to_polygons;
use std::collections::BTreeSet;

const LUMP_ENTITIES: usize = 0;
const LUMP_PLANES: usize = 1;
const LUMP_NODES: usize = 4;
const LUMP_LEAVES: usize = 8;
const LUMP_LEAF_BRUSHES: usize = 10;
const LUMP_MODELS: usize = 13;
const LUMP_BRUSHES: usize = 14;
const LUMP_BRUSH_SIDES: usize = 15;
const LUMP_COUNT: usize = 19;

const MODEL: usize = 48;

/// Where a format's records differ: node and leaf sizes, where a leaf's brush list
/// starts, and the widths of a leaf-brush entry and of a brush side's plane index.
struct Layout {
    name: &'static str,
    node: usize,
    leaf: usize,
    /// Offset of the leaf's first leaf-brush index (its count follows).
    leaf_brushes_at: usize,
    /// Leaf-brush entries, leaf brush first and count, and side plane indices are 32-bit
    /// (else 16-bit).
    wide: bool,
}

const IBSP: Layout = Layout {
    name: "IBSP",
    node: 28,
    leaf: 28,
    leaf_brushes_at: 24,
    wide: false,
};
const QBISM: Layout = Layout {
    name: "QBSP",
    node: 44,
    leaf: 52,
    leaf_brushes_at: 44,
    wide: true,
};

impl Layout {
    /// The index (16 or 32 bits) at `off`.
    fn index(&self, b: &[u8], off: usize) -> usize {
        if self.wide {
            u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]) as usize
        } else {
            usize::from(u16::from_le_bytes([b[off], b[off + 1]]))
        }
    }

    fn width(&self) -> usize {
        if self.wide {
            4
        } else {
            2
        }
    }
}

/// The layout the bytes start like, version 38 either way.
fn layout(bytes: &[u8]) -> Option<Layout> {
    if bytes.len() < 8 || i32_at(bytes, 4) != 38 {
        return None;
    }
    match &bytes[..4] {
        b"IBSP" => Some(IBSP),
        b"QBSP" => Some(QBISM),
        _ => None,
    }
}

/// Contents that stop a player: solid, window, player clip.
const BLOCKS_PLAYERS: i32 = 0x1 | 0x2 | 0x10000;
/// Deepest tree walked (a file whose tree is deeper is refused).
const MAX_TREE_DEPTH: usize = 1024;

/// Whether the bytes are a Quake 2 `.bsp` (IBSP or Qbism QBSP, version 38).
pub(super) fn is_q2bsp(bytes: &[u8]) -> bool {
    layout(bytes).is_some()
}

pub(super) fn parse(bytes: &[u8]) -> Result<MapData, MapError> {
    let Some(lay) = layout(bytes).filter(|_| bytes.len() >= 8 + LUMP_COUNT * 8) else {
        return err("not a Quake 2 IBSP or QBSP file (bad magic or truncated header)");
    };
    let (w, name) = (lay.width(), lay.name);
    let lump = |i: usize, rec: usize, name: &str| super::lumps::lump(bytes, 8, i, rec, name);
    let ent_text = String::from_utf8_lossy(lump(LUMP_ENTITIES, 1, "entities")?);
    let mut map = parse::parse(ent_text.trim_end_matches('\0'))
        .map_err(|e| MapError::Bsp(format!("entities: {e}")))?;
    let planes = planes20(bytes, 8, LUMP_PLANES)?;
    let nodes = lump(LUMP_NODES, lay.node, "nodes")?;
    let leaves = lump(LUMP_LEAVES, lay.leaf, "leaves")?;
    let leaf_brushes = lump(LUMP_LEAF_BRUSHES, w, "leaf brushes")?;
    let models = lump(LUMP_MODELS, MODEL, "models")?;
    let brushes = lump(LUMP_BRUSHES, 12, "brushes")?;
    let sides = lump(LUMP_BRUSH_SIDES, 2 * w, "brush sides")?;
    let (nnodes, nleaves) = (nodes.len() / lay.node, leaves.len() / lay.leaf);
    let (nbrushes, nsides) = (brushes.len() / 12, sides.len() / (2 * w));

    // The brushes the leaves under `head` name, in index order.
    let brushes_under = |head: i32, mi: usize| -> Result<BTreeSet<usize>, MapError> {
        let mut found = BTreeSet::new();
        let mut seen = vec![false; nnodes];
        let mut stack = vec![(head, 0usize)];
        while let Some((c, depth)) = stack.pop() {
            if depth > MAX_TREE_DEPTH {
                return err(format!("model {mi}: tree deeper than {MAX_TREE_DEPTH}"));
            }
            if c >= 0 {
                let n = c as usize;
                if n >= nnodes {
                    return err(format!("model {mi}: node {n} out of range (0..{nnodes})"));
                }
                if std::mem::replace(&mut seen[n], true) {
                    return err(format!("node {n} is reached twice: not a tree"));
                }
                let rec = &nodes[n * lay.node..];
                stack.push((i32_at(rec, 4), depth + 1));
                stack.push((i32_at(rec, 8), depth + 1));
            } else {
                let l = (-1 - i64::from(c)) as usize;
                if l >= nleaves {
                    return err(format!("leaf {l} out of range (0..{nleaves})"));
                }
                let rec = &leaves[l * lay.leaf..];
                let at = lay.leaf_brushes_at;
                let (first, n) = (lay.index(rec, at), lay.index(rec, at + w));
                if first.saturating_add(n) > leaf_brushes.len() / w {
                    return err(format!("{name} leaf {l}: brush list runs past its lump"));
                }
                for k in first..first + n {
                    let b = lay.index(leaf_brushes, k * w);
                    if b >= nbrushes {
                        return err(format!("leaf {l}: brush {b} out of range (0..{nbrushes})"));
                    }
                    found.insert(b);
                }
            }
        }
        Ok(found)
    };

    // A brush that stops players, as its bounding sides; `None` for one that does not.
    let read_brush = |bi: usize| -> Result<Option<Brush>, MapError> {
        let b = &brushes[bi * 12..];
        let (first, n, contents) = (i32_at(b, 0), i32_at(b, 4), i32_at(b, 8));
        if contents & BLOCKS_PLAYERS == 0 {
            return Ok(None);
        }
        let range = brush_sides(bi, first, n, nsides)?;
        let mut own = Vec::with_capacity(range.len());
        for si in range {
            let pi = lay.index(sides, si * 2 * w);
            let Some(p) = planes.get(pi) else {
                return err(format!(
                    "side {si} of brush {bi}: plane {pi} out of range (0..{})",
                    planes.len()
                ));
            };
            // (Its texinfo, after the plane, names a texture: the contents already decided.)
            own.push(*p);
        }
        // Only the sides that bound it (the compiler's bevels cut nothing).
        let faces: Vec<Face> = planes_to_polygons(&own, 1e-6)
            .into_iter()
            .map(|(i, _)| Face {
                plane: own[i],
                texture: CELL_TEXTURE.into(),
            })
            .collect();
        Ok((faces.len() >= 4).then_some(Brush { faces, line: 0 }))
    };

    let model_brushes = |mi: usize| -> Result<Vec<Brush>, MapError> {
        let head = i32_at(&models[mi * MODEL..], 36);
        let mut out = Vec::new();
        for bi in brushes_under(head, mi)? {
            out.extend(read_brush(bi)?);
        }
        Ok(out)
    };
    assign_models(&mut map, models.len() / MODEL, |mi| {
        Ok((model_brushes(mi)?, Vec::new()))
    })?;
    Ok(map)
}
