//! Cheats, for proving the server catches them: a fast clock, and states that no honest
//! movement reaches. Free of I/O: a [`Tamper`](expel_protocol::client::Tamper) on the client's protocol machine passes
//! each honest prediction through [`CheatState::apply`] and sends what comes out, as its
//! claim (trusted-client mode) or its reported prediction (authoritative mode).

use expel_core::PlayerId;
use expel_core::{MoveCommand, PlayerState, Sim};
use expel_protocol::predict::Predictor;
use expel_protocol::InputMsg;
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Which cheats, from which tick of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cheats {
    /// The clock runs this many times too fast (1.0: honest).
    pub clock_factor: f64,
    /// Ticks of honest play before the position cheats start.
    pub after_ticks: u64,
    /// Move along the command's wish direction at full speed, through walls.
    pub noclip: bool,
    /// Jump by this offset once, then carry on from there.
    pub teleport: Option<DVec3>,
    /// Scale every tick's displacement and velocity (1.0: honest).
    pub speed: f64,
    /// Rise at this many units per second, never on the ground (0: honest).
    pub fly: f64,
    /// Claim views 10 to 24 ticks older than drawn (see [`BACKTRACK_TICKS`]).
    pub backtrack: bool,
    /// Aim at players it is not shown, from the swarm's leak ([`leak`]).
    pub wallshot: bool,
    /// Press the gun's trigger every other tick.
    pub rapidfire: bool,
    /// Leave every other tick's command out of every datagram (so the server misses it,
    /// and judges the span it reports with looser rules).
    pub gaps: bool,
}

/// The gaps cheat: only the newest even tick's command goes (odd ticks' never do), its
/// report only with it.
fn leave_out_odd_ticks(msg: &mut InputMsg) {
    let newest = msg.batch().newest_tick();
    let keep = newest - (newest % 2);
    let Some(i) = keep.checked_sub(msg.first_tick).map(|i| i as usize) else {
        return;
    };
    let Some(cmd) = msg.commands.get(i).copied() else {
        return;
    };
    one(&mut msg.views, i);
    one(&mut msg.claims, i);
    if keep != newest {
        msg.predicted = None;
    }
    (msg.first_tick, msg.commands) = (keep, vec![cmd]);
}

/// `v` down to its `i`th, if it has one.
fn one<T>(v: &mut Vec<T>, i: usize) {
    if v.len() > i {
        let x = v.swap_remove(i);
        *v = vec![x];
    }
}

/// How much older than drawn a backtrack cheat claims its views, ticks (at 60 Hz, 167 to
/// 400 ms; even, so still snapshots it was sent when they come every second tick).
pub const BACKTRACK_TICKS: (u16, u16) = (10, 24);

/// Where the swarm's players stand, each bot's own as it predicts it: what a wallshot
/// cheat is leaked (a swarm colluding, as an ESP would). Filled only while a wallshot
/// cheater plays ([`leaking`]).
pub fn leak() -> &'static std::sync::Mutex<BTreeMap<PlayerId, DVec3>> {
    static LEAK: std::sync::Mutex<BTreeMap<PlayerId, DVec3>> =
        std::sync::Mutex::new(BTreeMap::new());
    &LEAK
}

/// Whether a wallshot cheater plays in this process (the others then publish their
/// places to [`leak`]).
pub fn leaking() -> &'static std::sync::atomic::AtomicBool {
    static LEAKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    &LEAKING
}

impl Default for Cheats {
    fn default() -> Self {
        Cheats {
            clock_factor: 1.0,
            after_ticks: 0,
            noclip: false,
            teleport: None,
            speed: 1.0,
            fly: 0.0,
            backtrack: false,
            wallshot: false,
            rapidfire: false,
            gaps: false,
        }
    }
}

impl Cheats {
    /// Whether any position cheat is on.
    pub fn moves(&self) -> bool {
        self.noclip || self.teleport.is_some() || self.speed != 1.0 || self.fly != 0.0
    }
}

/// The cheats' running state: where the cheater says it is.
#[derive(Debug, Default)]
pub struct CheatState {
    ticks: u64,
    /// The honest prediction of the previous tick.
    last: Option<DVec3>,
    /// The cheated position, once cheating.
    at: Option<DVec3>,
}

