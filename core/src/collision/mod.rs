//! The compiled collision model and its queries.
//!
//! [`CollisionModel::build`] turns a map's solid brushes into one-sided convex polygons with
//! shared vertices and edges, and its solid curved patches into two-sided sheets of them;
//! [`CollisionModel::trace`] sweeps a [`Hull`] through them: an upright box or a point by
//! a swept separating-axis test per brush (`boxsweep`), any other hull by the feature tests
//! against the polygons (`trace`).

mod boxsweep;
mod build;
mod cache;
mod clip;
mod grid;
pub mod hull;
pub(crate) mod mesh;
mod overlap;
pub mod patch;
pub mod rotate;
mod trace;
mod tree;
mod validate;

pub use cache::CacheError;
pub use mesh::Edge;
pub(crate) use trace::ROTATED_KEPT;
pub use trace::{Region, TraceScratch};
pub use validate::ModelError;

use crate::geom::{Aabb, Plane};
use glam::{DQuat, DVec3};
use hull::Hull;
use rotate::{Rotation, RotationTrace};
use serde::{Deserialize, Serialize};
use tree::AxialTree;

/// Contents bits of what a polygon or brush is made of; traces take a mask of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Contents(pub u32);

impl Contents {
    /// Nothing.
    pub const NONE: Contents = Contents(0);
    /// Blocks everything.
    pub const SOLID: Contents = Contents(1);
    /// Clip brushes: block players only.
    pub const PLAYER_CLIP: Contents = Contents(0x1_0000);
    /// Every contents bit.
    pub const ALL: Contents = Contents(u32::MAX);
    /// What a player collides with.
    pub const PLAYER: Contents = Contents(1 | 0x1_0000);

    #[inline]
    /// Whether any bit is in both.
    pub fn intersects(self, o: Contents) -> bool {
        self.0 & o.0 != 0
    }
}

/// A convex polygon of the model, one-sided: it blocks only from the front (a patch's
/// sheet is two polygons back to back).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Polygon {
    /// Plane of the polygon (normal out of the solid).
    pub plane: Plane,
    /// World bounds.
    pub bounds: Aabb,
    /// Range in the model's edge-use list.
    pub first: u32,
    /// Number of edges.
    pub count: u32,
    /// What the polygon is made of.
    pub contents: Contents,
    /// Index of the source brush in [`CollisionModel::brushes`] (for a patch polygon, its
    /// sheet's zero-thickness brush).
    pub brush: u32,
    /// One side of a two-sided sheet (a patch), whose rims have no faces of their own.
    pub sheet: bool,
}

/// A solid brush kept for position tests: planes, corner points and edge directions. A
/// patch polygon has one too, of no thickness (its plane both ways and its edges' side
/// planes): a hull is in it only when the sheet crosses the hull's interior.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SolidBrush {
    /// World bounds.
    pub bounds: Aabb,
    /// What the brush is made of.
    pub contents: Contents,
    /// Ranges into the model's brush plane, point and axis lists.
    pub planes: (u32, u32),
    /// Range into the model's brush point list.
    pub points: (u32, u32),
    /// Range into the model's brush axis list.
    pub axes: (u32, u32),
    /// Range into the model's list of the brush's edge × coordinate-axis directions (see
    /// [`SatAxis`]); empty for an axial brush.
    pub sat: (u32, u32),
    /// How many of the brush's planes, from its first, a box sweep clips: its planes but
    /// those that are sides of its bounds (exactly), which the bounds already clip, and
    /// which the build puts last; none for an axial brush.
    pub box_planes: u32,
    /// Every plane is axis-aligned.
    pub axial: bool,
    /// The zero-thickness brush of a patch's sheet polygon.
    pub sheet: bool,
    /// Source line in the `.map` (0 for `.bsp`).
    pub line: u32,
}

/// The direction across one of a brush's edges and a coordinate axis (their cross
/// product), with the brush's extent along it. With the brush's planes and the coordinate
/// axes these are every separating axis an upright box can have against the brush.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SatAxis {
    /// Unit direction.
    pub normal: DVec3,
    /// Least `normal · x` over the brush.
    pub lo: f64,
    /// Greatest `normal · x` over the brush.
    pub hi: f64,
}

