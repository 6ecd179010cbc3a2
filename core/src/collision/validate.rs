//! Structural checks of a [`CollisionModel`] that did not come from
//! [`CollisionModel::build`] (a decoded cache file): every index in range, every number
//! finite, trees acyclic and no deeper than the traversals allow. A model that passes
//! cannot make a query panic or loop.

use super::grid::{BrushGrid, Entry, Quads, FIRST_ALL, FIRST_Z, MAX_LEVELS};
use super::tree::{AxialTree, Node, MAX_DEPTH};
use super::{mesh::NONE, CollisionModel};
use crate::geom::{Aabb, Plane};
use glam::DVec3;
use thiserror::Error;

/// Why a model failed its structural check.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("invalid collision model: {0}")]
pub struct ModelError(pub String);

fn fail<T>(m: String) -> Result<T, ModelError> {
    Err(ModelError(m))
}

fn range(what: &str, i: usize, (a, b): (u32, u32), len: usize) -> Result<(), ModelError> {
    if a > b || b as usize > len {
        return fail(format!("{what} {i}: range {a}..{b} outside 0..{len}"));
    }
    Ok(())
}

fn finite_vec(what: &str, i: usize, v: DVec3) -> Result<(), ModelError> {
    if v.is_finite() {
        Ok(())
    } else {
        fail(format!("{what} {i}: {v:?} is not finite"))
    }
}

fn unit_plane(what: &str, i: usize, p: &Plane) -> Result<(), ModelError> {
    let ok = p.dist.is_finite() && (p.normal.length() - 1.0).abs() <= 1e-6;
    if ok {
        Ok(())
    } else {
        fail(format!("{what} {i}: plane {p:?} is not a unit plane"))
    }
}

fn finite_box(what: &str, i: usize, b: &Aabb) -> Result<(), ModelError> {
    if b.is_empty() || (b.min.is_finite() && b.max.is_finite()) {
        Ok(())
    } else {
        fail(format!("{what} {i}: bounds {b:?} are not finite"))
    }
}

impl AxialTree {
    /// Checks the tree over `count` items.
    fn validate(&self, name: &str, count: usize) -> Result<(), ModelError> {
        if self.item_bounds.len() != self.items.len() {
            return fail(format!("{name}: item bounds do not match items"));
        }
        if let Some(i) = self.items.iter().find(|&&i| i as usize >= count) {
            return fail(format!("{name}: item {i} outside 0..{count}"));
        }
        if self
            .item_bounds
            .iter()
            .any(|b| b.0.iter().any(|v| v.is_nan()))
        {
            return fail(format!("{name}: item bounds are NaN"));
        }
        // Children come after their parent (the build is pre-order), so the tree is
        // acyclic; depths then follow in one forward pass.
        let mut depth = vec![0usize; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            match n {
                Node::Leaf { first, count } => {
                    let end = *first as u64 + *count as u64;
                    if end > self.items.len() as u64 {
                        return fail(format!("{name}: leaf {i} runs past the item list"));
                    }
                }
                Node::Split {
                    axis,
                    dist,
                    back,
                    front,
                } => {
                    if *axis > 2 || !dist.is_finite() {
                        return fail(format!("{name}: split {i} has axis {axis}, dist {dist}"));
                    }
                    for c in [*back, *front] {
                        let c = c as usize;
                        if c <= i || c >= self.nodes.len() {
                            return fail(format!("{name}: split {i} has child {c}"));
                        }
                        depth[c] = depth[c].max(depth[i] + 1);
                        if depth[c] > MAX_DEPTH {
                            return fail(format!("{name}: deeper than {MAX_DEPTH}"));
                        }
                    }
                }
            }
        }
        finite_box(name, 0, &self.bounds)
    }
}

