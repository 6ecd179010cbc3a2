//! Translational continuous collision detection (seed 000 §2.2–2.3, §3.1–3.2, §4–5).
//!
//! Three feature pairs cover every first contact of a convex hull with a polygon model:
//! a hull vertex against a model polygon, a model vertex against a hull face (the model
//! vertex moves by `-dir` relative to the hull), and a hull edge against a model edge.
//! Side tests use Plücker coordinates formed relative to the trace start, so their size
//! does not grow with the distance from the map origin. Contact is made with the expel
//! zone, a skin of thickness [`EXPEL`] around the model: a feature stops where it enters
//! the zone, and a feature already inside may move away but never deeper.

use super::hull::Hull;
use super::tree::Bounds32;
use super::{CollisionModel, Contact, Contents, Feature, Hit, Sweep, Target, Trace};
use crate::geom::{Aabb, EXPEL, PARALLEL_SIN, POSITION_EPS, SIDE_EPS};
use glam::DVec3;

/// The zone test reaches at most `EXPEL * MITRE_CAP` from an edge; broad-phase margins
/// use this plus slack.
const MARGIN: f64 = EXPEL * super::mesh::MITRE_CAP + 1e-3;
/// How far outside a feature a contact may pass and still count where no welding crack can
/// open: rounding only. That is a hull's own faces and edges, and a map polygon's shared
/// convex edges; elsewhere the map gets [`SIDE_EPS`]. A wider margin there would catch a
/// floor's rim passing just under a box that rests inside the zone (a snag).
const EXACT_SIDE_EPS: f64 = POSITION_EPS;

/// Per-query working memory. Keep one per thread and reuse it: it grows to the model's
/// size once and then allocates nothing.
#[derive(Default, Debug)]
pub struct TraceScratch {
    pub(super) stamp: u32,
    poly_mark: Vec<u32>,
    pub(super) brush_mark: Vec<u32>,
    /// Traversal stack: (node, and the interval of the move spent in its cell).
    pub(super) stack: Vec<(u32, f64, f64)>,
    vert_mark: Vec<u32>,
    edge_mark: Vec<u32>,
    /// Per polygon being tested: edge direction, Plücker moment relative to the start,
    /// length, edge index, start vertex (relative).
    pe: Vec<PolyEdge>,
    // Per query hull data.
    lead_faces: Vec<u8>,
    lead_verts: Vec<u8>,
    lead_edges: Vec<u8>,
    vert_moment: Vec<DVec3>,
    pub(super) candidates: Vec<u32>,
    /// Hulls turned into rotated movers' frames, kept (see [`RotatedHulls`]).
    pub(crate) rotated: RotatedHulls,
}

/// Hulls as turned movers' frames see them, kept between queries: every sweep of a player
/// tick meets a rotator at the same angle, and a client's replay of its unacknowledged
/// ticks meets the same angles again; building a hull is far dearer than finding it.
#[derive(Default, Debug)]
pub(crate) struct RotatedHulls {
    /// (rotation bits, source hull's vertices, the turned hull or `None` when it could
    /// not be built), replaced oldest first.
    pub(crate) kept: Vec<([u64; 4], Vec<DVec3>, Option<crate::collision::hull::Hull>)>,
    /// The next slot to replace once full.
    pub(crate) next: usize,
}

/// Turned hulls kept per scratch: a replay's ticks times the rotators and hull sizes.
pub(crate) const ROTATED_KEPT: usize = 64;

#[derive(Clone, Copy, Debug)]
struct PolyEdge {
    w: DVec3,
    m: DVec3,
    len: f64,
    a: DVec3,
    /// How far outside this edge a vertex may pass and still count (see [`SIDE_EPS`]).
    tol: f64,
}

