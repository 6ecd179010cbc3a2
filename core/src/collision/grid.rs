//! Hierarchical uniform grid over the brushes' bounds: the broad phase of box sweeps,
//! start-solid tests and regions.
//!
//! A player's trace asks about a box a few dozen units across. A grid finds the cells of
//! that box by arithmetic and scans short lists of neighbouring brushes, where a tree
//! descends 10–20 dependent levels first (most of a short trace's time, measured on the
//! real maps). Polygons keep the axial tree (`tree.rs`), whose front-to-back walk the
//! polygon sweep needs.
//!
//! Levels of cells [`LEVEL_RATIO`] times coarser each (Ericson, *Real-Time Collision
//! Detection*, §7.2): a brush is listed at the finest level where it touches at most
//! [`SPAN`] cells along each axis, so in a bounded number of cells whatever its size; a
//! floor across the map sits in a few coarse cells, not in hundreds of fine ones. Cells
//! are found by the same monotone function of a coordinate for brushes and queries, so a
//! query never misses a brush whose bounds meet it, and each brush is reported once: from
//! the first query cell it lies in along each axis (each copy carries its place bits).

// SIMD: SSE intrinsics, each block with its SAFETY note. The only unsafe code there is.
#![allow(unsafe_code)]

use super::tree::Bounds32;
use crate::geom::Aabb;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Edge of the finest cells (units), unless the map is too large for that many of them,
/// in which case the edge doubles until they number at most [`MAX_CELLS`].
const CELL: f64 = 128.0;
const MAX_CELLS: u64 = 1 << 18;
/// Each level's cells are this many times wider than the level's below...
const LEVEL_RATIO: f64 = 4.0;
/// ...and a brush is listed at the finest level where it touches at most this many cells
/// along each axis.
const SPAN: u32 = 4;
/// A level with no more brushes than this keeps no cells: its brushes join one short
/// list every query scans whole.
const SHORT_LIST: usize = 16;
/// Most levels a grid has (the coarsest then holds whatever is left).
pub(crate) const MAX_LEVELS: usize = 16;

/// One brush in a list: its outward-rounded `f32` bounds as `[min.x, min.y, min.z, -max.x,
/// -max.y, -max.z]`, so that it meets a query exactly when every lane is at most the
/// query's [`Probe`]'s (one vector compare and no branches, where a test per side
/// mispredicts on scattered boxes), and where this copy lies.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[repr(C, align(32))]
pub(crate) struct Entry {
    pub key: [f32; 6],
    pub brush: u32,
    /// This copy's cell along x (below [`FIRST_Z`]) and whether it is the brush's first
    /// cell along x, y and z (the bits [`FIRST_X`], [`FIRST_Y`], [`FIRST_Z`]; all three in
    /// a list that is not a cell's).
    pub place: u32,
}

const FIRST_X: u32 = 1 << 31;
const FIRST_Y: u32 = 1 << 30;
pub(crate) const FIRST_Z: u32 = 1 << 29;
pub(crate) const FIRST_ALL: u32 = FIRST_X | FIRST_Y | FIRST_Z;

impl Entry {
    fn new(b: &Bounds32, brush: u32, place: u32) -> Entry {
        let b = &b.0;
        Entry {
            key: [b[0], b[1], b[2], -b[3], -b[4], -b[5]],
            brush,
            place,
        }
    }

    /// The bounds (exactly: negation is exact).
    pub(crate) fn bounds(&self) -> Bounds32 {
        let k = &self.key;
        Bounds32([k[0], k[1], k[2], -k[3], -k[4], -k[5]])
    }

    /// This copy's cell along x.
    pub(crate) fn x(&self) -> u32 {
        self.place & !FIRST_ALL
    }

