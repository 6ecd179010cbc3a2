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
//! Quake 3 does). An axial brush needs its bounds only.
//!
//! Two rules make the zone behave as a player expects:
//! * A box already in the zone may move away, never deeper: when the gaps that separate
//!   it are all closing, it stops at once. A gap that changes by less than [`RATE_EPS`]
//!   over the move counts as steady (a move slid along a plane has a rate of rounding
//!   size and either sign).
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

use super::hull::Hull;
use super::tree::Bounds32;
use super::{CollisionModel, Contents, Feature, Hit, Region, Sweep, Target, Trace, TraceScratch};
use crate::geom::{Aabb, EXPEL, POSITION_EPS};
use glam::DVec3;

/// Broad-phase padding around the swept box: the zone and some slack.
const MARGIN: f64 = EXPEL + 1e-3;
/// Moves no longer than this along every axis query the brush tree with their swept box.
const SHORT_MOVE: f64 = 64.0;
/// A gap that changes by less than this over the whole move counts as steady: a move
/// slid along a plane has a rate of rounding size and either sign, and a box resting in
/// the zone must not stop on its sign.
const RATE_EPS: f64 = 1e-9;

/// The box's centre at the start, its half extents and the move.
struct BoxMove {
    centre: DVec3,
    half: DVec3,
    dir: DVec3,
}

/// The clip of one brush's axes against the move.
struct Clip {
    /// Latest moment an open, closing gap reaches the zone (`-inf` if none).
    t_in: f64,
    /// The axis that names the contact, with its gap and rate: the open, closing one
    /// entering last, else the closing one least shut.
    n_in: DVec3,
    g_in: f64,
    r_in: f64,
    named_open: bool,
    /// Earliest moment an opening gap leaves the zone.
    t_out: f64,
    /// Largest gap at the start (negative: the box starts overlapping the brush).
    top: f64,
}

impl Clip {
    const NEW: Clip = Clip {
        t_in: f64::NEG_INFINITY,
        n_in: DVec3::ZERO,
        g_in: f64::NEG_INFINITY,
        r_in: 0.0,
        named_open: false,
        t_out: f64::INFINITY,
        top: f64::NEG_INFINITY,
    };

    /// Adds the axis `n` (unit, out of the brush) with the box's gap `g` beyond the brush
    /// along it at the start and its rate `r` per unit of the move. False when this axis
    /// alone keeps the box out of the brush (an open gap that does not close).
    #[inline]
    fn axis(&mut self, n: DVec3, g: f64, r: f64) -> bool {
        self.top = self.top.max(g);
        if r >= -RATE_EPS {
            if g > -POSITION_EPS {
                return false;
            }
            if r > 0.0 {
                self.t_out = self.t_out.min((EXPEL - g) / r);
            }
        } else if g > 0.0 {
            let t = (g - EXPEL) / -r;
            if !self.named_open || t > self.t_in {
                self.t_in = t;
                self.named_open = true;
                (self.n_in, self.g_in, self.r_in) = (n, g, r);
            }
        } else if !self.named_open && g > self.g_in {
            // Already shut, this gap sets no entry (the box is past it); it names the
            // contact only when none is open (the box starts touching the brush).
            (self.n_in, self.g_in, self.r_in) = (n, g, r);
        }
        true
    }

    /// What the finished clip says about the brush.
    fn meets(self, limit: f64) -> Meets {
        if self.top < -POSITION_EPS {
            return Meets::Inside;
        }
        let t = self.t_in.max(0.0);
        if t <= self.t_out && t <= limit {
            Meets::At(t, self)
        } else {
            Meets::No
        }
    }
}

/// How a moving box meets one brush.
enum Meets {
    /// Not within the move (or not before the limit).
    No,
    /// The box starts inside the brush (deeper than [`POSITION_EPS`]).
    Inside,
    /// It enters the brush's zone at this fraction.
    At(f64, Clip),
}

