//! Move validation. Trusted-client mode (the client claims its states) is in
//! [`claims`](ClaimValidator); this module holds what both modes share and the
//! authoritative mode's checks:
//!
//! Authoritative mode: the server re-simulates every command, so a
//! client cannot move where the rules do not allow; what it checks here is the command
//! stream itself and the client's own reports.
//!
//! * **Timing** (speedhack): a client whose clock runs fast sends more commands than
//!   ticks pass, and its commands drift ever further ahead. Both must hold over a window:
//!   more new command ticks than `timing_ratio` × the wall-clock ticks elapsed, and a lead
//!   beyond `timing_lead` ticks over the later of the server tick and the wall clock,
//!   kept by every message of the window's last third (jitter makes some early). An
//!   honest client follows the server, which keeps to the wall clock except while its
//!   loop stalls; it jumps forward only to catch up and otherwise slews toward a small
//!   lead, so it never meets both. Both are judged against the wall clock because a
//!   stalled server would otherwise make an honest client look early.
//! * **Invalid** values: axes of −128 (the quantized range is ±127), a pitch beyond ±90°,
//!   unknown buttons. They are refused, never clamped silently.
//! * **Divergence**: the state the client reports having predicted differs from the
//!   server's. One differing tick is a correction (late commands, packet loss, another
//!   player's move); a difference that persists for `divergence_ticks` without contact with
//!   another player is a modified client.
//! * **The client's own prediction**: where the server could re-run it exactly (the
//!   snapshot the report was made from and every command since in hand), it decides. A
//!   report equal to it is explained; one farther from it than a tick reaches is a
//!   teleport at once, at any round trip.
//!
//! Each violation carries its kind and evidence. Past `kick_after` violations within
//! `kick_window` ticks the server kicks the player with the reason.

mod claims;
mod trusted;

pub use claims::{claim_from_values, ClaimOutcome, TickView, MAX_SPAN};
pub use trusted::{
    ClaimReport, ClaimValidator, ClientRecords, NoRecords, SeenWorld, TickClaim, RETRY_BUDGET,
};

use crate::movement::{buttons, MoveCommand, PlayerState};
use crate::Sim;
use std::collections::VecDeque;

/// Trusted-client validation's queries over one simulation: a claimed tick judged
/// ([`Judge::step_claims`]), and the retries of a failing claim as its client may have
/// seen the world. The simulation is only read: a judge is made for the call.
#[derive(Clone, Copy)]
pub struct Judge<'s> {
    sim: &'s Sim,
}

impl<'s> Judge<'s> {
    /// A judge over `sim`.
    pub fn new(sim: &'s Sim) -> Judge<'s> {
        Judge { sim }
    }
}

/// Comparisons of reported predictions remembered (about two seconds at 60 Hz).
const COMPARED: usize = 128;

/// The cheat a state no honest tick reaches shows, beside the state the player could
/// have had (`expected`): a level speed past both the expected one and the rules' top
/// speed is [`ViolationKind::Speed`]; rising faster than expected is
/// [`ViolationKind::Fly`]; a straight way there the map blocks is moving through solid
/// ([`ViolationKind::Blocked`], noclip); anything else, a jump with honest speeds, stays
/// a [`ViolationKind::Teleport`].
fn cheat_shown(sim: &crate::Sim, expected: &PlayerState, claimed: &PlayerState) -> ViolationKind {
    use glam::DVec3;
    let level = |v: DVec3| glam::DVec2::new(v.x, v.y).length();
    let (ev, cv) = (expected.velocity(), claimed.velocity());
    let top = level(ev).max(sim.config().max_speed);
    if level(cv) > top * 1.05 + 1.0 {
        return ViolationKind::Speed;
    }
    let (a, b) = (expected.origin(), claimed.origin());
    if cv.z > ev.z.max(0.0) + 1.0 && b.z > a.z {
        return ViolationKind::Fly;
    }
    let hull = sim.movement().hull(claimed);
    let mut scratch = crate::collision::TraceScratch::default();
    let mask = crate::collision::Contents::PLAYER;
    let way = sim.map().sweep(hull, a, b, mask, &mut scratch);
    if way.fraction < 1.0 && (way.end - b).length() > 1.0 {
        return ViolationKind::Blocked;
    }
    ViolationKind::Teleport
}

/// What a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// Moving faster than the rules allow.
    Speed,
    /// Rising without a jump, step or push.
    Fly,
    /// Moving through solid.
    Blocked,
    /// A position the player cannot reach in a tick.
    Teleport,
    /// More commands than ticks (a fast clock).
    Timing,
    /// Reported predictions that keep differing from the server.
    Divergence,
    /// Values outside the protocol's range.
    Invalid,
    /// Input datagrams far past the rate the protocol needs, kept up.
    Flood,
    /// Shots claiming a view of the others older than the client could have had, kept up
    /// (a backtrack cheat).
    Backtrack,
    /// Shots aimed through players the client's snapshots never showed it, kept up (a
    /// wallhack, or players' places leaked to it).
    UnseenTarget,
    /// Commands the game's own rules refused (undefined buttons, a weapon fired faster
    /// than it allows), kept up.
    Rules,
    /// Ticks whose commands never came though later ones did, kept up (commands left
    /// out on purpose, to be judged by the looser rules a missing command gets).
    Gaps,
}

