//! Polygon-mesh topology shared by the map model and trace hulls: vertex welding, shared
//! edges, internal-edge flags and mitred expel normals.

use crate::geom::Plane;
use glam::DVec3;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Vertices closer than this are one vertex. Real maps have edges as short as 0.04 units.
pub(crate) const WELD: f64 = 0.002;
/// Mitred edge normals are capped at this length so very sharp edges do not push the
/// expel zone far out (DOOM III used about 3.3).
pub(crate) const MITRE_CAP: f64 = 3.25;
pub(crate) const NONE: u32 = u32::MAX;

/// Welds points on a hashed grid, checking neighbouring cells so that points straddling a
/// cell boundary still weld. Lookup only: results never depend on hash iteration order.
pub(crate) struct Welder {
    pub vertices: Vec<DVec3>,
    grid: HashMap<[i64; 3], Vec<u32>>,
    tolerance: f64,
}

impl Welder {
    /// Welds points closer than `tolerance` on every axis: [`WELD`] for maps, whose
    /// corners carry `f32` noise; far less for hulls, whose thin sides must survive.
    pub(crate) fn new(tolerance: f64) -> Self {
        Welder {
            vertices: Vec::new(),
            grid: HashMap::new(),
            tolerance,
        }
    }

    fn cell(&self, p: DVec3) -> [i64; 3] {
        // Float-to-int casts saturate, so far points cannot overflow.
        let c = (p / (self.tolerance * 2.0)).floor();
        [c.x as i64, c.y as i64, c.z as i64]
    }

    pub(crate) fn vertex(&mut self, p: DVec3) -> u32 {
        let c = self.cell(p);
        for dx in -1..=1 {
            for dy in -1..=1 {
                for dz in -1..=1 {
                    if let Some(list) = self.grid.get(&[c[0] + dx, c[1] + dy, c[2] + dz]) {
                        for &i in list {
                            if (self.vertices[i as usize] - p).abs().max_element() <= self.tolerance
                            {
                                return i;
                            }
                        }
                    }
                }
            }
        }
        let i = self.vertices.len() as u32;
        self.vertices.push(p);
        self.grid.entry(c).or_default().push(i);
        i
    }
}

/// Which surface a polygon belongs to. Edges pair only within one surface: a solid's
/// faces with each other, a two-sided sheet's front faces with each other and its back
/// faces with each other (its rims then stay open edges on both sides).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Surface {
    Solid,
    SheetFront,
    SheetBack,
}

/// A polygon as welded vertex indices, counter-clockwise seen from the front.
#[derive(Clone, Debug)]
pub(crate) struct RawPolygon {
    pub plane: Plane,
    pub verts: Vec<u32>,
    pub surface: Surface,
}

/// An edge of the mesh with everything the narrow phase needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Edge {
    /// Vertex indices; `dir = v[1] - v[0]`.
    pub v: [u32; 2],
    /// The polygons using the edge (the second is `u32::MAX` for a dangling edge).
    pub polys: [u32; 2],
    /// Normals bounding the edge's cone of contact normals: the two polygon normals, or for
    /// a dangling edge the polygon normal and its in-plane outward normal.
    pub normals: [DVec3; 2],
    /// Mitred outward offset: moving the edge by `EXPEL * mitre` lands where the two
    /// polygon planes offset by `EXPEL` meet (length capped at `MITRE_CAP`).
    pub mitre: DVec3,
    /// Between two polygons that meet flat or concave: can never be hit first.
    pub internal: bool,
}

/// Edges of welded polygons. Returns the edges and, per polygon, its edge uses in winding
/// order as `edge << 1 | reversed` (reversed: the polygon walks the edge from `v[1]`).
///
/// An edge used by exactly two polygons of one [`Surface`] in opposite directions is
/// shared; any other use (dangling, T-junction, or three or more polygons) gets an edge of
/// its own, which treats it conservatively as a boundary.
pub(crate) fn build_edges(vertices: &[DVec3], polys: &[RawPolygon]) -> (Vec<Edge>, Vec<Vec<u32>>) {
    // (lo, hi) vertex pair -> uses as (polygon, slot, walks lo -> hi).
    type Uses = Vec<(u32, u32, bool)>;
    let mut uses: HashMap<(u32, u32), Uses> = HashMap::new();
    let mut order: Vec<(u32, u32)> = Vec::new();
    for (pi, p) in polys.iter().enumerate() {
        let n = p.verts.len();
        for k in 0..n {
            let (a, b) = (p.verts[k], p.verts[(k + 1) % n]);
            let key = (a.min(b), a.max(b));
            let list = uses.entry(key).or_default();
            if list.is_empty() {
                order.push(key);
            }
            list.push((pi as u32, k as u32, a < b));
        }
    }
    let mut poly_edges: Vec<Vec<u32>> = polys.iter().map(|p| vec![0; p.verts.len()]).collect();
    let mut edges = Vec::new();
    for key in order {
        let list = &uses[&key];
        let mut groups: Vec<Vec<(u32, u32, bool)>> = Vec::new();
        for surface in [Surface::Solid, Surface::SheetFront, Surface::SheetBack] {
            let part: Vec<_> = list
                .iter()
                .copied()
                .filter(|u| polys[u.0 as usize].surface == surface)
                .collect();
            if part.len() == 2 && part[0].2 != part[1].2 {
                groups.push(part);
            } else {
                groups.extend(part.into_iter().map(|u| vec![u]));
            }
        }
        for g in groups {
            // Orient the edge as its first polygon walks it.
            let (p0, _, fwd0) = g[0];
            let v = if fwd0 { [key.0, key.1] } else { [key.1, key.0] };
            let ei = edges.len() as u32;
            for &(pi, slot, fwd) in &g {
                let reversed = fwd != fwd0;
                poly_edges[pi as usize][slot as usize] = ei << 1 | reversed as u32;
            }
            let p1 = if g.len() == 2 { g[1].0 } else { NONE };
            edges.push(edge_geometry(vertices, polys, v, [p0, p1]));
        }
    }
    (edges, poly_edges)
}

