//! The client's own prediction, re-run on the server. A client in authoritative mode
//! reports the state it predicted for a tick, made from the newest snapshot it had (which
//! it acknowledges with the report) and its own commands since. The server holds all of
//! that: the snapshot as the client decoded it (the encoder's frame), the commands as
//! they arrived, and the movers it showed. Re-running the prediction gives exactly what
//! an honest client reported, however long the round trip, so a reported path far from
//! it is one no unmodified client makes.

use crate::predict;
use crate::snapshot::SnapshotEncoder;
use expel_core::movement::{MoveCommand, PlayerState};
use expel_core::mover::MoverState;
use expel_core::sim::{PlayerId, Sim, SimScratch};

/// The longest span (seconds) from an acknowledged snapshot to a reported tick whose
/// prediction the server re-runs: a round trip of a second and the client's buffer.
pub(crate) const REPLAY_SECONDS: u64 = 2;

/// Where re-runs are counted (the server's counters).
pub(crate) trait ReplayCounts {
    /// A re-run was made of a prediction reported as `reported`: `own` is what it gave,
    /// `None` where it could not be made exactly (a command in its span never arrived).
    fn replayed(&mut self, own: Option<&PlayerState>, reported: &PlayerState);
}

/// The commands a client sent, by tick, the first copy of each as it arrived (for the
/// newest ticks only: a ring indexed by tick).
#[derive(Debug)]
pub(crate) struct CommandLog {
    slots: Vec<Option<(u64, MoveCommand)>>,
}

impl CommandLog {
    /// A log of at least the newest `span` ticks.
    pub(crate) fn new(span: usize) -> CommandLog {
        CommandLog {
            slots: vec![None; span.max(1).next_power_of_two()],
        }
    }

    fn slot(&self, t: u64) -> usize {
        (t % self.slots.len() as u64) as usize
    }

    /// Records the commands for `ticks`, keeping a tick's first copy.
    pub(crate) fn record(&mut self, ticks: impl Iterator<Item = (u64, MoveCommand)>) {
        for (t, c) in ticks {
            let i = self.slot(t);
            match self.slots[i] {
                Some((old, _)) if old >= t => {}
                _ => self.slots[i] = Some((t, c)),
            }
        }
    }

    /// The commands for ticks `from..=to` into `out`, if every one arrived and is still
    /// held.
    fn between(&self, from: u64, to: u64, out: &mut Vec<MoveCommand>) -> bool {
        out.clear();
        if to.saturating_sub(from) >= self.slots.len() as u64 {
            return false;
        }
        for t in from..=to {
            match self.slots[self.slot(t)] {
                Some((at, c)) if at == t => out.push(c),
                _ => return false,
            }
        }
        true
    }
}

/// The server's re-runs of reported predictions, within a budget of ticks re-run per
/// tick: a client cannot make the server work without bound by reporting predictions its
/// state does not bear out.
#[derive(Debug)]
pub(crate) struct Replayer {
    /// Ticks that may still be re-run before the next tick.
    budget: u64,
    /// The longest span re-run, from the acknowledged snapshot to the reported tick.
    max_ticks: u64,
    commands: Vec<MoveCommand>,
    scratch: SimScratch,
}

impl Replayer {
    /// Re-runs at `rate` ticks a second, of spans up to [`REPLAY_SECONDS`].
    pub(crate) fn new(rate: u32) -> Replayer {
        let max_ticks = REPLAY_SECONDS * u64::from(rate.max(1));
        Replayer {
            budget: max_ticks,
            max_ticks,
            commands: Vec::new(),
            scratch: SimScratch::new(),
        }
    }

    /// A new tick among `players`: a tick of re-run for each on average, and room for
    /// the longest span.
    pub(crate) fn renew(&mut self, players: usize) {
        self.budget = players as u64 + self.max_ticks;
    }

    /// Re-runs the prediction player `id`'s client reported (`reported`) for `tick` from
    /// snapshot `ack`, and counts the outcome in `counts`. `None` when it cannot be re-run
    /// exactly (the snapshot has left the history, a command never arrived, the span is
    /// too long) or the budget is spent. `movers` stands in for the movers the client holds
    /// that no snapshot it was sent showed (far from it: none it reaches in the span).
    #[allow(clippy::too_many_arguments)] // what a prediction is made of, each its own
    pub(crate) fn own_prediction(
        &mut self,
        sim: &Sim,
        id: PlayerId,
        (encoder, log): (&SnapshotEncoder, &CommandLog),
        ack: u64,
        tick: u64,
        reported: &PlayerState,
        movers: &[MoverState],
        counts: &mut impl ReplayCounts,
    ) -> Option<PlayerState> {
        let own = self.replay(sim, id, (encoder, log), ack, tick, movers)?;
        counts.replayed(own.as_ref(), reported);
        own
    }

