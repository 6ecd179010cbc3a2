//! Compiling a map's solid brushes into a [`CollisionModel`].

use super::mesh::{build_edges, RawPolygon, Welder};
use super::tree::AxialTree;
use super::{CollisionModel, Contents, ModelStats, Polygon, SolidBrush};
use crate::geom::{planes_to_polygons, Aabb, Plane};
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

struct BrushGeom {
    planes: Vec<Plane>,
    faces: Vec<(usize, Vec<DVec3>)>,
    contents: Contents,
    line: usize,
    bounds: Aabb,
}

impl CollisionModel {
    /// Compiles the world's solid brushes (see [`solidity::is_world_solid`]).
    pub fn build(map: &MapData) -> CollisionModel {
        let mut stats = ModelStats {
            entities: map.entities.len(),
            brushes: map.brush_count(),
            patches_skipped: map.patches_skipped,
            ..Default::default()
        };
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
            geoms.push(BrushGeom {
                planes,
                faces,
                contents: brush_contents(b),
                line: b.line,
                bounds,
            });
        }
        Self::from_brushes(geoms, stats)
    }

    fn from_brushes(geoms: Vec<BrushGeom>, mut stats: ModelStats) -> CollisionModel {
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
            poly_bounds32: Vec::new(),
            poly_tree: AxialTree::build(&[]),
            brush_tree: AxialTree::build(&[]),
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
                    let d = (w[(k + 1) % w.len()] - w[k]).normalize_or_zero();
                    if d != DVec3::ZERO
                        && !m.brush_axes[a0 as usize..]
                            .iter()
                            .any(|a| a.cross(d).length_squared() < 1e-18)
                    {
                        m.brush_axes.push(d);
                    }
                }
            }
            m.brushes.push(SolidBrush {
                bounds: g.bounds,
                contents: g.contents,
                planes: (p0, m.brush_planes.len() as u32),
                points: (q0, m.brush_points.len() as u32),
                axes: (a0, m.brush_axes.len() as u32),
                axial: g.planes.iter().all(|p| p.normal.abs().max_element() == 1.0),
                line: g.line as u32,
            });
        }
        let brush_bounds: Vec<Aabb> = m.brushes.iter().map(|b| b.bounds).collect();
        m.brush_tree = AxialTree::build(&brush_bounds);

        // Faces, minus those buried inside another brush of the same contents.
        let mut welder = Welder::new(super::mesh::WELD);
        let mut raw: Vec<RawPolygon> = Vec::new();
        let mut raw_meta: Vec<(Contents, u32)> = Vec::new();
        let mut candidates: Vec<u32> = Vec::new();
        for (bi, g) in geoms.iter().enumerate() {
            for (pi, w) in &g.faces {
                let plane = g.planes[*pi];
                let pb = Aabb::from_points(w);
                candidates.clear();
                m.brush_tree
                    .query_aabb(&pb.expand(BURIED_EPS), |i| candidates.push(i));
                candidates.sort_unstable();
                candidates.dedup();
                let buried = candidates.iter().any(|&bj| {
                    bj as usize != bi
                        && geoms[bj as usize].contents == g.contents
                        && buried_in(w, &plane, &geoms[bj as usize].planes)
                });
                if buried {
                    stats.buried_faces += 1;
                    continue;
                }
                let mut verts: Vec<u32> = Vec::with_capacity(w.len());
                for p in w {
                    let v = welder.vertex(*p);
                    if verts.last() != Some(&v) {
                        verts.push(v);
                    }
                }
                while verts.len() > 1 && verts.first() == verts.last() {
                    verts.pop();
                }
                if verts.len() >= 3 {
                    raw.push(RawPolygon { plane, verts });
                    raw_meta.push((g.contents, bi as u32));
                }
            }
        }
        m.vertices = welder.vertices;
        stats.merged_polygons = merge_coplanar(&m.vertices, &mut raw, &mut raw_meta);
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
            });
            m.poly_edges.extend_from_slice(pe);
        }
        m.edges = edges;
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
}

/// A face lies within brush `other` (closed), and not on one of its planes facing the same
/// way (then `other` has a face of its own there, and dropping both would open a hole).
fn buried_in(face: &[DVec3], plane: &Plane, other: &[Plane]) -> bool {
    other.iter().all(|q| {
        let inside = face.iter().all(|p| q.distance(*p) <= BURIED_EPS);
        inside && !q.same_as(plane, 1e-9, BURIED_EPS)
    })
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
        if turn < -1e-9 * (q - p).length() * (r - q).length() {
            return None;
        }
    }
    Some(out)
}
