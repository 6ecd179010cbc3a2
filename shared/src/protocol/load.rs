//! How many players the server can carry without harming those already in: its headroom,
//! from what its shell measures (the share of the time its thread works, socket drops)
//! and what it knows itself (ticks run late). Joins past it are refused for load, before
//! the players in feel it; an orchestrator is told the same figure.

/// The share of its time the server's thread may work with the players it admits: the rest
/// is room for a burst (joins, a crowd meeting) without running late.
pub const TARGET_BUSY: f64 = 0.7;
/// Players in before the cost of one is estimated from the load (fewer, and the fixed cost
/// of a tick would read as theirs).
const MIN_SAMPLE: usize = 8;
/// Weight of each new report in the per-player cost.
const WEIGHT: f64 = 0.3;
/// The published capacity moves only when the estimate leaves it by more than this share
/// (so an orchestrator is not told of every wobble).
const STEADY: f64 = 0.1;

/// Joins in a window, as a share of the players in, below which the window shows what the
/// players cost.
const STEADY_JOINS: f64 = 0.25;
/// Late ticks, as a share of those run, that show the server is strained (a few are a
/// neighbour's time slice, not a load to shed).
const LATE_SHARE: f64 = 0.1;

/// One window's measurements, from the shell.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// The share of the window the server's busiest thread worked or waited for a core to
    /// work on (0 to 1).
    pub busy: f64,
    /// Datagrams the socket dropped in the window (its receive queue overflowed).
    pub dropped: u64,
}

/// The capacity estimate.
#[derive(Clone, Debug, Default)]
pub struct Headroom {
    /// Busy share per player, averaged over reports.
    cost: Option<f64>,
    /// What joins are held to: `None` while nothing limits them.
    capacity: Option<usize>,
    /// Why the last report held joins at the players in, if it did.
    strained: Option<String>,
}

impl Headroom {
    /// Takes a window's load with `players` in, in which `ticks` were run, `late` of them
    /// a period or more after they were due, and `joins` players joined.
    pub fn report(&mut self, load: Load, players: usize, ticks: u64, late: u64, joins: u64) {
        let busy = load.busy.clamp(0.0, 1.0);
        // Only a window with few joins shows what players cost: a handshake costs many
        // ticks of a player, and a crowd joining would read as a costly crowd.
        let steady = joins as f64 <= players as f64 * STEADY_JOINS;
        if steady && players >= MIN_SAMPLE && busy > 0.0 {
            let sample = busy / players as f64;
            self.cost = Some(self.cost.map_or(sample, |c| c + (sample - c) * WEIGHT));
        }
        // Lateness and drops are shed only when the thread is loaded: a host that held a
        // quiet server back (a paused VM) is not helped by turning players away.
        let loaded = busy >= TARGET_BUSY / 2.0;
        self.strained = if loaded && late > 0 && late as f64 >= ticks as f64 * LATE_SHARE {
            Some(format!("{late} of {ticks} ticks ran late"))
        } else if loaded && load.dropped > 0 {
            Some(format!("the socket dropped {} datagrams", load.dropped))
        } else if steady && busy > TARGET_BUSY {
            Some(format!(
                "its thread works {:.0}% of the time (at most {:.0}%)",
                busy * 100.0,
                TARGET_BUSY * 100.0
            ))
        } else {
            None
        };
        let estimate = self.cost.map(|c| (TARGET_BUSY / c) as usize);
        self.capacity = match (&self.strained, estimate, self.capacity) {
            // Strained: nobody more, whatever the estimate says.
            (Some(_), e, _) => Some(e.map_or(players, |e| e.min(players))),
            (None, Some(e), Some(now)) if e.abs_diff(now) as f64 <= now as f64 * STEADY => {
                Some(now.max(players))
            }
            (None, e, _) => e.map(|e| e.max(players)),
        };
    }

    /// The players the server can carry now (`None`: no limit known).
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// Why joins are held where they are, when the load holds them.
    pub fn strained(&self) -> Option<&str> {
        self.strained.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: f64) -> Load {
        Load { busy, dropped: 0 }
    }

    #[test]
    fn capacity_follows_the_cost_per_player_to_the_target() {
        let mut h = Headroom::default();
        h.report(load(0.05), 4, 15, 0, 0);
        assert_eq!(h.capacity(), None, "too few players to tell");
        // 1% of the thread each: 70 players at the target.
        for _ in 0..20 {
            h.report(load(0.2), 20, 15, 0, 0);
        }
        let at = h.capacity().expect("an estimate");
        assert!((69..=70).contains(&at), "{at}");
        // A small wobble does not move it; a real change does.
        h.report(load(0.21), 20, 15, 0, 0);
        assert_eq!(h.capacity(), Some(at));
        for _ in 0..20 {
            h.report(load(0.4), 20, 15, 0, 0);
        }
        let at = h.capacity().expect("an estimate");
        assert!((34..=35).contains(&at), "{at}");
    }

    #[test]
    fn late_ticks_drops_and_a_busy_thread_admit_nobody_more() {
        for (l, late) in [
            (load(0.4), 3),
            (load(0.4), 15),
            (
                Load {
                    busy: 0.4,
                    dropped: 9,
                },
                0,
            ),
            (load(0.9), 0),
        ] {
            let mut h = Headroom::default();
            h.report(l, 20, 15, late, 0);
            assert!(h.capacity() <= Some(20), "{l:?} {late}");
            assert!(h.strained().is_some());
            // Relieved, it admits again.
            for _ in 0..20 {
                h.report(load(0.2), 20, 15, 0, 0);
            }
            assert!(h.capacity() >= Some(60), "{l:?} {late} {:?}", h.capacity());
            assert!(h.strained().is_none());
        }
        // A crowd joining costs more than it will: neither its cost nor its busy thread
        // counts, only its harm (ticks late).
        let mut h = Headroom::default();
        for _ in 0..20 {
            h.report(load(0.2), 20, 15, 0, 0);
        }
        let at = h.capacity();
        h.report(load(0.95), 40, 15, 0, 20);
        assert_eq!(h.capacity(), at);
        assert!(h.strained().is_none());
        h.report(load(0.95), 60, 15, 8, 20);
        assert_eq!(h.capacity(), Some(60));
        // A tick late now and then (a neighbour's time slice) is no strain, nor are late
        // ticks on a quiet thread (the host held it back).
        let mut h = Headroom::default();
        h.report(load(0.4), 20, 15, 1, 0);
        assert!(h.strained().is_none());
        h.report(load(0.1), 20, 15, 9, 0);
        assert!(h.strained().is_none());
        // Strained with too few players to estimate: held at those in.
        let mut h = Headroom::default();
        h.report(load(0.95), 2, 15, 0, 0);
        assert_eq!(h.capacity(), Some(2));
    }
}
