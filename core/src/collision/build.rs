//! Compiling a map's solid brushes and curved patches into a [`CollisionModel`].

use super::grid::BrushGrid;
use super::mesh::{build_edges, split_t_junctions, RawPolygon, Surface, Welder};
use super::patch::{self, PATCH_TOLERANCE};
use super::tree::AxialTree;
use super::{CollisionModel, Contents, ModelStats, Polygon, SatAxis, SolidBrush};
use crate::geom::{planes_to_polygons, Aabb, Plane, MAX_COORD};
use crate::map::{solidity, Brush, MapData};
use glam::DVec3;

/// Tolerance (units) for "a point lies inside or on a brush" when dropping buried faces.
const BURIED_EPS: f64 = 1e-6;

/// Contents of a solid brush: player clip when every face is clip or a tool texture.
fn brush_contents(b: &Brush) -> Contents {
    let clip = b
        .faces
        .iter()
        .any(|f| solidity::is_player_clip_texture(&f.texture))
        && b.faces.iter().all(|f| {
            solidity::is_player_clip_texture(&f.texture) || solidity::is_tool_texture(&f.texture)
        });
    if clip {
        Contents::PLAYER_CLIP
    } else {
        Contents::SOLID
    }
}

/// Most triangles all of a map's patches become together; beyond it every patch is cut
/// proportionally coarser (and `patch_deviation` reports how close they stay).
const MAP_PATCH_TRIANGLES: usize = 1 << 20;

/// Triangles this thin (height under this fraction of their longest side) have no usable
/// plane; dropping them leaves gaps far narrower than the expel zone, which seals them.
const SLIVER: f64 = 1e-9;

/// A solid patch cut into triangles, wound the same way.
struct Sheet {
    triangles: Vec<[DVec3; 3]>,
    contents: Contents,
    line: usize,
}

/// Contents of a solid patch: player clip, or solid.
fn patch_contents(p: &crate::map::Patch) -> Contents {
    if solidity::patch_is_player_clip(p) {
        Contents::PLAYER_CLIP
    } else {
        Contents::SOLID
    }
}

/// The world's solid patches, tessellated within [`PATCH_TOLERANCE`] (and the map's
/// triangle budget).
fn sheets(map: &MapData, stats: &mut ModelStats) -> Vec<Sheet> {
    let solid: Vec<&crate::map::Patch> = map.world_solid_patches().collect();
    stats.patches = solid.len();
    stats.patches_skipped = map.patch_count() - solid.len();
    let need: Vec<usize> = solid
        .iter()
        .map(|p| patch::triangles_needed(p, PATCH_TOLERANCE))
        .collect();
    let total: usize = need.iter().sum();
    solid
        .iter()
        .zip(&need)
        .map(|(p, &n)| {
            let mut budget = patch::MAX_PATCH_TRIANGLES;
            if total > MAP_PATCH_TRIANGLES {
                budget = budget.min(n * MAP_PATCH_TRIANGLES / total);
            }
            let t = patch::tessellate(p, PATCH_TOLERANCE, budget);
            stats.patch_deviation = stats.patch_deviation.max(t.bound);
            Sheet {
                triangles: t.triangles().collect(),
                contents: patch_contents(p),
                line: p.line,
            }
        })
        .collect()
}

struct BrushGeom {
    planes: Vec<Plane>,
    faces: Vec<(usize, Vec<DVec3>)>,
    contents: Contents,
    line: usize,
    bounds: Aabb,
}

