//! A shooting bot's own count of its gun's shots: which ticks fired (the rules' own
//! triggers run on its commands), which of those hit on its own screen (the client's
//! trace at the view the command was made at, the one the server judges it by), and
//! which the server confirmed (deathmatch's hit markers). A shot fired after the rules
//! had moved the bot (fragged and respawned it) and before it learned of it left, as the
//! server judges it, from where the bot no longer was: such shots are counted apart
//! (`misplaced`), not among the hits it saw.

use expel_core::sim::Struck;
use expel_core::Hull;
use expel_modes::deathmatch::{eye, DeathmatchNews, Triggers, GUN_RANGE};
use expel_protocol::client::ClientMachine;
use expel_protocol::messages::decode_message;
use std::collections::BTreeSet;

/// Ticks looked back at most when the bot was away.
const LOOK_BACK: u64 = 32;

/// One bot's shots.
#[derive(Debug, Default)]
pub struct ShotRecord {
    /// The last tick looked at.
    seen_to: u64,
    triggers: Triggers,
    shots: u64,
    /// Ticks of the shots it saw hit, and of those the server confirmed hit.
    hits_seen: BTreeSet<u64>,
    confirmed: BTreeSet<u64>,
    /// Ticks of recent shots, and of those fired from where it no longer was.
    fired: BTreeSet<u64>,
    misplaced: BTreeSet<u64>,
    /// The newest tick the rules moved it, as last seen.
    moved: u64,
    /// The first shot's tick once shots stopped being counted.
    uncounted_from: Option<u64>,
}

impl ShotRecord {
    /// Looks at the ticks `c` predicted since the last look (which fired the gun, and
    /// whether each shot hit on its screen) and at the hit markers that came. Other
    /// messages of the game's are read and dropped. Shots are counted while `counting`:
    /// a run stops counting a while before it ends, so the server's answer to each
    /// shot counted can still arrive (one fired as the run ends would count as
    /// unconfirmed for want of time).
    pub fn look(&mut self, c: &mut ClientMachine, counting: bool) {
        let (Some(sim), Some(pred)) = (c.sim().cloned(), c.predictor()) else {
            return;
        };
        let rate = f64::from(sim.movement().tick_rate());
        let now = c.predicted_tick();
        let mut fired = Vec::new();
        if pred.ready() {
            for t in self.seen_to.max(now.saturating_sub(LOOK_BACK)) + 1..=now {
                let cmd = pred.commands_between(t, t)[0];
                let Some(before) = c.made_from(t) else {
                    continue;
                };
                if self.triggers.pull(t, rate, &cmd).gun {
                    fired.push((t, eye(&before), cmd.view().0));
                }
            }
        }
        self.seen_to = now;
        if !counting {
            // The shots from here on are not counted, nor the server's answers to them.
            let first = fired.first().map(|f| f.0);
            self.uncounted_from = self.uncounted_from.or(first);
            fired.clear();
        }
        for (t, from, dir) in fired {
            self.shots += 1;
            self.fired.insert(t);
            if t > LOOK_BACK * 8 {
                self.fired = self.fired.split_off(&(t - LOOK_BACK * 8));
            }
            let end = from + dir * GUN_RANGE;
            if let Some((Struck::Player(_), _)) = c.trace_seen(t, &Hull::point(), from, end) {
                self.hits_seen.insert(t);
            }
        }
        // Moved by the rules at `m` (learned only now): the shots since left from
        // elsewhere than it had itself.
        let m = c.stats().last_moved;
        if m > self.moved {
            self.moved = m;
            let after: Vec<u64> = self.fired.range(m..).copied().collect();
            for t in after {
                self.hits_seen.remove(&t);
                self.misplaced.insert(t);
            }
        }
        while let Some(m) = c.poll_message() {
            let bytes = m.bytes;
            if let Ok(DeathmatchNews::Hit { tick, .. }) = decode_message(&bytes) {
                if self.uncounted_from.is_none_or(|u| tick < u) {
                    self.confirmed.insert(tick);
                }
            }
        }
    }

    /// Gun shots fired.
    pub fn shots(&self) -> u64 {
        self.shots
    }

    /// Shots it saw hit on its own screen.
    pub fn hits_seen(&self) -> u64 {
        self.hits_seen.len() as u64
    }

    /// Of those, the ones the server confirmed.
    pub fn hits_confirmed(&self) -> u64 {
        self.hits_seen.intersection(&self.confirmed).count() as u64
    }

    /// Hits the server confirmed that it saw miss (shots it fired from where it no
    /// longer was aside).
    pub fn hits_confirmed_unseen(&self) -> u64 {
        (self.confirmed.difference(&self.hits_seen))
            .filter(|t| !self.misplaced.contains(t))
            .count() as u64
    }

    /// Shots fired after the rules had moved it (a respawn) and before it knew.
    pub fn misplaced(&self) -> u64 {
        self.misplaced.len() as u64
    }
}