/// Which pair of features touched first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Feature {
    /// A hull vertex hit a model polygon.
    HullVertex {
        /// Index of the hull's vertex.
        vertex: u8,
        /// Index of the model's polygon.
        polygon: u32,
    },
    /// A model vertex hit a hull face.
    ModelVertex {
        /// Index of the model's vertex.
        vertex: u32,
        /// Index of the hull's face.
        hull_face: u8,
    },
    /// A hull edge hit a model edge.
    EdgeEdge {
        /// Index of the hull's edge.
        hull_edge: u8,
        /// Index of the model's edge.
        edge: u32,
    },
    /// An upright box reached a brush's zone across one of its separating axes (the box
    /// sweep, [`CollisionModel::sweep`] for boxes and points).
    BoxBrush {
        /// Index of the brush in [`CollisionModel::brushes`].
        brush: u32,
    },
}

/// What a sweep hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// A feature of the swept model (the map, when the model is the world's).
    Model(Feature),
    /// A mover (index into the simulation's movers), at a feature of its own model.
    Mover {
        /// Index of the mover in the simulation.
        mover: u32,
        /// The feature pair of the mover's model.
        feature: Feature,
    },
    /// Another player's box.
    Player(crate::PlayerId),
}

/// Where and what a sweep hit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// Contact normal: unit, pointing from what was hit towards the hull.
    pub normal: DVec3,
    /// Contact point on what was hit.
    pub point: DVec3,
    /// Contents of what was hit.
    pub contents: Contents,
    /// What was hit.
    pub target: Target,
}

/// Result of a sweep (the continuous query alone).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sweep {
    /// Fraction of the move completed, in [0, 1].
    pub fraction: f64,
    /// Hull position at the end: `start + fraction * (end - start)`.
    pub end: DVec3,
    /// The first contact, if the hull stopped at one.
    pub hit: Option<Hit>,
}

impl Sweep {
    /// A sweep that went all the way to `end`.
    pub fn clear(end: DVec3) -> Sweep {
        Sweep {
            fraction: 1.0,
            end,
            hit: None,
        }
    }

    /// The contact normal, when something was hit.
    pub fn normal(&self) -> Option<DVec3> {
        self.hit.map(|h| h.normal)
    }
}

/// Result of [`CollisionModel::trace`]: the sweep and the start position's test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trace {
    /// The sweep.
    pub sweep: Sweep,
    /// The hull at the start overlaps a solid brush (touching or lying inside the expel
    /// zone does not count).
    pub start_solid: bool,
    /// It starts and ends overlapping solid: for a box, it never left solid along the
    /// move (a box never goes deeper into a brush it starts in).
    pub all_solid: bool,
}

/// A contact within a distance, from [`CollisionModel::contacts`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Contact {
    /// Unit normal from the model towards the hull.
    pub normal: DVec3,
    /// Separation along the normal (may be slightly negative in the expel zone's error band).
    pub distance: f64,
    /// Closest point on the model.
    pub point: DVec3,
    /// Contents of the polygon.
    pub contents: Contents,
}

/// Counts describing a compiled model (what `expel map info` prints).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStats {
    /// Entities in the map.
    pub entities: usize,
    /// Brushes in the map.
    pub brushes: usize,
    /// Brushes that are solid world geometry.
    pub solid_brushes: usize,
    /// Solid brushes that enclose no volume (dropped).
    pub degenerate_brushes: usize,
    /// Collision polygons.
    pub polygons: usize,
    /// Faces dropped because another solid brush buries them.
    pub buried_faces: usize,
    /// Coplanar neighbours merged into one convex polygon.
    pub merged_polygons: usize,
    /// Distinct edges.
    pub edges: usize,
    /// Edges between coplanar or concave-free neighbours, never hit first.
    pub internal_edges: usize,
    /// Distinct vertices.
    pub vertices: usize,
    /// Nodes of the axial BSP trees.
    pub broad_phase_nodes: usize,
    /// Curved patches collided (solid world patches).
    pub patches: usize,
    /// Convex polygons the collided patches became, counted once per surface (each
    /// collides from both sides).
    pub patch_polygons: usize,
    /// Curved patches skipped because they are not solid (tool or liquid shaders, or not
    /// world geometry).
    pub patches_skipped: usize,
    /// Largest distance between a collided patch's polygons and its true curved surface,
    /// as proven by its tessellation (at most [`patch::PATCH_TOLERANCE`] unless a patch
    /// needed more than [`patch::MAX_PATCH_TRIANGLES`]).
    pub patch_deviation: f64,
}

