//! Test support: an exact separating-axis oracle written independently of the library
//! (it shares no geometry code with it), and random scene generators.
#![allow(dead_code)]

use expel_core::map::{Brush, Face, MapData, MapEntity, Patch};
use expel_core::{CollisionModel, Plane};
use glam::DVec3;
use rand::Rng;

/// A convex brush as the oracle sees it: planes, corners found by intersecting plane
/// triples, and candidate edge directions from plane-normal pairs.
pub(crate) struct OBrush {
    pub planes: Vec<(DVec3, f64)>,
    pub pts: Vec<DVec3>,
    pub edge_dirs: Vec<DVec3>,
}

impl OBrush {
    pub(crate) fn new(planes: Vec<(DVec3, f64)>) -> Option<OBrush> {
        let mut pts: Vec<DVec3> = Vec::new();
        let n = planes.len();
        for i in 0..n {
            for j in i + 1..n {
                for k in j + 1..n {
                    let (a, b, c) = (planes[i], planes[j], planes[k]);
                    let det = a.0.dot(b.0.cross(c.0));
                    if det.abs() < 1e-12 {
                        continue;
                    }
                    let p =
                        (b.0.cross(c.0) * a.1 + c.0.cross(a.0) * b.1 + a.0.cross(b.0) * c.1) / det;
                    if planes.iter().all(|(nn, d)| nn.dot(p) - d <= 1e-7)
                        && !pts.iter().any(|q| (*q - p).length() < 1e-9)
                    {
                        pts.push(p);
                    }
                }
            }
        }
        if pts.len() < 4 {
            return None;
        }
        let mut edge_dirs = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                let c = planes[i].0.cross(planes[j].0);
                if c.length() > 1e-9 {
                    edge_dirs.push(c.normalize());
                }
            }
        }
        Some(OBrush {
            planes,
            pts,
            edge_dirs,
        })
    }
}

/// A convex moving shape as points; the oracle derives every candidate axis from them.
pub(crate) struct OHull {
    pub pts: Vec<DVec3>,
    normals: Vec<DVec3>,
    dirs: Vec<DVec3>,
}

impl OHull {
    pub(crate) fn new(pts: Vec<DVec3>) -> OHull {
        let mut normals = Vec::new();
        let mut dirs = Vec::new();
        let n = pts.len();
        for i in 0..n {
            for j in i + 1..n {
                let d = pts[j] - pts[i];
                if d.length() > 1e-9 {
                    dirs.push(d.normalize());
                }
                for k in j + 1..n {
                    let c = (pts[j] - pts[i]).cross(pts[k] - pts[i]);
                    if c.length() > 1e-9 {
                        normals.push(c.normalize());
                    }
                }
            }
        }
        OHull { pts, normals, dirs }
    }

    pub(crate) fn aabb(mins: DVec3, maxs: DVec3) -> OHull {
        let mut pts = Vec::new();
        for i in 0..8 {
            pts.push(DVec3::new(
                if i & 1 == 0 { mins.x } else { maxs.x },
                if i & 2 == 0 { mins.y } else { maxs.y },
                if i & 4 == 0 { mins.z } else { maxs.z },
            ));
        }
        pts.dedup();
        OHull {
            pts,
            normals: vec![DVec3::X, DVec3::Y, DVec3::Z],
            dirs: vec![DVec3::X, DVec3::Y, DVec3::Z],
        }
    }

    fn axes(&self, b: &OBrush) -> Vec<DVec3> {
        let mut axes: Vec<DVec3> = b.planes.iter().map(|p| p.0).collect();
        axes.extend_from_slice(&self.normals);
        for d in &self.dirs {
            for e in &b.edge_dirs {
                let c = d.cross(*e);
                if c.length() > 1e-9 {
                    axes.push(c.normalize());
                }
            }
        }
        axes
    }

    fn proj(&self, a: DVec3) -> (f64, f64) {
        self.pts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                let d = a.dot(*p);
                (l.min(d), h.max(d))
            })
    }
}

fn proj_pts(pts: &[DVec3], a: DVec3) -> (f64, f64) {
    pts.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            let d = a.dot(*p);
            (l.min(d), h.max(d))
        })
}

