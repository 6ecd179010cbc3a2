//! Geometry primitives and the numeric contract of the collision core.
//!
//! # Numerics
//!
//! Everything is `f64`; unit roundoff u = 2^-53 ≈ 1.1e-16. Supported coordinates lie within
//! ±[`MAX_COORD`] = 2^20 units (32× the ±32768 of classic maps), moves may be any length
//! within that box (up to 2^21·√3 units).
//!
//! Why rounding stays far below the expel thickness [`EXPEL`] = 1/32 there:
//! * Every trace works in coordinates relative to its start point. Forming `x - start`
//!   costs one rounding of at most u·2^21 ≈ 2.3e-10 units.
//! * Plane distances `n·x - d` take ~6 roundings of terms bounded by √3·2^21, so they are
//!   off by less than 6·u·√3·2^21 ≈ 2.4e-9 units; a contact fraction `(d1 - e)/(d1 - d2)`
//!   and the end point `start + f·dir` add a few more u·|dir| ≤ 1e-9 terms.
//! * Edge–edge contacts use the unit common normal of two edge lines. Its direction error is
//!   about u/sinθ for edges at angle θ; edges closer than [`PARALLEL_SIN`] = 1e-7 to parallel
//!   are left to the vertex–face tests (their contact then also involves an end vertex; a
//!   skipped line–line crossing dips in by at most |edge|·sinθ, under 1e-4 for edges of
//!   up to 1000 units). The resulting distance error is at
//!   most |Δ|·u/1e-7 with |Δ| ≤ 2^22 the separation of the two lines: ≤ 4.7e-3, still 6×
//!   below e, and ≤ 1e-6 for any move under 10^4 units.
//! * Welding moves a vertex by at most 2e-3 units per axis (it only ever merges corners
//!   that compiled maps store with `f32` planes, or that differ by float noise), so the
//!   polygons may sit up to 3.5e-3 off the brush planes; the zone covers it ~9 times.
//! * Plücker side tests only need a sign; they accept a ray passing up to [`SIDE_EPS`]
//!   outside an edge, which makes neighbouring polygons (shared, welded or T-junction
//!   edges) overlap a hair instead of leaving a crack.
//!
//! So rounding stays below 1e-3·e in every realistic case and below e/6 in the worst
//! corner of the range; with the welding of `f32`-plane maps it stays below e/5. The tests
//! in `core/tests/numerics.rs` exercise the corners of the range.

use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// Expel-zone thickness e in map units: traces stop this far from what they hit.
pub const EXPEL: f64 = 1.0 / 32.0;
/// Half-size of the supported coordinate box.
pub const MAX_COORD: f64 = 1_048_576.0;
/// Sines of edge–edge angles below this are treated as parallel (see module docs).
pub const PARALLEL_SIN: f64 = 1e-7;
/// How far outside a map polygon's edge (in units) a feature may pass and still count as
/// inside. It covers vertex welding (up to 2e-3 per axis, see `collision::mesh::WELD`), so
/// polygons that meet at welded or T-junction edges overlap a hair instead of leaving a
/// crack. Only edges where a crack can open take it (flat or concave seams, unshared
/// edges); a hull's own features and shared convex edges are exact, or a box resting inside
/// the zone would snag on a rim passing just under it.
pub const SIDE_EPS: f64 = 4e-3;
/// Overlap deeper than this (units) makes a position solid; touching is not solid.
pub const POSITION_EPS: f64 = 1e-6;

/// A plane `normal · x = dist`; for brushes and polygons the normal points out of the solid.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plane {
    /// Unit normal.
    pub normal: DVec3,
    /// Distance of the plane from the origin along the normal.
    pub dist: f64,
}

impl Plane {
    /// Plane through three points in Quake's winding: n = (p3 - p1) × (p2 - p1).
    /// `None` when the points are collinear.
    pub fn from_points(p1: DVec3, p2: DVec3, p3: DVec3) -> Option<Plane> {
        let n = (p3 - p1).cross(p2 - p1);
        let len = n.length();
        if len.is_nan() || len <= 1e-12 || !len.is_finite() {
            return None;
        }
        let normal = n / len;
        Some(Plane {
            normal,
            dist: normal.dot(p1),
        })
    }

