//! The players' broad phase: which boxes a player's move can meet, and which end boxes
//! of a tick overlap.

use super::PlayerBox;
use crate::geom::{Aabb, POSITION_EPS};
use glam::DVec3;

/// The grid's smallest cell, about a player's width.
const PLAYER_CELL: f64 = 32.0;

/// What a [`Grid`] holds: an item binned by the (x, y) cell of its centre.
pub trait Binned: Copy {
    /// Where the item is binned: its (x, y) cell is its centre's.
    fn centre(&self) -> DVec3;
    /// Whether the item reaches into `zone` (the exact test after the cells' coarse one).
    fn overlaps(&self, zone: &Aabb) -> bool;
}

impl Binned for PlayerBox {
    fn centre(&self) -> DVec3 {
        self.bounds.center()
    }

    fn overlaps(&self, zone: &Aabb) -> bool {
        self.bounds.overlaps(zone)
    }
}

/// Items binned by the (x, y) cell of their centres: a flat grid, counting-sorted once
/// per tick, so a query reads a few cells directly. Items go in in order (the players' in
/// id order), so each cell lists them in that order.
#[derive(Debug)]
pub struct Grid<T> {
    cell: f64,
    /// Cell coordinates of the grid's first cell.
    origin: [i64; 2],
    dims: [usize; 2],
    /// Per cell, where its items begin in `items` (one extra entry closes the last).
    starts: Vec<u32>,
    items: Vec<T>,
}

impl<T> Default for Grid<T> {
    fn default() -> Self {
        Grid {
            cell: PLAYER_CELL,
            origin: [0; 2],
            dims: [0; 2],
            starts: Vec::new(),
            items: Vec::new(),
        }
    }
}

/// The players' start boxes of a tick.
pub(crate) type PlayerGrid = Grid<PlayerBox>;

impl<T: Binned> Grid<T> {
    /// Bins `input`, given in id order, in cells of about a player's width.
    pub fn build(&mut self, input: &[T]) {
        self.build_with(input, PLAYER_CELL);
    }

    /// Bins `input` in cells of `cell` units (at least a player's width, 32). The cell doubles
    /// until the grid holds at most 16 cells per item (items spread over a huge map).
    pub fn build_with(&mut self, input: &[T], cell: f64) {
        self.items.clear();
        self.starts.clear();
        if input.is_empty() {
            self.dims = [0, 0];
            return;
        }
        let mut cell = cell.max(PLAYER_CELL);
        let cells_of = |cell: f64| {
            let mut lo = [i64::MAX; 2];
            let mut hi = [i64::MIN; 2];
            for b in input {
                let c = Self::coords(b.centre(), cell);
                for a in 0..2 {
                    lo[a] = lo[a].min(c[a]);
                    hi[a] = hi[a].max(c[a]);
                }
            }
            (lo, hi)
        };
        let (lo, hi) = loop {
            let (lo, hi) = cells_of(cell);
            let n = (0..2)
                .map(|a| (hi[a] - lo[a] + 1) as u128)
                .product::<u128>();
            if n <= 16 * input.len() as u128 + 64 {
                break (lo, hi);
            }
            cell *= 2.0;
        };
        self.cell = cell;
        self.origin = lo;
        self.dims = [(hi[0] - lo[0] + 1) as usize, (hi[1] - lo[1] + 1) as usize];
        let n = self.dims[0] * self.dims[1];
        self.starts.resize(n + 1, 0);
        for b in input {
            let k = self.index(b);
            self.starts[k + 1] += 1;
        }
        for k in 0..n {
            self.starts[k + 1] += self.starts[k];
        }
        self.items.resize(input.len(), input[0]);
        let mut fill = self.starts.clone();
        for b in input {
            let k = self.index(b);
            self.items[fill[k] as usize] = *b;
            fill[k] += 1;
        }
    }

    fn coords(p: DVec3, cell: f64) -> [i64; 2] {
        // Origins are within ±2^23 (quantized i32), so cells fit easily.
        [(p.x / cell).floor() as i64, (p.y / cell).floor() as i64]
    }

    fn index(&self, b: &T) -> usize {
        let c = Self::coords(b.centre(), self.cell);
        let x = (c[0] - self.origin[0]) as usize;
        let y = (c[1] - self.origin[1]) as usize;
        x * self.dims[1] + y
    }