    /// Whether the bounds meet the probe's (false for NaN on either side): one vector
    /// compare, where the compiler splits a scalar fold into a branch per lane.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn meets(&self, p: &Probe) -> bool {
        use std::arch::x86_64::{_mm_and_ps, _mm_cmple_ps, _mm_movemask_ps, _mm_setr_ps};
        let k = &self.key;
        // SAFETY: SSE is part of the x86-64 baseline; no pointer is read.
        unsafe {
            let (a, b) = (
                _mm_setr_ps(k[0], k[1], k[2], k[3]),
                _mm_setr_ps(k[2], k[3], k[4], k[5]),
            );
            _mm_movemask_ps(_mm_and_ps(_mm_cmple_ps(a, p.a), _mm_cmple_ps(b, p.b))) == 0xF
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn meets(&self, p: &Probe) -> bool {
        let mut all = true;
        for k in 0..6 {
            all &= self.key[k] <= p.lanes[k];
        }
        all
    }
}

/// A query's bounds as `[max.x, max.y, max.z, -min.x, -min.y, -min.z]`, widened outward
/// past `f32` rounding ([`Bounds32::around`]), to compare with [`Entry::key`] (on x86-64
/// as lanes 0–3 and 2–5).
struct Probe {
    #[cfg(target_arch = "x86_64")]
    a: std::arch::x86_64::__m128,
    #[cfg(target_arch = "x86_64")]
    b: std::arch::x86_64::__m128,
    lanes: [f32; 6],
}

impl Probe {
    #[inline]
    fn around(q: &Aabb) -> Probe {
        let b = Bounds32::around(q).0;
        let p = [b[3], b[4], b[5], -b[0], -b[1], -b[2]];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::_mm_setr_ps;
            // SAFETY: SSE is part of the x86-64 baseline.
            unsafe {
                Probe {
                    a: _mm_setr_ps(p[0], p[1], p[2], p[3]),
                    b: _mm_setr_ps(p[2], p[3], p[4], p[5]),
                    lanes: p,
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Probe { lanes: p }
    }
}

/// One level of cells.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Level {
    /// Cell edge and its inverse.
    pub cell: f64,
    pub inv_cell: f64,
    /// Cells along x, y and z (each at least 1).
    pub dims: [u32; 3],
    /// Entries of cell `i` are `entries[starts[i]..starts[i + 1]]`; cells are numbered x
    /// fastest, then y, then z.
    pub starts: Vec<u32>,
    pub entries: Vec<Entry>,
    /// The level's brushes once each, scanned instead of the cells by a query whose cells
    /// hold more entries than this list, on average.
    pub brushes: Vec<Entry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct BrushGrid {
    /// Union of the listed brushes' (outward-rounded) bounds.
    pub bounds: Aabb,
    /// Least corner of cell (0, 0, 0) at every level.
    pub origin: DVec3,
    /// Finest first; levels with no more than [`SHORT_LIST`] brushes are left out...
    pub levels: Vec<Level>,
    /// ...and their brushes listed here, scanned whole by every query.
    pub loose: Quads,
}

impl BrushGrid {
    /// A grid over `bounds` (indexed by position); empty bounds are left out.
    pub(crate) fn build(bounds: &[Aabb]) -> BrushGrid {
        let b32: Vec<Option<Bounds32>> = bounds
            .iter()
            .map(|b| {
                (!b.is_empty() && b.min.is_finite() && b.max.is_finite()).then(|| Bounds32::new(b))
            })
            .collect();
        let all = b32
            .iter()
            .flatten()
            .fold(Aabb::EMPTY, |a, b| a.union(&b.aabb()));
        let (origin, size) = if all.is_empty() {
            (DVec3::ZERO, DVec3::ZERO)
        } else {
            (all.min, all.size())
        };
        let level = |cell: f64| {
            // (At most 2^18 cells along any axis, so the casts are exact.)
            Level::empty(
                cell,
                [0, 1, 2].map(|k| ((size[k] / cell) as u32).saturating_add(1)),
            )
        };
        let mut cell = CELL;
        while level(cell).cells() > MAX_CELLS && cell < 1e30 {
            cell *= 2.0;
        }
        let mut levels = Vec::new();
        let mut loose = Vec::new();
        let mut left: Vec<(Entry, Aabb)> = b32
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let bounds = b.as_ref()?;
                Some((Entry::new(bounds, i as u32, FIRST_ALL), bounds.aabb()))
            })
            .collect();
        while !left.is_empty() {
            let mut lv = level(cell);
            let last = levels.len() + 1 == MAX_LEVELS || lv.cells() == 1;
            let (here, rest): (Vec<_>, Vec<_>) = left.into_iter().partition(|(_, b)| {
                let (lo, hi) = lv.range(&origin, b);
                last || (0..3).all(|k| hi[k] - lo[k] < SPAN)
            });
            if here.len() > SHORT_LIST {
                lv.fill(&origin, &here);
                levels.push(lv);
            } else {
                loose.extend(here.iter().map(|e| e.0));
            }
            left = rest;
            cell *= LEVEL_RATIO;
        }
        loose.sort_by_key(|e| e.brush);
        BrushGrid {
            bounds: all,
            origin,
            levels,
            loose: Quads::new(&loose),
        }
    }

