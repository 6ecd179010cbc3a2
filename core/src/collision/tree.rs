//! Axial BSP tree over item bounds (van Waveren 2005, §5): the broad phase for polygons (and the
//! model build's own face-sized queries of brushes; traces find brushes in `grid.rs`).
//!
//! Each node splits space by an axis-aligned plane taken from the items' own bound planes
//! (the one nearest the node centre on its longest axis). Items straddling the plane go to
//! both children, so a leaf holds everything that crosses its cell; queries de-duplicate
//! with a per-query stamp. Traversal of a sweep is front to back and stops as soon as the
//! best hit so far is nearer than the next cell.

use crate::geom::Aabb;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Cells no smaller than this (units) on their longest axis stop splitting...
const MIN_NODE_SIZE: f64 = 64.0;
/// ...unless they hold more items than this.
const FORCE_SPLIT: usize = 128;
/// Leaves this small are not split further.
const LEAF_ITEMS: usize = 8;
pub(crate) const MAX_DEPTH: usize = 40;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Node {
    Split {
        axis: u8,
        dist: f64,
        back: u32,
        front: u32,
    },
    Leaf {
        first: u32,
        count: u32,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AxialTree {
    pub nodes: Vec<Node>,
    pub items: Vec<u32>,
    /// Bounds of each entry of `items`, stored beside it so a leaf is scanned in one
    /// sequential pass; `f32` rounded outward, so never tighter than the true bounds.
    pub item_bounds: Vec<Bounds32>,
    pub bounds: Aabb,
}

/// How far [`Bounds32::around`] moves each side out: relative, and absolute (for sides near
/// zero; far above `f32`'s least normal number).
const AROUND_REL: f64 = 1.0 / (1u64 << 20) as f64;
const AROUND_ABS: f64 = 1e-30;

/// An outward-rounded `f32` copy of an [`Aabb`]: `min[0..3]`, `max[0..3]`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(crate) struct Bounds32(pub [f32; 6]);

impl Bounds32 {
    #[inline]
    pub(crate) fn new(b: &Aabb) -> Bounds32 {
        let down = |v: f64| {
            let f = v as f32;
            if f as f64 > v {
                f.next_down()
            } else {
                f
            }
        };
        let up = |v: f64| {
            let f = v as f32;
            if (f as f64) < v {
                f.next_up()
            } else {
                f
            }
        };
        Bounds32([
            down(b.min.x),
            down(b.min.y),
            down(b.min.z),
            up(b.max.x),
            up(b.max.y),
            up(b.max.z),
        ])
    }

    /// The same bounds in `f64` (exactly).
    pub(crate) fn aabb(&self) -> Aabb {
        let a = self.0.map(f64::from);
        Aabb {
            min: DVec3::new(a[0], a[1], a[2]),
            max: DVec3::new(a[3], a[4], a[5]),
        }
    }

    /// Whether these bounds overlap `q` (compared in `f64`, to which `f32` widens exactly).
    #[inline]
    pub(crate) fn overlaps_aabb(&self, q: &Aabb) -> bool {
        let a = self.0.map(f64::from);
        (a[0] <= q.max.x)
            & (a[3] >= q.min.x)
            & (a[1] <= q.max.y)
            & (a[4] >= q.min.y)
            & (a[2] <= q.max.z)
            & (a[5] >= q.min.z)
    }

    /// Whether these bounds overlap `o` (with `&`, not `&&`: one branch, where six would
    /// mispredict on scattered boxes).
    #[inline]
    pub(crate) fn overlaps(&self, o: &Bounds32) -> bool {
        let (a, b) = (&self.0, &o.0);
        (a[0] <= b[3])
            & (a[3] >= b[0])
            & (a[1] <= b[4])
            & (a[4] >= b[1])
            & (a[2] <= b[5])
            & (a[5] >= b[2])
    }

    /// `f32` bounds that contain `b`: each side moved out by more than rounding to `f32`
    /// can move it back (`2^-24` relative). Looser than [`Bounds32::new`] by a few parts
    /// in ten million, and without its branches: for culling per query.
    #[inline]
    pub(crate) fn around(b: &Aabb) -> Bounds32 {
        let out = |v: f64| v.abs() * AROUND_REL + AROUND_ABS;
        Bounds32([
            (b.min.x - out(b.min.x)) as f32,
            (b.min.y - out(b.min.y)) as f32,
            (b.min.z - out(b.min.z)) as f32,
            (b.max.x + out(b.max.x)) as f32,
            (b.max.y + out(b.max.y)) as f32,
            (b.max.z + out(b.max.z)) as f32,
        ])
    }
}

impl AxialTree {
    pub(crate) fn build(item_bounds: &[Aabb]) -> AxialTree {
        let mut t = AxialTree {
            nodes: Vec::new(),
            items: Vec::new(),
            item_bounds: Vec::new(),
            bounds: item_bounds.iter().fold(Aabb::EMPTY, |a, b| a.union(b)),
        };
        let all: Vec<u32> = (0..item_bounds.len() as u32).collect();
        let b = t.bounds;
        t.build_node(item_bounds, all, b, 0);
        t
    }

    fn build_node(&mut self, ib: &[Aabb], items: Vec<u32>, cell: Aabb, depth: usize) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node::Leaf { first: 0, count: 0 });
        let size = cell.size();
        let want_split = items.len() > LEAF_ITEMS
            && depth < MAX_DEPTH
            && (size.max_element() >= MIN_NODE_SIZE || items.len() > FORCE_SPLIT);
        if want_split {
            if let Some((axis, dist)) = choose_split(ib, &items, &cell) {
                let (mut back, mut front) = (Vec::new(), Vec::new());
                // An item that only touches the plane goes to its own side (to the back if
                // it lies in it): both walks take a cell they touch, so a query that meets
                // the item reaches it there, and items sharing the plane of a vertex (a
                // grid of patch triangles) are not copied.
                for &i in &items {
                    let b = &ib[i as usize];
                    if b.min[axis] < dist || b.max[axis] <= dist {
                        back.push(i);
                    }
                    if b.max[axis] > dist {
                        front.push(i);
                    }
                }
                // A split that separates nothing would recurse forever, and one that copies
                // most items to both sides (many items meeting at one point, like a fan
                // of patch triangles round a pole) would multiply them at every level.
                let copies = back.len() + front.len() - items.len();
                if (back.len() < items.len() || front.len() < items.len())
                    && copies <= items.len() / 2
                {
                    let (mut bc, mut fc) = (cell, cell);
                    bc.max[axis] = dist;
                    fc.min[axis] = dist;
                    let b = self.build_node(ib, back, bc, depth + 1);
                    let f = self.build_node(ib, front, fc, depth + 1);
                    self.nodes[id as usize] = Node::Split {
                        axis: axis as u8,
                        dist,
                        back: b,
                        front: f,
                    };
                    return id;
                }
            }
        }
        self.nodes[id as usize] = Node::Leaf {
            first: self.items.len() as u32,
            count: items.len() as u32,
        };
        self.items.extend_from_slice(&items);
        self.item_bounds
            .extend(items.iter().map(|&i| Bounds32::new(&ib[i as usize])));
        id
    }

    /// Calls `f` with every item whose stored bounds overlap `q`, from the leaves whose cell
    /// overlaps `q` (with repeats). The stored bounds are rounded outward, so no item whose
    /// true bounds overlap is left out.
    pub(crate) fn query_aabb(&self, q: &Aabb, mut f: impl FnMut(u32)) {
        if self.nodes.is_empty() {
            return;
        }
        // Depth-first, one entry per level at most besides the current path.
        let mut stack = [0u32; MAX_DEPTH + 2];
        let mut sp = 1;
        while sp > 0 {
            sp -= 1;
            match &self.nodes[stack[sp] as usize] {
                Node::Leaf { first, count } => {
                    let range = *first as usize..(*first + *count) as usize;
                    for (&i, b) in self.items[range.clone()]
                        .iter()
                        .zip(&self.item_bounds[range])
                    {
                        if b.overlaps_aabb(q) {
                            f(i);
                        }
                    }
                }
                Node::Split {
                    axis,
                    dist,
                    back,
                    front,
                } => {
                    let a = *axis as usize;
                    if q.min.as_ref()[a] <= *dist {
                        stack[sp] = *back;
                        sp += 1;
                    }
                    if q.max.as_ref()[a] >= *dist {
                        stack[sp] = *front;
                        sp += 1;
                    }
                }
            }
        }
    }
}

