//! What a game draws: our player as predicted, the others interpolated a little behind
//! the newest snapshot, the movers as predicted.

use super::ClientMachine;
use crate::snapshot::interp::Drawn;
use crate::time::Instant;
use expel_core::movement::PlayerState;
use expel_core::mover::MoverState;
use expel_core::sim::PlayerId;
use glam::DVec3;
use std::collections::BTreeMap;

/// Most ticks the drawn view runs past the newest snapshot (while none comes).
const MAX_AHEAD: f64 = 4.0;
/// How much faster or slower than time the drawn view runs while it closes on where it
/// should be.
const SLEW: f64 = 0.1;
/// How far (ticks) behind where it should be the drawn view jumps there at once (a start,
/// a stall): ahead, it only ever slows.
const JUMP: f64 = 8.0;

/// The clock the others are drawn by: it runs with time, a little faster or slower to
/// close on the newest snapshot's tick less the interpolation delay, and never back.
/// Snapshots arrive unevenly (scheduling, jitter, loss); drawn straight from each
/// arrival, the view stepped back whenever one came late, and every interpolated
/// projectile with it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ViewClock {
    /// The tick it showed at `at`, and its rate since.
    anchor: Option<(Instant, f64, f64)>,
}

impl ViewClock {
    /// The tick it shows at `now` (ticks of `period` seconds) when the newest snapshot
    /// shows `target` as the tick to draw: no more than [`MAX_AHEAD`] past it.
    pub(super) fn shown(&self, now: Instant, period: f64, target: f64) -> f64 {
        let cap = target + MAX_AHEAD;
        let Some((at, tick, rate)) = self.anchor else {
            return cap;
        };
        let since = now.saturating_duration_since(at).as_secs_f64() / period;
        (tick + since * rate).min(cap)
    }

    /// A snapshot came at `now`, showing `target` as the tick to draw; `shown` is what
    /// the view showed just before.
    pub(super) fn steer(&mut self, now: Instant, shown: Option<f64>, target: f64) {
        let cur = match shown {
            Some(c) if target - c <= JUMP => c,
            _ => target,
        };
        let rate = 1.0 + ((target - cur) * SLEW).clamp(-SLEW, SLEW);
        self.anchor = Some((now, cur, rate));
    }
}

/// The work of [`ClientMachine::local_player`].
pub(super) fn local_player(client: &ClientMachine) -> Option<PlayerState> {
    client.play.as_ref()?.predictor.state()
}

/// The work of [`ClientMachine::display_origin`].
pub(super) fn display_origin(client: &ClientMachine) -> Option<DVec3> {
    client.play.as_ref()?.predictor.display_origin()
}

/// The work of [`ClientMachine::render_tick`].
pub(super) fn render_tick(client: &ClientMachine, now: Instant) -> f64 {
    let Some(p) = client.play.as_ref() else {
        return 0.0;
    };
    let Some((tick, _)) = p.newest else {
        return 0.0;
    };
    let delay = client.settings.interpolation_ticks;
    p.view.shown(now, p.clock.period, tick as f64 - delay)
}

/// The work of [`ClientMachine::others`].
pub(super) fn others(client: &ClientMachine, at: f64) -> BTreeMap<PlayerId, DVec3> {
    client
        .play
        .as_ref()
        .map(|p| p.interp.at(at))
        .unwrap_or_default()
}

/// The work of [`ClientMachine::others_drawn`].
pub(super) fn others_drawn(client: &ClientMachine, at: f64) -> BTreeMap<PlayerId, Drawn> {
    client
        .play
        .as_ref()
        .map(|p| p.interp.drawn(at))
        .unwrap_or_default()
}

/// The work of [`ClientMachine::movers`].
pub(super) fn movers(client: &ClientMachine) -> &[MoverState] {
    client
        .play
        .as_ref()
        .map_or(&[], |p| p.predictor.world().movers.as_slice())
}