    /// The cell of `p`, counted from the grid's first cell; a point beyond the grid gets
    /// the cell just outside it (so any point, however far, stays in range).
    pub fn cell_at(&self, p: DVec3) -> [i64; 2] {
        let c = Self::coords(p, self.cell);
        let at = |a: usize| {
            c[a].saturating_sub(self.origin[a])
                .clamp(-1, self.dims[a] as i64)
        };
        [at(0), at(1)]
    }

    /// Where cell `c` (counted as [`Grid::cell_at`] counts) begins across (x, y), and the
    /// cells' side.
    pub fn corner(&self, c: [i64; 2]) -> (DVec3, f64) {
        let at = |a: usize| (c[a] + self.origin[a]) as f64 * self.cell;
        (DVec3::new(at(0), at(1), 0.0), self.cell)
    }

    /// How many cells the grid has across x and y.
    pub fn dims(&self) -> [i64; 2] {
        [self.dims[0] as i64, self.dims[1] as i64]
    }

    /// The items of cells `(x, y0..=y1)` (counted as [`Grid::cell_at`] counts), the part
    /// within the grid: one run of the cell order.
    pub fn row(&self, x: i64, y0: i64, y1: i64) -> &[T] {
        let (w, h) = (self.dims[0] as i64, self.dims[1] as i64);
        let (y0, y1) = (y0.max(0), y1.min(h - 1));
        if x < 0 || x >= w || y0 > y1 {
            return &[];
        }
        let row = x as usize * self.dims[1];
        let from = self.starts[row + y0 as usize] as usize;
        let to = self.starts[row + y1 as usize + 1] as usize;
        &self.items[from..to]
    }

    /// The items that overlap `zone`, in cell order (the queries over them break ties by
    /// id, so nothing depends on it); `size` bounds how far an item reaches
    /// across (x, y) from its centre, so the centre of an item that overlaps lies within
    /// it of the zone.
    pub fn near(&self, zone: &Aabb, size: f64, out: &mut Vec<T>) {
        out.clear();
        self.each_near(zone, size, |b| out.push(*b));
    }

    /// [`Grid::near`], each item handed to `f` instead of collected.
    pub fn each_near(&self, zone: &Aabb, size: f64, mut f: impl FnMut(&T)) {
        if self.items.is_empty() {
            return;
        }
        let lo = Self::coords(zone.min - DVec3::splat(size), self.cell);
        let hi = Self::coords(zone.max + DVec3::splat(size), self.cell);
        let clamp =
            |v: i64, a: usize| (v - self.origin[a]).clamp(0, self.dims[a] as i64 - 1) as usize;
        if hi[0] < self.origin[0]
            || hi[1] < self.origin[1]
            || lo[0] >= self.origin[0] + self.dims[0] as i64
            || lo[1] >= self.origin[1] + self.dims[1] as i64
        {
            return;
        }
        for x in clamp(lo[0], 0)..=clamp(hi[0], 0) {
            let row = x * self.dims[1];
            let (from, to) = (
                self.starts[row + clamp(lo[1], 1)] as usize,
                self.starts[row + clamp(hi[1], 1) + 1] as usize,
            );
            self.items[from..to]
                .iter()
                .filter(|b| b.overlaps(zone))
                .for_each(&mut f);
        }
    }
}

/// Whether player box `a` overlaps `b` deeper than [`POSITION_EPS`]: what makes a spot
/// solid for a player, and players entangled when it holds as they start a tick.
pub(crate) fn entangled(a: &Aabb, b: &Aabb) -> bool {
    a.expand(-POSITION_EPS).overlaps(b)
}

/// Index pairs of boxes that overlap deeper than [`POSITION_EPS`] (sweep and prune on x).
pub(super) fn overlapping_pairs(boxes: &[Option<Aabb>]) -> Vec<(usize, usize)> {
    let mut order: Vec<(usize, Aabb)> = boxes
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.map(|b| (i, b.expand(-POSITION_EPS))))
        .collect();
    order.sort_unstable_by(|a, b| a.1.min.x.total_cmp(&b.1.min.x).then(a.0.cmp(&b.0)));
    let mut pairs = Vec::new();
    for (k, (i, a)) in order.iter().enumerate() {
        for (j, b) in &order[k + 1..] {
            if b.min.x > a.max.x {
                break;
            }
            if a.overlaps(b) {
                pairs.push((*i, *j));
            }
        }
    }
    pairs
}