    /// The same plane facing the other way.
    pub fn flipped(&self) -> Plane {
        Plane {
            normal: -self.normal,
            dist: -self.dist,
        }
    }

    #[inline]
    /// Signed distance of `p` from the plane (positive in front).
    pub fn distance(&self, p: DVec3) -> f64 {
        self.normal.dot(p) - self.dist
    }

    /// Same plane within `normal_eps` (component-wise on the unit normal) and `dist_eps`.
    pub fn same_as(&self, o: &Plane, normal_eps: f64, dist_eps: f64) -> bool {
        (self.normal - o.normal).abs().max_element() <= normal_eps
            && (self.dist - o.dist).abs() <= dist_eps
    }
}

/// Axis-aligned bounding box.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Aabb {
    /// Lower corner.
    pub min: DVec3,
    /// Upper corner.
    pub max: DVec3,
}

impl Aabb {
    /// The empty box: adding any point makes it that point.
    pub const EMPTY: Aabb = Aabb {
        min: DVec3::splat(f64::INFINITY),
        max: DVec3::splat(f64::NEG_INFINITY),
    };

    /// The smallest box holding the points.
    pub fn from_points<'a>(pts: impl IntoIterator<Item = &'a DVec3>) -> Aabb {
        let mut b = Aabb::EMPTY;
        for p in pts {
            b.add_point(*p);
        }
        b
    }

    #[inline]
    /// Grows the box to hold `p`.
    pub fn add_point(&mut self, p: DVec3) {
        self.min = self.min.min(p);
        self.max = self.max.max(p);
    }

    #[inline]
    /// The smallest box holding both.
    pub fn union(&self, o: &Aabb) -> Aabb {
        Aabb {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }

    #[inline]
    /// The box grown by `r` on every side (shrunk for negative `r`).
    pub fn expand(&self, r: f64) -> Aabb {
        Aabb {
            min: self.min - DVec3::splat(r),
            max: self.max + DVec3::splat(r),
        }
    }

    #[inline]
    /// Whether the boxes touch or overlap.
    pub fn overlaps(&self, o: &Aabb) -> bool {
        // `&`, not `&&`: one branch, where six would mispredict on scattered boxes.
        (self.min.x <= o.max.x)
            & (self.max.x >= o.min.x)
            & (self.min.y <= o.max.y)
            & (self.max.y >= o.min.y)
            & (self.min.z <= o.max.z)
            & (self.max.z >= o.min.z)
    }

    #[inline]
    /// Whether `o` lies wholly within the box (faces may touch).
    pub fn contains(&self, o: &Aabb) -> bool {
        self.min.cmple(o.min).all() & o.max.cmple(self.max).all()
    }

    /// The box moved by `by` (a hull's local bounds placed at a position).
    #[inline]
    pub fn offset(&self, by: DVec3) -> Aabb {
        Aabb {
            min: self.min + by,
            max: self.max + by,
        }
    }

    /// Whether the box holds no point.
    pub fn is_empty(&self) -> bool {
        !(self.min.x <= self.max.x && self.min.y <= self.max.y && self.min.z <= self.max.z)
    }

    /// The centre.
    pub fn center(&self) -> DVec3 {
        (self.min + self.max) * 0.5
    }

    /// The extent on each axis.
    pub fn size(&self) -> DVec3 {
        self.max - self.min
    }
}

/// Unit vector along `v`, scaled first by its largest component so that axes of any finite
/// length (1e-300 or 1e200) normalise without underflow or overflow; `None` for zero or
/// non-finite input.
pub fn unit_axis(v: DVec3) -> Option<DVec3> {
    let m = v.abs().max_element();
    if !(m.is_finite() && m > 0.0) {
        return None;
    }
    let u = v / m;
    Some(u / u.length())
}