/// Largest separation along any candidate axis of the hull at `pos` and the brush:
/// negative when they overlap (then its magnitude is the smallest penetration depth).
pub(crate) fn separation(h: &OHull, pos: DVec3, b: &OBrush) -> f64 {
    h.axes(b)
        .into_iter()
        .map(|a| {
            let (hl, hh) = h.proj(a);
            let o = a.dot(pos);
            let (bl, bh) = proj_pts(&b.pts, a);
            (bl - (hh + o)).max((hl + o) - bh)
        })
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Times t in [0, 1] at which the hull moving from `p0` by `d` overlaps the brush deeper
/// than `tol`: the intersection over all axes of the open overlap intervals.
pub(crate) fn overlap_interval(
    h: &OHull,
    p0: DVec3,
    d: DVec3,
    b: &OBrush,
    tol: f64,
) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for a in h.axes(b) {
        let (hl, hh) = h.proj(a);
        let (bl, bh) = proj_pts(&b.pts, a);
        let (o, r) = (a.dot(p0), a.dot(d));
        // Overlap deeper than tol: hh + o + r t > bl + tol and hl + o + r t < bh - tol.
        for (c, s) in [(bl + tol - hh - o, 1.0), (bh - tol - hl - o, -1.0)] {
            // s * (r t) > s * c ... i.e. r t > c (s=1) or r t < c (s=-1).
            let rr = r * s;
            let cc = c * s;
            if rr == 0.0 {
                if 0.0 <= cc {
                    return None;
                }
            } else if rr > 0.0 {
                lo = lo.max(cc / rr);
            } else {
                hi = hi.min(cc / rr);
            }
        }
        if lo >= hi {
            return None;
        }
    }
    Some((lo, hi))
}

/// The oracle's view of a map: each world solid brush with its bounds.
pub(crate) fn map_brushes(map: &MapData) -> Vec<(OBrush, DVec3, DVec3)> {
    map.world_solid_brushes()
        .filter_map(|b| {
            let ob = OBrush::new(
                b.faces
                    .iter()
                    .map(|f| (f.plane.normal, f.plane.dist))
                    .collect(),
            )?;
            let lo = ob.pts.iter().fold(DVec3::INFINITY, |a, p| a.min(*p));
            let hi = ob.pts.iter().fold(DVec3::NEG_INFINITY, |a, p| a.max(*p));
            Some((ob, lo, hi))
        })
        .collect()
}

/// The oracle's view of a model's patch sheets, one per sheet polygon: a flat convex set
/// with the polygon's plane as its only face axis and its sides as edge directions (the
/// separating-axis test of a polygon against a convex hull). Taken from the model's own
/// tessellation: the oracle checks the traces, the tessellation has tests of its own.
pub(crate) fn model_sheets(model: &CollisionModel) -> Vec<(OBrush, DVec3, DVec3)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, p) in model.polygons().iter().enumerate() {
        if !p.sheet || !seen.insert(p.brush) {
            continue;
        }
        let pts: Vec<DVec3> = model.polygon_points(i).collect();
        let n = (pts[1] - pts[0]).cross(pts[2] - pts[0]).normalize();
        let edge_dirs = (0..pts.len())
            .map(|k| (pts[(k + 1) % pts.len()] - pts[k]).normalize())
            .collect();
        let lo = pts.iter().fold(DVec3::INFINITY, |a, p| a.min(*p));
        let hi = pts.iter().fold(DVec3::NEG_INFINITY, |a, p| a.max(*p));
        out.push((
            OBrush {
                planes: vec![(n, n.dot(pts[0]))],
                pts,
                edge_dirs,
            },
            lo,
            hi,
        ));
    }
    out
}

/// A random curved patch near `c`: a `w x h` grid spanning two random directions, its
/// control points pushed up to `bend` units off the grid.
pub(crate) fn random_patch(rng: &mut impl Rng, c: DVec3, size: f64, bend: f64) -> Patch {
    let (w, h) = ([3, 5][rng.gen_range(0..2)], [3, 5][rng.gen_range(0..2)]);
    let du = unit(rng) * size / (w - 1) as f64;
    let dv = unit(rng) * size / (h - 1) as f64;
    let points = (0..w * h)
        .map(|k| {
            let (i, j) = ((k / h) as f64, (k % h) as f64);
            let off = unit(rng) * rng.gen_range(0.0..bend);
            c + du * (i - (w - 1) as f64 / 2.0) + dv * (j - (h - 1) as f64 / 2.0) + off
        })
        .collect();
    Patch {
        width: w,
        height: h,
        points,
        texture: "curve".into(),
        contents: None,
        line: 0,
    }
}