/// The immutable collision model of a map's world geometry. `Send + Sync`; share it by
/// reference or `Arc` across threads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CollisionModel {
    pub(crate) vertices: Vec<DVec3>,
    /// False for vertices whose edges are all internal: they are never hit first.
    pub(crate) vertex_active: Vec<bool>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) polygons: Vec<Polygon>,
    /// `edge << 1 | reversed` per polygon edge, in counter-clockwise order.
    pub(crate) poly_edges: Vec<u32>,
    pub(crate) brushes: Vec<SolidBrush>,
    pub(crate) brush_planes: Vec<Plane>,
    pub(crate) brush_points: Vec<DVec3>,
    pub(crate) brush_axes: Vec<DVec3>,
    pub(crate) brush_sat: Vec<SatAxis>,
    /// Outward-rounded `f32` copies of the polygon bounds, for quick culling.
    pub(crate) poly_bounds32: Vec<tree::Bounds32>,
    pub(crate) poly_tree: AxialTree,
    pub(crate) brush_grid: grid::BrushGrid,
    pub(crate) bounds: Aabb,
    pub(crate) stats: ModelStats,
}

impl CollisionModel {
    /// Version of the compiled model's layout and build rules; caches of compiled models
    /// key on it, so a change here invalidates them.
    pub const FORMAT_VERSION: u32 = 15;

    /// Counts describing the model.
    pub fn stats(&self) -> &ModelStats {
        &self.stats
    }

    /// Heap bytes the model holds, part by part, in a fixed order (what a server keeps per
    /// loaded map; the cache file is about as large).
    pub fn memory(&self) -> Vec<(&'static str, usize)> {
        fn bytes<T>(v: &[T]) -> usize {
            std::mem::size_of_val(v)
        }
        let g = &self.brush_grid;
        let grid = g
            .levels
            .iter()
            .map(|l| bytes(&l.starts) + bytes(&l.entries) + bytes(&l.brushes))
            .sum::<usize>()
            + bytes(&g.loose.sides)
            + bytes(&g.loose.brushes);
        let t = &self.poly_tree;
        vec![
            (
                "vertices",
                bytes(&self.vertices) + bytes(&self.vertex_active),
            ),
            ("edges", bytes(&self.edges)),
            ("polygons", bytes(&self.polygons) + bytes(&self.poly_edges)),
            ("polygon_bounds", bytes(&self.poly_bounds32)),
            (
                "polygon_tree",
                bytes(&t.nodes) + bytes(&t.items) + bytes(&t.item_bounds),
            ),
            ("brushes", bytes(&self.brushes)),
            ("brush_planes", bytes(&self.brush_planes)),
            ("brush_points", bytes(&self.brush_points)),
            ("brush_axes", bytes(&self.brush_axes)),
            ("brush_sat", bytes(&self.brush_sat)),
            ("brush_grid", grid),
        ]
    }

    /// Bounds of all solid geometry.
    pub fn bounds(&self) -> Aabb {
        self.bounds
    }

    /// The collision polygons.
    pub fn polygons(&self) -> &[Polygon] {
        &self.polygons
    }

    /// The distinct edges.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The distinct vertices.
    pub fn vertices(&self) -> &[DVec3] {
        &self.vertices
    }