impl CheatState {
    /// The state to send for this tick instead of the honest prediction `honest`, made
    /// for `cmd`. Also returns whether the cheat is active yet.
    pub fn apply(
        &mut self,
        cheats: &Cheats,
        sim: &Sim,
        cmd: &MoveCommand,
        honest: PlayerState,
    ) -> (PlayerState, bool) {
        self.ticks += 1;
        let now = honest.origin();
        let step = self.last.map_or(DVec3::ZERO, |l| now - l);
        self.last = Some(now);
        if !cheats.moves() || self.ticks <= cheats.after_ticks {
            return (honest, false);
        }
        let dt = sim.movement().dt();
        let first = self.at.is_none();
        let at = self.at.get_or_insert(now - step);
        let mut out = honest;
        let mut velocity = honest.velocity();
        let mut step = step * cheats.speed;
        velocity *= cheats.speed;
        if cheats.noclip {
            let (fwd, _, _) = cmd.view();
            let wish = DVec3::new(fwd.x, fwd.y, 0.0).normalize_or_zero();
            velocity = wish * sim.config().max_speed * (cmd.forward as f64 / 127.0);
            step = velocity * dt;
        }
        if cheats.fly != 0.0 {
            velocity.z = cheats.fly;
            step.z = cheats.fly * dt;
            out.flags &= !expel_core::movement::flags::ON_GROUND;
        }
        if let (Some(o), true) = (cheats.teleport, first) {
            step += o;
        }
        *at += step;
        out.origin = PlayerState::at(*at).origin;
        out.set_velocity(velocity);
        (out, true)
    }
}

/// The cheats as a [`expel_protocol::client::Tamper`]: each input message's
/// reported prediction (or claims) rewritten into the cheat's own chain of states, and
/// the clock's period overridden. Set it on a client's protocol machine (a
/// `expel_client::Session` or a bare [`expel_protocol::client::ClientMachine`]).
pub struct CheatTamper {
    cheats: Cheats,
    state: CheatState,
    /// The cheated states sent, by tick.
    sent: BTreeMap<u64, PlayerState>,
    /// Messages tampered with so far, and how many there were when the cheat began (0:
    /// not yet).
    calls: u64,
    /// Ticks the backtrack cheat claims last.
    back: u16,
    began: Arc<AtomicU64>,
    /// The honest tick period, seconds.
    base: f64,
}

impl CheatTamper {
    /// Cheats as `cheats` says; `began` is set to the number of input messages sent when
    /// the cheat began (it stays 0 until then).
    pub fn new(cheats: Cheats, began: Arc<AtomicU64>) -> CheatTamper {
        CheatTamper {
            cheats,
            state: CheatState::default(),
            sent: BTreeMap::new(),
            calls: 0,
            back: BACKTRACK_TICKS.0,
            began,
            base: 1.0 / 60.0,
        }
    }
}

impl expel_protocol::client::Tamper for CheatTamper {
    fn input(&mut self, sim: &Sim, predictor: &Predictor, tick: u64, msg: &mut InputMsg) {
        self.base = 1.0 / f64::from(sim.config().tick_rate.max(1));
        self.calls += 1;
        if self.cheats.clock_factor != 1.0 && self.began.load(Relaxed) == 0 {
            self.began.store(self.calls, Relaxed);
        }
        let cheating = self.calls > self.cheats.after_ticks;
        if self.cheats.gaps && cheating {
            leave_out_odd_ticks(msg);
            if self.began.load(Relaxed) == 0 {
                self.began.store(self.calls, Relaxed);
            }
        }
        if self.cheats.backtrack && cheating && !msg.views.is_empty() {
            let (least, most) = BACKTRACK_TICKS;
            self.back = if self.back >= most {
                least
            } else {
                self.back + 2
            };
            for v in msg.views.iter_mut().filter(|v| v.back > 0) {
                v.back = v.back.saturating_add(self.back);
            }
            if self.began.load(Relaxed) == 0 {
                self.began.store(self.calls, Relaxed);
            }
        }
        if !self.cheats.moves() || msg.predicted.is_none() {
            return;
        }
        let Some(cmd) = msg.commands.last().copied() else {
            return;
        };
        // Every predicted tick, skipped ones included, rewritten into one chain.
        let from = self.sent.last_key_value().map_or(tick, |(t, _)| t + 1);
        for t in from.max(tick.saturating_sub(64))..=tick {
            let Some(honest) = predictor.predicted_at(t) else {
                continue;
            };
            let (cheated, on) = self.state.apply(&self.cheats, sim, &cmd, honest);
            if on && self.began.load(Relaxed) == 0 {
                self.began.store(self.calls, Relaxed);
            }
            self.sent.insert(t, cheated);
        }
        // Kept for every tick the message carries (more than the redundancy's ticks when
        // a datagram goes every few ticks).
        self.sent = self.sent.split_off(&msg.first_tick.min(tick));
        msg.predicted = self.sent.get(&tick).copied();
        if !msg.claims.is_empty() {
            msg.claims = msg
                .ticked()
                .map(|(t, _)| self.sent.get(&t).copied())
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default();
        }
    }

    fn period(&mut self, period: f64) -> f64 {
        if self.cheats.clock_factor == 1.0 {
            period
        } else {
            self.base / self.cheats.clock_factor.max(0.1)
        }
    }
}