/// A scene: brushes for the library and the same brushes for the oracle.
pub(crate) struct Scene {
    pub map: MapData,
    pub brushes: Vec<OBrush>,
}

impl Scene {
    pub(crate) fn new(planes_list: Vec<Vec<(DVec3, f64)>>) -> Scene {
        let mut ent = MapEntity {
            properties: vec![("classname".into(), "worldspawn".into())],
            ..Default::default()
        };
        let mut brushes = Vec::new();
        for planes in planes_list {
            let Some(ob) = OBrush::new(planes.clone()) else {
                continue;
            };
            ent.brushes.push(Brush {
                faces: planes
                    .iter()
                    .map(|(n, d)| Face {
                        plane: Plane {
                            normal: *n,
                            dist: *d,
                        },
                        texture: "stone".into(),
                    })
                    .collect(),
                line: 0,
            });
            brushes.push(ob);
        }
        Scene {
            map: MapData {
                entities: vec![ent],
                ..Default::default()
            },
            brushes,
        }
    }

    pub(crate) fn min_separation(&self, h: &OHull, pos: DVec3) -> f64 {
        self.brushes
            .iter()
            .map(|b| separation(h, pos, b))
            .fold(f64::INFINITY, f64::min)
    }

    /// Adds patches to the map (call before building the model), returning the model with
    /// its sheets added to the oracle's solids.
    pub(crate) fn with_patches(&mut self, patches: Vec<Patch>) -> CollisionModel {
        self.map.entities[0].patches.extend(patches);
        let model = CollisionModel::build(&self.map);
        self.brushes
            .extend(model_sheets(&model).into_iter().map(|(b, _, _)| b));
        model
    }

    /// Earliest time the moving hull overlaps any brush deeper than `tol`.
    pub(crate) fn first_overlap(&self, h: &OHull, p0: DVec3, d: DVec3, tol: f64) -> Option<f64> {
        self.brushes
            .iter()
            .filter_map(|b| overlap_interval(h, p0, d, b, tol).map(|x| x.0))
            .reduce(f64::min)
    }
}

pub(crate) fn box_planes(min: DVec3, max: DVec3) -> Vec<(DVec3, f64)> {
    vec![
        (DVec3::X, max.x),
        (-DVec3::X, -min.x),
        (DVec3::Y, max.y),
        (-DVec3::Y, -min.y),
        (DVec3::Z, max.z),
        (-DVec3::Z, -min.z),
    ]
}

pub(crate) fn unit(rng: &mut impl Rng) -> DVec3 {
    loop {
        let v = DVec3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
        );
        let l = v.length();
        if l > 0.1 && l <= 1.0 {
            return v / l;
        }
    }
}

/// A random convex brush around `c`: a box cut by a few random planes, or a thin slab.
pub(crate) fn random_brush(rng: &mut impl Rng, c: DVec3, size: f64) -> Vec<(DVec3, f64)> {
    let half = DVec3::new(
        rng.gen_range(0.125..size),
        rng.gen_range(0.125..size),
        rng.gen_range(0.125..size),
    );
    let mut planes = box_planes(c - half, c + half);
    for _ in 0..rng.gen_range(0..4) {
        let n = unit(rng);
        // Cut through somewhere between the centre and the box's support.
        let support = n.abs().dot(half);
        let d = n.dot(c) + support * rng.gen_range(0.3..1.0);
        planes.push((n, d));
    }
    planes
}