    /// Calls `f` once with each brush whose bounds meet `q` (and perhaps a few more just
    /// apart: both are compared in `f32`, rounded outward).
    #[inline]
    pub(crate) fn query(&self, q: &Aabb, mut f: impl FnMut(u32)) {
        let p = Probe::around(q);
        self.loose.scan(&p, &mut f);
        for lv in &self.levels {
            lv.query(&self.origin, q, &p, &mut f);
        }
    }

    /// Union of the listed brushes' bounds (empty when there are none).
    pub(crate) fn bounds(&self) -> Aabb {
        self.bounds
    }
}

/// Calls `f` with each entry of a list (each brush once) that meets the probe.
#[inline]
fn scan(list: &[Entry], p: &Probe, f: &mut impl FnMut(u32)) {
    for e in list {
        if e.meets(p) {
            f(e.brush);
        }
    }
}

/// A short list four entries to a group, each side of the four in one vector, so that a
/// group meets a probe in six vector compares: the list every query scans whole.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Quads {
    /// Per group, [`Entry::key`] side by side: `sides[g][k][i]` is side `k` of entry `i`.
    /// Slots past the end are NaN, which meets nothing.
    pub sides: Vec<[[f32; 4]; 6]>,
    /// Per group, the brushes ([`Quads::NONE`] in slots past the end).
    pub brushes: Vec<[u32; 4]>,
}

impl Quads {
    pub(crate) const NONE: u32 = u32::MAX;

    fn new(list: &[Entry]) -> Quads {
        let mut q = Quads {
            sides: Vec::new(),
            brushes: Vec::new(),
        };
        for group in list.chunks(4) {
            let mut sides = [[f32::NAN; 4]; 6];
            let mut brushes = [Quads::NONE; 4];
            for (i, e) in group.iter().enumerate() {
                for (side, &v) in sides.iter_mut().zip(&e.key) {
                    side[i] = v;
                }
                brushes[i] = e.brush;
            }
            q.sides.push(sides);
            q.brushes.push(brushes);
        }
        q
    }

    /// Calls `f` with each brush that meets the probe, in list order.
    #[inline]
    fn scan(&self, p: &Probe, f: &mut impl FnMut(u32)) {
        for (sides, brushes) in self.sides.iter().zip(&self.brushes) {
            let mut hits = meets4(sides, p);
            while hits != 0 {
                f(brushes[hits.trailing_zeros() as usize]);
                hits &= hits - 1;
            }
        }
    }
}