impl AxialTree {
    /// Front-to-back walk of the cells that a box `[lo, hi]` (relative to the path) meets
    /// while its reference point moves from `start` by `dir` (fractions 0 to 1). Each cell
    /// is entered with the interval of the move spent in it; `visit` scans a leaf's items
    /// and bounds and returns the fraction the walk must still reach (the best hit so far),
    /// so cells entered later are skipped.
    pub(crate) fn walk_segment(
        &self,
        start: DVec3,
        dir: DVec3,
        lo: DVec3,
        hi: DVec3,
        stack: &mut Vec<(u32, f64, f64)>,
        mut visit: impl FnMut(&[u32], &[Bounds32]) -> f64,
    ) {
        if self.nodes.is_empty() {
            return;
        }
        let (lo, hi, start, dir) = (
            lo.to_array(),
            hi.to_array(),
            start.to_array(),
            dir.to_array(),
        );
        let inv = dir.map(|d| if d != 0.0 { 1.0 / d } else { 0.0 });
        let mut reach = 1.0f64;
        stack.clear();
        stack.push((0, 0.0, 1.0));
        while let Some((node, t0, t1)) = stack.pop() {
            if t0 > reach {
                continue;
            }
            match &self.nodes[node as usize] {
                Node::Leaf { first, count } => {
                    let range = *first as usize..(*first + *count) as usize;
                    reach = visit(&self.items[range.clone()], &self.item_bounds[range]);
                }
                Node::Split {
                    axis,
                    dist,
                    back,
                    front,
                } => {
                    let a = *axis as usize;
                    let t1 = t1.min(reach);
                    let (d, p0) = (dir[a], start[a]);
                    // Back cell x <= dist while p(t) + lo <= dist; front while p(t) + hi >= dist.
                    let (back_iv, front_iv) = if d == 0.0 {
                        (
                            (p0 + lo[a] <= *dist).then_some((t0, t1)),
                            (p0 + hi[a] >= *dist).then_some((t0, t1)),
                        )
                    } else {
                        let tb = (*dist - lo[a] - p0) * inv[a];
                        let tf = (*dist - hi[a] - p0) * inv[a];
                        let clip = |a: f64, b: f64| (a <= b).then_some((a, b));
                        if d > 0.0 {
                            (clip(t0, t1.min(tb)), clip(t0.max(tf), t1))
                        } else {
                            (clip(t0.max(tb), t1), clip(t0, t1.min(tf)))
                        }
                    };
                    let b = back_iv.map(|(x, y)| (*back, x, y));
                    let f = front_iv.map(|(x, y)| (*front, x, y));
                    // Push the far cell first so the near one (where the move starts) pops first.
                    let (near, far) = if d >= 0.0 { (b, f) } else { (f, b) };
                    if let Some(c) = far {
                        stack.push(c);
                    }
                    if let Some(c) = near {
                        stack.push(c);
                    }
                }
            }
        }
    }
}

/// The bound plane nearest the cell centre on the longest axis that has one strictly
/// inside the cell (falling back to the other axes).
fn choose_split(ib: &[Aabb], items: &[u32], cell: &Aabb) -> Option<(usize, f64)> {
    let size = cell.size();
    let centre = cell.center();
    let mut axes = [0usize, 1, 2];
    axes.sort_by(|&a, &b| size[b].total_cmp(&size[a]));
    for axis in axes {
        let (lo, hi) = (cell.min[axis], cell.max[axis]);
        let c = centre[axis];
        let mut best: Option<f64> = None;
        for &i in items {
            let b = &ib[i as usize];
            for v in [b.min[axis], b.max[axis]] {
                if v > lo && v < hi && best.is_none_or(|x| (v - c).abs() < (x - c).abs()) {
                    best = Some(v);
                }
            }
        }
        if let Some(d) = best {
            return Some((axis, d));
        }
    }
    None
}