/// A Quake-format axis-aligned brush.
#[allow(dead_code)]
pub(crate) fn brush(min: DVec3, max: DVec3) -> String {
    let f = |p: [f64; 3]| format!("( {} {} {} )", p[0], p[1], p[2]);
    let (a, b) = (min.to_array(), max.to_array());
    [
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([a[0], a[1], a[2]]),
            f([a[0], a[1] + 1.0, a[2]]),
            f([a[0], a[1], a[2] + 1.0])
        ),
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([b[0], b[1], b[2]]),
            f([b[0], b[1], b[2] + 1.0]),
            f([b[0], b[1] + 1.0, b[2]])
        ),
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([a[0], a[1], a[2]]),
            f([a[0], a[1], a[2] + 1.0]),
            f([a[0] + 1.0, a[1], a[2]])
        ),
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([b[0], b[1], b[2]]),
            f([b[0] + 1.0, b[1], b[2]]),
            f([b[0], b[1], b[2] + 1.0])
        ),
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([a[0], a[1], a[2]]),
            f([a[0] + 1.0, a[1], a[2]]),
            f([a[0], a[1] + 1.0, a[2]])
        ),
        format!(
            "{} {} {} t 0 0 0 1 1",
            f([b[0], b[1], b[2]]),
            f([b[0], b[1] + 1.0, b[2]]),
            f([b[0] + 1.0, b[1], b[2]])
        ),
    ]
    .iter()
    .fold(String::from("{\n"), |s, l| s + l + "\n")
        + "}\n"
}

/// A patch surface for [`ibsp_file`]: its shader and the contents flags the compiler gave
/// it.
pub(crate) struct BspPatch<'a> {
    pub patch: &'a Patch,
    pub shader: &'a str,
    pub contents: i32,
}

/// An IBSP v46 file written the way q3map2 lays it out: the world model's brushes (one
/// shader, solid) from their planes, and its patch surfaces as control grids of drawn
/// vertices (width varying fastest).
pub(crate) fn ibsp_file(brushes: &[Vec<(DVec3, f64)>], patches: &[BspPatch]) -> Vec<u8> {
    let le = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let f32s =
        |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect() };
    let shader = |name: &str, contents: i32| {
        let mut s = vec![0u8; 72];
        s[..name.len()].copy_from_slice(name.as_bytes());
        s[68..72].copy_from_slice(&contents.to_le_bytes());
        s
    };
    let mut lumps: Vec<Vec<u8>> = vec![Vec::new(); 17];
    lumps[0] = b"{\n\"classname\" \"worldspawn\"\n}\n\0".to_vec();
    lumps[1] = shader("textures/base/wall", 1);
    let (mut planes, mut sides, mut brush_recs) = (Vec::new(), Vec::new(), Vec::new());
    for b in brushes {
        brush_recs.extend(le(&[(sides.len() / 8) as i32, b.len() as i32, 0]));
        for (n, d) in b {
            sides.extend(le(&[(planes.len() / 16) as i32, 0]));
            planes.extend(f32s(&[n.x, n.y, n.z, *d]));
        }
    }
    let (mut surfaces, mut verts) = (Vec::new(), Vec::new());
    for (k, bp) in patches.iter().enumerate() {
        lumps[1].extend(shader(bp.shader, bp.contents));
        let p = bp.patch;
        let first = (verts.len() / 44) as i32;
        for j in 0..p.height {
            for i in 0..p.width {
                let q = p.point(i, j);
                verts.extend(f32s(&[q.x, q.y, q.z]));
                verts.extend(vec![0u8; 32]);
            }
        }
        let mut s = le(&[k as i32 + 1, -1, 2, first, (p.width * p.height) as i32]);
        s.extend(vec![0u8; 96 - s.len()]);
        s.extend(le(&[p.width as i32, p.height as i32]));
        surfaces.extend(s);
    }
    lumps[2] = planes;
    let mut model = f32s(&[-4096.0, -4096.0, -4096.0, 4096.0, 4096.0, 4096.0]);
    model.extend(le(&[0, patches.len() as i32, 0, brushes.len() as i32]));
    lumps[7] = model;
    lumps[8] = brush_recs;
    lumps[9] = sides;
    lumps[10] = verts;
    lumps[13] = surfaces;
    with_lumps(b"IBSP\x2e\0\0\0", &lumps)
}

/// A child in a hand-built BSP29 tree: another node, or a new leaf with these contents.
#[derive(Clone)]
pub(crate) enum BspChild {
    Node(usize),
    Leaf(i32),
}