impl ViolationKind {
    /// Every kind, in the order metrics list them.
    pub const ALL: [ViolationKind; 12] = [
        ViolationKind::Speed,
        ViolationKind::Fly,
        ViolationKind::Blocked,
        ViolationKind::Teleport,
        ViolationKind::Timing,
        ViolationKind::Divergence,
        ViolationKind::Invalid,
        ViolationKind::Flood,
        ViolationKind::Backtrack,
        ViolationKind::UnseenTarget,
        ViolationKind::Rules,
        ViolationKind::Gaps,
    ];

    /// Lower-case name, as metrics and logs show it.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Speed => "speed",
            ViolationKind::Fly => "fly",
            ViolationKind::Blocked => "blocked",
            ViolationKind::Teleport => "teleport",
            ViolationKind::Timing => "timing",
            ViolationKind::Divergence => "divergence",
            ViolationKind::Invalid => "invalid",
            ViolationKind::Flood => "flood",
            ViolationKind::Backtrack => "backtrack",
            ViolationKind::UnseenTarget => "unseen_target",
            ViolationKind::Rules => "rules",
            ViolationKind::Gaps => "gaps",
        }
    }
}

/// A violation with its evidence (what was claimed against what is allowed).
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// What it is.
    pub kind: ViolationKind,
    /// The server tick it was found at.
    pub tick: u64,
    /// Claimed versus allowed.
    pub evidence: String,
}

/// Thresholds of the checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidationConfig {
    /// Ticks over which command and tick counts are compared.
    pub timing_window: u64,
    /// Commands per tick above which a window is suspicious.
    pub timing_ratio: f64,
    /// Lead (command tick minus server tick) above which a suspicious window is flagged.
    pub timing_lead: u64,
    /// Ticks a divergence may persist without player contact before it is a violation.
    pub divergence_ticks: u64,
    /// Violations within `kick_window` ticks that get the player kicked (0: never).
    pub kick_after: usize,
    /// Ticks of the kick window.
    pub kick_window: u64,
}

impl ValidationConfig {
    /// Defaults for a tick rate: a 3 s timing window, 3% tolerance, a quarter second of
    /// lead; divergence over 2 s; 3 violations within 10 s kick.
    pub fn for_tick_rate(rate: u32) -> ValidationConfig {
        let r = rate.max(1) as u64;
        ValidationConfig {
            timing_window: 3 * r,
            timing_ratio: 1.03,
            timing_lead: r / 4 + 4,
            divergence_ticks: 2 * r,
            kick_after: 3,
            kick_window: 10 * r,
        }
    }
}

/// Why a command is invalid, if it is.
pub fn invalid_command(c: &MoveCommand) -> Option<String> {
    for (name, v) in [("forward", c.forward), ("side", c.side), ("up", c.up)] {
        if v == i8::MIN {
            return Some(format!("{name} axis -128 is outside -127..=127"));
        }
    }
    // Pitch in 1/65536 turns: within ±90° is [0, 16384] or [49152, 65535].
    if c.pitch > 16384 && c.pitch < 49152 {
        return Some(format!(
            "pitch {:.1}° is beyond ±90°",
            c.pitch as f64 * 360.0 / 65536.0
        ));
    }
    let unknown = c.buttons & !(buttons::JUMP | buttons::CROUCH);
    if unknown != 0 {
        return Some(format!("unknown buttons {unknown:#04x}"));
    }
    None
}

/// Ticks a command may be stamped ahead of the later of the server's tick and its clock.
pub const MAX_AHEAD: u64 = 128;

/// What one batch of a client's input tells the checks: its commands, stamped with
/// consecutive ticks from `first_tick`, and the newest snapshot the client acknowledges.
#[derive(Clone, Copy, Debug)]
pub struct Commands<'a> {
    /// The tick of `commands[0]`.
    pub first_tick: u64,
    /// One command per tick.
    pub commands: &'a [MoveCommand],
    /// The newest snapshot tick the client has seen.
    pub ack: u64,
}

impl Commands<'_> {
    /// The tick of the last command (saturating: an absurd stamp cannot wrap).
    pub fn newest_tick(&self) -> u64 {
        self.first_tick
            .saturating_add((self.commands.len() as u64).saturating_sub(1))
    }
}

