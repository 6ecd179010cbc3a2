//! Compiled Quake and Hexen 2 (BSP29), Half-Life (BSP30) maps, and Quake's large-map
//! variants of BSP29 (BSP2, 2PSB).
//!
//! These keep no brushes, so the solid geometry comes from the BSP tree itself: each solid
//! leaf of a model's hull-0 tree is a convex cell bounded by the planes on its path from
//! the root (and, where the path leaves it open, by the model's bounds). Each cell becomes
//! one brush of the same collision model as any other map's; entities come from the entity
//! lump as text.

use super::lumps::{assign_models, err, f32_at, i16_at, i32_at};
use super::{parse, Brush, Face, MapData, MapError, MapWarning};
use crate::geom::{planes_to_polygons, Plane, MAX_COORD};
use glam::DVec3;

const LUMP_ENTITIES: usize = 0;
const LUMP_PLANES: usize = 1;
const LUMP_NODES: usize = 5;
const LUMP_LEAVES: usize = 10;
const LUMP_MODELS: usize = 14;
const LUMP_COUNT: usize = 15;
/// Leaf contents that are solid for a player: solid and sky.
const CONTENTS_SOLID: i32 = -2;
const CONTENTS_SKY: i32 = -6;
/// Deepest tree read (real maps stay far below; each level adds a plane to every cell).
const MAX_TREE_DEPTH: usize = 256;
/// How far a model's bounds may cross (min above max) and still be taken as a box.
const INVERTED_SLACK: f64 = 1.0;
/// The texture name cell brushes carry (solid by the one solidity rule).
pub(super) const CELL_TEXTURE: &str = "bsp/solid";

/// How a file of the BSP29 family lays out its nodes and leaves (everything else read here
/// is the same in all of them). BSP2 and 2PSB are Quake's large-map variants: 32-bit
/// children and face ranges, bounds as floats (BSP2) or still as shorts (2PSB).
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// The format's name for messages.
    name: &'static str,
    node: usize,
    leaf: usize,
    /// Children are 32-bit (at 4 and 8), else 16-bit (at 4 and 6).
    wide: bool,
}

const CLASSIC: Layout = Layout {
    name: "BSP29",
    node: 24,
    leaf: 28,
    wide: false,
};
const BSP2: Layout = Layout {
    name: "BSP2",
    node: 44,
    leaf: 44,
    wide: true,
};
const PSB2: Layout = Layout {
    name: "2PSB",
    node: 32,
    leaf: 32,
    wide: true,
};

/// The layout the bytes start like: BSP version 29 or 30, or the `BSP2` or `2PSB` magic.
fn layout(bytes: &[u8]) -> Option<Layout> {
    match bytes.get(..4)? {
        b"BSP2" => Some(BSP2),
        b"2PSB" => Some(PSB2),
        _ => matches!(i32_at(bytes, 0), 29 | 30).then_some(CLASSIC),
    }
}

/// Whether the bytes start like a file of the BSP29 family (BSP29, BSP30, BSP2, 2PSB).
pub(super) fn is_bsp29(bytes: &[u8]) -> bool {
    layout(bytes).is_some()
}

/// A child of a node: another node, or a leaf (stored as `-1 - leaf`).
enum Child {
    Node(usize),
    Leaf(usize),
}

struct Tree<'a> {
    layout: Layout,
    planes: Vec<Plane>,
    nodes: &'a [u8],
    leaves: &'a [u8],
}

impl Tree<'_> {
    /// Child `k` (0 front, 1 back) of the node record `rec`.
    fn child_of(&self, rec: &[u8], k: usize, owner: usize) -> Result<Child, MapError> {
        let v = if self.layout.wide {
            i32_at(rec, 4 + 4 * k)
        } else {
            i32::from(i16_at(rec, 4 + 2 * k))
        };
        self.child(v, owner)
    }

    fn child(&self, v: i32, owner: usize) -> Result<Child, MapError> {
        let (nn, nl) = (
            self.nodes.len() / self.layout.node,
            self.leaves.len() / self.layout.leaf,
        );
        if v >= 0 {
            let n = v as usize;
            if n >= nn {
                return err(format!(
                    "node {owner}: child node {n} out of range (0..{nn})"
                ));
            }
            Ok(Child::Node(n))
        } else {
            let l = (-1 - i64::from(v)) as usize;
            if l >= nl {
                return err(format!(
                    "node {owner}: child leaf {l} out of range (0..{nl})"
                ));
            }
            Ok(Child::Leaf(l))
        }
    }

    /// The solid cells under `root`, each as its bounding planes (outward normals).
    fn solid_cells(&self, root: usize, bounds: [Plane; 6]) -> Result<Vec<Vec<Plane>>, MapError> {
        let mut out = Vec::new();
        // Depth-first with an explicit stack: (child, planes on the path). Each node is
        // reached once in a tree; a file whose nodes are shared or loop is refused.
        let mut stack = vec![(Child::Node(root), Vec::new())];
        let mut seen = vec![false; self.nodes.len() / self.layout.node];
        while let Some((c, path)) = stack.pop() {
            match c {
                Child::Leaf(l) => {
                    let contents = i32_at(self.leaves, l * self.layout.leaf);
                    if contents == CONTENTS_SOLID || contents == CONTENTS_SKY {
                        let mut planes: Vec<Plane> = bounds.to_vec();
                        planes.extend(path);
                        out.push(planes);
                    }
                }
                Child::Node(n) => {
                    if std::mem::replace(&mut seen[n], true) {
                        return err(format!("node {n} is reached twice: not a tree"));
                    }
                    if path.len() > MAX_TREE_DEPTH {
                        return err(format!("node {n}: tree deeper than {MAX_TREE_DEPTH}"));
                    }
                    let rec = &self.nodes[n * self.layout.node..];
                    let pi = i32_at(rec, 0);
                    if pi < 0 || pi as usize >= self.planes.len() {
                        return err(format!(
                            "node {n}: plane {pi} out of range (0..{})",
                            self.planes.len()
                        ));
                    }
                    let p = self.planes[pi as usize];
                    let (front, back) = (self.child_of(rec, 0, n)?, self.child_of(rec, 1, n)?);
                    // Front: n·x >= d, bounded by the flipped plane; back: n·x <= d.
                    let mut fp = path.clone();
                    fp.push(p.flipped());
                    let mut bp = path;
                    bp.push(p);
                    stack.push((back, bp));
                    stack.push((front, fp));
                }
            }
        }
        Ok(out)
    }
}