/// A BSP29/BSP30 file (`version` 29 or 30) with one model: planes, hull-0 nodes as
/// `(plane, front, back)` from node 0, the model's bounds, and the entity text; models of
/// 80 bytes (Hexen 2) when `hexen`.
pub(crate) fn bsp29_file(
    version: i32,
    entities: &str,
    planes: &[(DVec3, f64)],
    nodes: &[(usize, BspChild, BspChild)],
    bounds: (DVec3, DVec3),
    hexen: bool,
) -> Vec<u8> {
    let mut lumps: Vec<Vec<u8>> = vec![Vec::new(); 15];
    lumps[0] = format!("{entities}\0").into_bytes();
    for (n, d) in planes {
        for v in [n.x, n.y, n.z, *d] {
            lumps[1].extend((v as f32).to_le_bytes());
        }
        lumps[1].extend(0i32.to_le_bytes());
    }
    let mut leaves: Vec<i32> = Vec::new();
    for (p, front, back) in nodes {
        lumps[5].extend((*p as i32).to_le_bytes());
        for c in [front, back] {
            let v: i16 = match c {
                BspChild::Node(n) => *n as i16,
                BspChild::Leaf(contents) => {
                    leaves.push(*contents);
                    -(leaves.len() as i16)
                }
            };
            lumps[5].extend(v.to_le_bytes());
        }
        lumps[5].extend(vec![0u8; 16]);
    }
    for c in leaves {
        lumps[10].extend(c.to_le_bytes());
        lumps[10].extend(vec![0u8; 24]);
    }
    let (lo, hi) = bounds;
    for v in [lo.x, lo.y, lo.z, hi.x, hi.y, hi.z, 0.0, 0.0, 0.0] {
        lumps[14].extend((v as f32).to_le_bytes());
    }
    let heads = if hexen { 8 } else { 4 };
    for _ in 0..heads {
        lumps[14].extend(0i32.to_le_bytes());
    }
    lumps[14].extend(vec![0u8; 12]);
    with_lumps(&version.to_le_bytes(), &lumps)
}

/// A compiled map: `header` (magic and version), the lump directory, then the lumps.
pub(crate) fn with_lumps(header: &[u8], lumps: &[Vec<u8>]) -> Vec<u8> {
    let mut out = header.to_vec();
    let mut off = header.len() + lumps.len() * 8;
    for l in lumps {
        out.extend((off as i32).to_le_bytes());
        out.extend((l.len() as i32).to_le_bytes());
        off += l.len();
    }
    for l in lumps {
        out.extend_from_slice(l);
    }
    out
}

/// A BSP29 file rewritten as one of Quake's large-map variants (`BSP2`: 32-bit children
/// and face ranges, float bounds; `2PSB`: the same with short bounds): the same tree,
/// leaves and everything else.
pub(crate) fn widen_bsp29(bytes: &[u8], magic: &[u8; 4]) -> Vec<u8> {
    let float_bounds = magic == b"BSP2";
    let i16_at = |b: &[u8], o: usize| i16::from_le_bytes([b[o], b[o + 1]]);
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let i32_at = |b: &[u8], o: usize| i32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let bounds = |out: &mut Vec<u8>, rec: &[u8], at: usize| {
        for k in 0..6 {
            let v = i16_at(rec, at + 2 * k);
            if float_bounds {
                out.extend((v as f32).to_le_bytes());
            } else {
                out.extend(v.to_le_bytes());
            }
        }
    };
    let mut lumps: Vec<Vec<u8>> = (0..15)
        .map(|i| {
            let (off, len) = (
                i32_at(bytes, 4 + i * 8) as usize,
                i32_at(bytes, 8 + i * 8) as usize,
            );
            bytes[off..off + len].to_vec()
        })
        .collect();
    let mut nodes = Vec::new();
    for rec in lumps[5].chunks_exact(24) {
        nodes.extend(&rec[..4]);
        for k in 0..2 {
            nodes.extend(i32::from(i16_at(rec, 4 + 2 * k)).to_le_bytes());
        }
        bounds(&mut nodes, rec, 8);
        for k in 0..2 {
            nodes.extend(u32::from(u16_at(rec, 20 + 2 * k)).to_le_bytes());
        }
    }
    let mut leaves = Vec::new();
    for rec in lumps[10].chunks_exact(28) {
        leaves.extend(&rec[..8]);
        bounds(&mut leaves, rec, 8);
        for k in 0..2 {
            leaves.extend(u32::from(u16_at(rec, 20 + 2 * k)).to_le_bytes());
        }
        leaves.extend(&rec[24..28]);
    }
    (lumps[5], lumps[10]) = (nodes, leaves);
    with_lumps(magic, &lumps)
}