impl TraceScratch {
    /// Empty scratch; it grows to the model's size once.
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn begin(&mut self, model: &CollisionModel) {
        if self.poly_mark.len() < model.polygons.len() {
            self.poly_mark.resize(model.polygons.len(), 0);
        }
        if self.vert_mark.len() < model.vertices.len() {
            self.vert_mark.resize(model.vertices.len(), 0);
        }
        if self.brush_mark.len() < model.brushes.len() {
            self.brush_mark.resize(model.brushes.len(), 0);
        }
        if self.edge_mark.len() < model.edges.len() {
            self.edge_mark.resize(model.edges.len(), 0);
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.poly_mark.iter_mut().for_each(|m| *m = 0);
            self.vert_mark.iter_mut().for_each(|m| *m = 0);
            self.edge_mark.iter_mut().for_each(|m| *m = 0);
            self.brush_mark.iter_mut().for_each(|m| *m = 0);
            self.stamp = 1;
        }
    }
}

/// The polygons and solid brushes around one place, for [`CollisionModel::sweep_in`] and
/// [`CollisionModel::position_solid_in`].
#[derive(Clone, Debug)]
pub struct Region {
    bounds: Aabb,
    /// Whether the polygons were gathered (only hulls other than upright boxes sweep them).
    with_polygons: bool,
    polygons: Vec<u32>,
    bounds32: Vec<Bounds32>,
    brushes: Vec<u32>,
    /// The bounds of each of `brushes`, beside them so a scan reads one array.
    brush_bounds: Vec<Aabb>,
}

impl Default for Region {
    fn default() -> Self {
        Region {
            bounds: Aabb::EMPTY,
            with_polygons: false,
            polygons: Vec::new(),
            bounds32: Vec::new(),
            brushes: Vec::new(),
            brush_bounds: Vec::new(),
        }
    }
}

impl Region {
    /// Whether a swept box lies inside the gathered bounds (so nothing outside the region
    /// can be hit).
    pub fn contains(&self, b: &Aabb) -> bool {
        b.min.cmpge(self.bounds.min).all() && b.max.cmple(self.bounds.max).all()
    }

    /// The box the region was gathered for.
    pub fn bounds(&self) -> Aabb {
        self.bounds
    }

    /// The solid brushes whose bounds meet the region (in no particular order: the queries
    /// over them do not depend on it).
    pub(super) fn brushes(&self) -> &[u32] {
        &self.brushes
    }

    /// The bounds of each of [`Region::brushes`].
    pub(super) fn brush_bounds(&self) -> &[Aabb] {
        &self.brush_bounds
    }
}

/// Plücker side of the ray through `x` along `v` (given as `xv = x × v`) against the
/// directed line with direction `w` and moment `m`: positive when the ray passes on the
/// inner side of a counter-clockwise polygon edge while moving against the polygon normal.
#[inline]
fn side(v: DVec3, xv: DVec3, w: DVec3, m: DVec3) -> f64 {
    -(v.dot(m) + w.dot(xv))
}

/// Best hit so far.
#[derive(Clone, Copy)]
struct Best {
    f: f64,
    normal: DVec3,
    point: DVec3,
    feature: Option<Feature>,
    contents: Contents,
    /// World box swept by the hull up to `f`, padded by the zone margin: nothing outside
    /// it can be hit earlier.
    sweep: Aabb,
    sweep32: Bounds32,
}

impl Best {
    const NONE: Best = Best {
        f: 1.0,
        normal: DVec3::ZERO,
        point: DVec3::ZERO,
        feature: None,
        contents: Contents::NONE,
        sweep: Aabb::EMPTY,
        sweep32: Bounds32([0.0; 6]),
    };
}

struct Query<'a> {
    model: &'a CollisionModel,
    hull: &'a Hull,
    start: DVec3,
    dir: DVec3,
    dir_len: f64,
    mask: Contents,
}

impl CollisionModel {
    /// Sweeps `hull` from `start` to `end` against everything whose contents meet `mask`,
    /// and tests whether the start position is solid.
    pub fn trace(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        scratch: &mut TraceScratch,
    ) -> Trace {
        if hull.is_box() {
            return self.trace_box(hull, start, end, mask, scratch);
        }
        let sweep = self.sweep(hull, start, end, mask, scratch);
        let start_solid = self.position_solid(hull, start, mask, scratch);
        Trace {
            sweep,
            start_solid,
            all_solid: start_solid && self.position_solid(hull, sweep.end, mask, scratch),
        }
    }

