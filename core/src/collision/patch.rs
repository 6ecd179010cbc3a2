//! Curved patches as collision geometry: each biquadratic Bézier piece of a patch's control
//! grid is cut into a grid of triangles fine enough that the triangles stay within a proven
//! distance of the true surface.
//!
//! The bound: for a surface `f(u, v)` over a cell of `h × k` parameter units, the linear
//! interpolant over either triangle of the cell differs from `f` by at most
//! `(A_uu h² + 2 A_uv h k + A_vv k²) / 8`, where `A` bound the norms of the second
//! derivatives (a Taylor expansion about the point, with `Σ λ_i (u_i - u)² ≤ h²/4` for
//! barycentric weights `λ`). For a biquadratic piece the second derivatives are convex
//! combinations of control-point differences, so `A` come straight from the control grid.
//! The bound holds both ways: every point of the triangles is that close to the surface
//! point with the same parameters, and so every surface point to its triangle.
//!
//! Quake 3 stops subdividing while a section's midpoint is within 16 units of its chord;
//! this keeps the whole surface within [`PATCH_TOLERANCE`].

use crate::map::Patch;
use glam::DVec3;

/// The collision surface of a patch lies within this distance (units) of the true Bézier
/// surface everywhere, and the true surface within it of the collision surface (unless the
/// patch needed more triangles than [`MAX_PATCH_TRIANGLES`]; then the bound it reaches is
/// reported).
pub const PATCH_TOLERANCE: f64 = 4.0;
/// Most triangles one patch becomes (a 128 × 128 cell grid).
pub const MAX_PATCH_TRIANGLES: usize = 2 * 128 * 128;
/// Most segments one Bézier piece is cut into along either side.
const MAX_SEGMENTS: usize = 128;

/// A patch cut into a grid of points; each cell is two triangles.
#[derive(Clone, Debug)]
pub struct Tessellation {
    /// Grid points, `points[a * rows + b]` for column `a < cols` (along the patch width)
    /// and row `b < rows`.
    pub points: Vec<DVec3>,
    /// Grid columns (points along the width).
    pub cols: usize,
    /// Grid rows (points along the height).
    pub rows: usize,
    /// Proven bound on the distance between the triangles and the true surface.
    pub bound: f64,
}

impl Tessellation {
    fn at(&self, a: usize, b: usize) -> DVec3 {
        self.points[a * self.rows + b]
    }

    /// The triangles, cell by cell, each cell split along its shorter diagonal. All wind the
    /// same way: counter-clockwise about `(p[a+1][b] - p[a][b]) × (p[a][b+1] - p[a][b])`.
    pub fn triangles(&self) -> impl Iterator<Item = [DVec3; 3]> + '_ {
        (0..self.cols - 1)
            .flat_map(move |a| (0..self.rows - 1).map(move |b| (a, b)))
            .flat_map(move |(a, b)| {
                let (p00, p10) = (self.at(a, b), self.at(a + 1, b));
                let (p01, p11) = (self.at(a, b + 1), self.at(a + 1, b + 1));
                if (p11 - p00).length_squared() <= (p10 - p01).length_squared() {
                    [[p00, p10, p11], [p00, p11, p01]]
                } else {
                    [[p00, p10, p01], [p10, p11, p01]]
                }
            })
    }
}

/// The quadratic Bézier curve through `c` at `t`.
fn quad(c: [DVec3; 3], t: f64) -> DVec3 {
    let s = 1.0 - t;
    c[0] * (s * s) + c[1] * (2.0 * s * t) + c[2] * (t * t)
}

/// Control points of piece `(pi, pj)`: `c[i][j]`.
fn piece(p: &Patch, pi: usize, pj: usize) -> [[DVec3; 3]; 3] {
    std::array::from_fn(|i| std::array::from_fn(|j| p.point(2 * pi + i, 2 * pj + j)))
}

/// The point of a piece at local parameters `(u, v)` in `[0, 1]²`.
fn eval_piece(c: &[[DVec3; 3]; 3], u: f64, v: f64) -> DVec3 {
    quad([quad(c[0], v), quad(c[1], v), quad(c[2], v)], u)
}

/// The true surface at patch parameters `u ∈ [0, (width-1)/2]`, `v ∈ [0, (height-1)/2]`
/// (piece `⌊u⌋, ⌊v⌋`, clamped to the last piece at the far border).
pub fn evaluate(p: &Patch, u: f64, v: f64) -> DVec3 {
    let (nu, nv) = ((p.width - 1) / 2, (p.height - 1) / 2);
    let pi = (u.floor().max(0.0) as usize).min(nu - 1);
    let pj = (v.floor().max(0.0) as usize).min(nv - 1);
    eval_piece(&piece(p, pi, pj), u - pi as f64, v - pj as f64)
}