    /// [`Replayer::own_prediction`] uncounted: `None` when the budget is spent or there
    /// is no span, `Some(None)` when it cannot be re-run exactly.
    pub(crate) fn replay(
        &mut self,
        sim: &Sim,
        id: PlayerId,
        (encoder, log): (&SnapshotEncoder, &CommandLog),
        ack: u64,
        tick: u64,
        movers: &[MoverState],
    ) -> Option<Option<PlayerState>> {
        let span = tick.checked_sub(ack).filter(|s| *s > 0 && ack > 0)?;
        if span > self.budget {
            return None;
        }
        self.budget -= span;
        if span > self.max_ticks || !log.between(ack + 1, tick, &mut self.commands) {
            return Some(None);
        }
        let mut held = movers.to_vec();
        let Some(snap) = encoder.seen(ack, &mut held) else {
            return Some(None);
        };
        Some(predict::replay(
            sim,
            id,
            &snap,
            held,
            &self.commands,
            &mut self.scratch,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(forward: i8) -> MoveCommand {
        MoveCommand {
            forward,
            ..MoveCommand::default()
        }
    }

    #[test]
    fn the_log_holds_each_ticks_first_copy_and_knows_what_it_lacks() {
        let mut log = CommandLog::new(100);
        assert_eq!(log.slots.len(), 128);
        log.record((10..20).map(|t| (t, cmd(t as i8))));
        // A second copy of tick 15 (a modified client's) does not replace the first.
        log.record(std::iter::once((15, cmd(99))));
        let mut out = Vec::new();
        assert!(log.between(10, 19, &mut out));
        assert_eq!(out, (10..20).map(|t| cmd(t as i8)).collect::<Vec<_>>());
        // Tick 20 never came.
        assert!(!log.between(15, 20, &mut out));
        // Ticks a ring's length later take the slots over; the old ones are gone.
        log.record((138..140).map(|t| (t, cmd(1))));
        assert!(!log.between(10, 11, &mut out));
        assert!(log.between(12, 19, &mut out));
        // Older copies arriving late never overwrite newer ticks.
        log.record(std::iter::once((10, cmd(5))));
        assert!(log.between(138, 139, &mut out));
        // A span longer than the ring is never whole.
        assert!(!log.between(0, 200, &mut out));
    }

    /// Each tick allows a tick of re-run per player and one longest span; what a client
    /// reports past that is not re-run, nor counted as re-run.
    #[test]
    fn re_runs_stop_at_the_ticks_budget() {
        let text = include_str!("../../../maps/arena.map");
        let map = expel_core::MapData::parse_map(text).unwrap();
        let movement = expel_core::MoveConfig::default().validate().unwrap();
        let model = std::sync::Arc::new(expel_core::CollisionModel::build(&map));
        let sim = Sim::from_map(model, &map, movement).0;
        let (enc, log) = (SnapshotEncoder::new(), CommandLog::new(128));
        let mut r = Replayer::new(60);
        /// Re-runs, and those that could not be made exactly.
        #[derive(Default)]
        struct Counted(u64, u64);
        impl ReplayCounts for Counted {
            fn replayed(&mut self, own: Option<&PlayerState>, _: &PlayerState) {
                self.0 += 1;
                self.1 += u64::from(own.is_none());
            }
        }
        let mut stats = Counted::default();
        let state = PlayerState::default();
        let mut run = |r: &mut Replayer, ack: u64, tick: u64| {
            r.own_prediction(
                &sim,
                PlayerId(1),
                (&enc, &log),
                ack,
                tick,
                &state,
                &[],
                &mut stats,
            )
        };
        r.renew(10); // 130 ticks
        for (ack, tick) in [(100, 200), (150, 180), (190, 200), (0, 5), (9, 9)] {
            assert_eq!(run(&mut r, ack, tick), None);
        }
        r.renew(10);
        // Past the longest span: unknown.
        assert_eq!(run(&mut r, 100, 230), None);
        // (100, 200) and (150, 180) spent the budget (and found no commands); (190, 200)
        // found none left; none is run from before snapshot 1 or over no span; the next
        // tick, (100, 230) is longer than any re-run.
        assert_eq!((stats.0, stats.1), (3, 3));
    }
}