impl BoxMove {
    /// Gap and rate along `n` against a brush whose extent along `n` ends at `hi`.
    #[inline]
    fn gap(&self, n: DVec3, hi: f64) -> (f64, f64) {
        (
            n.dot(self.centre) - n.abs().dot(self.half) - hi,
            n.dot(self.dir),
        )
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

impl CollisionModel {
    /// [`CollisionModel::trace`] of an upright box or a point: its sweep, whose clips also
    /// tell whether it starts inside a brush (every brush the start box meets is clipped).
    pub(super) fn trace_box(
        &self,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        mask: Contents,
        s: &mut TraceScratch,
    ) -> Trace {
        match self.sweep_box(hull, start, end, mask, None, s) {
            Some((sweep, start_solid)) => Trace { sweep, start_solid },
            None => Trace {
                sweep: Sweep::clear(end),
                start_solid: self.position_solid(hull, start, mask, s),
            },
        }
    }

    /// [`CollisionModel::sweep`] of an upright box or a point: the swept separating-axis
    /// test per brush (see the module docs), over the region's brushes when the move lies
    /// inside it, else over the brush tree front to back. Also whether the box starts
    /// inside a brush. `None` for no move (or a move not finite).
    pub(super) fn sweep_box(
        &self,
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
            if !self.brushes[bi as usize].contents.intersects(mask) {
                return;
            }
            let (t, c) = match self.box_vs_brush(&mv, bi as usize, best.f) {
                Meets::No => return,
                Meets::Inside => {
                    inside = true;
                    return;
                }
                Meets::At(t, c) => (t, c),
            };
            if t < best.f || (t == best.f && bi < best.brush) {
                let centre = mv.centre + dir * t;
                best.f = t;
                best.brush = bi;
                best.normal = c.n_in;
                // The point of the hit plane nearest the box's centre.
                best.point = centre - c.n_in * (c.n_in.abs().dot(mv.half) + c.g_in + c.r_in * t);
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
            // A short move's swept box is small: one plain box query of the tree beats a
            // walk that tracks the move's interval in every cell.
            _ if dir.abs().max_element() <= SHORT_MOVE => {
                s.begin(self);
                let (marks, stamp) = (&mut s.brush_mark, s.stamp);
                self.brush_tree.query_aabb(&whole, |bi| {
                    if marks[bi as usize] != stamp {
                        marks[bi as usize] = stamp;
                        if self.brushes[bi as usize].bounds.overlaps(&best.sweep) {
                            test(bi, &mut best);
                        }
                    }
                });
            }
            _ => {
                s.begin(self);
                let mut stack = std::mem::take(&mut s.stack);
                let (marks, stamp) = (&mut s.brush_mark, s.stamp);
                // The leaves' f32 bounds cull against the sweep box as it stood when the
                // leaf was reached; the brush's own bounds then against the current one.
                let mut culled = (best.f, Bounds32::new(&whole));
                self.brush_tree.walk_segment(
                    start,
                    dir,
                    hb.min - DVec3::splat(MARGIN),
                    hb.max + DVec3::splat(MARGIN),
                    &mut stack,
                    |items, bounds| {
                        if culled.0 != best.f {
                            culled = (best.f, Bounds32::new(&best.sweep));
                        }
                        for (&bi, b) in items.iter().zip(bounds) {
                            if b.overlaps(&culled.1) && marks[bi as usize] != stamp {
                                marks[bi as usize] = stamp;
                                if self.brushes[bi as usize].bounds.overlaps(&best.sweep) {
                                    test(bi, &mut best);
                                }
                            }
                        }
                        best.f
                    },
                );
                s.stack = stack;
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
                    contents: self.brushes[best.brush as usize].contents,
                    target: Target::Model(Feature::BoxBrush { brush: best.brush }),
                }),
            }
        };
        Some((sweep, inside))
    }

    /// How the moving box meets brush `bi`, up to fraction `limit`.
    fn box_vs_brush(&self, mv: &BoxMove, bi: usize, limit: f64) -> Meets {
        let b = &self.brushes[bi];
        let mut c = Clip::NEW;
        // The coordinate axes, both ways: the brush's bounds.
        for k in 0..3 {
            let (lo, hi) = (mv.centre[k] - mv.half[k], mv.centre[k] + mv.half[k]);
            let mut n = DVec3::ZERO;
            n[k] = 1.0;
            if !c.axis(n, lo - b.bounds.max[k], mv.dir[k])
                || !c.axis(-n, b.bounds.min[k] - hi, -mv.dir[k])
            {
                return Meets::No;
            }
        }
        if !b.axial {
            for p in self.brush_planes(bi) {
                let (g, r) = mv.gap(p.normal, p.dist);
                if !c.axis(p.normal, g, r) {
                    return Meets::No;
                }
            }
        }
        for a in self.brush_sat(bi) {
            let (g, r) = mv.gap(a.normal, a.hi);
            let (g2, r2) = mv.gap(-a.normal, -a.lo);
            if !c.axis(a.normal, g, r) || !c.axis(-a.normal, g2, r2) {
                return Meets::No;
            }
        }
        c.meets(limit)
    }
}