/// Why a batch lies outside the server's tick window, if it does: its newest command
/// more than [`MAX_AHEAD`] ticks past the later of the tick about to be stepped and the
/// wall clock, or an acknowledgement of a snapshot the server has not made yet.
pub fn outside_window(msg: &Commands<'_>, server_tick: u64, clock: u64) -> Option<String> {
    let now = server_tick.max(clock);
    let newest = msg.newest_tick();
    if newest > now.saturating_add(MAX_AHEAD) {
        return Some(format!(
            "commands up to tick {newest}, {} ticks ahead of the server's {now} (at most {MAX_AHEAD})",
            newest - now
        ));
    }
    if msg.ack >= server_tick {
        return Some(format!(
            "acknowledges snapshot {} while the server has stepped only to {}",
            msg.ack,
            server_tick.saturating_sub(1)
        ));
    }
    None
}

/// One player's checks, fed as its inputs arrive and the server steps.
#[derive(Debug)]
pub struct Validator {
    cfg: ValidationConfig,
    newest: u64,
    /// (wall-clock tick, new command ticks, lead) per input message, within the window.
    arrivals: VecDeque<(u64, u64, u64)>,
    /// The new command ticks of every arrival but the window's first (kept as they come
    /// and go: the check runs on every input message).
    arrived: u64,
    timing_flagged_at: Option<u64>,
    diverging_since: Option<u64>,
    recent: VecDeque<u64>,
    /// Ticks whose reported prediction was compared with the server's state, and whether
    /// they matched (the newest few).
    compared: VecDeque<(u64, bool)>,
    /// The newest snapshot the client acknowledged.
    acked: u64,
    /// The newest reported prediction.
    last_report: Option<(u64, PlayerState)>,
    /// (tick, acknowledged snapshot) of recent reports: the snapshot each prediction
    /// was replayed from.
    report_acks: VecDeque<(u64, u64)>,
    /// The newest tick the server moved the player by a rule no prediction follows (a
    /// respawn).
    relocated: u64,
    /// When a divergence beyond any honest prediction's reach was last flagged.
    far_flagged_at: Option<u64>,
}

impl Validator {
    /// A player with nothing seen yet.
    pub fn new(cfg: ValidationConfig) -> Validator {
        Validator {
            cfg,
            newest: 0,
            arrivals: VecDeque::new(),
            arrived: 0,
            timing_flagged_at: None,
            diverging_since: None,
            recent: VecDeque::new(),
            compared: VecDeque::new(),
            acked: 0,
            last_report: None,
            report_acks: VecDeque::new(),
            relocated: 0,
            far_flagged_at: None,
        }
    }

    /// Checks a batch of commands received while the server is at `server_tick` and the
    /// wall clock at `clock` (in ticks since the server started). Commands are counted
    /// against the wall clock: a server that falls behind for a while (a loaded machine)
    /// steps fewer ticks than an honest client sends, but no fewer wall-clock ticks pass.
    ///
    /// A message outside the server's tick window is [`ViolationKind::Invalid`] and
    /// changes nothing here: its newest command at most [`MAX_AHEAD`] ticks past the later
    /// of `server_tick` and `clock`, its acknowledgement no newer than the last tick
    /// stepped (`server_tick - 1`). Nothing a client sends can move this state beyond
    /// what the window allows, so one datagram cannot switch the checks off.
    pub fn input(&mut self, msg: &Commands<'_>, server_tick: u64, clock: u64) -> Option<Violation> {
        let invalid = |evidence: String| {
            Some(Violation {
                kind: ViolationKind::Invalid,
                tick: server_tick,
                evidence,
            })
        };
        if let Some(e) = msg.commands.iter().find_map(invalid_command) {
            return invalid(e);
        }
        if let Some(e) = outside_window(msg, server_tick, clock) {
            return invalid(e);
        }
        let last = msg.newest_tick();
        // The first message only sets where the client starts.
        let new = if self.newest == 0 {
            0
        } else {
            last.saturating_sub(self.newest)
        };
        self.newest = self.newest.max(last);
        // Lead over the later of the server tick and the wall clock: an honest client
        // follows the server, which keeps to the wall clock except while it stalls.
        let lead_now = self.newest.saturating_sub(server_tick.max(clock));
        if !self.arrivals.is_empty() {
            self.arrived += new;
        }
        self.arrivals.push_back((clock, new, lead_now));
        while self
            .arrivals
            .front()
            .is_some_and(|(t, ..)| t + self.cfg.timing_window < clock)
        {
            self.arrivals.pop_front();
            // The new first arrival's commands no longer count.
            if let Some((_, n, _)) = self.arrivals.front() {
                self.arrived -= n;
            }
        }
        let since = self.arrivals.front().map_or(clock, |(t, ..)| *t);
        let elapsed = clock.saturating_sub(since);
        // Judge only a (nearly) full window.
        if elapsed < self.cfg.timing_window * 9 / 10 {
            return None;
        }
        let commands = self.arrived;
        let fast = commands as f64 > elapsed as f64 * self.cfg.timing_ratio;
        if !fast {
            return None;
        }
        // The lead kept through the window's last third: a path (or a client's host) that
        // holds messages back and lets them go in a burst makes some arrive early, not
        // all of them; a fast clock's lead grows under every one.
        // (This message is among them, so there is always one.)
        let recent = clock.saturating_sub(self.cfg.timing_window / 3);
        // Arrivals are in clock order (the server's wall clock never goes back, as the
        // window's own trimming above assumes): the recent ones are the last.
        let lead = self
            .arrivals
            .iter()
            .rev()
            .take_while(|(t, ..)| *t >= recent)
            .map(|(.., l)| *l)
            .min()
            .unwrap_or(lead_now);
        let recently = self
            .timing_flagged_at
            .is_some_and(|t| t + self.cfg.timing_window > server_tick);
        if lead > self.cfg.timing_lead && !recently {
            self.timing_flagged_at = Some(server_tick);
            return Some(Violation {
                kind: ViolationKind::Timing,
                tick: server_tick,
                evidence: format!(
                    "{commands} commands in {elapsed} ticks, {lead} ticks ahead (allowed {:.0} and {})",
                    elapsed as f64 * self.cfg.timing_ratio,
                    self.cfg.timing_lead
                ),
            });
        }
        None
    }

