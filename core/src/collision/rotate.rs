//! Rotational continuous collision detection (van Waveren 2005, §2.4–2.5, §3.3–3.4; the
//! paper is cited in full in `trace.rs`).
//!
//! The hull turns about an axis through a point. In a frame whose z axis is the rotation
//! axis, every feature pair gives a function `A cos a + B sin a + C` of the angle: a point's
//! distance to a plane, and the Plücker side of a turning line against a fixed one. With
//! `r = tan(a/2)` its roots solve `(C - A) r² + 2B r + (C + A) = 0`, taken in the stable
//! form; angles are compared as `r`, which grows with the angle below 180°, and the poses at
//! a given `r` come from `cos a = (1 - r²)/(1 + r²)`, `sin a = 2r/(1 + r²)`, so there is no
//! trigonometry inside the loops (the turn is split into pieces of at most 90°, so `r` stays
//! within [0, 1], and one `atan` at the end gives the angle reached).
//!
//! The expel zone works as for translation: a vertex stops where it is over a polygon,
//! inside the zone and not moving away; edges stop before their real crossing, at the
//! crossing of the mitred offset line. A feature inside the zone and turning deeper stops
//! at once; turning outward, it may go on to its furthest point, or until it comes back.

use super::hull::Hull;
use super::{CollisionModel, Contents, TraceScratch};
use crate::geom::{Aabb, Plane, EXPEL, POSITION_EPS, SIDE_EPS};
use glam::{DMat3, DQuat, DVec3};

/// A turn of `angle` radians (right-handed) about `axis` through `origin`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rotation {
    /// A point on the axis.
    pub origin: DVec3,
    /// The axis (any finite non-zero length).
    pub axis: DVec3,
    /// Angle in radians, right-handed about the axis.
    pub angle: f64,
}

/// Where a rotation stopped against the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotationHit {
    /// Contact normal at the stop, from the model towards the hull.
    pub normal: DVec3,
    /// Contact point on the model.
    pub point: DVec3,
}

/// Result of a rotation trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotationTrace {
    /// Fraction of the angle turned, in [0, 1].
    pub fraction: f64,
    /// The contact the turn stopped at, if any.
    pub hit: Option<RotationHit>,
    /// The hull overlaps solid at the start.
    pub start_solid: bool,
}

/// `A cos a + B sin a + C` as a function of `r = tan(a/2)`.
#[derive(Clone, Copy, Debug)]
struct Wave {
    a: f64,
    b: f64,
    c: f64,
}

impl Wave {
    #[inline]
    fn at(&self, r: f64) -> f64 {
        let (c, s) = cos_sin(r);
        self.a * c + self.b * s + self.c
    }

    /// Derivative with respect to the angle.
    #[inline]
    fn slope(&self, r: f64) -> f64 {
        let (c, s) = cos_sin(r);
        -self.a * s + self.b * c
    }

    /// Roots in `[lo, hi]` (as `r`), ascending.
    fn roots(&self, lo: f64, hi: f64, out: &mut Vec<f64>) {
        // (C - A) r² + 2 B r + (C + A) = 0
        let qa = self.c - self.a;
        let qb = self.b;
        let qc = self.c + self.a;
        let scale = self.a.abs().max(self.b.abs()).max(self.c.abs());
        if scale == 0.0 {
            return;
        }
        let mut push = |r: f64| {
            if r.is_finite() && r >= lo && r <= hi {
                out.push(r);
            }
        };
        if qa.abs() <= 1e-14 * scale {
            if qb != 0.0 {
                push(-qc / (2.0 * qb));
            }
            return;
        }
        let disc = qb * qb - qa * qc;
        if disc < 0.0 {
            return;
        }
        let q = -(qb + qb.signum() * disc.sqrt());
        if q != 0.0 {
            push(q / qa);
            push(qc / q);
        } else {
            push(0.0);
        }
    }

    /// The first local maximum (where the slope turns from + to -) as `r`, if any
    /// (`tan(a/2)` of the angle `atan2(B, A)` taken in (0, π)).
    fn peak(&self) -> Option<f64> {
        // -A sin a + B cos a = 0 with the second derivative negative: a = atan2(B, A).
        // tan(a/2) = sin a / (1 + cos a) = B / (|AB| + A) on the unit circle.
        let h = libm::hypot(self.a, self.b);
        if h == 0.0 {
            return None;
        }
        let (ca, sa) = (self.a / h, self.b / h);
        (sa > 0.0).then(|| sa / (1.0 + ca))
    }
}

#[inline]
fn cos_sin(r: f64) -> (f64, f64) {
    let d = 1.0 + r * r;
    ((1.0 - r * r) / d, 2.0 * r / d)
}

