//! The sweep of an upright box (or a point) against the brushes: an exact swept
//! separating-axis test per brush.
//!
//! An upright box and a convex brush are apart exactly when one of a known, small set of
//! axes separates them: the brush's plane normals, the three coordinate axes (the box's
//! faces; the brush's extent along them is its bounds) and each brush edge direction ×
//! each coordinate axis, precomputed with the brush's extent along it ([`SatAxis`]); to
//! those the build adds the planes of neighbouring polygons that the brush reaches from
//! behind (any direction is a valid axis, and these are the ones that keep a sliding box
//! clear of a crease, below).
//!
//! Along each axis the gap between the two is linear in the move, so the moment the box
//! comes within the expel zone [`EXPEL`] of the brush is the latest moment any axis's
//! gap closes to [`EXPEL`], provided no other axis has opened past it by then: a slab
//! clip, exact in `f64` up to rounding, with no bevel planes to approximate (the way
//! Quake 3 does). An axial brush needs its bounds only, and a plane that is exactly a side
//! of the bounds is clipped as that side. The clip itself is `clip.rs`.
//!
//! Two rules make the zone behave as a player expects:
//! * A box already in the zone may move away, never deeper: when the gaps that separate
//!   it are all closing, it stops at once. A gap that changes by less than [`RATE_EPS`]
//!   over the move counts as steady (a move slid along a plane has a rate of rounding
//!   size and either sign), and so does one that shrinks by less than rounding the ends
//!   to `f32` can make it ([`steady_for`]) and stays open (a move along a slanted face
//!   between rounded endpoints).
//! * An axis whose gap is open at the start and does not close keeps the box out of the
//!   brush for the whole move, so the brush cannot stop it, however near along other axes.
//!   A box resting in the zone over a floor built of many brushes slides over the seams
//!   and convex creases (the floor's plane is such an axis of the next brush: its own top,
//!   or the face across the crease), where a zone around each brush's side would catch it.
//!
//! A box starting inside a brush (deeper than [`POSITION_EPS`]) is not stopped by it: the
//! start-solid test reports that, and the move out is free, as with the polygon path.
//!
//! [`SatAxis`]: super::SatAxis
//! [`RATE_EPS`]: super::clip::RATE_EPS
//! [`steady_for`]: super::clip::steady_for
//! [`POSITION_EPS`]: crate::geom::POSITION_EPS

use super::clip::{least_shut, steady_for, Axis, Meets, PairClip, NEUTRAL, NO_AXIS, RATE_EPS};
use super::hull::Hull;
use super::{CollisionModel, Contents, Feature, Hit, Region, Sweep, Target, Trace, TraceScratch};
use crate::geom::{Aabb, Plane, EXPEL, POSITION_EPS};
use glam::DVec3;

/// Broad-phase padding around the swept box: the zone and some slack.
const MARGIN: f64 = EXPEL + 1e-3;
/// Moves longer than this along some axis query the grid in pieces this long.
const SHORT_MOVE: f64 = 64.0;
/// At most this many pieces (a longer piece only costs time).
const MAX_PIECES: u32 = 1024;
/// The box's centre at the start, its half extents and the move.
struct BoxMove {
    centre: DVec3,
    half: DVec3,
    dir: DVec3,
}

impl BoxMove {
    /// Gap and rate along `n` against a brush whose extent along `n` ends at `hi`.
    #[inline]
    fn gap(&self, n: DVec3, hi: f64) -> Axis {
        (
            n.dot(self.centre) - n.abs().dot(self.half) - hi,
            n.dot(self.dir),
        )
    }

    /// Gap and rate along the coordinate axis `k`, outward (`up`) or inward, against
    /// bounds `b`.
    #[inline(always)]
    fn coord(&self, k: usize, up: bool, b: &Aabb) -> Axis {
        if up {
            (self.centre[k] - self.half[k] - b.max[k], self.dir[k])
        } else {
            (b.min[k] - (self.centre[k] + self.half[k]), -self.dir[k])
        }
    }

    /// Gaps and rates both ways along a precomputed axis: out past `hi`, in past `lo`.
    #[inline(always)]
    fn both(&self, a: &super::SatAxis) -> [Axis; 2] {
        let (centre, reach, r) = (
            a.normal.dot(self.centre),
            a.normal.abs().dot(self.half),
            a.normal.dot(self.dir),
        );
        [(centre - reach - a.hi, r), (a.lo - centre - reach, -r)]
    }
}

/// Best hit so far: its fraction, brush (`u32::MAX` for none), normal and contact point.
struct BoxBest {
    f: f64,
    brush: u32,
    normal: DVec3,
    point: DVec3,
    sweep: Aabb,
}

