//! The machines' instant. Natively it is `std::time::Instant`, which every shell passes
//! in. WebAssembly in a browser has no clock of its own (`Instant::now` panics there), so
//! there it is the page's clock, `performance.now()` in milliseconds, passed in the same
//! way: the machines never read a clock themselves on either side.

#[cfg(not(target_arch = "wasm32"))]
pub use std::time::Instant;

#[cfg(target_arch = "wasm32")]
pub use page::Instant;

#[cfg(target_arch = "wasm32")]
mod page {
    use std::ops::{Add, AddAssign, Sub, SubAssign};
    use std::time::Duration;

    /// An instant on the page's clock: the time since the page's time origin.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub struct Instant(Duration);

    impl Instant {
        /// The instant `ms` milliseconds after the page's time origin (what
        /// `performance.now()` returns); a value below zero or not finite is the origin.
        pub fn from_page_millis(ms: f64) -> Instant {
            let secs = if ms.is_finite() && ms > 0.0 {
                ms / 1000.0
            } else {
                0.0
            };
            Instant(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
        }

        /// Milliseconds since the page's time origin.
        pub fn page_millis(self) -> f64 {
            self.0.as_secs_f64() * 1000.0
        }

        /// The time from `earlier` to this instant, or zero if `earlier` is later.
        pub fn duration_since(self, earlier: Instant) -> Duration {
            self.0.saturating_sub(earlier.0)
        }

        /// As [`Instant::duration_since`].
        pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
            self.duration_since(earlier)
        }

        /// The time from `earlier`, or `None` if `earlier` is later.
        pub fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
            self.0.checked_sub(earlier.0)
        }

        /// This instant plus `d`, unless that overflows.
        pub fn checked_add(self, d: Duration) -> Option<Instant> {
            self.0.checked_add(d).map(Instant)
        }

        /// This instant minus `d`, unless that is before the origin.
        pub fn checked_sub(self, d: Duration) -> Option<Instant> {
            self.0.checked_sub(d).map(Instant)
        }
    }

    impl Add<Duration> for Instant {
        type Output = Instant;
        fn add(self, d: Duration) -> Instant {
            Instant(self.0.saturating_add(d))
        }
    }

    impl AddAssign<Duration> for Instant {
        fn add_assign(&mut self, d: Duration) {
            *self = *self + d;
        }
    }

    impl Sub<Duration> for Instant {
        type Output = Instant;
        fn sub(self, d: Duration) -> Instant {
            Instant(self.0.saturating_sub(d))
        }
    }

    impl SubAssign<Duration> for Instant {
        fn sub_assign(&mut self, d: Duration) {
            *self = *self - d;
        }
    }

    impl Sub<Instant> for Instant {
        type Output = Duration;
        fn sub(self, earlier: Instant) -> Duration {
            self.duration_since(earlier)
        }
    }
}