    /// The server moved the player at `tick` by a rule no prediction follows (a respawn).
    pub fn relocated(&mut self, tick: u64) {
        self.relocated = tick;
    }

    /// The server moved the player at `tick` where its client could not predict: it
    /// skipped ticks (too far behind to run them, the player standing still while its
    /// client predicted it moving) or the game's rules placed it. What the client reported
    /// before is no reference for what it reports next.
    pub fn moved_by_server(&mut self, tick: u64) {
        self.relocated = tick;
        self.last_report = None;
        self.diverging_since = None;
    }

    /// Compares the state player `id` reported for the world's tick with the server's,
    /// once the server has stepped it. `contact`: the server's move of the player touched
    /// another player (or a mover) that tick.
    ///
    /// The report was predicted from the server's own state at the snapshot it
    /// acknowledged, with the other players held where that snapshot showed them. So a
    /// difference is explained while the server's move meets a player, or another player
    /// stood near enough for the prediction to have met it where it was (within both
    /// players' reach over the ticks since that snapshot). It is explained only so far:
    /// an honest prediction and the server's move part by at most both their reaches per
    /// tick since; a difference beyond that is a modified client however crowded it is.
    ///
    /// `own`: the client's own prediction re-run by the server from the same snapshot and
    /// commands, when it could be. That is exactly what an unmodified client reports: a
    /// report equal to it is explained whatever the server's state, and one farther from
    /// it than a tick reaches is flagged as a teleport at once.
    pub fn claim(
        &mut self,
        sim: &crate::Sim,
        world: &crate::WorldState,
        id: crate::sim::PlayerId,
        claimed: &PlayerState,
        contact: bool,
        own: Option<&PlayerState>,
    ) -> Option<Violation> {
        let tick = world.tick;
        let actual = world.player(id)?;
        if self.compared.len() >= COMPARED {
            self.compared.pop_front();
        }
        self.compared.push_back((tick, claimed == actual));
        let recently = self
            .far_flagged_at
            .is_some_and(|t| t + self.cfg.divergence_ticks / 2 > tick);
        if let Some(own) = own {
            if own == claimed {
                self.diverging_since = None;
                return None;
            }
            let apart = (claimed.origin() - own.origin()).length();
            // Both are one prediction of one tick: only an input the re-run lacked (a
            // mover out of the client's view) can part them, and not by more than a tick.
            let reach = sim.reach(own);
            if apart > reach && !recently {
                self.far_flagged_at = Some(tick);
                return Some(Violation {
                    kind: cheat_shown(sim, own, claimed),
                    tick,
                    evidence: format!(
                        "reported prediction {apart:.1} units from the client's own prediction re-run from its snapshot, at most {reach:.1} reachable in a tick"
                    ),
                });
            }
        }
        let from = self
            .report_acks
            .iter()
            .find(|(t, _)| *t == tick)
            .map(|(_, a)| *a)
            .filter(|a| *a > 0 && *a < tick && *a >= self.relocated);
        // Per tick, how far the two paths can part: level (speed and acceleration) and in
        // all (steps, jumps, falls too). The server's state sets the reach, plus a run at
        // full speed for a prediction the server's move did not hold back; the client's
        // own claimed velocity never widens its bound.
        let run = sim.config().max_speed * sim.movement().dt();
        let level = sim.level_reach(actual) + run;
        let all = sim.reach(actual) + run;
        if let (Some(ack), false) = (from, recently) {
            let ticks = (tick - ack) as f64;
            let d = claimed.origin() - actual.origin();
            let slack = 2.0 * crate::movement::pmove::UNSTICK_REACH;
            let (level_apart, apart) = (d.truncate().length(), d.length());
            let (level_max, all_max) = (2.0 * ticks * level + slack, 2.0 * ticks * all + slack);
            if level_apart > level_max || apart > all_max {
                self.far_flagged_at = Some(tick);
                return Some(Violation {
                    kind: ViolationKind::Divergence,
                    tick,
                    evidence: format!(
                        "reported prediction {level_apart:.1} units level and {apart:.1} in all from the server's state, at most {level_max:.1} and {all_max:.1} from its snapshot {} ticks back",
                        tick - ack
                    ),
                });
            }
        }
        let near = || {
            // Ticks the prediction ran on the snapshot's picture of the others: within
            // them, both players' level reach apart, and their steps and falls in height.
            let ticks = from.map_or(self.cfg.divergence_ticks, |a| tick - a) as f64;
            let me = sim.player_box(id, actual).map(|b| b.bounds);
            world.players.iter().any(|(other, o)| {
                let theirs = sim.player_box(*other, &o.state).map(|b| b.bounds);
                match (*other != id, me, theirs) {
                    (true, Some(a), Some(b)) => {
                        let gap = (a.min - b.max).max(b.min - a.max);
                        let level_near = ticks * (level + sim.level_reach(&o.state));
                        let height_near = ticks * (all + sim.reach(&o.state));
                        gap.x.max(gap.y) <= level_near && gap.z <= height_near
                    }
                    _ => false,
                }
            })
        };
        if claimed == actual || contact || near() {
            self.diverging_since = None;
            return None;
        }
        let since = *self.diverging_since.get_or_insert(tick);
        if tick - since < self.cfg.divergence_ticks {
            return None;
        }
        self.diverging_since = Some(tick);
        Some(Violation {
            kind: ViolationKind::Divergence,
            tick,
            evidence: format!(
                "claimed origin {:?} against {:?}, diverging for {} ticks",
                claimed.origin(),
                actual.origin(),
                tick - since
            ),
        })
    }