/// Which of a group's four entries meet the probe, as the low four bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn meets4(sides: &[[f32; 4]; 6], p: &Probe) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE is part of the x86-64 baseline; no pointer is read.
    unsafe {
        let side = |k: usize| {
            let s = &sides[k];
            _mm_cmple_ps(_mm_setr_ps(s[0], s[1], s[2], s[3]), _mm_set1_ps(p.lanes[k]))
        };
        let m = _mm_and_ps(
            _mm_and_ps(side(0), side(1)),
            _mm_and_ps(_mm_and_ps(side(2), side(3)), _mm_and_ps(side(4), side(5))),
        );
        _mm_movemask_ps(m) as u32
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn meets4(sides: &[[f32; 4]; 6], p: &Probe) -> u32 {
    (0..4)
        .filter(|&i| (0..6).all(|k| sides[k][i] <= p.lanes[k]))
        .fold(0, |m, i| m | 1 << i)
}

/// [`Entry::place`] of the copy in cell `at` of a brush whose first cell is `lo`.
fn place(lo: [u32; 3], [x, y, z]: [u32; 3]) -> u32 {
    x | if x == lo[0] { FIRST_X } else { 0 }
        | if y == lo[1] { FIRST_Y } else { 0 }
        | if z == lo[2] { FIRST_Z } else { 0 }
}

impl Level {
    /// A level of `dims` cells of edge `cell`, listing nothing yet.
    fn empty(cell: f64, dims: [u32; 3]) -> Level {
        Level {
            cell,
            inv_cell: 1.0 / cell,
            dims,
            starts: Vec::new(),
            entries: Vec::new(),
            brushes: Vec::new(),
        }
    }

    fn cells(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product()
    }

    /// Lists each brush in the cells it touches (a counting sort by cell, brushes in
    /// index order within a cell).
    fn fill(&mut self, origin: &DVec3, brushes: &[(Entry, Aabb)]) {
        let n = self.cells() as usize;
        let mut counts = vec![0u32; n + 1];
        self.for_each_cell(origin, brushes, |c, _| counts[c + 1] += 1);
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        self.starts = counts.clone();
        let placeholder = Entry {
            key: [0.0; 6],
            brush: 0,
            place: 0,
        };
        let mut entries = vec![placeholder; counts[n] as usize];
        self.for_each_cell(origin, brushes, |c, e| {
            entries[counts[c] as usize] = e;
            counts[c] += 1;
        });
        self.entries = entries;
        self.brushes = brushes.iter().map(|e| e.0).collect();
    }

    /// Calls `f` with each cell a brush touches and its entry there.
    fn for_each_cell(
        &self,
        origin: &DVec3,
        brushes: &[(Entry, Aabb)],
        mut f: impl FnMut(usize, Entry),
    ) {
        for (entry, b) in brushes {
            let (lo, hi) = self.range(origin, b);
            for z in lo[2]..=hi[2] {
                for y in lo[1]..=hi[1] {
                    for x in lo[0]..=hi[0] {
                        let place = place(lo, [x, y, z]);
                        f(self.index(x, y, z), Entry { place, ..*entry });
                    }
                }
            }
        }
    }

    /// The place bits the copy of a brush with bounds `b` in cell `at` must have.
    pub(crate) fn place_of(&self, origin: &DVec3, b: &Aabb, at: [u32; 3]) -> u32 {
        place(self.range(origin, b).0, at)
    }

    /// The cell holding coordinate `v` along axis `k`, clamped to the grid: monotone in
    /// `v`, so boxes that overlap have overlapping cell ranges. (Truncation is the floor
    /// once negatives are clamped to 0; NaN maps to cell 0.) On x86-64 [`Level::range`]
    /// computes this two at a time; a test holds it to this.
    #[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
    #[inline]
    fn cell_of(&self, origin: &DVec3, v: f64, k: usize) -> u32 {
        let c = ((v - origin[k]) * self.inv_cell).max(0.0);
        (c as u32).min(self.dims[k] - 1)
    }

    /// First and last cell along each axis that a box touches.
    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    fn range(&self, o: &DVec3, b: &Aabb) -> ([u32; 3], [u32; 3]) {
        (
            [
                self.cell_of(o, b.min.x, 0),
                self.cell_of(o, b.min.y, 1),
                self.cell_of(o, b.min.z, 2),
            ],
            [
                self.cell_of(o, b.max.x, 0),
                self.cell_of(o, b.max.y, 1),
                self.cell_of(o, b.max.z, 2),
            ],
        )
    }

    /// [`Level::cell_of`] for the six sides at once, two to a register: the same numbers
    /// (clamping before the cast instead of after changes nothing for a whole clamp).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn range(&self, o: &DVec3, b: &Aabb) -> ([u32; 3], [u32; 3]) {
        use std::arch::x86_64::*;
        let [dx, dy, dz] = self.dims.map(|d| f64::from(d - 1));
        // SAFETY: SSE2 is part of the x86-64 baseline; no pointer is read.
        let cells = |v: [f64; 2], o: [f64; 2], last: [f64; 2]| unsafe {
            let c = _mm_mul_pd(
                _mm_sub_pd(_mm_setr_pd(v[0], v[1]), _mm_setr_pd(o[0], o[1])),
                _mm_set1_pd(self.inv_cell),
            );
            // (`maxpd` gives its second operand for NaN: cell 0, as `f64::max` does.)
            let c = _mm_min_pd(
                _mm_max_pd(c, _mm_setzero_pd()),
                _mm_setr_pd(last[0], last[1]),
            );
            let c = _mm_cvttpd_epi32(c);
            [
                _mm_cvtsi128_si32(c) as u32,
                _mm_cvtsi128_si32(_mm_srli_si128::<4>(c)) as u32,
            ]
        };
        let [x0, y0] = cells([b.min.x, b.min.y], [o.x, o.y], [dx, dy]);
        let [z0, x1] = cells([b.min.z, b.max.x], [o.z, o.x], [dz, dx]);
        let [y1, z1] = cells([b.max.y, b.max.z], [o.y, o.z], [dy, dz]);
        ([x0, y0, z0], [x1, y1, z1])
    }

    #[inline]
    fn index(&self, x: u32, y: u32, z: u32) -> usize {
        (x as usize) + self.dims[0] as usize * (y as usize + self.dims[1] as usize * z as usize)
    }

    #[inline]
    fn query(&self, o: &DVec3, q: &Aabb, p: &Probe, f: &mut impl FnMut(u32)) {
        let (lo, hi) = self.range(o, q);
        // Scan the list instead when the cells in range hold more entries than it, on
        // average (a query as large as the level, or a level of large, crowded brushes).
        let cells: u64 = (0..3).map(|k| (hi[k] - lo[k] + 1) as u64).product();
        if cells * self.entries.len() as u64 > self.cells() * self.brushes.len() as u64 {
            return scan(&self.brushes, p, f);
        }
        // The cells of a row along x are consecutive: one pass over their entries. A
        // brush is listed in every cell it touches; it is reported from the first query
        // cell it lies in along each axis, which is the query's first or its own first.
        // (Half-open ranges: an inclusive range's iterator keeps an extra flag and branch.)
        for z in lo[2]..hi[2] + 1 {
            for y in lo[1]..hi[1] + 1 {
                let row = self.index(0, y, z);
                let (a, b) = (row + lo[0] as usize, row + hi[0] as usize + 1);
                let need =
                    if y == lo[1] { 0 } else { FIRST_Y } | if z == lo[2] { 0 } else { FIRST_Z };
                for e in &self.entries[self.starts[a] as usize..self.starts[b] as usize] {
                    if e.meets(p) {
                        let need = need | if e.x() == lo[0] { 0 } else { FIRST_X };
                        if e.place & need == need {
                            f(e.brush);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_box(rng: &mut ChaCha8Rng, spread: f64, size: f64) -> Aabb {
        let c = DVec3::new(
            rng.gen_range(-spread..spread),
            rng.gen_range(-spread..spread),
            rng.gen_range(-spread..spread),
        );
        let h = DVec3::new(
            rng.gen_range(0.0..size),
            rng.gen_range(0.0..size),
            rng.gen_range(0.0..size),
        );
        Aabb {
            min: c - h,
            max: c + h,
        }
    }

    /// Every query reports the brushes whose bounds overlap it (and none farther than
    /// rounding to f32 could explain), each once,
    /// over grids of small and huge brushes (the huge ones make the cells grow), including
    /// queries partly or wholly outside the grid, and empty or non-finite brush bounds.
    #[test]
    fn queries_report_each_overlapping_brush_once() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for case in 0..40 {
            let n = rng.gen_range(1..300);
            let mut huge = false;
            let mut bounds: Vec<Aabb> = (0..n)
                .map(|_| {
                    let big = rng.gen_bool(0.05);
                    huge |= big;
                    random_box(&mut rng, 3000.0, if big { 20_000.0 } else { 100.0 })
                })
                .collect();
            bounds[0] = Aabb::EMPTY;
            if case % 2 == 0 {
                bounds[n - 1].max.x = f64::INFINITY;
            }
            let g = BrushGrid::build(&bounds);
            g.validate_for_test(bounds.len());
            assert!(
                !huge || g.levels.len() > 1 || !g.loose.brushes.is_empty(),
                "case {case}: huge brushes sit on coarser levels"
            );
            for _ in 0..200 {
                let q = random_box(&mut rng, 5000.0, 200.0);
                let mut got = Vec::new();
                g.query(&q, |i| got.push(i));
                got.sort_unstable();
                let meets = |i: u32, q: &Aabb| {
                    let b = &bounds[i as usize];
                    !b.is_empty() && b.min.is_finite() && b.max.is_finite() && b.overlaps(q)
                };
                let want: Vec<u32> = (0..n as u32).filter(|&i| meets(i, &q)).collect();
                let wide = q.expand(q.min.abs().max(q.max.abs()).max_element() * 1e-5);
                let may: Vec<u32> = (0..n as u32).filter(|&i| meets(i, &wide)).collect();
                assert!(
                    want.iter().all(|i| got.contains(i)) && got.iter().all(|i| may.contains(i)),
                    "case {case}, query {q:?}: got {got:?}, want {want:?}"
                );
                let mut once = got.clone();
                once.dedup();
                assert_eq!(once, got, "case {case}: a brush reported twice");
            }
        }
    }

    /// [`Level::range`] finds the cells [`Level::cell_of`] does, side by side, for
    /// coordinates inside, outside and at the edges of the grid, and for NaN.
    #[test]
    fn ranges_are_the_cells_of_their_sides() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..2000 {
            let cell = 2f64.powi(rng.gen_range(-2..12));
            let dims = [0; 3].map(|_| rng.gen_range(1..300u32));
            let lv = Level::empty(cell, dims);
            let origin = DVec3::new(
                rng.gen_range(-1e4..1e4),
                rng.gen_range(-1e4..1e4),
                rng.gen_range(-1e4..1e4),
            );
            let mut coord = |k: usize| match rng.gen_range(0..8) {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => origin[k] + cell * rng.gen_range(0..dims[k] + 2) as f64,
                _ => origin[k] + rng.gen_range(-2.0..1.2) * cell * dims[k] as f64,
            };
            let b = Aabb {
                min: DVec3::new(coord(0), coord(1), coord(2)),
                max: DVec3::new(coord(0), coord(1), coord(2)),
            };
            let want = (
                [0, 1, 2].map(|k| lv.cell_of(&origin, b.min[k], k)),
                [0, 1, 2].map(|k| lv.cell_of(&origin, b.max[k], k)),
            );
            assert_eq!(
                lv.range(&origin, &b),
                want,
                "{b:?} from {origin:?}, cells {cell}"
            );
        }
    }
}
