//! How many players the server can carry without harming those already in: its headroom,
//! from what its shell measures (the share of the time its thread works, socket drops)
//! and what it knows itself (ticks run late, players' commands that came after their
//! tick). Joins past it are refused for load, before the players in feel it; an
//! orchestrator is told the same figure.
//!
//! The estimate from the players' cost says where the thread fills; harm seen before
//! that (a neighbour took part of the core, the I/O threads fell behind) sets a lower
//! ceiling, the way a congestion window backs off and creeps back: a tenth under the
//! players in when harm shows, a little higher with each window without it, gone once it
//! passes the estimate.

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
/// Commands that came after their tick, as a share of those applied, that show the
/// server is strained: its players' commands are meant to meet their ticks (99.9% of
/// them), and a loaded server that reads them late is the one delaying them...
const LATE_COMMANDS: f64 = 0.001;
/// ...when they are this share of the players' at least: a server that reads late
/// delays many players at once, where a client on a jittery path (or a few who mean to
/// be late, to hold the door shut on others) is late on its own.
const LATE_PLAYERS: f64 = 0.1;
/// Harm sets the ceiling this share under the players in.
const BACK_OFF: f64 = 0.1;
/// Each window without harm raises the ceiling by this share (a tenth in ten windows:
/// some two and a half seconds of quarter-second windows).
const RISE: f64 = 0.01;

/// One window's measurements, from the shell.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// The share of the window the server's busiest thread worked or waited for a core to
    /// work on (0 to 1).
    pub busy: f64,
    /// Datagrams the socket dropped in the window (its receive queue overflowed).
    pub dropped: u64,
}

/// One window as the server saw it, from its own counts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Players in at its end.
    pub players: usize,
    /// Ticks run.
    pub ticks: u64,
    /// Of them, run a period or more after they were due.
    pub late_ticks: u64,
    /// Players who joined.
    pub joins: u64,
    /// Players' commands applied on their tick.
    pub commands: u64,
    /// Players' commands that came after their tick.
    pub late_commands: u64,
    /// Players with any of those.
    pub late_players: usize,
}

/// The capacity estimate.
#[derive(Clone, Debug, Default)]
pub struct Headroom {
    /// Busy share per player, averaged over reports.
    cost: Option<f64>,
    /// The players harm was last seen under, less the back-off, risen since, and that
    /// harm: `None` while no harm has been seen under the estimate.
    ceiling: Option<(f64, String)>,
    /// What joins are held to: `None` while nothing limits them.
    capacity: Option<usize>,
    /// Why the last report held joins at the players in, if it did.
    strained: Option<String>,
    /// The server's running counts at the last report (a window's are the difference).
    reported: Window,
    /// Players welcomed since the last report.
    joins: u64,
}

impl Headroom {
    /// A player was welcomed.
    pub fn joined(&mut self) {
        self.joins += 1;
    }

    /// Takes a window's load with the server's running counts at its end (`totals`, whose
    /// `joins` this counts itself): the window is what they grew by since the last report.
    pub fn report_totals(&mut self, load: Load, totals: Window) {
        let now = Window {
            joins: std::mem::take(&mut self.joins),
            ..totals
        };
        let was = std::mem::replace(&mut self.reported, now);
        let window = Window {
            ticks: now.ticks.saturating_sub(was.ticks),
            late_ticks: now.late_ticks.saturating_sub(was.late_ticks),
            commands: now.commands.saturating_sub(was.commands),
            late_commands: now.late_commands.saturating_sub(was.late_commands),
            ..now
        };
        self.report(load, window);
    }