pub(super) fn parse(bytes: &[u8]) -> Result<MapData, MapError> {
    let Some(layout) = layout(bytes) else {
        return err("not a BSP29, BSP30, BSP2 or 2PSB file");
    };
    if bytes.len() < 4 + LUMP_COUNT * 8 {
        return err(format!("{} header is truncated", layout.name));
    }
    let ent_text = super::lumps::lump(bytes, 4, LUMP_ENTITIES, 1, "entities")?;
    let ent_text = String::from_utf8_lossy(ent_text);
    let mut map = parse::parse(ent_text.trim_end_matches('\0'))
        .map_err(|e| MapError::Bsp(format!("entities: {e}")))?;
    let planes = super::lumps::planes20(bytes, 4, LUMP_PLANES)?;
    let tree = Tree {
        layout,
        planes,
        nodes: super::lumps::lump(bytes, 4, LUMP_NODES, layout.node, "nodes")?,
        leaves: super::lumps::lump(bytes, 4, LUMP_LEAVES, layout.leaf, "leaves")?,
    };
    let models_raw = super::lumps::lump(bytes, 4, LUMP_MODELS, 1, "models")?;
    // Quake and Half-Life models hold 4 hull heads (64 bytes), Hexen 2's 8 (80 bytes); the
    // fields read here sit at the same offsets in both.
    let referenced = map
        .entities
        .iter()
        .filter_map(|e| e.get("model")?.strip_prefix('*')?.parse::<usize>().ok())
        .max()
        .map_or(1, |m| m + 1);
    let stride = match (models_raw.len() % 64 == 0, models_raw.len() % 80 == 0) {
        (true, false) => 64,
        (false, true) => 80,
        (true, true) if models_raw.len() / 80 == referenced => 80,
        (true, true) => 64,
        (false, false) => {
            return err(format!(
                "models lump length {} fits neither 64- nor 80-byte models",
                models_raw.len()
            ))
        }
    };
    let nmodels = models_raw.len() / stride;
    let repaired = std::cell::RefCell::new(Vec::new());
    let model_brushes = |mi: usize| -> Result<Vec<Brush>, MapError> {
        let m = &models_raw[mi * stride..];
        let mut lo = DVec3::new(f32_at(m, 0), f32_at(m, 4), f32_at(m, 8));
        let mut hi = DVec3::new(f32_at(m, 12), f32_at(m, 16), f32_at(m, 20));
        // Compilers round bounds outward from float geometry; a thin model can come out
        // with its bounds crossed by a unit. That is the box between them.
        let crossed = (lo - hi).max_element();
        if crossed > 0.0 && crossed <= INVERTED_SLACK {
            repaired.borrow_mut().push(MapWarning {
                line: 0,
                message: format!(
                    "model {mi}: bounds {:?}..{:?} are crossed by {crossed} (compiler rounding); taken as the box between them",
                    lo.to_array(),
                    hi.to_array()
                ),
            });
            (lo, hi) = (lo.min(hi), lo.max(hi));
        }
        if !(lo.is_finite() && hi.is_finite() && lo.cmple(hi).all())
            || lo.abs().max_element() > MAX_COORD
            || hi.abs().max_element() > MAX_COORD
        {
            return err(format!("model {mi}: bounds {lo:?}..{hi:?} are not usable"));
        }
        let head = i32_at(m, 36);
        if head < 0 || head as usize >= tree.nodes.len() / layout.node {
            return err(format!("model {mi}: head node {head} out of range"));
        }
        // Cells left open by the tree (outside the map) end a unit beyond the model.
        let (lo, hi) = (lo - DVec3::ONE, hi + DVec3::ONE);
        let bounds = [
            Plane {
                normal: DVec3::X,
                dist: hi.x,
            },
            Plane {
                normal: -DVec3::X,
                dist: -lo.x,
            },
            Plane {
                normal: DVec3::Y,
                dist: hi.y,
            },
            Plane {
                normal: -DVec3::Y,
                dist: -lo.y,
            },
            Plane {
                normal: DVec3::Z,
                dist: hi.z,
            },
            Plane {
                normal: -DVec3::Z,
                dist: -lo.z,
            },
        ];
        let mut brushes = Vec::new();
        for cell in tree.solid_cells(head as usize, bounds)? {
            // Keep only the planes that bound the cell (most on the path cut nothing).
            let faces: Vec<Face> = planes_to_polygons(&cell, 1e-6)
                .into_iter()
                .map(|(i, _)| Face {
                    plane: cell[i],
                    texture: CELL_TEXTURE.into(),
                })
                .collect();
            if faces.len() >= 4 && faces.len() <= super::MAX_BRUSH_FACES {
                brushes.push(Brush { faces, line: 0 });
            }
        }
        Ok(brushes)
    };
    assign_models(&mut map, nmodels, |mi| Ok((model_brushes(mi)?, Vec::new())))?;
    map.warnings.extend(repaired.into_inner());
    Ok(map)
}