impl CollisionModel {
    /// Compiles the world's solid brushes (see [`solidity::is_world_solid`]) and solid
    /// patches (see [`solidity::is_world_solid_patch`]).
    pub fn build(map: &MapData) -> CollisionModel {
        let mut stats = ModelStats {
            entities: map.entities.len(),
            brushes: map.brush_count(),
            ..Default::default()
        };
        let sheets = sheets(map, &mut stats);
        let mut geoms: Vec<BrushGeom> = Vec::new();
        for b in map.world_solid_brushes() {
            stats.solid_brushes += 1;
            let planes: Vec<Plane> = b.faces.iter().map(|f| f.plane).collect();
            let faces = planes_to_polygons(&planes, 1e-6);
            if faces.len() < 4 {
                stats.degenerate_brushes += 1;
                continue;
            }
            let bounds = Aabb::from_points(faces.iter().flat_map(|(_, w)| w.iter()));
            // Planes that do not close the brush within the supported coordinates (the
            // readers drop such brushes with a warning; this holds for any MapData).
            let beyond = |v: glam::DVec3| !v.is_finite() || v.abs().max_element() > MAX_COORD;
            if beyond(bounds.min) || beyond(bounds.max) {
                stats.degenerate_brushes += 1;
                continue;
            }
            geoms.push(BrushGeom {
                planes,
                faces,
                contents: brush_contents(b),
                line: b.line,
                bounds,
            });
        }
        Self::from_parts(geoms, sheets, stats)
    }

    fn from_parts(
        geoms: Vec<BrushGeom>,
        sheets: Vec<Sheet>,
        mut stats: ModelStats,
    ) -> CollisionModel {
        let mut m = CollisionModel {
            vertices: Vec::new(),
            vertex_active: Vec::new(),
            edges: Vec::new(),
            polygons: Vec::new(),
            poly_edges: Vec::new(),
            brushes: Vec::new(),
            brush_planes: Vec::new(),
            brush_points: Vec::new(),
            brush_axes: Vec::new(),
            brush_sat: Vec::new(),
            poly_bounds32: Vec::new(),
            poly_tree: AxialTree::build(&[]),
            brush_grid: BrushGrid::build(&[]),
            bounds: Aabb::EMPTY,
            stats: ModelStats::default(),
        };
        for g in &geoms {
            let p0 = m.brush_planes.len() as u32;
            m.brush_planes.extend_from_slice(&g.planes);
            let q0 = m.brush_points.len() as u32;
            for (_, w) in &g.faces {
                for p in w {
                    if !m.brush_points[q0 as usize..]
                        .iter()
                        .any(|q| (*q - *p).abs().max_element() <= 1e-9)
                    {
                        m.brush_points.push(*p);
                    }
                }
            }
            let a0 = m.brush_axes.len() as u32;
            for (_, w) in &g.faces {
                for k in 0..w.len() {
                    push_axis(&mut m.brush_axes, a0 as usize, w[(k + 1) % w.len()] - w[k]);
                }
            }
            m.brushes.push(SolidBrush {
                bounds: g.bounds,
                contents: g.contents,
                planes: (p0, m.brush_planes.len() as u32),
                points: (q0, m.brush_points.len() as u32),
                axes: (a0, m.brush_axes.len() as u32),
                sat: (0, 0),
                box_planes: 0,
                axial: g.planes.iter().all(|p| p.normal.abs().max_element() == 1.0),
                sheet: false,
                line: g.line as u32,
            });
        }
        let mut welder = Welder::new(super::mesh::WELD);
        let (mut raw, mut raw_meta) = exposed_faces(&geoms, &m.brushes, &mut welder, &mut stats);
        push_sheet_triangles(&sheets, &mut welder, &mut raw, &mut raw_meta);
        m.vertices = welder.vertices;
        split_t_junctions(&m.vertices, &mut raw);
        stats.merged_polygons = merge_coplanar(&m.vertices, &mut raw, &mut raw_meta);
        // Each sheet polygon gets a zero-thickness brush for position tests and a mirrored
        // back face, so the sheet blocks from both sides.
        for i in 0..raw.len() {
            if raw[i].surface != Surface::SheetFront {
                continue;
            }
            let line = raw_meta[i].1;
            raw_meta[i].1 = m.brushes.len() as u32;
            m.push_sheet_brush(&raw[i], raw_meta[i].0, line);
            stats.patch_polygons += 1;
            let mut back = raw[i].clone();
            back.plane = back.plane.flipped();
            back.verts.reverse();
            back.surface = Surface::SheetBack;
            raw.push(back);
            raw_meta.push(raw_meta[i]);
        }
        let (edges, poly_edges) = build_edges(&m.vertices, &raw);
        m.vertex_active = vec![false; m.vertices.len()];
        for e in edges.iter().filter(|e| !e.internal) {
            m.vertex_active[e.v[0] as usize] = true;
            m.vertex_active[e.v[1] as usize] = true;
        }
        for ((p, pe), (contents, brush)) in raw.iter().zip(&poly_edges).zip(&raw_meta) {
            let bounds = Aabb::from_points(p.verts.iter().map(|&v| &m.vertices[v as usize]));
            m.bounds = m.bounds.union(&bounds);
            m.polygons.push(Polygon {
                plane: p.plane,
                bounds,
                first: m.poly_edges.len() as u32,
                count: pe.len() as u32,
                contents: *contents,
                brush: *brush,
                sheet: p.surface != Surface::Solid,
            });
            m.poly_edges.extend_from_slice(pe);
        }
        m.edges = edges;
        m.build_sat();
        let brush_bounds: Vec<Aabb> = m.brushes.iter().map(|b| b.bounds).collect();
        m.brush_grid = BrushGrid::build(&brush_bounds);
        let poly_bounds: Vec<Aabb> = m.polygons.iter().map(|p| p.bounds).collect();
        m.poly_bounds32 = poly_bounds.iter().map(super::tree::Bounds32::new).collect();
        m.poly_tree = AxialTree::build(&poly_bounds);

        stats.polygons = m.polygons.len();
        stats.edges = m.edges.len();
        stats.internal_edges = m.edges.iter().filter(|e| e.internal).count();
        stats.vertices = m.vertices.len();
        stats.broad_phase_nodes = m.poly_tree.nodes.len();
        m.stats = stats;
        m
    }