/// Rotation by `angle` radians about the unit `axis`, with `libm`'s `sincos` so every
/// platform computes the same bits (glam's own constructor uses the platform's `sin`).
pub fn axis_angle(axis: DVec3, angle: f64) -> DQuat {
    let (s, c) = libm::sincos(angle * 0.5);
    let v = axis * s;
    DQuat::from_xyzw(v.x, v.y, v.z, c)
}

/// Degrees to radians, by the one multiplication every platform rounds alike.
pub fn radians(deg: f64) -> f64 {
    deg * (std::f64::consts::PI / 180.0)
}

/// Clips a convex polygon to the half-space `plane.distance(x) <= eps`, keeping winding.
/// Points within `eps` of the plane count as inside, so a face lying on a coplanar plane of
/// its own brush survives.
pub fn clip_polygon(poly: &[DVec3], plane: &Plane, eps: f64, out: &mut Vec<DVec3>) {
    out.clear();
    if poly.is_empty() {
        return;
    }
    let n = poly.len();
    let dists: Vec<f64> = poly.iter().map(|p| plane.distance(*p)).collect();
    for i in 0..n {
        let j = (i + 1) % n;
        let (a, b) = (poly[i], poly[j]);
        let (da, db) = (dists[i], dists[j]);
        let a_in = da <= eps;
        let b_in = db <= eps;
        if a_in {
            out.push(a);
        }
        if a_in != b_in && (da < -eps || db < -eps) {
            // A real crossing (not an on-plane point leaving): intersect.
            let t = da / (da - db);
            out.push(a + (b - a) * t);
        }
    }
}

/// A large square on `plane`, wound counter-clockwise seen from the front (the normal side).
pub fn base_winding(plane: &Plane, half: f64) -> Vec<DVec3> {
    let n = plane.normal;
    // Pick the axis least aligned with n for a stable tangent.
    let a = n.abs();
    let up = if a.z <= a.x && a.z <= a.y {
        DVec3::Z
    } else if a.x <= a.y {
        DVec3::X
    } else {
        DVec3::Y
    };
    let u = up.cross(n).normalize();
    let v = n.cross(u);
    let o = n * plane.dist;
    // u × v = n, so (u, v) is counter-clockwise seen from +n.
    vec![
        o - u * half - v * half,
        o + u * half - v * half,
        o + u * half + v * half,
        o - u * half + v * half,
    ]
}

/// Convex polygons bounding the intersection of the half-spaces `n·x <= d`, one per plane
/// that contributes a face of positive area (index into `planes`). Duplicate planes give
/// one face; planes that cut nothing (bevels) give none.
pub fn planes_to_polygons(planes: &[Plane], min_area: f64) -> Vec<(usize, Vec<DVec3>)> {
    let mut faces = Vec::new();
    let mut tmp = Vec::new();
    'planes: for (i, p) in planes.iter().enumerate() {
        for q in &planes[..i] {
            if q.same_as(p, 1e-9, 1e-7) {
                continue 'planes;
            }
        }
        let mut w = base_winding(p, MAX_COORD * 4.0);
        for (j, q) in planes.iter().enumerate() {
            if j == i || q.same_as(p, 1e-9, 1e-7) {
                continue;
            }
            clip_polygon(&w, q, 1e-9, &mut tmp);
            std::mem::swap(&mut w, &mut tmp);
            if w.len() < 3 {
                continue 'planes;
            }
        }
        if polygon_area(&w, p.normal) > min_area {
            faces.push((i, w));
        }
    }
    faces
}

/// Area of a planar polygon with the given normal.
pub fn polygon_area(poly: &[DVec3], normal: DVec3) -> f64 {
    if poly.len() < 3 {
        return 0.0;
    }
    let mut s = DVec3::ZERO;
    let o = poly[0];
    for i in 1..poly.len() - 1 {
        s += (poly[i] - o).cross(poly[i + 1] - o);
    }
    0.5 * s.dot(normal)
}
