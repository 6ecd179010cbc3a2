//! The slab clip of a box sweep (see `boxsweep.rs`): the box's gap beyond a brush along
//! each separating axis, and its rate over the move, reduced to the moment the box enters
//! the brush's zone and the axis that names the contact.
//!
//! Axes come in pairs (a precomputed axis both ways, a coordinate axis both ways, two
//! planes), and on x86-64 a pair is clipped in the two lanes of SSE2 registers: one
//! division for both, and selects as masks. A scalar select on `f64` compiles to a branch
//! there, and the signs of gaps and rates follow no pattern a predictor could learn. The
//! lanes keep their own running extremes and are merged at the end, earlier axis first on
//! ties, so the entry and its axis are the scalar clip's, bit for bit (a test checks that
//! on random axes); other targets use the scalar clip.

// SIMD: SSE intrinsics, each block with its SAFETY note. The only unsafe code there is.
#![allow(unsafe_code)]

use crate::geom::{EXPEL, POSITION_EPS};

/// A gap that changes by less than this over the whole move counts as steady: a move
/// slid along a plane has a rate of rounding size and either sign, and a box resting in
/// the zone must not stop on its sign.
pub(super) const RATE_EPS: f64 = 1e-9;

/// A gap that shrinks by less than this over the whole move, and stays open at its end,
/// also counts as steady (the least such allowance; see [`steady_for`]): a move along a
/// slanted face between endpoints rounded to `f32` (a client's, a map tool's) closes the
/// gap by a rounding's worth (a face's normal is not along the grid), which would stop a
/// box sliding in the face's zone at once. Since the gap must stay open, the box never
/// ends inside the brush this way: at most it wears the zone away, a rounding a move,
/// and the strict rule holds from there.
pub(super) const STEADY_EPS: f64 = 1.0 / 32_768.0;

/// The steady allowance for a move from `start` by `d`: what rounding both ends to `f32`
/// can change a gap by (each coordinate by half an `f32` ulp, at most 2^-24 of it, over
/// a unit normal: under 2^-23 of the two ends' largest coordinates together), at least
/// [`STEADY_EPS`] and at most a 256th of a unit (the position grid's step).
pub(super) fn steady_for(start: glam::DVec3, d: glam::DVec3) -> f64 {
    let far = start.abs().max_element() + (start + d).abs().max_element();
    (far * f64::from(f32::EPSILON)).clamp(STEADY_EPS, 1.0 / 256.0)
}

/// Whether a gap `g` with rate `r` closes over the move (see [`RATE_EPS`] and
/// [`steady_for`]).
#[inline(always)]
pub(super) fn closes((g, r): Axis, steady: f64) -> bool {
    r < -RATE_EPS && (r < -steady || g + r < 0.0)
}

/// No axis (an axis index as the clip numbers them).
pub(super) const NO_AXIS: u32 = u32::MAX;

/// A gap and its rate.
pub(super) type Axis = (f64, f64);

/// An axis that changes nothing (for the odd lane of a pair): shut, steady, far inside.
pub(super) const NEUTRAL: Axis = (f64::NEG_INFINITY, 0.0);

/// The clip of one brush's axes against the move, axis by axis. Axes are known by their
/// index; the one that names the contact is looked up again at the end, so the clip only
/// keeps numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Clip {
    /// Latest moment an open, closing gap reaches the zone (`-inf` if none), and its axis
    /// ([`NO_AXIS`] if none: then the box starts touching the brush, and [`least_shut`]
    /// names the contact).
    t_in: f64,
    open: u32,
    /// Earliest moment an opening gap leaves the zone.
    t_out: f64,
    /// Largest gap at the start (negative: the box starts overlapping the brush).
    top: f64,
    /// The steady allowance ([`steady_for`]).
    steady: f64,
}