    /// Takes a window's load and what the server saw in it.
    pub fn report(&mut self, load: Load, w: Window) {
        let players = w.players;
        let busy = load.busy.clamp(0.0, 1.0);
        // Only a window with few joins shows what players cost: a handshake costs many
        // ticks of a player, and a crowd joining would read as a costly crowd.
        let steady = w.joins as f64 <= players as f64 * STEADY_JOINS;
        if steady && players >= MIN_SAMPLE && busy > 0.0 {
            let sample = busy / players as f64;
            self.cost = Some(self.cost.map_or(sample, |c| c + (sample - c) * WEIGHT));
        }
        // Harm is shed only when the thread is loaded: a host that held a quiet server
        // back (a paused VM) is not helped by turning players away, nor is a crowd on
        // jittery paths.
        let loaded = busy >= TARGET_BUSY / 2.0;
        let late_ticks = w.late_ticks > 0 && w.late_ticks as f64 >= w.ticks as f64 * LATE_SHARE;
        let late_commands = w.late_commands > 0
            && w.late_commands as f64 >= (w.commands + w.late_commands) as f64 * LATE_COMMANDS
            && w.late_players as f64 >= players as f64 * LATE_PLAYERS;
        let harm = if !loaded {
            None
        } else if late_ticks {
            Some(format!("{} of {} ticks ran late", w.late_ticks, w.ticks))
        } else if load.dropped > 0 {
            Some(format!("the socket dropped {} datagrams", load.dropped))
        } else if late_commands {
            Some(format!(
                "{} of {} commands came after their tick",
                w.late_commands,
                w.commands + w.late_commands
            ))
        } else {
            None
        };
        let estimate = self.cost.map(|c| (TARGET_BUSY / c) as usize);
        self.ceiling = match (&harm, self.ceiling.take()) {
            (Some(why), c) => {
                let under = players as f64 * (1.0 - BACK_OFF);
                let at = c.map_or(under, |(c, _)| c.min(under));
                Some((at, format!("{why} with {players} in")))
            }
            // Past the estimate, the estimate holds joins alone.
            (None, Some((c, why))) => Some((c * (1.0 + RISE), why))
                .filter(|(c, _)| estimate.is_none_or(|e| *c < e as f64)),
            (None, None) => None,
        };
        self.strained = harm.or_else(|| {
            (steady && busy > TARGET_BUSY).then(|| {
                format!(
                    "its thread works {:.0}% of the time (at most {:.0}%)",
                    busy * 100.0,
                    TARGET_BUSY * 100.0
                )
            })
        });
        let ceiling = self.ceiling.as_ref().map(|(c, _)| *c as usize);
        let want = match (&self.strained, estimate) {
            // Strained: nobody more, whatever the estimate says.
            (Some(_), e) => Some(e.map_or(players, |e| e.min(players))),
            (None, e) => e.map(|e| e.max(players)),
        };
        let want = match (want, ceiling) {
            (Some(w), Some(c)) => Some(w.min(c)),
            (w, c) => w.or(c),
        };
        self.capacity = match (want, self.capacity) {
            (Some(w), Some(now))
                if self.strained.is_none() && w.abs_diff(now) as f64 <= now as f64 * STEADY =>
            {
                // (Under the players in, it holds nobody more whatever its figure.)
                Some(if w >= players { now.max(players) } else { now })
            }
            (w, _) => w,
        };
    }