/// [`CollisionModel::trace`] of an upright box or a point: its sweep, whose clips also
/// tell whether it starts inside a brush (every brush the start box meets is clipped).
pub(super) fn trace_box(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    s: &mut TraceScratch,
) -> Trace {
    let (sweep, start_solid) = match sweep_box(model, hull, start, end, mask, None, s) {
        Some(found) => found,
        None => (
            Sweep::clear(end),
            model.position_solid(hull, start, mask, s),
        ),
    };
    // A box that starts inside a brush never goes deeper into it (see
    // `start_inside`), so one that ends inside never left.
    let all_solid = start_solid && model.position_solid(hull, sweep.end, mask, s);
    Trace {
        sweep,
        start_solid,
        all_solid,
    }
}

/// [`CollisionModel::sweep`] of an upright box or a point: the swept separating-axis
/// test per brush (see the module docs), over the region's brushes when the move lies
/// inside it, else over the brush grid, nearest piece first. Also whether the box starts
/// inside a brush. `None` for no move (or a move not finite).
pub(super) fn sweep_box(
    model: &CollisionModel,
    hull: &Hull,
    start: DVec3,
    end: DVec3,
    mask: Contents,
    region: Option<&Region>,
    s: &mut TraceScratch,
) -> Option<(Sweep, bool)> {
    let dir = end - start;
    if !(dir.length_squared() > 0.0 && dir.is_finite() && start.is_finite()) {
        return None;
    }
    let hb = hull.bounds();
    let mv = BoxMove {
        centre: start + (hb.min + hb.max) * 0.5,
        half: (hb.max - hb.min) * 0.5,
        dir,
    };
    let sweep_box = |f: f64| hull.swept_bounds(start, start + dir * f).expand(MARGIN);
    let whole = sweep_box(1.0);
    let mut best = BoxBest {
        f: 1.0,
        brush: u32::MAX,
        normal: DVec3::ZERO,
        point: DVec3::ZERO,
        sweep: whole,
    };
    let mut inside = false;
    let mut test = |bi: u32, best: &mut BoxBest| {
        // (Its bounds are known to meet the sweep box.)
        if !model.brushes[bi as usize].contents.intersects(mask) {
            return;
        }
        let (t, ix) = match box_vs_brush(model, &mv, bi as usize, best.f) {
            Meets::No => return,
            Meets::Inside => {
                inside = true;
                // Out of a brush it starts in, the box goes where it likes, except
                // deeper: such a move does not start.
                match start_inside(model, &mv, bi as usize) {
                    Some(ix) => (0.0, ix),
                    None => return,
                }
            }
            Meets::At(t, ix) => (t, ix),
        };
        if t < best.f || (t == best.f && bi < best.brush) {
            let (n, g, r) = box_axis(model, &mv, bi as usize, ix);
            let centre = mv.centre + dir * t;
            best.f = t;
            best.brush = bi;
            best.normal = n;
            // The point of the hit plane nearest the box's centre.
            best.point = centre - n * (n.abs().dot(mv.half) + g + r * t);
            best.sweep = sweep_box(t);
        }
    };
    match region {
        Some(r) if r.contains(&whole) => {
            for (&bi, b) in r.brushes().iter().zip(r.brush_bounds()) {
                if b.overlaps(&best.sweep) {
                    test(bi, &mut best);
                }
            }
        }
        _ if dir.abs().max_element() <= SHORT_MOVE => {
            model.brush_grid.query(&whole, |bi| {
                if model.brushes[bi as usize].bounds.overlaps(&best.sweep) {
                    test(bi, &mut best);
                }
            });
        }
        // The grid, over the move in pieces of at most SHORT_MOVE units, nearest first:
        // a brush the box meets before the end of a piece overlaps the swept box of
        // that piece or an earlier one, so once the best hit lies within the pieces
        // queried, the rest are skipped.
        _ => {
            let Some((f0, f1)) = grid_span(model, &mv) else {
                return Some((Sweep::clear(end), false));
            };
            let pieces = ((dir.abs().max_element() * (f1 - f0) / SHORT_MOVE).ceil() as u32)
                .clamp(1, MAX_PIECES);
            if pieces > 1 {
                s.begin(model);
            }
            let (marks, stamp) = (&mut s.brush_mark, s.stamp);
            for k in 0..pieces {
                let a = f0 + (f1 - f0) * (k as f64 / pieces as f64);
                if a > best.f {
                    break;
                }
                let b = if k + 1 == pieces {
                    f1
                } else {
                    f0 + (f1 - f0) * ((k + 1) as f64 / pieces as f64)
                };
                let q = hull
                    .swept_bounds(start + dir * a, start + dir * b)
                    .expand(MARGIN);
                model.brush_grid.query(&q, |bi| {
                    if pieces > 1 {
                        if marks[bi as usize] == stamp {
                            return;
                        }
                        marks[bi as usize] = stamp;
                    }
                    if model.brushes[bi as usize].bounds.overlaps(&best.sweep) {
                        test(bi, &mut best);
                    }
                });
                if best.f <= b {
                    break;
                }
            }
        }
    }
    let sweep = if best.brush == u32::MAX {
        Sweep::clear(end)
    } else {
        Sweep {
            fraction: best.f,
            end: start + dir * best.f,
            hit: Some(Hit {
                normal: best.normal,
                point: best.point,
                contents: model.brushes[best.brush as usize].contents,
                target: Target::Model(Feature::BoxBrush { brush: best.brush }),
            }),
        }
    };
    Some((sweep, inside))
}