    /// Adds the zero-thickness brush of a sheet polygon: its plane both ways, the side
    /// plane of each edge, its corners and edge directions.
    fn push_sheet_brush(&mut self, p: &RawPolygon, contents: Contents, line: u32) {
        let pts: Vec<DVec3> = p.verts.iter().map(|&v| self.vertices[v as usize]).collect();
        let n = p.plane.normal;
        let p0 = self.brush_planes.len() as u32;
        self.brush_planes.push(p.plane);
        self.brush_planes.push(p.plane.flipped());
        let a0 = self.brush_axes.len() as u32;
        for k in 0..pts.len() {
            let (a, b) = (pts[k], pts[(k + 1) % pts.len()]);
            let out = (b - a).cross(n).normalize_or_zero();
            if out != DVec3::ZERO {
                self.brush_planes.push(Plane {
                    normal: out,
                    dist: out.dot(a),
                });
            }
            push_axis(&mut self.brush_axes, a0 as usize, b - a);
        }
        let q0 = self.brush_points.len() as u32;
        self.brush_points.extend_from_slice(&pts);
        let planes = &self.brush_planes[p0 as usize..];
        self.brushes.push(SolidBrush {
            bounds: Aabb::from_points(&pts),
            contents,
            planes: (p0, self.brush_planes.len() as u32),
            points: (q0, self.brush_points.len() as u32),
            axes: (a0, self.brush_axes.len() as u32),
            sat: (0, 0),
            box_planes: 0,
            axial: planes.iter().all(|q| q.normal.abs().max_element() == 1.0),
            sheet: true,
            line,
        });
    }
}