    /// Checks a reported prediction as it arrives, against the client's own previous one:
    /// consecutive predictions of an honest client are one tick of movement apart, so one
    /// that jumps farther than a tick reaches is a teleport, flagged that tick. The check
    /// stands down when the client may have replaced its path since: it acknowledged a
    /// snapshot whose state was not seen to match its prediction (a correction replays).
    /// A jump is no teleport when `own` (the client's own prediction re-run, see
    /// [`Validator::claim`]; asked only for a jump) gives exactly the reported state.
    pub fn report(
        &mut self,
        sim: &crate::Sim,
        id: crate::sim::PlayerId,
        tick: u64,
        state: &PlayerState,
        ack: u64,
        own: impl FnOnce() -> Option<PlayerState>,
    ) -> Option<Violation> {
        // The client replays from each snapshot it takes whose state differs from what it
        // then predicts for that tick, and that may differ from what it first reported:
        // a replay from an earlier snapshot can have changed its path after it reported
        // the later ticks, and it reports `tick - ack` ticks ahead. So the path may have
        // been replaced unless every tick from that far before the snapshot up to it was
        // compared and matched as reported.
        // A replay over more than half a second (a server far behind sends snapshots
        // seldom) runs against other players moved far since: its path may change
        // however well the client's own state matched, and the divergence check judges it.
        let long = tick.saturating_sub(ack) > self.cfg.divergence_ticks / 4;
        let replaced = ack > self.acked
            && (long || {
                let from = ack.saturating_sub(tick.saturating_sub(ack));
                let matched = self
                    .compared
                    .iter()
                    .filter(|(t, same)| *t >= from && *t <= ack && *same)
                    .count() as u64;
                matched < ack - from + 1
            });
        self.acked = self.acked.max(ack);
        if self.report_acks.len() >= COMPARED {
            self.report_acks.pop_front();
        }
        self.report_acks.push_back((tick, ack));
        let prev = match self.last_report {
            Some((t, _)) if t >= tick => return None, // reordered or duplicated
            last => last,
        };
        self.last_report = Some((tick, *state));
        let (t, p) = prev?;
        // A client whose newest snapshot is at or past the tick it reports is behind the
        // server (a stalled machine): its report is not a prediction of that tick.
        let behind = ack >= t;
        if replaced
            || behind
            || t + 1 != tick
            || state.origin == sim.spawn_state(id, state.mode).origin
        {
            return None;
        }
        let moved = (state.origin() - p.origin()).length();
        let reach = sim.reach(&p) + crate::movement::pmove::UNSTICK_REACH;
        (moved > reach && own().as_ref() != Some(state)).then(|| Violation {
            kind: cheat_shown(sim, &p, state),
            tick,
            evidence: format!(
                "reported prediction moved {moved:.1} units in a tick, at most {reach:.1} reachable"
            ),
        })
    }

    /// Records a violation; true when the player has earned a kick. Divergence is
    /// counted and reported but does not kick yet: a client's view holds only the nearest
    /// players, so a mover triggered by someone out of view can mislead an honest
    /// prediction for a while.
    pub fn record(&mut self, v: &Violation) -> bool {
        if v.kind == ViolationKind::Divergence {
            return false;
        }
        self.recent.push_back(v.tick);
        while self
            .recent
            .front()
            .is_some_and(|t| t + self.cfg.kick_window < v.tick)
        {
            self.recent.pop_front();
        }
        self.cfg.kick_after > 0 && self.recent.len() >= self.cfg.kick_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlayerId;

    fn input(first: u64, n: usize) -> Commands<'static> {
        // Idle commands, leaked: a test helper, a few bytes per call.
        Commands {
            first_tick: first,
            commands: Vec::leak(vec![MoveCommand::default(); n]),
            ack: 0,
        }
    }