/// Bounds on the second derivatives of a piece: `(A_uu, A_uv, A_vv)`.
fn curvature(c: &[[DVec3; 3]; 3]) -> (f64, f64, f64) {
    let (mut uu, mut uv, mut vv) = (0.0f64, 0.0f64, 0.0f64);
    for (k, row) in c.iter().enumerate() {
        uu = uu.max(2.0 * (c[0][k] - c[1][k] * 2.0 + c[2][k]).length());
        vv = vv.max(2.0 * (row[0] - row[1] * 2.0 + row[2]).length());
    }
    for a in 0..2 {
        for b in 0..2 {
            let d = c[a + 1][b + 1] - c[a][b + 1] - c[a + 1][b] + c[a][b];
            uv = uv.max(4.0 * d.length());
        }
    }
    (uu, uv, vv)
}

/// The interpolation bound for a piece cut into `nu × nv` cells.
fn bound((uu, uv, vv): (f64, f64, f64), nu: usize, nv: usize) -> f64 {
    let (h, k) = (1.0 / nu as f64, 1.0 / nv as f64);
    (uu * h * h + 2.0 * uv * h * k + vv * k * k) / 8.0
}

/// Segments along each side of one piece for the tolerance: refine the side whose terms
/// dominate until the bound holds.
fn segments(c: (f64, f64, f64), tolerance: f64) -> (usize, usize) {
    let (mut nu, mut nv) = (1usize, 1usize);
    while bound(c, nu, nv) > tolerance && (nu < MAX_SEGMENTS || nv < MAX_SEGMENTS) {
        let (h, k) = (1.0 / nu as f64, 1.0 / nv as f64);
        let along_u = c.0 * h * h + c.1 * h * k;
        let along_v = c.2 * k * k + c.1 * h * k;
        if (along_u >= along_v && nu < MAX_SEGMENTS) || nv == MAX_SEGMENTS {
            nu += 1;
        } else {
            nv += 1;
        }
    }
    (nu, nv)
}

/// How many triangles [`tessellate`] makes of `p` at `tolerance` before any budget.
pub fn triangles_needed(p: &Patch, tolerance: f64) -> usize {
    let (su, sv) = piece_segments(p, tolerance);
    2 * su.iter().sum::<usize>() * sv.iter().sum::<usize>()
}

/// Segments per piece column and per piece row: the most any piece in it needs, so
/// neighbouring pieces share their border points and the surface stays closed.
fn piece_segments(p: &Patch, tolerance: f64) -> (Vec<usize>, Vec<usize>) {
    let (np, nq) = ((p.width - 1) / 2, (p.height - 1) / 2);
    let (mut su, mut sv) = (vec![1usize; np], vec![1usize; nq]);
    for (pi, u) in su.iter_mut().enumerate() {
        for (pj, v) in sv.iter_mut().enumerate() {
            let (a, b) = segments(curvature(&piece(p, pi, pj)), tolerance);
            *u = (*u).max(a);
            *v = (*v).max(b);
        }
    }
    (su, sv)
}

