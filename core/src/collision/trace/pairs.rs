//! The three feature pairs a first contact can be (van Waveren 2005, §3.1–3.2): a hull vertex
//! against a model polygon, a model vertex against a hull face, and edge against edge.

use super::*;

/// How far outside a feature a contact may pass and still count where no welding crack can
/// open: rounding only. That is a hull's own faces and edges, and a map polygon's shared
/// convex edges; elsewhere the map gets [`SIDE_EPS`]. A wider margin there would catch a
/// floor's rim passing just under a box that rests inside the zone (a snag).
const EXACT_SIDE_EPS: f64 = POSITION_EPS;

impl Query<'_> {
    /// Fraction at which a feature at signed distance `d1` (closing at `rate` > 0 per unit
    /// fraction) enters the zone of thickness `zone`; `None` if it does not within the move
    /// or lies behind the surface.
    #[inline]
    fn zone_fraction(d1: f64, rate: f64, zone: f64) -> Option<f64> {
        if d1 < -POSITION_EPS || d1 - rate >= zone {
            return None;
        }
        // Already in the zone and moving deeper: stay put.
        Some(if d1 - zone <= POSITION_EPS {
            0.0
        } else {
            (d1 - zone) / rate
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn hull_vertices_vs_polygon(
        &self,
        pi: u32,
        n: DVec3,
        nd: f64,
        pd: f64,
        edges: &[u32],
        s: &mut TraceScratch,
        best: &mut Best,
    ) {
        let mut have_edges = false;
        for k in 0..s.lead_verts.len() {
            let vi = s.lead_verts[k];
            let h = self.hull.vertices[vi as usize];
            let d1 = pd + n.dot(h);
            let Some(f) = Self::zone_fraction(d1, -nd, EXPEL) else {
                continue;
            };
            if f >= best.f && best.feature.is_some() {
                continue;
            }
            if !have_edges {
                // Polygon edges as Plücker lines relative to the start, once per polygon.
                s.pe.clear();
                for &c in edges {
                    let (a, b, _) = self.edge_points(c);
                    let w = b - a;
                    // Welding can open a hairline crack only where the neighbour does not
                    // share this exact edge, or lies flat or concave beside it; across a
                    // shared convex edge the neighbour takes over exactly.
                    let e = &self.model.edges[(c >> 1) as usize];
                    let tol = if e.internal || e.polys[1] == crate::collision::mesh::NONE {
                        SIDE_EPS
                    } else {
                        EXACT_SIDE_EPS
                    };
                    s.pe.push(PolyEdge {
                        w,
                        m: a.cross(b),
                        len: w.length(),
                        a,
                        tol,
                    });
                }
                have_edges = true;
            }
            let xv = s.vert_moment[vi as usize];
            let inside =
                s.pe.iter()
                    .all(|e| side(self.dir, xv, e.w, e.m) >= -e.tol * self.dir_len * e.len);
            if !inside {
                continue;
            }
            // The zone is the slab over the polygon: a grazing vertex enters it through the
            // polygon's side, not its top.
            let Some(f) = entry_time(
                f,
                d1 / -nd,
                s.pe.iter().map(|e| {
                    let o = e.w.cross(n) / e.len;
                    (o.dot(h - e.a) - e.tol, o.dot(self.dir))
                }),
            ) else {
                continue;
            };
            if f <= 1.0 && !(f >= best.f && best.feature.is_some()) {
                *best = self.best(Best {
                    f,
                    normal: n,
                    point: self.start + h + self.dir * f,
                    feature: Some(Feature::HullVertex {
                        vertex: vi,
                        polygon: pi,
                    }),
                    contents: self.model.polygons[pi as usize].contents,
                    ..Best::NONE
                });
            }
        }
    }

    pub(super) fn model_vertices_vs_hull(
        &self,
        pi: u32,
        edges: &[u32],
        rel: &Aabb,
        s: &mut TraceScratch,
        best: &mut Best,
    ) {
        let m = self.model;
        let h = self.hull;
        let neg = -self.dir;
        for &c in edges {
            // Each edge use's start: every polygon vertex once.
            let e = &m.edges[(c >> 1) as usize];
            let vi = e.v[(c & 1) as usize];
            if s.vert_mark[vi as usize] == s.stamp {
                continue;
            }
            s.vert_mark[vi as usize] = s.stamp;
            if !m.vertex_active[vi as usize] {
                continue;
            }
            let rel_a = m.vertices[vi as usize] - self.start;
            if rel_a.cmplt(rel.min).any() || rel_a.cmpgt(rel.max).any() {
                continue;
            }
            let xv = rel_a.cross(neg);
            for &fi in &s.lead_faces {
                let face = &h.faces[fi as usize];
                let nf = face.plane.normal;
                let rate = nf.dot(self.dir);
                let d1 = nf.dot(rel_a) - face.plane.dist;
                let Some(f) = Self::zone_fraction(d1, rate, EXPEL) else {
                    continue;
                };
                if f >= best.f && best.feature.is_some() {
                    continue;
                }
                let fedges = &h.face_edges[face.first as usize..(face.first + face.count) as usize];
                let oriented = |&(ei, rev): &(u8, bool)| {
                    let he = &h.edges[ei as usize];
                    if rev {
                        (-he.dir, -he.moment, h.vertices[he.v[1] as usize])
                    } else {
                        (he.dir, he.moment, h.vertices[he.v[0] as usize])
                    }
                };
                let inside = fedges.iter().map(oriented).all(|(w, mm, _)| {
                    side(neg, xv, w, mm) >= -EXACT_SIDE_EPS * self.dir_len * w.length()
                });
                if !inside {
                    continue;
                }
                let Some(f) = entry_time(
                    f,
                    d1 / rate,
                    fedges.iter().map(oriented).map(|(w, _, a)| {
                        let o = w.cross(nf) / w.length();
                        (o.dot(rel_a - a) - EXACT_SIDE_EPS, o.dot(neg))
                    }),
                ) else {
                    continue;
                };
                if f <= 1.0 && !(f >= best.f && best.feature.is_some()) {
                    *best = self.best(Best {
                        f,
                        normal: -nf,
                        point: m.vertices[vi as usize],
                        feature: Some(Feature::ModelVertex {
                            vertex: vi,
                            hull_face: fi,
                        }),
                        contents: m.polygons[pi as usize].contents,
                        ..Best::NONE
                    });
                }
            }
        }
    }

    pub(super) fn edges_vs_edges(
        &self,
        pi: u32,
        edges: &[u32],
        rel: &Aabb,
        s: &mut TraceScratch,
        best: &mut Best,
    ) {
        let m = self.model;
        let h = self.hull;
        let dir = self.dir;
        let neg = -dir;
        for &code in edges {
            let ei = (code >> 1) as usize;
            if s.edge_mark[ei] == s.stamp {
                continue;
            }
            s.edge_mark[ei] = s.stamp;
            let edge = &m.edges[ei];
            if edge.internal {
                continue;
            }
            let (a, b, _) = self.edge_points(code);
            if a.min(b).cmpgt(rel.max).any() || a.max(b).cmplt(rel.min).any() {
                continue;
            }
            let w = b - a;
            let wl = w.length();
            let mm = a.cross(b);
            let (xa, xb) = (a.cross(neg), b.cross(neg));
            for &hj in &s.lead_edges {
                let he = &h.edges[hj as usize];
                let u = he.dir;
                let uw = u.cross(w);
                let mut c = uw;
                // Cheap rejections on the unnormalised common normal first: it must point
                // out of the model (along the mitre), the hull must approach along it, and
                // reach the zone within the move.
                let mut zc = c.dot(edge.mitre);
                if zc < 0.0 {
                    c = -c;
                    zc = -zc;
                }
                let rc = -c.dot(dir);
                if rc <= 0.0 {
                    continue;
                }
                let ha = h.vertices[he.v[0] as usize];
                let dc = (ha - a).dot(c);
                if dc - rc >= EXPEL * zc {
                    continue;
                }
                let cl = c.length();
                let ul = u.length();
                if cl <= PARALLEL_SIN * ul * wl {
                    continue; // parallel: the vertex–face tests cover it
                }
                let nn = c / cl;
                let zone = zc / cl;
                let rate = rc / cl;
                let d1 = dc / cl;
                let Some(f) = Self::zone_fraction(d1, rate, EXPEL * zone) else {
                    continue;
                };
                if (f >= best.f && best.feature.is_some()) || !in_cone(nn, edge, w) {
                    continue;
                }
                // The swept hull edge must cross the model edge's line, and the model edge
                // (moving by -dir) the hull edge's line: opposite sides at both ends.
                let tol_m = EXACT_SIDE_EPS * self.dir_len * wl;
                let sa = side(dir, s.vert_moment[he.v[0] as usize], w, mm);
                let sb = side(dir, s.vert_moment[he.v[1] as usize], w, mm);
                if (sa > tol_m && sb > tol_m) || (sa < -tol_m && sb < -tol_m) {
                    continue;
                }
                // The model edge's ends: welded neighbours share them exactly, so only an
                // unshared edge needs the welding margin there (a wider one would catch a
                // box passing just over a corner post's top, at floor level).
                let end_eps = if edge.polys[1] == crate::collision::mesh::NONE {
                    SIDE_EPS
                } else {
                    EXACT_SIDE_EPS
                };
                let tol_h = end_eps * self.dir_len * ul;
                let ta = side(neg, xa, u, he.moment);
                let tb = side(neg, xb, u, he.moment);
                if (ta > tol_h && tb > tol_h) || (ta < -tol_h && tb < -tol_h) {
                    continue;
                }
                // Closest points of the two lines at fraction t: hull at s(t), model at
                // r(t), both linear in t. The zone around the edge only reaches as far as
                // the segments do, so a grazing edge hits once both lie within them.
                let c2 = cl * cl;
                let delta = a - ha;
                // (With the unflipped u × w: the flip above only orients the normal.)
                let (s0, sr) = (delta.cross(w).dot(uw) / c2, -dir.cross(w).dot(uw) / c2);
                let (r0, rr) = (delta.cross(u).dot(uw) / c2, -dir.cross(u).dot(uw) / c2);
                // The same tolerance as the side tests, as a fraction of each edge.
                let (ts, tr) = (EXACT_SIDE_EPS / ul, end_eps / wl);
                let Some(f) = entry_time(
                    f,
                    d1 / rate,
                    [
                        (-s0 - ts, -sr),
                        (s0 - 1.0 - ts, sr),
                        (-r0 - tr, -rr),
                        (r0 - 1.0 - tr, rr),
                    ]
                    .into_iter(),
                ) else {
                    continue;
                };
                if f > 1.0 || (f >= best.f && best.feature.is_some()) {
                    continue;
                }
                let r = r0 + rr * f;
                *best = self.best(Best {
                    f,
                    normal: nn,
                    point: self.start + a + w * r.clamp(0.0, 1.0),
                    feature: Some(Feature::EdgeEdge {
                        hull_edge: hj,
                        edge: ei as u32,
                    }),
                    contents: m.polygons[pi as usize].contents,
                    ..Best::NONE
                });
            }
        }
    }
}

/// Earliest fraction in `[f, t_cross]` at which every constraint `g0 + gr·t <= 0` holds
/// (the feature lies over the other one, within the side tolerance), or `None` when there
/// is no such moment: the features pass beside each other without touching.
#[inline]
fn entry_time(f: f64, t_cross: f64, cons: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    let (mut lo, mut hi) = (f, t_cross.max(f));
    for (g0, gr) in cons {
        if gr > 0.0 {
            hi = hi.min(-g0 / gr);
        } else if gr < 0.0 {
            lo = lo.max(-g0 / gr);
        } else if g0 > 0.0 {
            return None;
        }
    }
    (lo <= hi).then_some(lo)
}

/// Whether unit normal `nn` lies in the edge's cone of contact normals.
#[inline]
fn in_cone(nn: DVec3, edge: &crate::collision::Edge, w: DVec3) -> bool {
    let [n1, n2] = edge.normals;
    let k = w;
    let den = n1.cross(n2).dot(k);
    let tol = 1e-9 * k.length();
    if den.abs() <= tol {
        return nn.dot(n1) >= 1.0 - 1e-9 || n1.dot(n2) < 0.0;
    }
    let alpha = nn.cross(n2).dot(k) / den;
    let beta = n1.cross(nn).dot(k) / den;
    alpha >= -1e-9 && beta >= -1e-9
}

/// Plücker side of the ray through `x` along `v` (given as `xv = x × v`) against the
/// directed line with direction `w` and moment `m`: positive when the ray passes on the
/// inner side of a counter-clockwise polygon edge while moving against the polygon normal.
#[inline]
fn side(v: DVec3, xv: DVec3, w: DVec3, m: DVec3) -> f64 {
    -(v.dot(m) + w.dot(xv))
}