    /// Feeds a validator one input of 4 commands per wall-clock tick for a minute: the
    /// client's newest command tick and the server's tick as functions of the wall clock
    /// (`None`: the client sends nothing that tick). Returns the clock of the first flag.
    fn run(client: impl Fn(u64) -> Option<u64>, server: impl Fn(u64) -> u64) -> Option<u64> {
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        for clock in 1..3600u64 {
            let Some(t) = client(clock) else { continue };
            if let Some(x) = v.input(&input(t.saturating_sub(3).max(1), 4), server(clock), clock) {
                assert_eq!(x.kind, ViolationKind::Timing);
                return Some(clock);
            }
        }
        None
    }

    /// A clock running at `rate` times the wall clock, 5 ticks ahead at the start.
    fn fast(rate: f64) -> impl Fn(u64) -> Option<u64> {
        move |c| Some(5 + (c as f64 * rate) as u64)
    }

    #[test]
    fn a_ten_percent_speedhack_is_flagged_within_five_seconds_and_honest_clocks_never() {
        let on_time = |c| c;
        let at = run(fast(1.10), on_time).expect("speedhack not flagged");
        assert!(at <= 300, "flagged after {at} ticks");
        assert_eq!(run(fast(1.0), on_time), None);
        assert_eq!(run(fast(1.02), on_time), None);
        // An honest clock that stalls for 40 ticks and then jumps forward to catch up.
        let stalls = |c| (!(600..640).contains(&c)).then_some(c + 5);
        assert_eq!(run(stalls, on_time), None);
        // A loaded machine (what a crowd of handshakes did to a two-core CI machine): a
        // client that fell 12 ticks behind catches up at the client library's fastest
        // slew (+20 % for 60 ticks), then the server's tick loop stalls for half a
        // second and bursts to catch up. Only the wall clock is a fair reference.
        let catches_up = |c: u64| (c > 12).then(|| c + 5 - (600u64.saturating_sub(c) / 5).min(12));
        let server_stalls = |c: u64| if (600..630).contains(&c) { 600 } else { c };
        assert_eq!(run(catches_up, server_stalls), None);
        // ...while a speedhack is caught even through a stalling server.
        assert!(run(fast(1.10), server_stalls).is_some());
    }

    /// A client whose messages are held back and let go in bursts (a starved host, a
    /// path that queues) steers so the most delayed message still arrives in time: the
    /// last of each burst arrives far ahead. Catching up as well, it is still no
    /// speedhack; a fast clock whose messages come the same way is.
    #[test]
    fn messages_let_go_in_bursts_are_no_speedhack() {
        let first_flag = |rate: f64| {
            let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
            for burst in 1..180u64 {
                let clock = burst * 20;
                // Catching up 12 ticks over the first ten seconds, then steady.
                let behind = (600u64.saturating_sub(clock) / 50).min(12);
                for k in 0..20u64 {
                    // Sent a tick apart; the oldest arrives 6 ticks early, the newest 25.
                    let sent = clock - 19 + k;
                    let newest = (sent as f64 * rate) as u64 + 25 - behind;
                    if let Some(x) = v.input(&input(newest - 3, 4), clock, clock) {
                        assert_eq!(x.kind, ViolationKind::Timing);
                        return Some(clock);
                    }
                }
            }
            None
        };
        assert_eq!(first_flag(1.0), None);
        let at = first_flag(1.10).expect("a bursty speedhack went unflagged");
        assert!(at <= 400, "flagged after {at} ticks");
    }

    #[test]
    fn ticks_outside_the_window_are_refused_and_leave_the_checks_working() {
        let on_time = |c: u64| c;
        for first in [u64::MAX - 40, 1 << 63, (1 << 63) - 1, 5_000] {
            let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
            let mut flagged = None;
            for clock in 1..1200u64 {
                // The fast clock's commands, and once a datagram from far in the future.
                let msg = if clock == 30 {
                    input(first, 4)
                } else {
                    let t = 5 + (clock as f64 * 1.10) as u64;
                    input(t.saturating_sub(3).max(1), 4)
                };
                match v.input(&msg, on_time(clock), clock) {
                    Some(x) if clock == 30 => {
                        assert_eq!(x.kind, ViolationKind::Invalid, "{first}");
                        assert!(x.evidence.contains("ahead"), "{}", x.evidence);
                    }
                    None if clock == 30 => panic!("tick {first} accepted at 30"),
                    Some(x) => {
                        assert_eq!(x.kind, ViolationKind::Timing);
                        flagged = Some(clock);
                        break;
                    }
                    None => {}
                }
            }
            let at = flagged.unwrap_or_else(|| panic!("speedhack after tick {first} unflagged"));
            assert!(at <= 300, "flagged after {at} ticks");
        }
        // The edge of the window is honest; one past it is not; nor an ack from the future.
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        assert!(v.input(&input(100 + MAX_AHEAD, 1), 100, 90).is_none());
        assert!(v.input(&input(101 + MAX_AHEAD, 1), 100, 90).is_some());
        assert!(v.input(&input(101 + MAX_AHEAD, 1), 90, 101).is_none());
        let mut future_ack = input(100, 1);
        future_ack.ack = 100;
        let x = v.input(&future_ack, 100, 100).unwrap();
        assert!(x.evidence.contains("acknowledges"), "{}", x.evidence);
        future_ack.ack = 99;
        assert!(v.input(&future_ack, 100, 100).is_none());
    }

