//! Convex trace models ("hulls"): the shape that moves.

use super::mesh::{build_edges, RawPolygon, Surface, Welder};
use crate::geom::{planes_to_polygons, Aabb, Plane, MAX_COORD};
use glam::{DQuat, DVec3};
use thiserror::Error;

/// Most points accepted by [`Hull::convex`].
pub const MAX_HULL_POINTS: usize = 64;

/// A hull that cannot be built.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum HullError {
    /// A coordinate is NaN or infinite.
    #[error("hull needs finite coordinates")]
    NotFinite,
    /// A coordinate beyond the supported range.
    #[error("hull coordinates must lie within ±{MAX_COORD}")]
    OutOfRange,
    /// A box whose mins exceed its maxs.
    #[error("box mins {mins:?} exceed maxs {maxs:?}")]
    InvertedBox {
        /// Lower corner given.
        mins: [f64; 3],
        /// Upper corner given.
        maxs: [f64; 3],
    },
    /// Too many points or features.
    #[error("hull has {0} points; at most {MAX_HULL_POINTS} are supported")]
    TooManyPoints(usize),
    /// No volume, polygon or point can be made of the points.
    #[error("hull points are collinear or coincident; give a point, a polygon or a solid")]
    Degenerate,
    /// Prism parameters out of range.
    #[error("prism needs 3 to 32 sides, a positive radius and height, got {sides} sides")]
    BadPrism {
        /// Sides asked for.
        sides: usize,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct HullEdge {
    pub v: [u8; 2],
    /// Faces on either side (a flat hull's edges border its two faces).
    pub faces: [u8; 2],
    pub dir: DVec3,
    /// Plücker moment `v0 × v1` in hull-local coordinates.
    pub moment: DVec3,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct HullFace {
    pub plane: Plane,
    /// Bit i set when vertex i is a corner of the face.
    pub vertex_mask: u64,
    /// Indices into `Hull::face_edges`.
    pub first: u16,
    pub count: u16,
}

/// The hull's features that lead a motion: faces facing along it, and the vertices and
/// edges on those faces (all vertices for a hull without faces).
#[derive(Clone, Debug, Default)]
pub(crate) struct Leads {
    pub faces: Vec<u8>,
    pub verts: Vec<u8>,
    pub edges: Vec<u8>,
}

/// A convex polyhedron (or a point) in coordinates relative to its position. Immutable and
/// cheap to share; traces read it through `&Hull`.
#[derive(Clone, Debug)]
pub struct Hull {
    pub(crate) vertices: Vec<DVec3>,
    pub(crate) edges: Vec<HullEdge>,
    pub(crate) faces: Vec<HullFace>,
    /// Per face, its boundary in counter-clockwise order as (edge, reversed).
    pub(crate) face_edges: Vec<(u8, bool)>,
    pub(crate) bounds: Aabb,
    is_box: bool,
    /// For boxes, whose faces are the coordinate planes, the leading features depend only
    /// on the signs of the motion: precomputed for all 27 sign patterns.
    box_leads: Vec<Leads>,
}

impl Hull {
    /// A single point.
    pub fn point() -> Hull {
        Hull {
            vertices: vec![DVec3::ZERO],
            edges: Vec::new(),
            faces: Vec::new(),
            face_edges: Vec::new(),
            bounds: Aabb {
                min: DVec3::ZERO,
                max: DVec3::ZERO,
            },
            is_box: true,
            box_leads: Vec::new(),
        }
    }

    /// Axis-aligned box `[mins, maxs]`; a zero-size box is a point, a flat one a rectangle.
    pub fn aabb(mins: DVec3, maxs: DVec3) -> Result<Hull, HullError> {
        if !mins.is_finite() || !maxs.is_finite() {
            return Err(HullError::NotFinite);
        }
        if mins.abs().max(maxs.abs()).max_element() > MAX_COORD {
            return Err(HullError::OutOfRange);
        }
        if mins.cmpgt(maxs).any() {
            return Err(HullError::InvertedBox {
                mins: mins.to_array(),
                maxs: maxs.to_array(),
            });
        }
        if mins == maxs {
            let mut h = Hull::point();
            h.vertices[0] = mins;
            h.bounds = Aabb {
                min: mins,
                max: maxs,
            };
            return Ok(h);
        }
        let planes: Vec<Plane> = (0..3)
            .flat_map(|a| {
                let n = DVec3::AXES[a];
                [
                    Plane {
                        normal: n,
                        dist: maxs[a],
                    },
                    Plane {
                        normal: -n,
                        dist: -mins[a],
                    },
                ]
            })
            .collect();
        let mut h = Self::from_planes(&planes)?;
        h.is_box = true;
        h.box_leads = (0..27)
            .map(|i| {
                let sign = |k: usize| [0.0, 1.0, -1.0][(i / [1, 3, 9][k]) % 3];
                h.compute_leads(DVec3::new(sign(0), sign(1), sign(2)))
            })
            .collect();
        Ok(h)
    }

    /// Upright prism with `sides` sides around the z axis, circumscribing radius `radius`
    /// (first vertex on +x), from `zmin` to `zmax`.
    pub fn prism(sides: usize, radius: f64, zmin: f64, zmax: f64) -> Result<Hull, HullError> {
        let valid = radius > 0.0 && zmax > zmin && radius.is_finite() && zmax.is_finite();
        if !(3..=32).contains(&sides) || !valid {
            return Err(HullError::BadPrism { sides });
        }
        let mut pts = Vec::with_capacity(sides * 2);
        for i in 0..sides {
            let a = std::f64::consts::TAU * i as f64 / sides as f64;
            let (s, c) = (libm::sin(a), libm::cos(a));
            for z in [zmin, zmax] {
                pts.push(DVec3::new(radius * c, radius * s, z));
            }
        }
        Self::convex(&pts)
    }

    /// Convex hull of the given points.
    pub fn convex(points: &[DVec3]) -> Result<Hull, HullError> {
        if points.len() > MAX_HULL_POINTS {
            return Err(HullError::TooManyPoints(points.len()));
        }
        if points.iter().any(|p| !p.is_finite()) {
            return Err(HullError::NotFinite);
        }
        if points.iter().any(|p| p.abs().max_element() > MAX_COORD) {
            return Err(HullError::OutOfRange);
        }
        let b = Aabb::from_points(points);
        if points.is_empty() {
            return Err(HullError::Degenerate);
        }
        if b.size().max_element() == 0.0 {
            return Self::aabb(b.min, b.max);
        }
        let scale = b.size().max_element();
        let eps = scale * 1e-9;
        // Supporting planes through every triple (hulls are small; n^4 is fine).
        let mut planes: Vec<Plane> = Vec::new();
        let n = points.len();
        for i in 0..n {
            for j in i + 1..n {
                for k in j + 1..n {
                    let nrm = (points[j] - points[i]).cross(points[k] - points[i]);
                    let len = nrm.length();
                    if len <= scale * scale * 1e-12 {
                        continue;
                    }
                    for nrm in [nrm / len, -nrm / len] {
                        let d = nrm.dot(points[i]);
                        if points.iter().all(|p| nrm.dot(*p) - d <= eps)
                            && !planes.iter().any(|q| {
                                q.same_as(
                                    &Plane {
                                        normal: nrm,
                                        dist: d,
                                    },
                                    1e-9,
                                    eps,
                                )
                            })
                        {
                            planes.push(Plane {
                                normal: nrm,
                                dist: d,
                            });
                        }
                    }
                }
            }
        }
        if planes.is_empty() {
            return Err(HullError::Degenerate);
        }
        Self::from_planes(&planes)
    }

    /// The convex region bounded by `planes` (normals outward).
    fn from_planes(planes: &[Plane]) -> Result<Hull, HullError> {
        let faces = planes_to_polygons(planes, 0.0);
        if faces.is_empty() {
            return Err(HullError::Degenerate);
        }
        // Weld only float noise (relative to the hull's size), so a thin side survives.
        let scale = planes
            .iter()
            .map(|p| p.dist.abs())
            .fold(0.0, f64::max)
            .max(1.0);
        let mut welder = Welder::new(scale * 1e-9);
        let mut raw: Vec<RawPolygon> = Vec::new();
        for (pi, w) in &faces {
            let mut verts: Vec<u32> = Vec::new();
            for p in w {
                let v = welder.vertex(*p);
                if verts.last() != Some(&v) && verts.first() != Some(&v) {
                    verts.push(v);
                }
            }
            if verts.len() >= 3 {
                raw.push(RawPolygon {
                    plane: planes[*pi],
                    verts,
                    surface: Surface::Solid,
                });
            }
        }
        let vertices = welder.vertices;
        if vertices.len() > 64 || raw.len() > 64 {
            return Err(HullError::TooManyPoints(vertices.len()));
        }
        let (edges, poly_edges) = build_edges(&vertices, &raw);
        let mut h = Hull {
            bounds: Aabb::from_points(&vertices),
            vertices,
            edges: Vec::new(),
            faces: Vec::new(),
            face_edges: Vec::new(),
            is_box: false,
            box_leads: Vec::new(),
        };
        h.edges = edges
            .iter()
            .map(|e| {
                let (a, b) = (h.vertices[e.v[0] as usize], h.vertices[e.v[1] as usize]);
                HullEdge {
                    v: [e.v[0] as u8, e.v[1] as u8],
                    faces: [e.polys[0] as u8, e.polys[1].min(255) as u8],
                    dir: b - a,
                    moment: a.cross(b),
                }
            })
            .collect();
        for (p, pe) in raw.iter().zip(&poly_edges) {
            h.faces.push(HullFace {
                plane: p.plane,
                vertex_mask: p.verts.iter().fold(0, |m, &v| m | 1 << v),
                first: h.face_edges.len() as u16,
                count: pe.len() as u16,
            });
            h.face_edges
                .extend(pe.iter().map(|&c| ((c >> 1) as u8, c & 1 == 1)));
        }
        Ok(h)
    }

    /// This hull as a frame turned by `q` sees it (every point `v` at `q⁻¹·v`): the same
    /// faces, edges and vertices, turned. Exact topology, no hull to rebuild; used for
    /// each angle a rotating mover takes, so it must stay cheap.
    pub(crate) fn turned(&self, q: DQuat) -> Hull {
        let inv = q.inverse();
        let vertices: Vec<DVec3> = self.vertices.iter().map(|v| inv * *v).collect();
        let edges = self
            .edges
            .iter()
            .map(|e| {
                let (a, b) = (vertices[e.v[0] as usize], vertices[e.v[1] as usize]);
                HullEdge {
                    dir: b - a,
                    moment: a.cross(b),
                    ..*e
                }
            })
            .collect();
        let faces = self
            .faces
            .iter()
            .map(|f| {
                let normal = (inv * f.plane.normal).normalize();
                // Through the face's farthest corner, so every corner stays inside.
                let dist = (0..vertices.len())
                    .filter(|i| f.vertex_mask >> i & 1 == 1)
                    .map(|i| normal.dot(vertices[i]))
                    .fold(f64::NEG_INFINITY, f64::max);
                HullFace {
                    plane: Plane { normal, dist },
                    ..*f
                }
            })
            .collect();
        Hull {
            bounds: Aabb::from_points(&vertices),
            vertices,
            edges,
            faces,
            face_edges: self.face_edges.clone(),
            is_box: false,
            box_leads: Vec::new(),
        }
    }

    /// An axis-aligned box (or a point): its faces are the coordinate planes.
    pub fn is_box(&self) -> bool {
        self.is_box
    }

    /// Precomputed leading features for `dir`, when the hull has them (boxes).
    #[inline]
    pub(crate) fn leads(&self, dir: DVec3) -> Option<&Leads> {
        if self.box_leads.is_empty() {
            return None;
        }
        let s = |v: f64| (v > 0.0) as usize + 2 * (v < 0.0) as usize;
        self.box_leads.get(s(dir.x) + 3 * s(dir.y) + 9 * s(dir.z))
    }

    /// Leading features for `dir`.
    pub(crate) fn compute_leads(&self, dir: DVec3) -> Leads {
        let mut l = Leads::default();
        let all = |l: &mut Leads| {
            l.verts.extend(0..self.vertices.len() as u8);
            l.edges.extend(0..self.edges.len() as u8);
        };
        if self.faces.is_empty() {
            all(&mut l);
            return l;
        }
        let mut faces = 0u64;
        let mut verts = 0u64;
        for (fi, f) in self.faces.iter().enumerate() {
            if f.plane.normal.dot(dir) > 0.0 {
                faces |= 1 << fi;
                verts |= f.vertex_mask;
                l.faces.push(fi as u8);
            }
        }
        while verts != 0 {
            l.verts.push(verts.trailing_zeros() as u8);
            verts &= verts - 1;
        }
        for (ei, e) in self.edges.iter().enumerate() {
            if faces & (1 << e.faces[0] | 1 << e.faces[1]) != 0 {
                l.edges.push(ei as u8);
            }
        }
        if l.faces.is_empty() {
            // Only a flat hull moving within its own plane has no leading face: its rim
            // leads (every vertex and edge), or it would pass through everything.
            all(&mut l);
        }
        l
    }

    /// Local bounds (relative to the hull's position).
    pub fn bounds(&self) -> Aabb {
        self.bounds
    }

    /// World box the hull sweeps moving from `start` to `end`.
    pub fn swept_bounds(&self, start: DVec3, end: DVec3) -> Aabb {
        Aabb {
            min: start.min(end) + self.bounds.min,
            max: start.max(end) + self.bounds.max,
        }
    }

    /// Corner points, relative to the hull's position.
    pub fn vertices(&self) -> &[DVec3] {
        &self.vertices
    }

    /// Outward face planes in local coordinates.
    pub fn planes(&self) -> impl Iterator<Item = &Plane> {
        self.faces.iter().map(|f| &f.plane)
    }

    /// Unit directions of the hull's edges.
    pub fn edge_directions(&self) -> impl Iterator<Item = DVec3> + '_ {
        self.edges.iter().map(|e| e.dir.normalize())
    }

    /// `min` and `max` of `n · v` over the hull's vertices.
    #[inline]
    pub fn project(&self, n: DVec3) -> (f64, f64) {
        if self.is_box {
            let c = (self.bounds.min + self.bounds.max) * 0.5;
            let h = (self.bounds.max - self.bounds.min) * 0.5;
            let m = n.dot(c);
            let r = n.abs().dot(h);
            (m - r, m + r)
        } else {
            let mut lo = f64::INFINITY;
            let mut hi = f64::NEG_INFINITY;
            for v in &self.vertices {
                let d = n.dot(*v);
                lo = lo.min(d);
                hi = hi.max(d);
            }
            (lo, hi)
        }
    }
}