    /// The corner points of polygon `i`, counter-clockwise seen from the front.
    pub fn polygon_points(&self, i: usize) -> impl Iterator<Item = DVec3> + '_ {
        let p = &self.polygons[i];
        self.poly_edges[p.first as usize..(p.first + p.count) as usize]
            .iter()
            .map(move |&c| {
                let e = &self.edges[(c >> 1) as usize];
                self.vertices[e.v[(c & 1) as usize] as usize]
            })
    }

    /// The solid brushes kept for position tests.
    pub fn brushes(&self) -> &[SolidBrush] {
        &self.brushes
    }

    /// Outward planes of solid brush `i` (the brush is where `n·x <= d` for all).
    pub fn brush_planes(&self, i: usize) -> &[Plane] {
        let (a, b) = self.brushes[i].planes;
        &self.brush_planes[a as usize..b as usize]
    }

    /// Corner points of solid brush `i`.
    pub fn brush_points(&self, i: usize) -> &[DVec3] {
        let (a, b) = self.brushes[i].points;
        &self.brush_points[a as usize..b as usize]
    }

    /// Unit edge directions of solid brush `i` (parallel ones merged).
    pub fn brush_axes(&self, i: usize) -> &[DVec3] {
        let (a, b) = self.brushes[i].axes;
        &self.brush_axes[a as usize..b as usize]
    }

    /// The edge × coordinate-axis directions of solid brush `i` with its extents along
    /// them (none for an axial brush).
    pub fn brush_sat(&self, i: usize) -> &[SatAxis] {
        let (a, b) = self.brushes[i].sat;
        &self.brush_sat[a as usize..b as usize]
    }

    /// The planes of solid brush `i` that the box sweep clips (see
    /// [`SolidBrush::box_planes`]).
    pub fn brush_box_planes(&self, i: usize) -> &[Plane] {
        let b = &self.brushes[i];
        let first = b.planes.0 as usize;
        &self.brush_planes[first..first + b.box_planes as usize]
    }

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
        trace::trace(self, hull, start, end, mask, scratch)
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
        trace::sweep(self, hull, start, end, mask, s)
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
        trace::sweep_in(self, region, hull, start, end, mask, s)
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
        trace::sweep_polygons(self, hull, start, end, mask, s)
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
        trace::gather_region(self, bounds, hull, region, s)
    }

    /// Contacts of `hull` at `pos` with polygons within `max_dist`, for ground and wall
    /// checks (van Waveren 2005, §2.6): each nearby front-facing polygon is probed by sweeping the
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
        trace::contacts(self, hull, pos, max_dist, mask, s, out)
    }

    /// Whether `hull` placed at `pos` overlaps (deeper than `POSITION_EPS`) any solid
    /// brush whose contents meet `mask`. Exact separating-axis test against the brushes.
    pub fn position_solid(
        &self,
        hull: &Hull,
        pos: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> bool {
        overlap::position_solid(self, hull, pos, mask, s)
    }

    /// The first solid brush (index) that `hull` at `pos` overlaps, if any.
    pub fn overlapping_brush(
        &self,
        hull: &Hull,
        pos: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Option<usize> {
        overlap::overlapping_brush(self, hull, pos, mask, s)
    }

    /// Whether `hull` at `position`, turned by `q` about `origin`, overlaps solid.
    pub fn position_solid_posed(
        &self,
        hull: &Hull,
        position: DVec3,
        q: DQuat,
        origin: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> bool {
        overlap::position_solid_posed(self, hull, position, q, origin, mask, s)
    }

    /// [`CollisionModel::position_solid`] over the brushes of a [`Region`] gathered
    /// beforehand, when the hull lies inside it (else over the whole model).
    pub fn position_solid_in(
        &self,
        region: &Region,
        hull: &Hull,
        pos: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> bool {
        overlap::position_solid_in(self, region, hull, pos, mask, s)
    }

    /// Turns `hull`, placed at `position`, by `rot`, against everything whose contents
    /// meet `mask`; stops where the first feature pair enters the expel zone.
    pub fn rotate(
        &self,
        hull: &Hull,
        position: DVec3,
        rot: &Rotation,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> RotationTrace {
        rotate::rotate(self, hull, position, rot, mask, s)
    }

    /// The cache file bytes of this model, built from map bytes whose BLAKE3 hash is
    /// `source`.
    pub fn to_cache_bytes(&self, source: &[u8; 32]) -> Vec<u8> {
        cache::to_cache_bytes(self, source)
    }

    /// Decodes and checks a cache file for the map bytes hashed to `source`.
    pub fn from_cache_bytes(bytes: &[u8], source: &[u8; 32]) -> Result<Self, CacheError> {
        cache::from_cache_bytes(bytes, source)
    }

    /// Checks the model's structure; see the module docs.
    pub fn validate(&self) -> Result<(), ModelError> {
        validate::validate(self)
    }
}

/// Compile-time proof that the model can be shared between threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CollisionModel>();
    assert_send_sync::<Hull>();
};
