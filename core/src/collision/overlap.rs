//! Position tests: does a hull, placed (and possibly turned), overlap a solid brush? One
//! exact separating-axis test serves upright and turned hulls alike.

use super::hull::Hull;
use super::{CollisionModel, Contents, Region, TraceScratch};
use crate::geom::{Aabb, POSITION_EPS};
use glam::{DQuat, DVec3};

/// A hull placed in the world as the separating-axis test sees it. Two kinds, statically
/// dispatched: the test runs per candidate brush and must not allocate.
trait Placed {
    /// `min` and `max` of `axis · x` over the placed hull.
    fn project(&self, axis: DVec3) -> (f64, f64);
    fn bounds(&self) -> Aabb;
    /// An upright box: its faces are the coordinate planes.
    fn is_box(&self) -> bool;
    /// Calls `f` with each face normal and the hull's furthest extent along it, until `f`
    /// returns true; returns whether it did.
    fn any_face(&self, f: impl FnMut(DVec3, f64) -> bool) -> bool;
    /// Calls `f` with each unit edge direction until `f` returns true.
    fn any_dir(&self, f: impl FnMut(DVec3) -> bool) -> bool;
}

/// A hull upright at a position.
struct Upright<'a> {
    hull: &'a Hull,
    pos: DVec3,
}

impl Placed for Upright<'_> {
    fn project(&self, axis: DVec3) -> (f64, f64) {
        let (lo, hi) = self.hull.project(axis);
        let o = axis.dot(self.pos);
        (lo + o, hi + o)
    }

    fn bounds(&self) -> Aabb {
        self.hull.bounds().offset(self.pos)
    }

    fn is_box(&self) -> bool {
        self.hull.is_box()
    }

    fn any_face(&self, mut f: impl FnMut(DVec3, f64) -> bool) -> bool {
        self.hull
            .planes()
            .any(|p| f(p.normal, p.dist + p.normal.dot(self.pos)))
    }

    fn any_dir(&self, f: impl FnMut(DVec3) -> bool) -> bool {
        self.hull.edge_directions().any(f)
    }
}

/// A hull turned about a point: corners, face normals and edge directions in world space.
struct Turned {
    pts: Vec<DVec3>,
    normals: Vec<DVec3>,
    dirs: Vec<DVec3>,
}

impl Placed for Turned {
    fn project(&self, axis: DVec3) -> (f64, f64) {
        range(&self.pts, axis)
    }

    fn bounds(&self) -> Aabb {
        Aabb::from_points(&self.pts)
    }

    fn is_box(&self) -> bool {
        false
    }

    fn any_face(&self, mut f: impl FnMut(DVec3, f64) -> bool) -> bool {
        self.normals.iter().any(|n| f(*n, range(&self.pts, *n).1))
    }

    fn any_dir(&self, f: impl FnMut(DVec3) -> bool) -> bool {
        self.dirs.iter().copied().any(f)
    }
}

/// `min` and `max` of `axis · p` over the points.
pub(super) fn range(set: &[DVec3], axis: DVec3) -> (f64, f64) {
    set.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            let d = axis.dot(*p);
            (l.min(d), h.max(d))
        })
}

/// The work of [`CollisionModel::position_solid`].
pub(super) fn position_solid(
    model: &CollisionModel,
    hull: &Hull,
    pos: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> bool {
    model.overlapping_brush(hull, pos, mask, s).is_some()
}

/// The work of [`CollisionModel::overlapping_brush`].
pub(super) fn overlapping_brush(
    model: &CollisionModel,
    hull: &Hull,
    pos: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> Option<usize> {
    first_overlap(model, &Upright { hull, pos }, mask, s)
}

/// The work of [`CollisionModel::position_solid_posed`].
pub(super) fn position_solid_posed(
    model: &CollisionModel,
    hull: &Hull,
    position: DVec3,
    q: DQuat,
    origin: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> bool {
    if q == DQuat::IDENTITY {
        return model.position_solid(hull, position, mask, s);
    }
    let placed = Turned {
        pts: hull
            .vertices()
            .iter()
            .map(|v| origin + q * (position + *v - origin))
            .collect(),
        normals: hull.planes().map(|p| q * p.normal).collect(),
        dirs: hull.edge_directions().map(|d| q * d).collect(),
    };
    first_overlap(model, &placed, mask, s).is_some()
}

/// The work of [`CollisionModel::position_solid_in`].
pub(super) fn position_solid_in(
    model: &CollisionModel,
    region: &Region,
    hull: &Hull,
    pos: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> bool {
    let h = Upright { hull, pos };
    if !region.contains(&h.bounds()) {
        return first_overlap(model, &h, mask, s).is_some();
    }
    let inner = h.bounds().expand(-POSITION_EPS);
    region
        .brushes()
        .iter()
        .zip(region.brush_bounds())
        .any(|(&bi, b)| b.overlaps(&inner) && brush_blocks(model, &h, bi as usize, mask, &inner))
}

/// The lowest-numbered brush the placed hull overlaps.
fn first_overlap(
    model: &CollisionModel,
    h: &impl Placed,
    mask: Contents,
    s: &mut TraceScratch,
) -> Option<usize> {
    let q = h.bounds();
    let mut cand = std::mem::take(&mut s.candidates);
    cand.clear();
    model.brush_grid.query(&q, |i| cand.push(i));
    cand.sort_unstable();
    let inner = q.expand(-POSITION_EPS);
    let found = cand
        .iter()
        .map(|&i| i as usize)
        .find(|&bi| brush_blocks(model, h, bi, mask, &inner));
    s.candidates = cand;
    found
}

/// Whether brush `bi` meets `mask` and the placed hull (whose bounds shrunk by
/// [`POSITION_EPS`] are `inner`) overlaps it.
fn brush_blocks(
    model: &CollisionModel,
    h: &impl Placed,
    bi: usize,
    mask: Contents,
    inner: &Aabb,
) -> bool {
    let b = &model.brushes[bi];
    b.contents.intersects(mask) && b.bounds.overlaps(inner) && overlaps_brush(model, h, bi)
}

/// Separating-axis test of the placed hull against brush `bi`, the brush's bounds
/// already known to overlap. Face axes need one side only: two disjoint convex solids
/// are separated by a face plane of one of them, or by an edge-pair axis.
fn overlaps_brush(model: &CollisionModel, h: &impl Placed, bi: usize) -> bool {
    let pts = model.brush_points(bi);
    for p in model.brush_planes(bi) {
        if p.dist - h.project(p.normal).0 <= POSITION_EPS {
            return false;
        }
    }
    // A box's faces are the coordinate axes: the bounds test settled them, and an axial
    // brush has only axis-parallel edges, so no edge pair separates either.
    if h.is_box() && model.brushes[bi].axial {
        return true;
    }
    if !h.is_box() && h.any_face(|n, far| range(pts, n).0 - far >= -POSITION_EPS) {
        return false;
    }
    let separated = h.any_dir(|d| {
        model.brush_axes(bi).iter().any(|a| {
            let c = d.cross(*a);
            let l = c.length();
            if l <= 1e-9 {
                return false;
            }
            let axis = c / l;
            let (hl, hh) = h.project(axis);
            let (bl, bh) = range(pts, axis);
            (hh - bl).min(bh - hl) <= POSITION_EPS
        })
    });
    !separated
}