/// One brush of a hand-built Quake 2 `.bsp`: its planes (outward), its contents flags and
/// the model it belongs to.
pub(crate) struct Q2Brush {
    pub planes: Vec<(DVec3, f64)>,
    pub contents: i32,
    pub model: usize,
}

/// A Quake 2 IBSP (version 38) file, or with `qbism` Qbism's QBSP (32-bit indices, float
/// bounds): the entity text, and brushes by model. Model 0's
/// tree is one node (plane 0 of its first brush) over two leaves, each naming the model's
/// brushes up to and from the middle one (so it is named twice); every other model's head
/// is a single leaf naming its brushes.
pub(crate) fn q2bsp_file(entities: &str, brushes: &[Q2Brush], qbism: bool) -> Vec<u8> {
    let le = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    // Qbism's QBSP: 32-bit indices, float bounds in nodes and leaves.
    let (w, node_size, leaf_size) = if qbism { (4, 44, 52) } else { (2, 28, 28) };
    let idx = move |v: &[usize]| -> Vec<u8> {
        v.iter()
            .flat_map(|x| {
                if qbism {
                    (*x as u32).to_le_bytes().to_vec()
                } else {
                    (*x as u16).to_le_bytes().to_vec()
                }
            })
            .collect()
    };
    let mut lumps: Vec<Vec<u8>> = vec![Vec::new(); 19];
    lumps[0] = format!("{entities}\0").into_bytes();
    for b in brushes {
        let first_side = (lumps[15].len() / (2 * w)) as i32;
        lumps[14].extend(le(&[first_side, b.planes.len() as i32, b.contents]));
        for (n, d) in &b.planes {
            let plane = lumps[1].len() / 20;
            lumps[15].extend(idx(&[plane]));
            lumps[15].extend(vec![0u8; w]);
            for v in [n.x, n.y, n.z, *d] {
                lumps[1].extend((v as f32).to_le_bytes());
            }
            lumps[1].extend(0i32.to_le_bytes());
        }
    }
    let models = brushes.iter().map(|b| b.model).max().map_or(0, |m| m + 1);
    let leaf = |lumps: &mut Vec<Vec<u8>>, list: &[usize]| -> i32 {
        let first = lumps[10].len() / w;
        lumps[10].extend(idx(list));
        // Contents, then cluster, area, bounds and leaf faces left zero.
        let mut rec = le(&[1]);
        rec.extend(vec![0u8; leaf_size - 4 - 2 * w]);
        rec.extend(idx(&[first, list.len()]));
        lumps[8].extend(rec);
        -((lumps[8].len() / leaf_size) as i32)
    };
    for m in 0..models {
        let own: Vec<usize> = (0..brushes.len())
            .filter(|i| brushes[*i].model == m)
            .collect();
        let head = if m == 0 {
            let mid = own.len() / 2;
            let (a, b) = (
                leaf(&mut lumps, &own[..=mid.min(own.len() - 1)]),
                leaf(&mut lumps, &own[mid..]),
            );
            let mut node = le(&[0, a, b]);
            node.extend(vec![0u8; node_size - 12]);
            lumps[4].extend(node);
            (lumps[4].len() / node_size - 1) as i32
        } else {
            leaf(&mut lumps, &own)
        };
        let mut model = vec![0u8; 36];
        model.extend(le(&[head, 0, 0]));
        lumps[13].extend(model);
    }
    let magic = if qbism {
        b"QBSP\x26\0\0\0"
    } else {
        b"IBSP\x26\0\0\0"
    };
    with_lumps(magic, &lumps)
}