impl CollisionModel {
    /// Every brush's separating axes for the box sweep besides its planes and the
    /// coordinate axes ([`SatAxis`]), once the polygons exist: each plane's normal the
    /// other way, each edge direction × each coordinate axis, and the plane of every
    /// polygon of another brush or patch that the brush reaches from behind (the plane a box sliding over their crease keeps its gap
    /// along: without it a convex crease between two brushes, two patch facets or a patch
    /// and a brush would catch a box resting in the zone). Each once, and none that is a
    /// coordinate axis or another of the brush's planes.
    fn build_sat(&mut self) {
        let brush_bounds: Vec<Aabb> = self.brushes.iter().map(|b| b.bounds).collect();
        let tree = AxialTree::build(&brush_bounds);
        let mut across: Vec<Vec<DVec3>> = vec![Vec::new(); self.brushes.len()];
        let mut near = Vec::new();
        for p in &self.polygons {
            let reach = p.bounds.expand(CREASE_EPS);
            near.clear();
            tree.query_aabb(&reach, |i| near.push(i));
            near.sort_unstable();
            near.dedup();
            for &bi in &near {
                let b = &self.brushes[bi as usize];
                if bi == p.brush || !b.bounds.overlaps(&reach) {
                    continue;
                }
                let top = self.brush_points[b.points.0 as usize..b.points.1 as usize]
                    .iter()
                    .fold(f64::NEG_INFINITY, |h, q| h.max(p.plane.distance(*q)));
                // The brush reaches the polygon's plane from behind: the plane separates it
                // from a box resting on the polygon.
                if top.abs() <= CREASE_EPS {
                    across[bi as usize].push(p.plane.normal);
                }
            }
        }
        self.brush_sat.clear();
        for (bi, extra) in across.iter().enumerate() {
            let b = &self.brushes[bi];
            let planes = &self.brush_planes[b.planes.0 as usize..b.planes.1 as usize];
            let points = &self.brush_points[b.points.0 as usize..b.points.1 as usize];
            let axes = &self.brush_axes[b.axes.0 as usize..b.axes.1 as usize];
            let s0 = self.brush_sat.len();
            // A plane's normal reversed: the box's gap beyond the brush's far side along it.
            // It decides where a box edge grazes a brush edge (a box sliding along one face
            // past the corner where the far side begins keeps its gap along it and nothing
            // else); unneeded where an opposite plane or a coordinate axis is the same line,
            // and for a sheet, whose side planes are no faces (its plane both ways, the
            // coordinate axes and its edges across them are every axis a flat polygon has).
            let solid_planes = if b.sheet { &[][..] } else { planes };
            for p in solid_planes {
                let n = p.normal;
                if DVec3::AXES.iter().any(|&a| parallel(a, n))
                    || planes
                        .iter()
                        .any(|q| q.normal.dot(n) < 0.0 && parallel(q.normal, n))
                    || self.brush_sat[s0..].iter().any(|a| parallel(a.normal, n))
                {
                    continue;
                }
                let (lo, hi) = super::overlap::range(points, n);
                self.brush_sat.push(SatAxis { normal: n, lo, hi });
            }
            let crosses = axes
                .iter()
                .flat_map(|w| DVec3::AXES.map(|k| w.cross(k).normalize_or_zero()));
            for n in crosses.chain(extra.iter().copied()) {
                if n == DVec3::ZERO
                    || DVec3::AXES.iter().any(|&a| parallel(a, n))
                    || planes.iter().any(|p| parallel(p.normal, n))
                    || self.brush_sat[s0..].iter().any(|a| parallel(a.normal, n))
                {
                    continue;
                }
                let (lo, hi) = super::overlap::range(points, n);
                self.brush_sat.push(SatAxis { normal: n, lo, hi });
            }
            self.brushes[bi].sat = (s0 as u32, self.brush_sat.len() as u32);
        }
        // A plane that is exactly a side of the bounds gives the box the same gap and rate,
        // bit for bit, as that coordinate axis (a unit normal's zero components add
        // nothing): the clip needs it once. The others go first among the brush's planes
        // (in their order), so the clip's planes are a prefix of them, not a copy.
        for b in &mut self.brushes {
            let (p0, p1) = (b.planes.0 as usize, b.planes.1 as usize);
            let mut kept = 0;
            if !b.axial {
                let planes = &mut self.brush_planes[p0..p1];
                let (clip, sides): (Vec<Plane>, Vec<Plane>) =
                    planes.iter().partition(|p| !bounds_side(&b.bounds, p));
                kept = clip.len();
                for (dst, src) in planes.iter_mut().zip(clip.into_iter().chain(sides)) {
                    *dst = src;
                }
            }
            b.box_planes = kept as u32;
        }
    }
}