/// Rotates `p` about z by the angle with tangent-half `r` (negative `r` turns back).
#[inline]
fn turn(p: DVec3, r: f64) -> DVec3 {
    let (c, s) = cos_sin(r);
    DVec3::new(p.x * c - p.y * s, p.x * s + p.y * c, p.z)
}

/// `n · turn(p, ±r) - d` as a wave (sign −1 turns `p` backwards).
fn plane_wave(n: DVec3, d: f64, p: DVec3, sign: f64) -> Wave {
    Wave {
        a: n.x * p.x + n.y * p.y,
        b: sign * (n.y * p.x - n.x * p.y),
        c: n.z * p.z - d,
    }
}

/// A convex face in the rotation frame: plane and corners (counter-clockwise).
struct Face<'a> {
    plane: Plane,
    corners: &'a [DVec3],
}

impl Face<'_> {
    /// Outward in-plane normals of the sides, with their offsets: a point is over the
    /// face when `o·p - k <= SIDE_EPS` for every side.
    fn sides(&self, out: &mut Vec<(DVec3, f64)>) {
        out.clear();
        let n = self.plane.normal;
        let k = self.corners.len();
        for i in 0..k {
            let (a, b) = (self.corners[i], self.corners[(i + 1) % k]);
            let o = (b - a).cross(n).normalize_or_zero();
            out.push((o, o.dot(a)));
        }
    }
}

/// The earliest `r` in `[0, r_end]` at which the point `p` (turning with `sign`) lies over
/// `face`, within the zone and not moving away from it; `None` if never.
fn vertex_stop(
    p: DVec3,
    sign: f64,
    face: &Face,
    r_end: f64,
    sides: &mut Vec<(DVec3, f64)>,
    cand: &mut Vec<f64>,
) -> Option<f64> {
    let n = face.plane.normal;
    let dist = plane_wave(n, face.plane.dist, p, sign);
    // The stretch in front of the plane: from the start (or, for a point that starts
    // behind it, from where it comes out) to where it first crosses back. A turning point
    // can leave a plane's back and return over its face, so behind is not the end of it.
    cand.clear();
    dist.roots(0.0, r_end, cand);
    cand.sort_by(|a, b| a.total_cmp(b));
    let begin = if dist.at(0.0) >= -POSITION_EPS {
        0.0
    } else {
        cand.iter().copied().find(|&r| dist.slope(r) > 0.0)?
    };
    let cross = cand
        .iter()
        .copied()
        .filter(|&r| r > begin && dist.slope(r) < 0.0)
        .fold(r_end, f64::min);
    let zone = Wave {
        c: dist.c - EXPEL,
        ..dist
    };
    face.sides(sides);
    cand.clear();
    cand.push(begin);
    zone.roots(begin, cross, cand);
    if let Some(pk) = dist.peak() {
        if pk >= begin && pk <= cross {
            cand.push(pk);
        }
    }
    for (o, k) in sides.iter() {
        plane_wave(*o, *k, p, sign).roots(begin, cross, cand);
    }
    cand.push(cross);
    cand.sort_by(|a, b| a.total_cmp(b));
    // Closing in on the plane just after `r` (a point that keeps its distance is free).
    let scale = dist.a.abs() + dist.b.abs();
    let approaching = |r: f64| dist.slope(r + 1e-9) < -1e-12 * scale;
    cand.iter().copied().find(|&r| {
        let q = turn(p, sign * r);
        let z = zone.at(r);
        z <= 1e-9
            && dist.at(r) >= -POSITION_EPS - 1e-9
            && approaching(r)
            && sides.iter().all(|(o, k)| o.dot(q) - k <= SIDE_EPS)
    })
}

/// The work of [`CollisionModel::rotate`].
pub(super) fn rotate(
    model: &CollisionModel,
    hull: &Hull,
    position: DVec3,
    rot: &Rotation,
    mask: Contents,
    s: &mut TraceScratch,
) -> RotationTrace {
    let start_solid =
        model.position_solid_posed(hull, position, DQuat::IDENTITY, rot.origin, mask, s);
    let free = RotationTrace {
        fraction: 1.0,
        hit: None,
        start_solid,
    };
    let Some(mut k) = crate::geom::unit_axis(rot.axis) else {
        return free;
    };
    if !rot.angle.is_finite() || rot.angle == 0.0 {
        return free;
    }
    let mut total = rot.angle;
    if total < 0.0 {
        k = -k;
        total = -total;
    }
    // Frame: z along the axis, origin on it.
    let e1 = k.any_orthonormal_vector();
    let e2 = k.cross(e1);
    let to_local = DMat3::from_cols(e1, e2, k).transpose();
    let to_world = DMat3::from_cols(e1, e2, k);
    let pieces = (total / std::f64::consts::FRAC_PI_2).ceil().max(1.0) as usize;
    let step = total / pieces as f64;
    let r_step = libm::tan(step * 0.5);
    for piece in 0..pieces {
        let done = step * piece as f64;
        let q = crate::geom::axis_angle(k, done);
        if let Some((r, normal, point)) = rotate_piece(
            model, hull, position, rot.origin, q, r_step, to_local, to_world, mask,
        ) {
            let a = 2.0 * libm::atan(r);
            return RotationTrace {
                fraction: ((done + a) / total).clamp(0.0, 1.0),
                hit: Some(RotationHit { normal, point }),
                start_solid,
            };
        }
    }
    free
}

