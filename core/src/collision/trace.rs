//! Translational continuous collision detection (J.M.P. van Waveren, *Robust Continuous
//! Collision Detection Between Arbitrary Polyhedra Using Trajectory Parameterization of
//! Polyhedral Features*, 2005: §2.2–2.3, §3.1–3.2, §4–5).
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

mod pairs;

/// The zone test reaches at most `EXPEL * MITRE_CAP` from an edge; broad-phase margins
/// use this plus slack.
const MARGIN: f64 = EXPEL * super::mesh::MITRE_CAP + 1e-3;

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

/// The work of [`CollisionModel::trace`].
pub(super) fn trace(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    scratch: &mut TraceScratch,
) -> Trace {
    if hull.is_box() {
        return super::boxsweep::trace_box(model, hull, start, end, mask, scratch);
    }
    let sweep = model.sweep(hull, start, end, mask, scratch);
    let start_solid = model.position_solid(hull, start, mask, scratch);
    Trace {
        sweep,
        start_solid,
        all_solid: start_solid && model.position_solid(hull, sweep.end, mask, scratch),
    }
}

/// The work of [`CollisionModel::sweep`].
pub(super) fn sweep(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> Sweep {
    sweep_with(model, hull, start, end, mask, None, s)
}

/// The work of [`CollisionModel::sweep_in`].
pub(super) fn sweep_in(
    model: &CollisionModel,
    region: &Region,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> Sweep {
    sweep_with(model, hull, start, end, mask, Some(region), s)
}

/// The work of [`CollisionModel::sweep_polygons`].
pub(super) fn sweep_polygons(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> Sweep {
    sweep_polygons_in(model, hull, start, end, mask, None, s)
}

fn sweep_with(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    region: Option<&Region>,
    s: &mut TraceScratch,
) -> Sweep {
    if hull.is_box() {
        super::boxsweep::sweep_box(model, hull, start, end, mask, region, s)
            .map_or(Sweep::clear(end), |(sweep, _)| sweep)
    } else {
        sweep_polygons_in(model, hull, start, end, mask, region, s)
    }
}

fn sweep_polygons_in(
    model: &CollisionModel,
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
        s.begin(model);
        let q = Query {
            model,
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

/// The work of [`CollisionModel::gather_region`].
pub(super) fn gather_region(
    model: &CollisionModel,
    bounds: Aabb,
    hull: &Hull,
    region: &mut Region,
    s: &mut TraceScratch,
) {
    s.begin(model);
    region.bounds = bounds;
    region.with_polygons = !hull.is_box();
    region.polygons.clear();
    region.bounds32.clear();
    region.brushes.clear();
    region.brush_bounds.clear();
    let brushes = &mut region.brushes;
    model.brush_grid.query(&bounds, |i| {
        if model.brushes[i as usize].bounds.overlaps(&bounds) {
            brushes.push(i);
        }
    });
    region.brush_bounds.extend(
        region
            .brushes
            .iter()
            .map(|&i| model.brushes[i as usize].bounds),
    );
    if !region.with_polygons {
        return;
    }
    let marks = &mut s.poly_mark;
    let stamp = s.stamp;
    let polys = &mut region.polygons;
    model.poly_tree.query_aabb(&bounds, |i| {
        if marks[i as usize] != stamp && model.polygons[i as usize].bounds.overlaps(&bounds) {
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
            .map(|&i| model.poly_bounds32[i as usize]),
    );
}

/// The work of [`CollisionModel::contacts`].
pub(super) fn contacts(
    model: &CollisionModel,
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
    model.poly_tree.query_aabb(&q, |i| cand.push(i));
    cand.sort_unstable();
    cand.dedup();
    for &pi in &cand {
        let p = &model.polygons[pi as usize];
        if !p.contents.intersects(mask) || !p.bounds.overlaps(&q) {
            continue;
        }
        let n = p.plane.normal;
        let distance = p.plane.distance(pos) + hull.project(n).0;
        if !(-POSITION_EPS..=max_dist).contains(&distance) {
            continue;
        }
        let dir = -n * (max_dist + EXPEL);
        s.begin(model);
        let qy = Query {
            model,
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
}
