//! What a game draws: our player as predicted, the others interpolated a little behind
//! the newest snapshot, the movers as predicted.

use super::Client;
use crate::movement::PlayerState;
use crate::mover::MoverState;
use crate::protocol::snapshot::interp::Drawn;
use crate::sim::PlayerId;
use glam::DVec3;
use std::collections::BTreeMap;
use std::time::Instant;

impl Client {
    /// Our player, predicted at the newest tick.
    pub fn local_player(&self) -> Option<PlayerState> {
        self.play.as_ref()?.predictor.state()
    }

    /// Where to draw our player: the prediction plus what is left of the last
    /// correction, fading.
    pub fn display_origin(&self) -> Option<DVec3> {
        self.play.as_ref()?.predictor.display_origin()
    }

    /// The server tick to draw others at, `now`: the newest snapshot's tick advanced by
    /// the time since it came, less the interpolation delay.
    pub fn render_tick(&self, now: Instant) -> f64 {
        let Some(p) = self.play.as_ref() else {
            return 0.0;
        };
        let Some((tick, at)) = p.newest else {
            return 0.0;
        };
        let since = now.saturating_duration_since(at).as_secs_f64() / p.clock.period;
        tick as f64 + since.min(4.0) - self.settings.interpolation_ticks
    }

    /// The other players' positions at server tick `at` (see [`Client::render_tick`]).
    pub fn others(&self, at: f64) -> BTreeMap<PlayerId, DVec3> {
        self.play
            .as_ref()
            .map(|p| p.interp.at(at))
            .unwrap_or_default()
    }

    /// The other players as a game draws them at server tick `at`: where they stand,
    /// which way they face, whether they crouch (see [`Client::render_tick`]).
    pub fn others_drawn(&self, at: f64) -> BTreeMap<PlayerId, Drawn> {
        self.play
            .as_ref()
            .map(|p| p.interp.drawn(at))
            .unwrap_or_default()
    }

    /// The movers as the newest prediction has them.
    pub fn movers(&self) -> &[MoverState] {
        self.play
            .as_ref()
            .map_or(&[], |p| p.predictor.world().movers.as_slice())
    }
}
