//! Position tests: does a hull, placed (and possibly turned), overlap a solid brush? One
//! exact separating-axis test serves upright and turned hulls alike.

use super::hull::Hull;
use super::{CollisionModel, Contents, TraceScratch};
use crate::geom::{Aabb, POSITION_EPS};
use glam::{DQuat, DVec3};

/// A hull placed in the world as the separating-axis test sees it: upright at a position,
/// or turned (its corners, face normals and edge directions precomputed in world space).
enum Placed<'a> {
    Upright {
        hull: &'a Hull,
        pos: DVec3,
    },
    Turned {
        pts: Vec<DVec3>,
        normals: Vec<DVec3>,
        dirs: Vec<DVec3>,
    },
}

impl Placed<'_> {
    /// `min` and `max` of `axis · x` over the placed hull.
    fn project(&self, axis: DVec3) -> (f64, f64) {
        match self {
            Placed::Upright { hull, pos } => {
                let (lo, hi) = hull.project(axis);
                let o = axis.dot(*pos);
                (lo + o, hi + o)
            }
            Placed::Turned { pts, .. } => range(pts, axis),
        }
    }

    fn bounds(&self) -> Aabb {
        match self {
            Placed::Upright { hull, pos } => hull.bounds().offset(*pos),
            Placed::Turned { pts, .. } => Aabb::from_points(pts),
        }
    }

    /// An upright box: its faces are the coordinate planes.
    fn is_box(&self) -> bool {
        matches!(self, Placed::Upright { hull, .. } if hull.is_box())
    }

    /// The hull's face normals, each with the hull's furthest extent along it.
    fn faces(&self) -> Box<dyn Iterator<Item = (DVec3, f64)> + '_> {
        match self {
            Placed::Upright { hull, pos } => Box::new(
                hull.planes()
                    .map(move |p| (p.normal, p.dist + p.normal.dot(*pos))),
            ),
            Placed::Turned { pts, normals, .. } => {
                Box::new(normals.iter().map(move |n| (*n, range(pts, *n).1)))
            }
        }
    }

    fn dirs(&self) -> Box<dyn Iterator<Item = DVec3> + '_> {
        match self {
            Placed::Upright { hull, .. } => Box::new(hull.edge_directions()),
            Placed::Turned { dirs, .. } => Box::new(dirs.iter().copied()),
        }
    }
}

fn range(set: &[DVec3], axis: DVec3) -> (f64, f64) {
    set.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            let d = axis.dot(*p);
            (l.min(d), h.max(d))
        })
}

impl CollisionModel {
    /// Whether `hull` placed at `pos` overlaps (deeper than [`POSITION_EPS`]) any solid
    /// brush whose contents meet `mask`. Exact separating-axis test against the brushes.
    pub fn position_solid(
        &self,
        hull: &Hull,
        pos: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> bool {
        self.overlapping_brush(hull, pos, mask, s).is_some()
    }

    /// The first solid brush (index) that `hull` at `pos` overlaps, if any.
    pub fn overlapping_brush(
        &self,
        hull: &Hull,
        pos: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Option<usize> {
        self.first_overlap(&Placed::Upright { hull, pos }, mask, s)
    }

    /// Whether `hull` at `position`, turned by `q` about `origin`, overlaps solid.
    pub fn position_solid_posed(
        &self,
        hull: &Hull,
        position: DVec3,
        q: DQuat,
        origin: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> bool {
        if q == DQuat::IDENTITY {
            return self.position_solid(hull, position, mask, s);
        }
        let placed = Placed::Turned {
            pts: hull
                .vertices()
                .iter()
                .map(|v| origin + q * (position + *v - origin))
                .collect(),
            normals: hull.planes().map(|p| q * p.normal).collect(),
            dirs: hull.edge_directions().map(|d| q * d).collect(),
        };
        self.first_overlap(&placed, mask, s).is_some()
    }

    /// The first brush (in the brush tree's order) the placed hull overlaps.
    fn first_overlap(&self, h: &Placed, mask: Contents, s: &mut TraceScratch) -> Option<usize> {
        let q = h.bounds();
        s.begin(self);
        let mut cand = std::mem::take(&mut s.candidates);
        cand.clear();
        self.brush_tree.query_aabb(&q, |i| cand.push(i));
        let inner = q.expand(-POSITION_EPS);
        let found = cand.iter().map(|&i| i as usize).find(|&bi| {
            if s.brush_mark[bi] == s.stamp {
                return false;
            }
            s.brush_mark[bi] = s.stamp;
            let b = &self.brushes[bi];
            b.contents.intersects(mask) && b.bounds.overlaps(&inner) && self.overlaps_brush(h, bi)
        });
        s.candidates = cand;
        found
    }

    /// Separating-axis test of the placed hull against brush `bi`, the brush's bounds
    /// already known to overlap. Face axes need one side only: two disjoint convex solids
    /// are separated by a face plane of one of them, or by an edge-pair axis.
    fn overlaps_brush(&self, h: &Placed, bi: usize) -> bool {
        let pts = self.brush_points(bi);
        for p in self.brush_planes(bi) {
            if p.dist - h.project(p.normal).0 <= POSITION_EPS {
                return false;
            }
        }
        // A box's faces are the coordinate axes: the bounds test settled them, and an axial
        // brush has only axis-parallel edges, so no edge pair separates either.
        if h.is_box() && self.brushes[bi].axial {
            return true;
        }
        if !h.is_box() {
            for (n, far) in h.faces() {
                if range(pts, n).0 - far >= -POSITION_EPS {
                    return false;
                }
            }
        }
        for d in h.dirs() {
            for a in self.brush_axes(bi) {
                let c = d.cross(*a);
                let l = c.length();
                if l <= 1e-9 {
                    continue;
                }
                let axis = c / l;
                let (hl, hh) = h.project(axis);
                let (bl, bh) = range(pts, axis);
                if (hh - bl).min(bh - hl) <= POSITION_EPS {
                    return false;
                }
            }
        }
        true
    }
}