/// Whether `p` is exactly a side of `b`: its normal a coordinate axis either way (the
/// other components zero) and its distance that side's.
fn bounds_side(b: &Aabb, p: &Plane) -> bool {
    (0..3).any(|k| {
        let others_zero = (0..3).all(|j| j == k || p.normal[j] == 0.0);
        others_zero
            && ((p.normal[k] == 1.0 && p.dist == b.max[k])
                || (p.normal[k] == -1.0 && -p.dist == b.min[k]))
    })
}

/// How near a neighbouring brush must come to a polygon's plane and bounds for the plane
/// to become one of its box-sweep axes (the weld, with room).
const CREASE_EPS: f64 = 1e-3;

/// Adds the direction of `v` to a brush's axes (those from index `first` on) unless it is
/// zero or parallel to one already there.
fn push_axis(axes: &mut Vec<DVec3>, first: usize, v: DVec3) {
    let d = v.normalize_or_zero();
    if d != DVec3::ZERO && !axes[first..].iter().any(|&a| parallel(a, d)) {
        axes.push(d);
    }
}

/// Whether unit directions `a` and `b` are parallel (either way) to within 1e-9 radians.
fn parallel(a: DVec3, b: DVec3) -> bool {
    a.cross(b).length_squared() < 1e-18
}

/// The welded vertices of a polygon's corner loop, with corners that welded together
/// (neighbours, or the last and the first) kept once.
fn welded_loop(welder: &mut Welder, pts: &[DVec3]) -> Vec<u32> {
    let mut verts: Vec<u32> = Vec::with_capacity(pts.len());
    for p in pts {
        let v = welder.vertex(*p);
        if verts.last() != Some(&v) {
            verts.push(v);
        }
    }
    while verts.len() > 1 && verts.first() == verts.last() {
        verts.pop();
    }
    verts
}

/// The parts of convex `face` (in `plane`) outside brush `other` (closed: a part lying on
/// its surface counts as inside), as convex pieces. Where `other` has a face in the same
/// plane facing the same way, one of the two overlapping faces must stay: the earlier
/// brush's (`other_first`) keeps it, so the later one's covered part goes.
fn exposed_parts(
    face: Vec<DVec3>,
    plane: &Plane,
    other: &[Plane],
    other_first: bool,
) -> Vec<Vec<DVec3>> {
    if !other_first && other.iter().any(|q| q.same_as(plane, 1e-9, BURIED_EPS)) {
        return vec![face];
    }
    // Wholly in front of one plane (touching it at most): untouched.
    let outside = other.iter().any(|q| {
        face.iter().all(|p| q.distance(*p) >= -BURIED_EPS)
            && face.iter().any(|p| q.distance(*p) > BURIED_EPS)
    });
    if outside {
        return vec![face];
    }
    let mut out = Vec::new();
    let mut rest = face;
    for q in other {
        if rest.iter().all(|p| q.distance(*p) <= BURIED_EPS) {
            continue;
        }
        let front = clip(&rest, q, 1.0);
        if front.len() >= 3 && area(&front, plane.normal) > SLIVER_AREA {
            out.push(front);
        }
        rest = clip(&rest, q, -1.0);
        if rest.len() < 3 {
            return out;
        }
    }
    // What is left lies within `other`: buried.
    out
}

/// Pieces thinner than this (square units) are dropped as clipping noise.
const SLIVER_AREA: f64 = 1e-6;

/// The part of convex polygon `poly` where `side * q.distance(p) >= 0`.
fn clip(poly: &[DVec3], q: &Plane, side: f64) -> Vec<DVec3> {
    let mut out = Vec::with_capacity(poly.len() + 1);
    for k in 0..poly.len() {
        let (a, b) = (poly[k], poly[(k + 1) % poly.len()]);
        let (da, db) = (side * q.distance(a), side * q.distance(b));
        if da >= 0.0 {
            out.push(a);
        }
        if (da > 0.0 && db < 0.0) || (da < 0.0 && db > 0.0) {
            let t = da / (da - db);
            let mut p = a + (b - a) * t;
            // Points on an axial plane land exactly on it.
            for ax in 0..3 {
                if q.normal[ax].abs() == 1.0 {
                    p[ax] = q.dist * q.normal[ax];
                }
            }
            out.push(p);
        }
    }
    out
}