/// One piece of at most 90°: the hull starts turned by `q` about the axis. Returns the
/// stop as `r`, with normal and point in world space.
#[allow(clippy::too_many_arguments)]
fn rotate_piece(
    model: &CollisionModel,
    hull: &Hull,
    position: DVec3,
    origin: DVec3,
    q: DQuat,
    r_end: f64,
    to_local: DMat3,
    to_world: DMat3,
    mask: Contents,
) -> Option<(f64, DVec3, DVec3)> {
    // Hull vertices in the rotation frame at the start of the piece.
    let local = |v: DVec3| to_local * (q * (position + v - origin));
    let hv: Vec<DVec3> = hull.vertices.iter().map(|v| local(*v)).collect();
    // Everything a vertex can reach while turning lies within its circle about the axis.
    let mut reach = Aabb::EMPTY;
    let kw = to_world.z_axis;
    let spread = DVec3::new(
        (1.0 - kw.x * kw.x).max(0.0).sqrt(),
        (1.0 - kw.y * kw.y).max(0.0).sqrt(),
        (1.0 - kw.z * kw.z).max(0.0).sqrt(),
    );
    for p in &hv {
        let rad = p.truncate().length();
        let c = origin + to_world * DVec3::new(0.0, 0.0, p.z);
        reach = reach.union(&Aabb {
            min: c - spread * rad,
            max: c + spread * rad,
        });
    }
    let reach = reach.expand(EXPEL * super::mesh::MITRE_CAP + 1e-3);
    let mut cand: Vec<u32> = Vec::new();
    model.poly_tree.query_aabb(&reach, |i| cand.push(i));
    cand.sort_unstable();
    cand.dedup();
    let mut best: Option<(f64, DVec3, DVec3)> = None;
    let mut sides = Vec::new();
    let mut roots = Vec::new();
    let mut corners: Vec<DVec3> = Vec::new();
    let better = |best: &Option<(f64, DVec3, DVec3)>, r: f64| best.is_none_or(|b| r < b.0);
    // Hull faces in the frame, for model vertices against them.
    let hull_faces: Vec<(Plane, Vec<DVec3>)> = hull
        .faces
        .iter()
        .map(|f| {
            let pts: Vec<DVec3> = hull.face_edges[f.first as usize..(f.first + f.count) as usize]
                .iter()
                .map(|&(e, rev)| {
                    let he = &hull.edges[e as usize];
                    hv[he.v[rev as usize] as usize]
                })
                .collect();
            let n = (to_local * (q * f.plane.normal)).normalize();
            (
                Plane {
                    normal: n,
                    dist: n.dot(pts[0]),
                },
                pts,
            )
        })
        .collect();
    for &pi in &cand {
        let poly = &model.polygons[pi as usize];
        if !poly.contents.intersects(mask) || !poly.bounds.overlaps(&reach) {
            continue;
        }
        corners.clear();
        corners.extend(
            model
                .polygon_points(pi as usize)
                .map(|p| to_local * (p - origin)),
        );
        let n = to_local * poly.plane.normal;
        let face = Face {
            plane: Plane {
                normal: n,
                dist: n.dot(corners[0]),
            },
            corners: &corners,
        };
        // Hull vertices turning against the polygon.
        for p in &hv {
            if let Some(r) = vertex_stop(*p, 1.0, &face, r_end, &mut sides, &mut roots) {
                if better(&best, r) {
                    best = Some((r, to_world * n, origin + to_world * turn(*p, r)));
                }
            }
        }
        // Polygon corners turning (backwards) against the hull's faces.
        for c in corners.iter() {
            for (plane, pts) in &hull_faces {
                let f = Face {
                    plane: *plane,
                    corners: pts,
                };
                if let Some(r) = vertex_stop(*c, -1.0, &f, r_end, &mut sides, &mut roots) {
                    if better(&best, r) {
                        best = Some((
                            r,
                            -(to_world * turn(plane.normal, r)),
                            origin + to_world * *c,
                        ));
                    }
                }
            }
        }
        // Hull edges turning against the polygon's edges.
        let m = &model.poly_edges[poly.first as usize..(poly.first + poly.count) as usize];
        for (k, &code) in m.iter().enumerate() {
            let edge = &model.edges[(code >> 1) as usize];
            if edge.internal {
                continue;
            }
            let (qa, qb) = (corners[k], corners[(k + 1) % corners.len()]);
            let mitre = to_local * edge.mitre;
            for he in &hull.edges {
                let (pa, pb) = (hv[he.v[0] as usize], hv[he.v[1] as usize]);
                if let Some((r, nn, pt)) = edge_stop(pa, pb, qa, qb, mitre, r_end) {
                    if better(&best, r) {
                        best = Some((r, to_world * nn, origin + to_world * pt));
                    }
                }
            }
        }
    }
    best
}