/// The fractions of the move during which the box (with the margin) may meet the
/// grid's brushes: the move clipped to their bounds. `None` when it never does.
fn grid_span(model: &CollisionModel, mv: &BoxMove) -> Option<(f64, f64)> {
    let g = model.brush_grid.bounds();
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for k in 0..3 {
        let half = mv.half[k] + MARGIN;
        let (lo, hi) = (
            g.min[k] - half - mv.centre[k],
            g.max[k] + half - mv.centre[k],
        );
        let d = mv.dir[k];
        if d == 0.0 {
            if !(lo <= 0.0 && 0.0 <= hi) {
                return None;
            }
        } else {
            let (a, b) = (lo / d, hi / d);
            t0 = t0.max(a.min(b));
            t1 = t1.min(a.max(b));
        }
    }
    // (Widened a little: rounding must not drop a brush at the ends.)
    (t0 <= t1).then(|| ((t0 - 1e-9).max(0.0), (t1 + 1e-9).min(1.0)))
}

/// How the moving box meets brush `bi`, up to fraction `limit`. Its axes, numbered in
/// this order: the brush's planes that are not sides of its bounds first (for a box
/// resting on a slope, or passing over the brushes under a floor, one of them is most
/// often the axis that keeps the brush out), then the coordinate axes both ways (its
/// bounds), then the precomputed axes both ways; two at a time (`clip.rs`).
fn box_vs_brush(model: &CollisionModel, mv: &BoxMove, bi: usize, limit: f64) -> Meets {
    let b = &model.brushes[bi];
    let mut c = PairClip::new(steady_for(mv.centre, mv.dir));
    let mut ix = 0u32;
    let gap = |p: &Plane| mv.gap(p.normal, p.dist);
    let pairs = model.brush_box_planes(bi).chunks_exact(2);
    let odd = pairs.remainder();
    for p in pairs {
        if !c.pair(ix, gap(&p[0]), gap(&p[1])) {
            return Meets::No;
        }
        ix += 2;
    }
    if let [p] = odd {
        if !c.pair(ix, gap(p), NEUTRAL) {
            return Meets::No;
        }
        ix += 1;
    }
    for k in 0..3 {
        if !c.pair(
            ix,
            mv.coord(k, true, &b.bounds),
            mv.coord(k, false, &b.bounds),
        ) {
            return Meets::No;
        }
        ix += 2;
    }
    let sat = model.brush_sat(bi);
    if !sat.is_empty() && c.missed(limit) {
        return Meets::No;
    }
    for a in sat {
        let [hi, lo] = mv.both(a);
        if !c.pair(ix, hi, lo) {
            return Meets::No;
        }
        ix += 2;
    }
    c.finish().meets(limit)
}

/// For a box that starts inside brush `bi` (deeper than the position tolerance on
/// every axis): the axis that stops the move, when the move goes deeper. How deep the
/// box is, is its least penetration: the largest gap over the axes (an exact measure,
/// since the axes include every separating axis of a box and a brush). Along the move
/// that largest gap is a maximum of linear functions, so convex: it never shrinks
/// anywhere along the move if it does not shrink at the start, that is if one of the
/// axes of least penetration (within the tolerance) is not closing. A move that
/// closes them all goes deeper and is stopped at once (the first of them names it);
/// any other never takes the box deeper than it started, so never through a wall.
fn start_inside(model: &CollisionModel, mv: &BoxMove, bi: usize) -> Option<u32> {
    let axes = || (0..).map_while(|i| box_axis_at(model, mv, bi, i));
    let top = axes().fold(f64::NEG_INFINITY, |m, (_, (g, _))| m.max(g));
    let mut first = None;
    for (i, (_, (g, r))) in axes().enumerate() {
        if g >= top - POSITION_EPS {
            if r >= -RATE_EPS {
                return None;
            }
            first.get_or_insert(i as u32);
        }
    }
    first
}