/// Area of planar polygon `poly` with unit normal `n`.
fn area(poly: &[DVec3], n: DVec3) -> f64 {
    let mut c = DVec3::ZERO;
    for k in 0..poly.len() {
        c += poly[k].cross(poly[(k + 1) % poly.len()]);
    }
    0.5 * c.dot(n).abs()
}

/// Merges neighbouring polygons that lie in one plane, share an edge, have the same
/// contents and stay convex together: fewer polygons to test, and the shared edge (which
/// could never be hit) disappears. Returns how many merges were made.
fn merge_coplanar(
    vertices: &[DVec3],
    polys: &mut Vec<RawPolygon>,
    meta: &mut Vec<(Contents, u32)>,
) -> usize {
    let mut merges = 0;
    loop {
        let (edges, _) = build_edges(vertices, polys);
        let mut gone = vec![false; polys.len()];
        let mut merged_any = false;
        for e in &edges {
            let [a, b] = e.polys;
            if b == u32::MAX || gone[a as usize] || gone[b as usize] {
                continue;
            }
            let (pa, pb) = (&polys[a as usize], &polys[b as usize]);
            if meta[a as usize].0 != meta[b as usize].0 || !pa.plane.same_as(&pb.plane, 1e-9, 1e-6)
            {
                continue;
            }
            if let Some(verts) = union_loop(vertices, &pa.verts, &pb.verts, e.v, pa.plane.normal) {
                // A sheet's triangles follow a curved outline: joined into long slanted
                // strips they would overlap each other's bounds everywhere and choke the
                // broad phase, so sheets merge only where the bounds do not grow.
                if pa.surface != Surface::Solid
                    && bounds_area(vertices, &verts)
                        > bounds_area(vertices, &pa.verts) + bounds_area(vertices, &pb.verts)
                {
                    continue;
                }
                polys[a as usize].verts = verts;
                gone[b as usize] = true;
                merged_any = true;
                merges += 1;
            }
        }
        if !merged_any {
            return merges;
        }
        let mut k = 0;
        polys.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
        let mut k = 0;
        meta.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
    }
}

/// Surface area of the bounds of a polygon's corners.
fn bounds_area(vertices: &[DVec3], verts: &[u32]) -> f64 {
    let s = Aabb::from_points(verts.iter().map(|&v| &vertices[v as usize])).size();
    2.0 * (s.x * s.y + s.y * s.z + s.z * s.x)
}

/// The outline of two polygons joined along the edge `e` (walked `e[0] -> e[1]` by the
/// first), if it is convex.
fn union_loop(vertices: &[DVec3], a: &[u32], b: &[u32], e: [u32; 2], n: DVec3) -> Option<Vec<u32>> {
    let ia = a.iter().position(|&v| v == e[1])?;
    let ib = b.iter().position(|&v| v == e[0])?;
    // From e[1] round the first polygon to e[0], then round the second back to e[1].
    let mut out: Vec<u32> = (0..a.len()).map(|k| a[(ia + k) % a.len()]).collect();
    let rest: Vec<u32> = (0..b.len()).map(|k| b[(ib + k) % b.len()]).collect();
    if out.last() != Some(&e[0]) || rest.last() != Some(&e[1]) {
        return None;
    }
    out.extend_from_slice(&rest[1..rest.len() - 1]);
    let k = out.len();
    let mut seen = out.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != k {
        return None;
    }
    // Convex: every corner turns the same way about n (straight corners allowed; they are
    // kept so neighbours sharing that vertex stay watertight).
    for i in 0..k {
        let p = vertices[out[i] as usize];
        let q = vertices[out[(i + 1) % k] as usize];
        let r = vertices[out[(i + 2) % k] as usize];
        let turn = (q - p).cross(r - q).dot(n);
        let scale = 1e-9 * (q - p).length() * (r - q).length();
        // A straight corner goes on; one that doubles back would wind the loop over itself.
        if turn < -scale || (turn <= scale && (q - p).dot(r - q) <= 0.0) {
            return None;
        }
    }
    Some(out)
}