    /// The players the server can carry now (`None`: no limit known).
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// Why joins are held where they are, when the load holds them: this window's
    /// strain, else the harm that set the ceiling while it holds.
    pub fn strained(&self) -> Option<&str> {
        self.strained
            .as_deref()
            .or(self.ceiling.as_ref().map(|(_, why)| why.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: f64) -> Load {
        Load { busy, dropped: 0 }
    }

    /// A window of `players`, `ticks` run, `late` of them late, `joins` joined; every
    /// command on its tick.
    fn seen(players: usize, ticks: u64, late: u64, joins: u64) -> Window {
        Window {
            players,
            ticks,
            late_ticks: late,
            joins,
            commands: players as u64 * ticks,
            late_commands: 0,
            late_players: 0,
        }
    }

    /// The server reports its running counts; the windows between them are what count,
    /// and the joins it told of one by one are the window's.
    #[test]
    fn running_totals_are_reported_as_the_windows_between_them() {
        let windows = [
            (0.2, seen(20, 15, 0, 0)),
            (0.5, seen(20, 15, 0, 12)),
            (0.4, seen(20, 15, 3, 0)),
            (0.2, seen(24, 15, 0, 0)),
        ];
        let (mut by_window, mut by_totals) = (Headroom::default(), Headroom::default());
        let mut totals = Window::default();
        let mut strained = 0;
        for _ in 0..5 {
            for (busy, w) in windows {
                by_window.report(load(busy), w);
                for _ in 0..w.joins {
                    by_totals.joined();
                }
                totals = Window {
                    players: w.players,
                    ticks: totals.ticks + w.ticks,
                    late_ticks: totals.late_ticks + w.late_ticks,
                    joins: 0,
                    commands: totals.commands + w.commands,
                    late_commands: totals.late_commands + w.late_commands,
                    late_players: w.late_players,
                };
                by_totals.report_totals(load(busy), totals);
                assert_eq!(by_window.capacity(), by_totals.capacity());
                assert_eq!(by_window.strained(), by_totals.strained());
                strained += usize::from(by_totals.strained().is_some());
            }
        }
        assert!(by_totals.capacity().is_some());
        assert!(strained > 0, "the late ticks strained it");
    }

    #[test]
    fn capacity_follows_the_cost_per_player_to_the_target() {
        let mut h = Headroom::default();
        h.report(load(0.05), seen(4, 15, 0, 0));
        assert_eq!(h.capacity(), None, "too few players to tell");
        // 1% of the thread each: 70 players at the target.
        for _ in 0..20 {
            h.report(load(0.2), seen(20, 15, 0, 0));
        }
        let at = h.capacity().expect("an estimate");
        assert!((69..=70).contains(&at), "{at}");
        // A small wobble does not move it; a real change does.
        h.report(load(0.21), seen(20, 15, 0, 0));
        assert_eq!(h.capacity(), Some(at));
        for _ in 0..20 {
            h.report(load(0.4), seen(20, 15, 0, 0));
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
            h.report(l, seen(20, 15, late, 0));
            assert!(h.capacity() <= Some(20), "{l:?} {late}");
            assert!(h.strained().is_some());
            // Relieved, it admits again (harm's ceiling rises back in some 140 windows).
            for _ in 0..150 {
                h.report(load(0.2), seen(20, 15, 0, 0));
            }
            assert!(h.capacity() >= Some(60), "{l:?} {late} {:?}", h.capacity());
            assert!(h.strained().is_none());
        }
        // A crowd joining costs more than it will: neither its cost nor its busy thread
        // counts, only its harm (ticks late).
        let mut h = Headroom::default();
        for _ in 0..20 {
            h.report(load(0.2), seen(20, 15, 0, 0));
        }
        let at = h.capacity();
        h.report(load(0.95), seen(40, 15, 0, 20));
        assert_eq!(h.capacity(), at);
        assert!(h.strained().is_none());
        h.report(load(0.95), seen(60, 15, 8, 20));
        assert_eq!(h.capacity(), Some(54), "a tenth under the players in");
        // A tick late now and then (a neighbour's time slice) is no strain, nor are late
        // ticks on a quiet thread (the host held it back).
        let mut h = Headroom::default();
        h.report(load(0.4), seen(20, 15, 1, 0));
        assert!(h.strained().is_none());
        h.report(load(0.1), seen(20, 15, 9, 0));
        assert!(h.strained().is_none());
        // Strained with too few players to estimate: held at those in.
        let mut h = Headroom::default();
        h.report(load(0.95), seen(2, 15, 0, 0));
        assert_eq!(h.capacity(), Some(2));
    }

    #[test]
    fn commands_after_their_tick_on_a_loaded_server_back_it_off_until_they_stop() {
        // 1% of the thread each: 70 players at the target.
        let mut h = Headroom::default();
        for _ in 0..20 {
            h.report(load(0.5), seen(50, 30, 0, 0));
        }
        assert_eq!(h.capacity(), Some(70));
        // `n` commands late, over a tenth of the players (5 of 50).
        let late_of = |late_commands, late_players| Window {
            late_commands,
            late_players,
            ..seen(50, 30, 0, 0)
        };
        let late = |n| late_of(n, 5);
        // Fewer than one in a thousand late: a jittery path or two, not the server.
        h.report(load(0.5), late(0));
        h.report(load(0.5), late(1));
        assert_eq!(h.capacity(), Some(70));
        assert!(h.strained().is_none());
        // Nor many, from a few players: they are late on their own (or to shut the door).
        h.report(load(0.5), late_of(400, 4));
        assert_eq!(h.capacity(), Some(70));
        assert!(h.strained().is_none());
        // Nor many on a quiet thread: the paths are late, not the server.
        h.report(load(0.2), late(40));
        assert!(h.strained().is_none(), "{:?}", h.strained());
        // Loaded and late: a tenth under the players in, and why.
        h.report(load(0.5), late(40));
        assert_eq!(h.capacity(), Some(45));
        let why = h.strained().expect("strained").to_string();
        assert!(
            why.contains("40 of 1540 commands came after their tick"),
            "{why}"
        );
        // The harm gone, the ceiling holds (and says why) and creeps back.
        h.report(load(0.5), late(0));
        assert_eq!(h.capacity(), Some(45));
        assert_eq!(h.strained(), Some(&*format!("{why} with 50 in")));
        let mut seen_caps = vec![];
        for _ in 0..60 {
            h.report(load(0.5), late(0));
            seen_caps.push(h.capacity().expect("a capacity"));
        }
        assert!(seen_caps.windows(2).all(|w| w[0] <= w[1]), "{seen_caps:?}");
        assert!(
            seen_caps.iter().any(|&c| c > 50) && seen_caps[59] < 70,
            "{seen_caps:?}"
        );
        // Past the estimate, the estimate alone holds joins (to within its steadiness).
        for _ in 0..60 {
            h.report(load(0.5), late(0));
        }
        assert!(
            h.capacity().is_some_and(|c| (63..=70).contains(&c)),
            "{:?}",
            h.capacity()
        );
        assert!(h.strained().is_none());
        // Harm again under the ceiling lowers it no further than a tenth under those in.
        h.report(load(0.5), late(40));
        h.report(load(0.5), late(40));
        assert_eq!(h.capacity(), Some(45));
    }
}