    #[test]
    fn invalid_values_are_named() {
        let mut c = MoveCommand::default();
        assert_eq!(invalid_command(&c), None);
        c.side = i8::MIN;
        assert!(invalid_command(&c).unwrap().contains("side"));
        c.side = 0;
        c.pitch = 30_000;
        assert!(invalid_command(&c).unwrap().contains("pitch"));
        c.pitch = 60_000;
        c.buttons = 0x80;
        assert!(invalid_command(&c).unwrap().contains("buttons"));
    }

    fn arena() -> crate::Sim {
        let text = include_str!("../../../maps/arena.map");
        let map = crate::MapData::parse_map(text).unwrap();
        let movement = crate::MoveConfig::default().validate().unwrap();
        let model = std::sync::Arc::new(crate::CollisionModel::build(&map));
        crate::Sim::from_map(model, &map, movement).0
    }

    /// The world at `tick` with player 1 in `state` and the `others`.
    fn world(
        sim: &crate::Sim,
        tick: u64,
        state: PlayerState,
        others: &[(u32, PlayerState)],
    ) -> crate::WorldState {
        let mut w = sim.new_state();
        sim.add_player(&mut w, PlayerId(1), state).unwrap();
        for (id, o) in others {
            sim.add_player(&mut w, PlayerId(*id), *o).unwrap();
        }
        w.tick = tick;
        w
    }

    #[test]
    fn a_divergence_beyond_reach_of_the_acknowledged_snapshot_is_flagged_through_contact() {
        let sim = arena();
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        let at = |x: f64| PlayerState::at(glam::DVec3::new(x, 0.0, 24.0));
        let server = at(0.0);
        // Predicted 6 ticks after the snapshot it acknowledged: a bump by another player
        // parts the paths by a few units, within reach.
        v.report(&sim, PlayerId(1), 100, &at(40.0), 94, || None);
        assert!(v
            .claim(
                &sim,
                &world(&sim, 100, server, &[]),
                PlayerId(1),
                &at(40.0),
                true,
                None
            )
            .is_none());
        // Hundreds of units apart: no contact explains that, nor a velocity the client
        // claims to widen its own bound.
        let mut fast = at(400.0);
        fast.set_velocity(glam::DVec3::new(1.0e5, 0.0, 0.0));
        v.report(&sim, PlayerId(1), 101, &fast, 95, || None);
        let f = v.claim(
            &sim,
            &world(&sim, 101, server, &[]),
            PlayerId(1),
            &fast,
            true,
            None,
        );
        assert!(f.is_some_and(|f| f.kind == ViolationKind::Divergence));
        // A respawn since the snapshot: the server moved the player by a rule no
        // prediction follows.
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        v.relocated(97);
        v.report(&sim, PlayerId(1), 101, &at(900.0), 95, || None);
        assert!(v
            .claim(
                &sim,
                &world(&sim, 101, server, &[]),
                PlayerId(1),
                &at(900.0),
                true,
                None
            )
            .is_none());
    }

    #[test]
    fn divergence_counts_only_when_it_persists_without_contact() {
        let sim = arena();
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        let a = PlayerState::at(glam::DVec3::new(0.0, 0.0, 24.0));
        let b = PlayerState::at(glam::DVec3::new(1.0, 0.0, 24.0));
        let alone = |t| world(&sim, t, a, &[]);
        for t in 1..100 {
            assert!(v
                .claim(&sim, &alone(t), PlayerId(1), &b, false, None)
                .is_none());
        }
        assert!(v
            .claim(&sim, &alone(100), PlayerId(1), &a, false, None)
            .is_none());
        for t in 101..400 {
            assert!(
                v.claim(&sim, &alone(t), PlayerId(1), &b, true, None)
                    .is_none(),
                "contact explains it"
            );
        }
        // A player standing close by: the prediction may have met it where the client
        // saw it, though the server's move did not.
        let crowd = PlayerState::at(glam::DVec3::new(40.0, 0.0, 24.0));
        for t in 400..700 {
            let w = world(&sim, t, a, &[(2, crowd)]);
            assert!(
                v.claim(&sim, &w, PlayerId(1), &b, false, None).is_none(),
                "a neighbour explains it"
            );
        }
        let flagged =
            (700..1000).find_map(|t| v.claim(&sim, &alone(t), PlayerId(1), &b, false, None));
        assert!(flagged
            .as_ref()
            .is_some_and(|f| f.tick == 820 && f.kind == ViolationKind::Divergence));
        assert!(!v.record(flagged.as_ref().unwrap()));
        // Divergence alone never kicks; timing does, the third time.
        for t in 0..5 {
            assert!(!v.record(flagged.as_ref().unwrap()), "{t}");
        }
        let timing = Violation {
            kind: ViolationKind::Timing,
            tick: 700,
            evidence: String::new(),
        };
        assert!(!v.record(&timing) && !v.record(&timing) && v.record(&timing));
    }