/// Bisection for where `pred` turns true in `(lo, hi]`, given false at `lo`, true at `hi`.
fn first_true(mut lo: f64, mut hi: f64, pred: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Closest-point parameters of lines `p + s u` and `q + t w` (None when parallel).
fn closest(p: DVec3, u: DVec3, q: DVec3, w: DVec3) -> Option<(f64, f64)> {
    let c = u.cross(w);
    let c2 = c.length_squared();
    if c2 <= 1e-18 * u.length_squared() * w.length_squared() {
        return None;
    }
    let d = q - p;
    Some((d.cross(w).dot(c) / c2, d.cross(u).dot(c) / c2))
}

/// The stop (as `r`) of the hull edge `pa pb` turning against the fixed edge `qa qb` with
/// mitred offset `mitre`: before the edges' first real crossing, at the crossing of the
/// offset line (or where the edges first overlap in extent after it); at once when they
/// start inside the zone and are closing.
fn edge_stop(
    pa: DVec3,
    pb: DVec3,
    qa: DVec3,
    qb: DVec3,
    mitre: DVec3,
    r_end: f64,
) -> Option<(f64, DVec3, DVec3)> {
    let u0 = pb - pa;
    let w = qb - qa;
    let (ul, wl) = (u0.length(), w.length());
    // Plücker side of the turning line against a fixed line through `q` along `w`:
    // u(a)·(q × w) + w·(p(a) × u(a)), each term one turning vector.
    let side = |q: DVec3| {
        let mq = q.cross(w);
        let mp = pa.cross(u0);
        Wave {
            a: u0.x * mq.x + u0.y * mq.y + (w.x * mp.x + w.y * mp.y),
            b: (u0.x * mq.y - u0.y * mq.x) + (mp.x * w.y - mp.y * w.x),
            c: u0.z * mq.z + w.z * mp.z,
        }
    };
    let real = side(qa);
    let off = side(qa + mitre * EXPEL);
    let tol = SIDE_EPS;
    let state = |r: f64| {
        // Distance along the common normal (outward positive), and whether the closest
        // points lie within both edges.
        let (p, u) = (turn(pa, r), turn(u0, r));
        let c = u.cross(w);
        let cl = c.length();
        if cl <= 1e-7 * ul * wl {
            return None;
        }
        let mut nn = c / cl;
        if nn.dot(mitre) < 0.0 {
            nn = -nn;
        }
        let (s, t) = closest(p, u, qa, w)?;
        let inside = s >= -tol / ul && s <= 1.0 + tol / ul && t >= -tol / wl && t <= 1.0 + tol / wl;
        Some(((p - qa).dot(nn), nn, inside, qa + w * t.clamp(0.0, 1.0)))
    };
    let mut roots = Vec::new();
    real.roots(0.0, r_end, &mut roots);
    roots.sort_by(|a, b| a.total_cmp(b));
    // First real crossing within both edges: the edges would pass through each other.
    let contact = roots
        .iter()
        .copied()
        .find(|&r| state(r).is_some_and(|(_, _, inside, _)| inside));
    let zone_at = |r: f64| {
        state(r).is_some_and(|(d, nn, inside, _)| {
            inside && d <= EXPEL * nn.dot(mitre).max(1.0) && d >= -POSITION_EPS
        })
    };
    let closing = |r: f64| {
        let h = 1e-7;
        match (state(r), state(r + h)) {
            (Some((d0, ..)), Some((d1, ..))) => d1 <= d0,
            _ => false,
        }
    };
    if zone_at(0.0) && closing(0.0) {
        let (_, nn, _, pt) = state(0.0)?;
        return Some((0.0, nn, pt));
    }
    let rc = contact?;
    // The offset line's crossing before the contact (or the start, if already past it).
    let mut o = Vec::new();
    off.roots(0.0, rc, &mut o);
    let mut lo = o.iter().copied().fold(0.0f64, f64::max);
    if lo == 0.0 && zone_at(0.0) {
        // Inside the zone and turning outward first: free up to the furthest point.
        lo = first_true(lo, rc, closing);
    } else if !zone_at(lo) {
        // Grazing: where the edges first overlap in extent within the zone.
        lo = first_true(lo, rc, zone_at);
    }
    let (_, nn, _, pt) = state(lo).or_else(|| state(rc))?;
    Some((lo, nn, pt))
}