    /// The sweep alone (no start-solid test): the continuous collision query. Upright
    /// boxes and points take the box sweep (an exact swept separating-axis test per brush);
    /// other hulls the polygon sweep.
    pub fn sweep(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Sweep {
        self.sweep_with(hull, start, end, mask, None, s)
    }

    /// [`CollisionModel::sweep`] over the polygons of a [`Region`] gathered beforehand,
    /// when the move lies inside it (else over the whole model): many short traces in one
    /// place (a player's tick) then share one broad-phase query.
    pub fn sweep_in(
        &self,
        region: &Region,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Sweep {
        self.sweep_with(hull, start, end, mask, Some(region), s)
    }

    /// The polygon sweep (van Waveren's feature tests against the model's polygons) for
    /// any hull, boxes included, where [`CollisionModel::sweep`] takes the box sweep for
    /// boxes: the two stand side by side in tests and benchmarks.
    pub fn sweep_polygons(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Sweep {
        self.sweep_polygons_in(hull, start, end, mask, None, s)
    }

    fn sweep_with(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        region: Option<&Region>,
        s: &mut TraceScratch,
    ) -> Sweep {
        if hull.is_box() {
            self.sweep_box(hull, start, end, mask, region, s)
                .map_or(Sweep::clear(end), |(sweep, _)| sweep)
        } else {
            self.sweep_polygons_in(hull, start, end, mask, region, s)
        }
    }

    fn sweep_polygons_in(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        region: Option<&Region>,
        s: &mut TraceScratch,
    ) -> Sweep {
        let dir = end - start;
        let mut best = Best::NONE;
        let dir_len = dir.length();
        if dir_len > 0.0 && dir_len.is_finite() && start.is_finite() {
            s.begin(self);
            let q = Query {
                model: self,
                hull,
                start,
                dir,
                dir_len,
                mask,
            };
            q.prepare_hull(s);
            best = q.best(best);
            match region {
                Some(r) if r.with_polygons && r.contains(&best.sweep) => {
                    for (&pi, b) in r.polygons.iter().zip(&r.bounds32) {
                        if b.overlaps(&best.sweep32) {
                            q.test_polygon(pi, s, &mut best);
                        }
                    }
                }
                _ => q.traverse(s, &mut best),
            }
        }
        match best.feature {
            Some(feature) => Sweep {
                fraction: best.f,
                end: start + dir * best.f,
                hit: Some(Hit {
                    normal: best.normal,
                    point: best.point,
                    contents: best.contents,
                    target: Target::Model(feature),
                }),
            },
            None => Sweep::clear(end),
        }
    }

    /// Gathers into `region` what sweeps and position tests of `hull` within `bounds`
    /// need: every solid brush whose bounds meet them, and for a hull other than an upright
    /// box (which sweeps the brushes) every such polygon.
    pub fn gather_region(
        &self,
        bounds: Aabb,
        hull: &Hull,
        region: &mut Region,
        s: &mut TraceScratch,
    ) {
        s.begin(self);
        region.bounds = bounds;
        region.with_polygons = !hull.is_box();
        region.polygons.clear();
        region.bounds32.clear();
        region.brushes.clear();
        region.brush_bounds.clear();
        let brushes = &mut region.brushes;
        self.brush_grid.query(&bounds, |i| {
            if self.brushes[i as usize].bounds.overlaps(&bounds) {
                brushes.push(i);
            }
        });
        region.brush_bounds.extend(
            region
                .brushes
                .iter()
                .map(|&i| self.brushes[i as usize].bounds),
        );
        if !region.with_polygons {
            return;
        }
        let marks = &mut s.poly_mark;
        let stamp = s.stamp;
        let polys = &mut region.polygons;
        self.poly_tree.query_aabb(&bounds, |i| {
            if marks[i as usize] != stamp && self.polygons[i as usize].bounds.overlaps(&bounds) {
                marks[i as usize] = stamp;
                polys.push(i);
            }
        });
        // Tree order, not query order, so results never depend on the walk.
        region.polygons.sort_unstable();
        region.bounds32.extend(
            region
                .polygons
                .iter()
                .map(|&i| self.poly_bounds32[i as usize]),
        );
    }

    /// Contacts of `hull` at `pos` with polygons within `max_dist`, for ground and wall
    /// checks (seed 000 §2.6): each nearby front-facing polygon is probed by sweeping the
    /// hull straight at it, with the same feature tests as [`CollisionModel::sweep`].
    /// Normals point from the model towards the hull.
    pub fn contacts(
        &self,
        hull: &Hull,
        pos: DVec3,
        max_dist: f64,
        mask: Contents,
        s: &mut TraceScratch,
        out: &mut Vec<Contact>,
    ) {
        out.clear();
        let q = hull.bounds().offset(pos).expand(max_dist + MARGIN);
        let mut cand = std::mem::take(&mut s.candidates);
        cand.clear();
        self.poly_tree.query_aabb(&q, |i| cand.push(i));
        cand.sort_unstable();
        cand.dedup();
        for &pi in &cand {
            let p = &self.polygons[pi as usize];
            if !p.contents.intersects(mask) || !p.bounds.overlaps(&q) {
                continue;
            }
            let n = p.plane.normal;
            let distance = p.plane.distance(pos) + hull.project(n).0;
            if !(-POSITION_EPS..=max_dist).contains(&distance) {
                continue;
            }
            let dir = -n * (max_dist + EXPEL);
            s.begin(self);
            let qy = Query {
                model: self,
                hull,
                start: pos,
                dir,
                dir_len: dir.length(),
                mask,
            };
            qy.prepare_hull(s);
            let mut best = Best::NONE;
            best = qy.best(best);
            qy.test_polygon(pi, s, &mut best);
            if best.feature.is_some() {
                out.push(Contact {
                    normal: best.normal,
                    distance,
                    point: best.point,
                    contents: p.contents,
                });
            }
        }
        s.candidates = cand;
    }
}

impl<'a> Query<'a> {
    /// Leading hull faces (facing along the motion), and the vertices and edges on them.
    fn prepare_hull(&self, s: &mut TraceScratch) {
        let h = self.hull;
        s.vert_moment.clear();
        s.vert_moment
            .extend(h.vertices.iter().map(|v| v.cross(self.dir)));
        let computed;
        let leads = match h.leads(self.dir) {
            Some(l) => l,
            None => {
                computed = h.compute_leads(self.dir);
                &computed
            }
        };
        s.lead_faces.clear();
        s.lead_verts.clear();
        s.lead_edges.clear();
        s.lead_faces.extend_from_slice(&leads.faces);
        s.lead_verts.extend_from_slice(&leads.verts);
        s.lead_edges.extend_from_slice(&leads.edges);
    }

    /// Whether the hull, moving along the path up to fraction `f`, comes within the zone
    /// margin of the box `b`: a slab test of the path against `b` grown by the hull. Long
    /// diagonal moves have sweep boxes full of things far from the path.
    #[inline]
    fn path_reaches(&self, b: &Aabb, f: f64) -> bool {
        let hb = self.hull.bounds();
        let lo = b.min - hb.max - DVec3::splat(MARGIN) - self.start;
        let hi = b.max - hb.min + DVec3::splat(MARGIN) - self.start;
        let (mut t0, mut t1) = (0.0f64, f);
        for a in 0..3 {
            let (l, h, d) = (lo.as_ref()[a], hi.as_ref()[a], self.dir.as_ref()[a]);
            if d == 0.0 {
                if l > 0.0 || h < 0.0 {
                    return false;
                }
            } else {
                let (mut u, mut v) = (l / d, h / d);
                if u > v {
                    std::mem::swap(&mut u, &mut v);
                }
                t0 = t0.max(u);
                t1 = t1.min(v);
                if t0 > t1 {
                    return false;
                }
            }
        }
        true
    }

    /// A new best hit, with its (smaller) sweep box.
    fn best(&self, mut b: Best) -> Best {
        b.sweep = self.sweep_box(b.f);
        b.sweep32 = Bounds32::new(&b.sweep);
        b
    }

    /// The swept hull box up to fraction `f`, padded by the zone margin.
    fn sweep_box(&self, f: f64) -> Aabb {
        let end = self.start + self.dir * f;
        self.hull.swept_bounds(self.start, end).expand(MARGIN)
    }

    /// Front-to-back walk of the polygon tree, skipping cells the move reaches only after
    /// the best hit so far.
    fn traverse(&self, s: &mut TraceScratch, best: &mut Best) {
        let hb = self.hull.bounds();
        let mut stack = std::mem::take(&mut s.stack);
        self.model.poly_tree.walk_segment(
            self.start,
            self.dir,
            hb.min - DVec3::splat(MARGIN),
            hb.max + DVec3::splat(MARGIN),
            &mut stack,
            |items, bounds| {
                for (&pi, b) in items.iter().zip(bounds) {
                    if b.overlaps(&best.sweep32) && s.poly_mark[pi as usize] != s.stamp {
                        s.poly_mark[pi as usize] = s.stamp;
                        self.test_polygon(pi, s, best);
                    }
                }
                best.f
            },
        );
        s.stack = stack;
    }

    fn test_polygon(&self, pi: u32, s: &mut TraceScratch, best: &mut Best) {
        let m = self.model;
        let poly = &m.polygons[pi as usize];
        if !poly.contents.intersects(self.mask) {
            return;
        }
        let n = poly.plane.normal;
        let nd = n.dot(self.dir);
        // Back-facing or parallel: the face cannot be entered, and a solid's edges and
        // corners are then reached through its other faces (a contact normal between two
        // faces' normals faces the motion only if one of them does). A sheet's rim has a
        // face on one side only: its edges and corners are met even moving away from it.
        if nd >= 0.0 && !poly.sheet {
            return;
        }
        if !self.path_reaches(&poly.bounds, best.f) {
            return;
        }
        let sweep = best.sweep;
        let pd = poly.plane.distance(self.start);
        let (hl, hh) = self.hull.project(n);
        let dmin = pd + hl;
        // Stays in front outside the zone all along, or wholly behind all along (a sheet
        // may be approached from behind and passed beyond its rim, or left).
        if dmin + nd.min(0.0) * best.f >= EXPEL || pd + hh + nd.max(0.0) * best.f < -EXPEL {
            return;
        }
        // Features are culled against the swept box relative to the start.
        let rel = Aabb {
            min: sweep.min - self.start,
            max: sweep.max - self.start,
        };
        let edges = &m.poly_edges[poly.first as usize..(poly.first + poly.count) as usize];
        if nd < 0.0 {
            self.hull_vertices_vs_polygon(pi, n, nd, pd, edges, s, best);
        }
        self.model_vertices_vs_hull(pi, edges, &rel, s, best);
        if !self.hull.edges.is_empty() {
            self.edges_vs_edges(pi, edges, &rel, s, best);
        }
    }

    /// Start (relative to the trace start) and end of a polygon's edge use.
    #[inline]
    fn edge_points(&self, c: u32) -> (DVec3, DVec3, u32) {
        let m = self.model;
        let e = &m.edges[(c >> 1) as usize];
        let rev = (c & 1) as usize;
        let va = e.v[rev];
        (
            m.vertices[va as usize] - self.start,
            m.vertices[e.v[1 - rev] as usize] - self.start,
            va,
        )
    }

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
    fn hull_vertices_vs_polygon(
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
                    let tol = if e.internal || e.polys[1] == super::mesh::NONE {
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

    fn model_vertices_vs_hull(
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

    fn edges_vs_edges(
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
                let end_eps = if edge.polys[1] == super::mesh::NONE {
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
fn in_cone(nn: DVec3, edge: &super::Edge, w: DVec3) -> bool {
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