    /// The client's own prediction re-run decides where it is known: the report it
    /// gives is explained however far from the server's state, and one a tick's reach
    /// from it is a teleport, whatever contact or crowd would explain otherwise.
    #[test]
    fn the_clients_own_prediction_re_run_explains_or_condemns_a_report() {
        let sim = arena();
        // Along y = -128, clear of the arena's pillars.
        let at = |x: f64| PlayerState::at(glam::DVec3::new(x, -128.0, 24.0));
        let server = at(0.0);
        let crowd = [(2, at(40.0))];
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        // 900 units from the server's state, but exactly what the client predicts (the
        // jump from its previous report too).
        assert!(v
            .report(&sim, PlayerId(1), 100, &at(0.0), 94, || None)
            .is_none());
        assert!(v
            .report(&sim, PlayerId(1), 101, &at(900.0), 94, || Some(at(900.0)))
            .is_none());
        for t in 101..400 {
            let w = world(&sim, t, server, &[]);
            assert!(v
                .claim(&sim, &w, PlayerId(1), &at(900.0), false, Some(&at(900.0)))
                .is_none());
        }
        // The same jump with a prediction that does not make it.
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        assert!(v
            .report(&sim, PlayerId(1), 100, &at(0.0), 94, || None)
            .is_none());
        let f = v.report(&sim, PlayerId(1), 101, &at(900.0), 94, || Some(at(0.0)));
        assert!(f.is_some_and(|f| f.kind == ViolationKind::Teleport));
        // 60 units from its own prediction, next to another player and in contact: a
        // teleport all the same, flagged once a second.
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        let flags: Vec<u64> = (100..400)
            .filter_map(|t| {
                let w = world(&sim, t, server, &crowd);
                v.claim(&sim, &w, PlayerId(1), &at(60.0), true, Some(&at(0.0)))
            })
            .inspect(|f| assert_eq!(f.kind, ViolationKind::Teleport))
            .map(|f| f.tick)
            .collect();
        assert_eq!(flags, [100, 160, 220, 280, 340]);
        // Within a tick's reach of it (an input the re-run lacked): left to the other
        // rules, which contact satisfies.
        let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
        for t in 100..400 {
            let w = world(&sim, t, server, &[]);
            assert!(v
                .claim(&sim, &w, PlayerId(1), &at(5.0), true, Some(&at(0.0)))
                .is_none());
        }
    }

    /// A report no honest tick reaches is named by what it shows beside the client's own
    /// prediction: a speed past the rules', a rise, a way through a wall, or else a jump.
    #[test]
    fn a_condemned_report_names_the_cheat_its_evidence_shows() {
        let sim = arena();
        let state = |x: f64, y: f64, v: [f64; 3]| {
            let mut s = PlayerState::at(glam::DVec3::new(x, y, 24.0));
            s.set_velocity(glam::DVec3::from(v));
            s
        };
        let own = state(-256.0, -128.0, [300.0, 0.0, 0.0]);
        let named = |claimed: PlayerState| {
            let mut v = Validator::new(ValidationConfig::for_tick_rate(60));
            let w = world(&sim, 100, own, &[]);
            v.claim(&sim, &w, PlayerId(1), &claimed, false, Some(&own))
                .map(|f| f.kind)
        };
        // Twice the top speed, and the distance it makes.
        let speed = named(state(-200.0, -128.0, [640.0, 0.0, 0.0]));
        assert_eq!(speed, Some(ViolationKind::Speed));
        // Rising at 400 units a second off the floor.
        let mut up = state(-256.0, -128.0, [300.0, 0.0, 400.0]);
        up.origin = PlayerState::at(glam::DVec3::new(-256.0, -128.0, 84.0)).origin;
        assert_eq!(named(up), Some(ViolationKind::Fly));
        // Across the pillar at (0, 0) at an honest speed: through solid.
        let through = named(state(64.0, 0.0, [300.0, 0.0, 0.0]));
        assert_eq!(through, Some(ViolationKind::Blocked));
        // 300 units along the open floor at an honest speed: a teleport.
        let jump = named(state(-256.0, -428.0, [300.0, 0.0, 0.0]));
        assert_eq!(jump, Some(ViolationKind::Teleport));
    }
}