/// How a moving box meets one brush.
#[derive(Debug, PartialEq)]
pub(super) enum Meets {
    /// Not within the move (or not before the limit).
    No,
    /// The box starts inside the brush (deeper than [`POSITION_EPS`]).
    Inside,
    /// It enters the brush's zone at this fraction; the open axis that names the contact
    /// ([`NO_AXIS`] when none is open: then [`least_shut`] names it).
    At(f64, u32),
}

// (On x86-64 the lanes clip instead; this one is the reference their test checks.)
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
impl Clip {
    pub(super) fn new(steady: f64) -> Clip {
        Clip {
            steady,
            t_in: f64::NEG_INFINITY,
            open: NO_AXIS,
            t_out: f64::INFINITY,
            top: f64::NEG_INFINITY,
        }
    }

    /// Adds axis `ix` with the box's gap `g` beyond the brush along it at the start and
    /// its rate `r` per unit of the move. False when this axis alone keeps the box out of
    /// the brush (an open gap that does not close).
    #[inline(always)]
    fn axis(&mut self, ix: u32, (g, r): Axis) -> bool {
        let closing = closes((g, r), self.steady);
        if !closing && g > -POSITION_EPS {
            return false;
        }
        self.top = self.top.max(g);
        // When the gap reaches the zone: entering if closing, leaving if opening (one
        // division: `(g - E) / -r` is `(E - g) / r` exactly).
        let t = (g - EXPEL) / -r;
        if r > 0.0 {
            self.t_out = self.t_out.min(t);
        }
        if closing && g > 0.0 && t > self.t_in {
            self.t_in = t;
            self.open = ix;
        }
        true
    }

    /// Adds axes `ix` and `ix + 1`. False when either keeps the box out.
    #[inline(always)]
    pub(super) fn pair(&mut self, ix: u32, a: Axis, b: Axis) -> bool {
        self.axis(ix, a) && self.axis(ix + 1, b)
    }

    /// Whether the axes so far already keep the box out until `limit`: more axes only
    /// delay the entry or hasten the exit, so the rest need not be looked at.
    #[inline(always)]
    pub(super) fn missed(&self, limit: f64) -> bool {
        self.t_in > self.t_out || self.t_in > limit
    }

    pub(super) fn finish(&self) -> Clip {
        *self
    }
}

impl Clip {
    /// What the finished clip says about the brush: where the box meets it, and the open
    /// axis that names the contact ([`NO_AXIS`] if none does).
    pub(super) fn meets(&self, limit: f64) -> Meets {
        if self.top < -POSITION_EPS {
            return Meets::Inside;
        }
        let t = self.t_in.max(0.0);
        if t <= self.t_out && t <= limit {
            Meets::At(t, self.open)
        } else {
            Meets::No
        }
    }
}

/// The axis that names a contact when no gap is open (the box starts touching the brush):
/// the closing gap least shut (the box is past it), the earliest on a tie; [`NO_AXIS`] if
/// none. Found again from all the axes when needed, which is seldom, rather than kept by
/// every clip.
pub(super) fn least_shut(axes: impl Iterator<Item = Axis>) -> u32 {
    let (mut best, mut ix) = (f64::NEG_INFINITY, NO_AXIS);
    for (i, (g, r)) in axes.enumerate() {
        if r < -RATE_EPS && g <= 0.0 && g > best {
            (best, ix) = (g, i as u32);
        }
    }
    ix
}

#[cfg(target_arch = "x86_64")]
pub(super) use lanes::Clip2;

/// The clip on this target: two lanes on x86-64, else axis by axis.
#[cfg(target_arch = "x86_64")]
pub(super) type PairClip = Clip2;
#[cfg(not(target_arch = "x86_64"))]
pub(super) type PairClip = Clip;

#[cfg(target_arch = "x86_64")]
mod lanes {
    // SAFETY (every `unsafe` block below): SSE2 is part of the x86-64 baseline, so the
    // intrinsics exist on every x86-64 CPU; none touches memory through a pointer.
    #[cfg(test)]
    use super::NEUTRAL;
    use super::{Axis, Clip, EXPEL, NO_AXIS, POSITION_EPS, RATE_EPS};
    use std::arch::x86_64::*;