/// The brushes' faces as polygons, minus their parts buried inside other brushes of the
/// same contents (each with its contents and brush); faces buried whole are counted.
fn exposed_faces(
    geoms: &[BrushGeom],
    brushes: &[SolidBrush],
    welder: &mut Welder,
    stats: &mut ModelStats,
) -> (Vec<RawPolygon>, Vec<(Contents, u32)>) {
    let brush_bounds: Vec<Aabb> = brushes.iter().map(|b| b.bounds).collect();
    // The build's own queries are as large as faces and polygons, up to the whole map:
    // there a tree's pruning beats the grid, which is made for player-sized queries.
    let build_tree = AxialTree::build(&brush_bounds);

    // Faces, minus their parts buried inside other brushes of the same contents. A face
    // partly inside a neighbour keeps only its exposed part: left whole, its rim would
    // stand where the neighbour's surface runs on (a floor's edge under a floor), and a
    // box sliding along that surface would catch on it.
    let mut raw: Vec<RawPolygon> = Vec::new();
    let mut raw_meta: Vec<(Contents, u32)> = Vec::new();
    let mut candidates: Vec<u32> = Vec::new();
    for (bi, g) in geoms.iter().enumerate() {
        for (pi, w) in &g.faces {
            let plane = g.planes[*pi];
            let pb = Aabb::from_points(w);
            candidates.clear();
            build_tree.query_aabb(&pb.expand(BURIED_EPS), |i| candidates.push(i));
            candidates.sort_unstable();
            candidates.dedup();
            let mut pieces = vec![w.clone()];
            for &bj in &candidates {
                let other = &geoms[bj as usize];
                if bj as usize == bi || other.contents != g.contents {
                    continue;
                }
                pieces = pieces
                    .into_iter()
                    .flat_map(|piece| {
                        exposed_parts(piece, &plane, &other.planes, (bj as usize) < bi)
                    })
                    .collect();
                if pieces.is_empty() {
                    break;
                }
            }
            if pieces.is_empty() {
                stats.buried_faces += 1;
            }
            for piece in pieces {
                let verts = welded_loop(welder, &piece);
                if verts.len() >= 3 {
                    raw.push(RawPolygon {
                        plane,
                        verts,
                        surface: Surface::Solid,
                    });
                    raw_meta.push((g.contents, bi as u32));
                }
            }
        }
    }
    (raw, raw_meta)
}

/// Adds the sheets' triangles as the front faces of two-sided sheets (the meta's second
/// field holds the patch's line until the sheet's brushes exist); slivers are left out.
fn push_sheet_triangles(
    sheets: &[Sheet],
    welder: &mut Welder,
    raw: &mut Vec<RawPolygon>,
    raw_meta: &mut Vec<(Contents, u32)>,
) {
    for sheet in sheets {
        for tri in &sheet.triangles {
            let verts: Vec<u32> = tri.iter().map(|p| welder.vertex(*p)).collect();
            if verts[0] == verts[1] || verts[1] == verts[2] || verts[0] == verts[2] {
                continue;
            }
            let [a, b, c] = [0, 1, 2].map(|k| welder.vertices[verts[k] as usize]);
            let n = (b - a).cross(c - a);
            let longest = (b - a)
                .length_squared()
                .max((c - b).length_squared())
                .max((a - c).length_squared());
            let len = n.length();
            if !(len > 1e-12 && len > SLIVER * longest) {
                continue;
            }
            let normal = n / len;
            raw.push(RawPolygon {
                plane: Plane {
                    normal,
                    dist: normal.dot(a),
                },
                verts,
                surface: Surface::SheetFront,
            });
            raw_meta.push((sheet.contents, sheet.line as u32));
        }
    }
}