fn edge_geometry(vertices: &[DVec3], polys: &[RawPolygon], v: [u32; 2], p: [u32; 2]) -> Edge {
    let (a, b) = (vertices[v[0] as usize], vertices[v[1] as usize]);
    let n1 = polys[p[0] as usize].plane.normal;
    // Outward in-plane normal of the first polygon (which walks a -> b counter-clockwise).
    let out1 = (b - a).cross(n1).normalize_or_zero();
    let (n2, internal) = if p[1] == NONE {
        (out1, false)
    } else {
        let n2 = polys[p[1] as usize].plane.normal;
        // Direction from the edge into the second polygon, in its plane.
        let into2 = n2.cross(a - b).normalize_or_zero();
        // Flat or concave when the second polygon rises in front of the first; never a
        // fold, where the two lie back to back (two coincident sheets facing apart): that
        // edge is as sharp as an edge can be.
        (n2, n1.dot(into2) >= -1e-9 && n1.dot(n2) > -1.0 + 1e-9)
    };
    let sum = n1 + n2;
    let dir = if sum.length() > 1e-6 {
        sum.normalize()
    } else {
        out1
    };
    let cos_half = ((1.0 + n1.dot(n2)) * 0.5).max(0.0).sqrt();
    let len = if cos_half > 1.0 / MITRE_CAP {
        1.0 / cos_half
    } else {
        MITRE_CAP
    };
    Edge {
        v,
        polys: p,
        normals: [n1, n2],
        mitre: dir * len,
        internal,
    }
}

/// How far off an edge's line (units) a vertex may lie and still split it.
const T_JUNCTION_EPS: f64 = 1e-4;

/// Splits every polygon edge at the other polygons' vertices lying on it (T-junctions), so
/// neighbours share edges exactly: an edge left unshared would be treated as a rim, with the
/// wider welding margin, where a box sliding past would catch on it.
///
/// Brush faces only: a patch's tessellation shares its edges by construction, and edges
/// pair only within one surface anyway.
pub(crate) fn split_t_junctions(vertices: &[DVec3], polys: &mut [RawPolygon]) {
    let solid = |p: &RawPolygon| p.surface == Surface::Solid;
    // Cells of 32 units; an edge longer than MAX_STEPS half-cells is left unsplit, so a
    // hostile map cannot make this walk long (it keeps the wider margin, as before).
    const CELL: f64 = 32.0;
    const MAX_STEPS: usize = 1024;
    let key = |p: DVec3| {
        let c = (p / CELL).floor();
        [c.x as i64, c.y as i64, c.z as i64]
    };
    let mut used: Vec<u32> = polys
        .iter()
        .filter(|p| solid(p))
        .flat_map(|p| p.verts.iter().copied())
        .collect();
    used.sort_unstable();
    used.dedup();
    let mut grid: HashMap<[i64; 3], Vec<u32>> = HashMap::new();
    for &v in &used {
        grid.entry(key(vertices[v as usize])).or_default().push(v);
    }
    let mut cells: Vec<[i64; 3]> = Vec::new();
    let mut found: Vec<(f64, u32)> = Vec::new();
    for poly in polys.iter_mut().filter(|p| solid(p)) {
        let mut out: Vec<u32> = Vec::with_capacity(poly.verts.len());
        let n = poly.verts.len();
        for k in 0..n {
            let (ia, ib) = (poly.verts[k], poly.verts[(k + 1) % n]);
            out.push(ia);
            let (a, b) = (vertices[ia as usize], vertices[ib as usize]);
            let d = b - a;
            let len2 = d.length_squared();
            // (A polygon's consecutive vertices differ, so `steps` is at least 1.)
            if len2 == 0.0 {
                continue;
            }
            // Cells along the edge, each with its neighbours (a vertex near a cell's side).
            cells.clear();
            let steps = (d.length() / (CELL * 0.5)).ceil() as usize;
            if steps > MAX_STEPS {
                continue;
            }
            for s in 0..=steps {
                let c = key(a + d * (s as f64 / steps as f64));
                for dx in -1..=1 {
                    for dy in -1..=1 {
                        for dz in -1..=1 {
                            cells.push([c[0] + dx, c[1] + dy, c[2] + dz]);
                        }
                    }
                }
            }
            cells.sort_unstable();
            cells.dedup();
            found.clear();
            for c in &cells {
                for &v in grid.get(c).map(Vec::as_slice).unwrap_or(&[]) {
                    if v == ia || v == ib {
                        continue;
                    }
                    let p = vertices[v as usize];
                    let t = (p - a).dot(d) / len2;
                    if t <= 0.0 || t >= 1.0 {
                        continue;
                    }
                    if (a + d * t - p).length() <= T_JUNCTION_EPS {
                        found.push((t, v));
                    }
                }
            }
            found.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            found.dedup_by_key(|x| x.1);
            out.extend(found.iter().map(|x| x.1));
        }
        poly.verts = out;
    }
}