/// Cuts a patch (already checked by [`Patch::check`]) into triangles within `tolerance` of
/// its surface, using at most `max_triangles` (at least one cell per piece): when the
/// tolerance needs more, every piece is cut proportionally coarser and the reported bound
/// says how close it stays.
pub fn tessellate(p: &Patch, tolerance: f64, max_triangles: usize) -> Tessellation {
    let (mut su, mut sv) = piece_segments(p, tolerance);
    let need = 2 * su.iter().sum::<usize>() * sv.iter().sum::<usize>();
    if need > max_triangles {
        let scale = (max_triangles as f64 / need as f64).sqrt();
        for n in su.iter_mut().chain(sv.iter_mut()) {
            *n = ((*n as f64 * scale).floor() as usize).max(1);
        }
    }
    // Parameter of each grid line: (piece, local t).
    let lines = |s: &[usize]| -> Vec<(usize, f64)> {
        let mut out = Vec::with_capacity(s.iter().sum::<usize>() + 1);
        for (pi, &n) in s.iter().enumerate() {
            for k in 0..n {
                out.push((pi, k as f64 / n as f64));
            }
        }
        out.push((s.len() - 1, 1.0));
        out
    };
    let (us, vs) = (lines(&su), lines(&sv));
    let mut points = Vec::with_capacity(us.len() * vs.len());
    for &(pi, u) in &us {
        for &(pj, v) in &vs {
            points.push(eval_piece(&piece(p, pi, pj), u, v));
        }
    }
    let mut worst = 0.0f64;
    for (pi, &nu) in su.iter().enumerate() {
        for (pj, &nv) in sv.iter().enumerate() {
            worst = worst.max(bound(curvature(&piece(p, pi, pj)), nu, nv));
        }
    }
    Tessellation {
        points,
        cols: us.len(),
        rows: vs.len(),
        bound: worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_patch(rng: &mut ChaCha8Rng, w: usize, h: usize, scale: f64) -> Patch {
        Patch {
            width: w,
            height: h,
            points: (0..w * h)
                .map(|k| {
                    let (i, j) = ((k / h) as f64, (k % h) as f64);
                    DVec3::new(
                        i * 64.0 + rng.gen_range(-scale..scale),
                        j * 64.0 + rng.gen_range(-scale..scale),
                        rng.gen_range(-scale..scale),
                    )
                })
                .collect(),
            texture: "t".into(),
            contents: None,
            line: 0,
        }
    }

    /// The stated bound, checked at random points: the triangle point with barycentric
    /// weights `λ` and the surface point at the same weights of the corners' parameters are
    /// within the bound, and the bound within the tolerance.
    #[test]
    fn triangles_stay_within_the_tolerance_of_the_surface() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut worst = 0.0f64;
        for case in 0..60 {
            let (w, h) = (3 + 2 * rng.gen_range(0..3), 3 + 2 * rng.gen_range(0..3));
            let scale = [1.0, 30.0, 200.0, 800.0][case % 4];
            let p = random_patch(&mut rng, w, h, scale);
            let t = tessellate(&p, PATCH_TOLERANCE, MAX_PATCH_TRIANGLES);
            if triangles_needed(&p, PATCH_TOLERANCE) <= MAX_PATCH_TRIANGLES {
                assert!(t.bound <= PATCH_TOLERANCE, "bound {}", t.bound);
            }
            // Grid line parameters, recomputed from the grid size per piece.
            let param = |s: &[usize], a: usize| -> f64 {
                let (mut a, mut base) = (a, 0.0);
                for &n in s {
                    if a <= n {
                        return base + a as f64 / n as f64;
                    }
                    a -= n;
                    base += 1.0;
                }
                base
            };
            let (mut su, mut sv) = piece_segments(&p, PATCH_TOLERANCE);
            if t.cols != 1 + su.iter().sum::<usize>() {
                // Budget-limited: recover the segments from the grid (scaled uniformly).
                let need = 2 * su.iter().sum::<usize>() * sv.iter().sum::<usize>();
                let scale = (MAX_PATCH_TRIANGLES as f64 / need as f64).sqrt();
                for n in su.iter_mut().chain(sv.iter_mut()) {
                    *n = ((*n as f64 * scale).floor() as usize).max(1);
                }
            }
            assert_eq!(t.cols, 1 + su.iter().sum::<usize>());
            assert_eq!(t.rows, 1 + sv.iter().sum::<usize>());
            for _ in 0..400 {
                let a = rng.gen_range(0..t.cols - 1);
                let b = rng.gen_range(0..t.rows - 1);
                let corners = [(a, b), (a + 1, b), (a + 1, b + 1), (a, b + 1)];
                let tri = [corners[0], corners[1], corners[2]];
                let (mut l0, mut l1) = (rng.gen::<f64>(), rng.gen::<f64>());
                if l0 + l1 > 1.0 {
                    (l0, l1) = (1.0 - l0, 1.0 - l1);
                }
                let l = [l0, l1, 1.0 - l0 - l1];
                let (mut u, mut v, mut q) = (0.0, 0.0, DVec3::ZERO);
                for k in 0..3 {
                    let (ca, cb) = tri[k];
                    u += l[k] * param(&su, ca);
                    v += l[k] * param(&sv, cb);
                    q += t.at(ca, cb) * l[k];
                }
                // Stay inside one piece: corners of a cell never straddle a piece border.
                let d = (evaluate(&p, u, v) - q).length();
                worst = worst.max(d / t.bound.max(1e-12));
                assert!(
                    d <= t.bound + 1e-9,
                    "deviation {d} beyond bound {}",
                    t.bound
                );
            }
        }
        // The bound is not absurdly loose either.
        assert!(worst > 0.05, "largest deviation only {worst} of the bound");
    }

    #[test]
    fn flat_patches_need_one_cell_per_piece_and_borders_are_shared() {
        let p = Patch {
            width: 5,
            height: 3,
            points: (0..15)
                .map(|k| DVec3::new((k / 3) as f64 * 10.0, (k % 3) as f64 * 10.0, 5.0))
                .collect(),
            texture: "t".into(),
            contents: None,
            line: 0,
        };
        let t = tessellate(&p, PATCH_TOLERANCE, MAX_PATCH_TRIANGLES);
        assert_eq!((t.cols, t.rows, t.bound), (3, 2, 0.0));
        assert_eq!(t.triangles().count(), 4);
        // A curved grid's piece border points are the control points themselves.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let c = random_patch(&mut rng, 5, 5, 300.0);
        let t = tessellate(&c, PATCH_TOLERANCE, MAX_PATCH_TRIANGLES);
        assert_eq!(t.at(0, 0), c.point(0, 0));
        assert_eq!(t.at(t.cols - 1, t.rows - 1), c.point(4, 4));
    }

    #[test]
    fn a_budget_coarsens_and_reports_the_bound_it_reaches() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let p = random_patch(&mut rng, 9, 9, 20_000.0);
        assert!(triangles_needed(&p, PATCH_TOLERANCE) > 2_000);
        let t = tessellate(&p, PATCH_TOLERANCE, 2_000);
        assert!(t.triangles().count() <= 2_000);
        assert!(t.bound > PATCH_TOLERANCE);
    }
}