impl BrushGrid {
    /// Checks the grid over `count` brushes: each level's cell lists cover its entries
    /// exactly and name only brushes that exist.
    fn validate(&self, count: usize) -> Result<(), ModelError> {
        if self.levels.len() > MAX_LEVELS || !self.origin.is_finite() {
            return fail(format!(
                "brush grid: {} levels from {:?}",
                self.levels.len(),
                self.origin
            ));
        }
        // Every entry names a brush that exists, with bounds that are numbers.
        let entries = |what: &str, list: &mut dyn Iterator<Item = &Entry>| {
            for e in list {
                if e.brush as usize >= count || e.key.iter().any(|v| v.is_nan()) {
                    return fail(format!(
                        "brush grid {what}: brush {} (of {count}) with bounds {:?}",
                        e.brush,
                        e.bounds()
                    ));
                }
            }
            Ok(())
        };
        // The short list: a brush that exists with bounds that are numbers in each slot,
        // or no brush and NaN bounds (meeting nothing).
        let q = &self.loose;
        if q.sides.len() != q.brushes.len() {
            return fail(format!(
                "brush grid loose list: {} groups of bounds for {} of brushes",
                q.sides.len(),
                q.brushes.len()
            ));
        }
        for (sides, brushes) in q.sides.iter().zip(&q.brushes) {
            for (i, &b) in brushes.iter().enumerate() {
                let nan = sides.iter().map(|s| s[i].is_nan());
                let ok = if b == Quads::NONE {
                    nan.into_iter().all(|n| n)
                } else {
                    (b as usize) < count && !nan.into_iter().any(|n| n)
                };
                if !ok {
                    return fail(format!(
                        "brush grid loose list: brush {b} (of {count}) with bounds {:?}",
                        sides.map(|s| s[i])
                    ));
                }
            }
        }
        for (i, lv) in self.levels.iter().enumerate() {
            let cells = lv.dims.iter().try_fold(1u64, |n, &d| {
                (d > 0).then(|| n.checked_mul(d as u64)).flatten()
            });
            if cells.is_none_or(|c| c + 1 != lv.starts.len() as u64) || lv.dims[0] >= FIRST_Z {
                return fail(format!(
                    "brush grid level {i}: {} cell starts for dims {:?}",
                    lv.starts.len(),
                    lv.dims
                ));
            }
            if !(lv.cell > 0.0 && lv.cell.is_finite() && lv.inv_cell == 1.0 / lv.cell) {
                return fail(format!(
                    "brush grid level {i}: cell {} (inverse {})",
                    lv.cell, lv.inv_cell
                ));
            }
            if lv.starts.first() != Some(&0)
                || lv.starts.windows(2).any(|w| w[0] > w[1])
                || lv.starts.last().map(|&e| e as usize) != Some(lv.entries.len())
            {
                return fail(format!(
                    "brush grid level {i}: cell starts do not cover the entries"
                ));
            }
            entries(
                &format!("level {i}"),
                &mut lv.entries.iter().chain(&lv.brushes),
            )?;
            // Each copy knows its cell and whether it is its brush's first along each
            // axis (a query reports it from there); a list that is no cell's, that it is.
            let [nx, ny, nz] = lv.dims;
            let mut c = 0;
            for z in 0..nz {
                for y in 0..ny {
                    for x in 0..nx {
                        let list = &lv.entries[lv.starts[c] as usize..lv.starts[c + 1] as usize];
                        for e in list {
                            let want = lv.place_of(&self.origin, &e.bounds().aabb(), [x, y, z]);
                            if e.place != want {
                                return fail(format!(
                                    "brush grid level {i}: brush {} in cell {:?} placed {:#x}, not {want:#x}",
                                    e.brush,
                                    [x, y, z],
                                    e.place
                                ));
                            }
                        }
                        c += 1;
                    }
                }
            }
            if let Some(e) = lv.brushes.iter().find(|e| e.place != FIRST_ALL) {
                return fail(format!(
                    "brush grid level {i}: brush {} of the level's list placed {:#x}",
                    e.brush, e.place
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
impl BrushGrid {
    pub(super) fn validate_for_test(&self, count: usize) {
        self.validate(count).unwrap();
    }
}

/// The work of [`CollisionModel::validate`].
pub(super) fn validate(model: &CollisionModel) -> Result<(), ModelError> {
    let (nv, ne, np, nb) = (
        model.vertices.len(),
        model.edges.len(),
        model.polygons.len(),
        model.brushes.len(),
    );
    for (i, v) in model.vertices.iter().enumerate() {
        finite_vec("vertex", i, *v)?;
    }
    if model.vertex_active.len() != nv || model.poly_bounds32.len() != np {
        return fail("per-vertex or per-polygon lists differ in length".into());
    }
    for (i, e) in model.edges.iter().enumerate() {
        if e.v.iter().any(|&v| v as usize >= nv) {
            return fail(format!("edge {i}: vertex {:?} outside 0..{nv}", e.v));
        }
        if e.polys[0] as usize >= np || (e.polys[1] != NONE && e.polys[1] as usize >= np) {
            return fail(format!("edge {i}: polygons {:?} outside 0..{np}", e.polys));
        }
        for v in [e.normals[0], e.normals[1], e.mitre] {
            finite_vec("edge", i, v)?;
        }
    }
    if let Some(c) = model.poly_edges.iter().find(|&&c| (c >> 1) as usize >= ne) {
        return fail(format!(
            "polygon edge use {c} names an edge outside 0..{ne}"
        ));
    }
    for (i, p) in model.polygons.iter().enumerate() {
        let end = p.first.checked_add(p.count);
        range(
            "polygon",
            i,
            (p.first, end.unwrap_or(u32::MAX)),
            model.poly_edges.len(),
        )?;
        if p.count < 3 || p.brush as usize >= nb {
            return fail(format!("polygon {i}: {} edges, brush {}", p.count, p.brush));
        }
        unit_plane("polygon", i, &p.plane)?;
        finite_box("polygon", i, &p.bounds)?;
    }
    for (i, b) in model.brushes.iter().enumerate() {
        range("brush planes", i, b.planes, model.brush_planes.len())?;
        range("brush points", i, b.points, model.brush_points.len())?;
        range("brush axes", i, b.axes, model.brush_axes.len())?;
        range("brush separating axes", i, b.sat, model.brush_sat.len())?;
        // (The planes a box sweep clips are the first of the brush's own.)
        let clipped = (b.planes.0, b.planes.0.saturating_add(b.box_planes));
        range("brush box planes", i, clipped, b.planes.1 as usize)?;
        finite_box("brush", i, &b.bounds)?;
    }
    for (i, p) in model.brush_planes.iter().enumerate() {
        unit_plane("brush plane", i, p)?;
    }
    for (i, v) in model
        .brush_points
        .iter()
        .chain(&model.brush_axes)
        .enumerate()
    {
        finite_vec("brush point or axis", i, *v)?;
    }
    for (i, a) in model.brush_sat.iter().enumerate() {
        let ok = a.lo.is_finite() && a.hi.is_finite() && (a.normal.length() - 1.0).abs() <= 1e-6;
        if !ok {
            return fail(format!(
                "brush separating axis {i}: {a:?} is not a unit axis"
            ));
        }
    }
    model.poly_tree.validate("polygon tree", np)?;
    model.brush_grid.validate(nb)?;
    finite_box("model", 0, &model.bounds)
}