    /// [`Clip`] in two lanes: lane 0 sees the even axes of each pair, lane 1 the odd.
    #[derive(Clone, Copy)]
    pub(in crate::collision) struct Clip2 {
        t_in: __m128d,
        open: __m128i,
        t_out: __m128d,
        top: __m128d,
        steady: f64,
    }

    /// `m ? a : b`, lane by lane (`m` all ones or all zeros per lane).
    #[inline(always)]
    fn pick(m: __m128d, a: __m128d, b: __m128d) -> __m128d {
        unsafe { _mm_or_pd(_mm_and_pd(m, a), _mm_andnot_pd(m, b)) }
    }

    #[inline(always)]
    fn pick_ix(m: __m128d, a: __m128i, b: __m128i) -> __m128i {
        unsafe {
            let m = _mm_castpd_si128(m);
            _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b))
        }
    }

    #[inline(always)]
    fn lanes(v: __m128d) -> [f64; 2] {
        unsafe { [_mm_cvtsd_f64(v), _mm_cvtsd_f64(_mm_unpackhi_pd(v, v))] }
    }

    #[inline(always)]
    fn lanes_ix(v: __m128i) -> [u32; 2] {
        unsafe {
            [
                _mm_cvtsi128_si64(v) as u32,
                _mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)) as u32,
            ]
        }
    }

    impl Clip2 {
        pub(crate) fn new(steady: f64) -> Clip2 {
            unsafe {
                Clip2 {
                    t_in: _mm_set1_pd(f64::NEG_INFINITY),
                    open: _mm_set1_epi64x(i64::from(NO_AXIS)),
                    t_out: _mm_set1_pd(f64::INFINITY),
                    top: _mm_set1_pd(f64::NEG_INFINITY),
                    steady,
                }
            }
        }

        /// [`Clip::pair`]: axes `ix` (lane 0) and `ix + 1` (lane 1).
        #[inline(always)]
        pub(crate) fn pair(&mut self, ix: u32, a: Axis, b: Axis) -> bool {
            unsafe {
                let g = _mm_setr_pd(a.0, b.0);
                let r = _mm_setr_pd(a.1, b.1);
                // `closes`: past the rounding, and shrinking by more than the steady
                // allowance or to shut by the end.
                let zero = _mm_setzero_pd();
                let closing = _mm_and_pd(
                    _mm_cmplt_pd(r, _mm_set1_pd(-RATE_EPS)),
                    _mm_or_pd(
                        _mm_cmplt_pd(r, _mm_set1_pd(-self.steady)),
                        _mm_cmplt_pd(_mm_add_pd(g, r), zero),
                    ),
                );
                let out = _mm_andnot_pd(closing, _mm_cmpgt_pd(g, _mm_set1_pd(-POSITION_EPS)));
                if _mm_movemask_pd(out) != 0 {
                    return false;
                }
                // (`maxpd`/`minpd` return the second operand on NaN, as `f64::max` keeps
                // the running value; no lane here is NaN.)
                self.top = _mm_max_pd(g, self.top);
                let t = _mm_div_pd(
                    _mm_sub_pd(g, _mm_set1_pd(EXPEL)),
                    _mm_xor_pd(r, _mm_set1_pd(-0.0)),
                );
                let leaving = pick(_mm_cmpgt_pd(r, zero), t, _mm_set1_pd(f64::INFINITY));
                self.t_out = _mm_min_pd(leaving, self.t_out);
                let ix = _mm_set_epi64x(i64::from(ix + 1), i64::from(ix));
                let enters = _mm_and_pd(
                    closing,
                    _mm_and_pd(_mm_cmpgt_pd(g, zero), _mm_cmpgt_pd(t, self.t_in)),
                );
                self.t_in = pick(enters, t, self.t_in);
                self.open = pick_ix(enters, ix, self.open);
                true
            }
        }

        /// [`Clip::missed`] over both lanes.
        #[inline(always)]
        pub(crate) fn missed(&self, limit: f64) -> bool {
            let ([a, b], [c, d]) = (lanes(self.t_in), lanes(self.t_out));
            let t_in = a.max(b);
            t_in > c.min(d) || t_in > limit
        }

        /// The lanes merged into the axis-by-axis clip's state: the greater value, and on
        /// a tie the earlier axis (each lane already holds its own earliest).
        pub(crate) fn finish(&self) -> Clip {
            let first = |[v0, v1]: [f64; 2], [i0, i1]: [u32; 2]| {
                if v1 > v0 || (v1 == v0 && i1 < i0) {
                    (v1, i1)
                } else {
                    (v0, i0)
                }
            };
            let (t_in, open) = first(lanes(self.t_in), lanes_ix(self.open));
            let ([o0, o1], [p0, p1]) = (lanes(self.t_out), lanes(self.top));
            Clip {
                t_in,
                open,
                t_out: o0.min(o1),
                top: p0.max(p1),
                steady: self.steady,
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use rand::{Rng, SeedableRng};
        use rand_chacha::ChaCha8Rng;

        /// The two-lane clip reaches the axis-by-axis clip's state and verdict, bit for
        /// bit, on random axes: gaps and rates around the thresholds, exact ties, zeros of
        /// both signs and neutral lanes.
        #[test]
        fn two_lanes_clip_as_one() {
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let pool = [
                0.0,
                -0.0,
                EXPEL,
                -EXPEL,
                POSITION_EPS,
                -POSITION_EPS,
                RATE_EPS,
                -RATE_EPS,
                1.0,
                -1.0,
                0.5,
                -2.0,
            ];
            let value = |rng: &mut ChaCha8Rng| match rng.gen_range(0..4) {
                0 => pool[rng.gen_range(0..pool.len())],
                1 => rng.gen_range(-1.0..1.0) * 1e-6,
                _ => rng.gen_range(-40.0..40.0),
            };
            let (mut met, mut out) = (0, 0);
            for _ in 0..200_000 {
                let n = rng.gen_range(1..12);
                let axes: Vec<Axis> = (0..n)
                    .map(|_| {
                        if rng.gen_bool(0.1) {
                            NEUTRAL
                        } else {
                            // Mostly closing or steady, so that clips run long.
                            let g = value(&mut rng);
                            let r =
                                -value(&mut rng).abs() * if rng.gen_bool(0.8) { 1.0 } else { -1.0 };
                            (g, r)
                        }
                    })
                    .collect();
                let steady = if rng.gen_bool(0.5) { 0.0 } else { 1e-3 };
                let (mut one, mut two) = (Clip::new(steady), Clip2::new(steady));
                let mut kept = true;
                for (p, pair) in axes.chunks(2).enumerate() {
                    let b = pair.get(1).copied().unwrap_or(NEUTRAL);
                    let ix = 2 * p as u32;
                    kept = one.pair(ix, pair[0], b);
                    assert_eq!(kept, two.pair(ix, pair[0], b), "axes {axes:?}");
                    if !kept {
                        break;
                    }
                    assert_eq!(one.missed(0.7), two.missed(0.7), "axes {axes:?}");
                }
                if kept {
                    let (one, merged) = (one.finish(), two.finish());
                    // The entry and its axis bit for bit; the exit and the top
                    // as numbers (a lane's min or max may keep either zero of a tie).
                    let same = one.t_in.to_bits() == merged.t_in.to_bits()
                        && one.open == merged.open
                        && one.t_out == merged.t_out
                        && one.top == merged.top;
                    assert!(same, "axes {axes:?}: {one:?} against {merged:?}");
                    assert_eq!(one.meets(0.7), merged.meets(0.7));
                    met += 1;
                } else {
                    out += 1;
                }
            }
            assert!(
                met > 10_000 && out > 10_000,
                "{met} clips ran to the end, {out} stopped"
            );
        }
    }
}