/// Axis `ix` of brush `bi` as [`CollisionModel::box_vs_brush`] numbers them: its
/// direction out of the brush, and the box's gap and rate along it (the same numbers
/// the clip sees); `None` past the last. Found by index, not by walking the axes
/// before it: it runs for each new best hit.
fn box_axis_at(
    model: &CollisionModel,
    mv: &BoxMove,
    bi: usize,
    ix: usize,
) -> Option<(DVec3, Axis)> {
    let b = &model.brushes[bi];
    let planes = model.brush_box_planes(bi);
    if let Some(p) = planes.get(ix) {
        return Some((p.normal, mv.gap(p.normal, p.dist)));
    }
    let i = ix - planes.len();
    if i < 6 {
        let (k, up) = (i / 2, i.is_multiple_of(2));
        let n = DVec3::AXES[k] * if up { 1.0 } else { -1.0 };
        return Some((n, mv.coord(k, up, &b.bounds)));
    }
    let a = model.brush_sat(bi).get((i - 6) / 2)?;
    let [hi, lo] = mv.both(a);
    Some(if i.is_multiple_of(2) {
        (a.normal, hi)
    } else {
        (-a.normal, lo)
    })
}

/// Axis `ix` of brush `bi` (see [`CollisionModel::box_axis_at`]): its direction, and
/// the box's gap and rate along it. [`NO_AXIS`] names the least shut axis
/// ([`least_shut`]); when there is none either, no direction and no gap.
fn box_axis(model: &CollisionModel, mv: &BoxMove, bi: usize, ix: u32) -> (DVec3, f64, f64) {
    let ix = if ix == NO_AXIS {
        let axes = (0..).map_while(|i| box_axis_at(model, mv, bi, i));
        least_shut(axes.map(|(_, a)| a))
    } else {
        ix
    };
    match box_axis_at(model, mv, bi, ix as usize) {
        Some((n, (g, r))) => (n, g, r),
        None => (DVec3::ZERO, f64::NEG_INFINITY, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MapData;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Every plane the clip leaves out (a side of the brush's bounds) gives any box the gap
    /// and rate of the coordinate axis it duplicates, on the shipped maps' brushes, so
    /// leaving it out changes no clip.
    #[test]
    fn planes_left_out_are_their_coordinate_axes() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (mut left_out, mut kept) = (0, 0);
        for name in ["arena.map", "terrain.map", "curves.map", "stress.map"] {
            let path = format!("{}/../maps/{name}", env!("CARGO_MANIFEST_DIR"));
            let map = MapData::parse_any(&std::fs::read(&path).unwrap()).unwrap();
            let m = CollisionModel::build(&map);
            for bi in 0..m.brushes.len() {
                let b = &m.brushes[bi];
                let clipped = m.brush_box_planes(bi);
                kept += clipped.len();
                for p in m.brush_planes(bi) {
                    if b.axial
                        || clipped
                            .iter()
                            .any(|q| q.normal == p.normal && q.dist == p.dist)
                    {
                        continue;
                    }
                    left_out += 1;
                    let k = (0..3).find(|&k| p.normal[k].abs() == 1.0).unwrap();
                    for _ in 0..20 {
                        let c = b.bounds.min
                            + (b.bounds.max - b.bounds.min)
                                * DVec3::new(rng.gen(), rng.gen(), rng.gen());
                        let mv = BoxMove {
                            centre: c + DVec3::new(
                                rng.gen_range(-50.0..50.0),
                                rng.gen_range(-50.0..50.0),
                                rng.gen_range(-50.0..50.0),
                            ),
                            half: DVec3::new(
                                rng.gen_range(0.0..20.0),
                                rng.gen_range(0.0..20.0),
                                rng.gen_range(0.0..40.0),
                            ),
                            dir: DVec3::new(
                                rng.gen_range(-40.0..40.0),
                                rng.gen_range(-40.0..40.0),
                                rng.gen_range(-40.0..40.0),
                            ),
                        };
                        let up = p.normal[k] > 0.0;
                        assert_eq!(
                            mv.gap(p.normal, p.dist),
                            mv.coord(k, up, &b.bounds),
                            "{name}: brush {bi}, plane {p:?}"
                        );
                    }
                }
            }
        }
        assert!(
            left_out > 100 && kept > 100,
            "{left_out} left out, {kept} kept"
        );
    }
}
