//! Shots judged as the shooter saw them (lag compensation), and no further back. A client
//! draws the others between two snapshots it received, a few ticks behind the newest;
//! each command that presses a game button carries that view ([`ViewClaim`]). The server
//! checks it against what it knows: the view's two snapshots were sent to this client and
//! are held; the newer is no newer than the snapshot the client acknowledged with the
//! command; the view is no older than that acknowledgement less the longest interpolation
//! allowed ([`MAX_INTERPOLATION_TICKS`]) and the slack of a command that first arrived in
//! a later datagram, nor older than the least trip measured allows (so a client that
//! holds back its acknowledgements gains nothing either). A view outside is clamped to the
//! nearest one the client could have had and counted; kept up, it is a
//! [`ViolationKind::Backtrack`]. The rules' trace then meets the map as it is and the
//! players shown at that view ([`History::boxes_of`]); a shot aimed through a player the
//! client was never shown is counted, and kept up it is a
//! [`ViolationKind::UnseenTarget`].
//!
//! [`ViewClaim`]: crate::wire::ViewClaim

use crate::codec::INPUT_REDUNDANCY;
use crate::input::Claimed;
use crate::snapshot::SnapshotEncoder;
use expel_core::collision::Hit;
use expel_core::movement::PlayerState;
use expel_core::sim::{History, PlayerId, ShotView, Struck};
use expel_core::validate::{Violation, ViolationKind};
use std::collections::VecDeque;

/// What a shot judged as its shooter saw it works in (kept, not allocated a shot).
#[derive(Debug, Default)]
pub(crate) struct Rewind {
    pub(crate) shown: Vec<PlayerId>,
    pub(crate) boxes: Vec<expel_core::sim::PlayerBox>,
    /// The shooter's own box.
    pub(crate) own: Vec<expel_core::sim::PlayerBox>,
    pub(crate) poses: Vec<expel_core::mover::Pose>,
    pub(crate) trace: expel_core::collision::TraceScratch,
}

/// The longest interpolation delay a shot is judged with, ticks: a client drawing the
/// others further back than this is judged as if it drew them this far back.
pub const MAX_INTERPOLATION_TICKS: f64 = 6.0;
/// The delay a command without a view is judged at (the client library's default).
pub const DEFAULT_INTERPOLATION_TICKS: f64 = 4.0;
/// Shots the rules may judge for one player in one tick; more are refused and counted.
pub const MAX_SHOTS_PER_TICK: u32 = 8;
/// Seconds over which shots, clamped views and unseen aims are counted.
const WINDOW_SECONDS: u64 = 5;
/// Clamped views (or unseen aims) within the window that flag a player, when they are at
/// least a quarter (unseen aims: half) of its shots there.
const FLAG_AFTER: usize = 5;
/// Trips (ticks from a snapshot to the input that acknowledged it) the floor is the
/// least of.
const TRIPS: usize = 48;
/// How far from where the server has the shooter a shot may leave from where the
/// shooter's own client had itself (its prediction, off after a brush with another
/// player), units: within this, and with nothing solid between, the shot leaves from
/// where the shooter saw itself.
pub const SHOOTER_SLACK: f64 = 32.0;
/// Farther than [`SHOOTER_SLACK`] (a brush with a player the client drew where it no
/// longer was, at a long round trip), up to this, units: the shot leaves from where the
/// shooter saw itself only if a re-run of its own prediction, from the snapshot it had
/// acknowledged and the commands it sent, makes that very place (as the validation of
/// moves re-runs it): a modified client cannot report a place of its choosing.
pub const SHOOTER_REACH: f64 = 256.0;
/// A shot within this angle (its cosine) of a player the client was shown was aimed at
/// that player: 8 degrees, a hand's error and more. Its miss flies on past, and what it
/// crosses beyond is no aim at the unseen.
pub(crate) const AIMED_AT_COS: f64 = 0.990_268_068_741_570_3;
/// How far past what a shot met (the map, a mover) a player it was aimed at must stand
/// for the aim to be at someone behind it, units: a player standing at the wall it hit
/// is no one hidden.
pub(crate) const BEHIND_MARGIN: f64 = 16.0;
/// How far from a box's centre a shot's line may pass and still be aimed at it, past the
/// box's own half-width, units: a hand's error of a few degrees at a room's distance.
pub(crate) const AIM_SLACK: f64 = 24.0;

/// Why a shot's aim was at a player it could not see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unseen {
    /// Its snapshots never showed the player (a leak of places).
    NeverShown(PlayerId),
    /// It was shown the player, standing behind what the shot met (the map drawn
    /// through: a wallhack).
    BehindWall(PlayerId),
}

/// Reported places kept.
const REPORTED: usize = 8;
/// Ticks before a shot's the newest report of the shooter's own place may be: the
/// offset of its prediction from the server's changes little over a few ticks, and one
/// report in twenty is lost at 5% loss.
const REPORT_REACH: u64 = 4;

/// Refusals by the game's rules a second, kept up over [`REFUSAL_SECONDS`], that flag a
/// player (a human mashing a trigger while it reloads makes a few).
const REFUSALS_PER_SECOND: u64 = 10;
const REFUSAL_SECONDS: u64 = 3;
/// Ticks a second whose commands were left out while later ones came, kept up over
/// [`REFUSAL_SECONDS`], that flag a player. An honest client's command is missing only
/// when every datagram that carried it was lost: at 35% loss, 0.35^4 of ticks, about one
/// a second at 60 Hz.
const SKIPPED_PER_SECOND: u64 = 5;
/// Ticks added to every bound: a tick's rounding each way.
const BASE_SLACK: f64 = 2.0;

/// One player's shots as the server judged them.
#[derive(Debug, Default)]
pub(crate) struct Aim {
    trips: VecDeque<u64>,
    /// Mean deviation of the trips from their running mean, ticks (the path's jitter).
    mean: f64,
    deviation: f64,
    /// Ticks of recent shots, of those with clamped views, of unseen aims.
    shots: VecDeque<u64>,
    clamped: VecDeque<u64>,
    unseen: VecDeque<u64>,
    /// The tick shots were last judged in, and how many.
    tick: u64,
    judged: u32,
    /// Ticks of the rules' recent refusals.
    refusals: VecDeque<u64>,
    /// Where the client reported it stood after recent ticks (its own prediction).
    reported: VecDeque<Reported>,
    /// Ticks of recent commands left out while later ones came.
    skipped: VecDeque<u64>,
}

/// The state a client reported its player in after a tick (its own prediction), with
/// the snapshot it had acknowledged: what a re-run of that prediction starts from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reported {
    pub(crate) tick: u64,
    pub(crate) state: PlayerState,
    pub(crate) ack: u64,
}

/// What the check of a shot's view found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Judged {
    /// The view the shot is traced at.
    pub(crate) view: ShotView,
    /// Why the claimed view was not taken (clamped), if it was not.
    pub(crate) clamped: Option<String>,
}

impl Aim {
    /// An input acknowledging snapshot `ack` arrived when tick `arrived` was due.
    pub(crate) fn trip(&mut self, arrived: u64, ack: u64) {
        let Some(t) = arrived.checked_sub(ack).filter(|_| ack > 0) else {
            return;
        };
        if self.trips.len() >= TRIPS {
            self.trips.pop_front();
        }
        self.trips.push_back(t);
        let t = t as f64;
        if self.trips.len() == 1 {
            self.mean = t;
        }
        self.deviation += ((t - self.mean).abs() - self.deviation) * 0.125;
        self.mean += (t - self.mean) * 0.125;
    }

    /// The rules refused a command of tick `tick`: the violation, once refusals are kept
    /// up ([`REFUSALS_PER_SECOND`] over [`REFUSAL_SECONDS`]).
    pub(crate) fn refused(&mut self, tick: u64, rate: u32) -> Option<Violation> {
        let n = kept_up(&mut self.refusals, tick, rate, REFUSALS_PER_SECOND)?;
        Some(Violation {
            kind: ViolationKind::Rules,
            tick,
            evidence: format!(
                "{n} commands refused by the game's rules in {REFUSAL_SECONDS} s (undefined \
                 buttons, or a weapon fired faster than it allows)"
            ),
        })
    }

    /// The client reported its player in `state` after tick `tick`, having acknowledged
    /// snapshot `ack`.
    pub(crate) fn reported(&mut self, tick: u64, state: PlayerState, ack: u64) {
        if self.reported.back().is_some_and(|r| r.tick >= tick) {
            return;
        }
        if self.reported.len() >= REPORTED {
            self.reported.pop_front();
        }
        self.reported.push_back(Reported { tick, state, ack });
    }

    /// The newest report at or before `tick`, at most [`REPORT_REACH`] ticks before it
    /// (the report of `tick` itself rides one datagram, which may be lost).
    pub(crate) fn report_near(&self, tick: u64) -> Option<Reported> {
        let i = self.reported.partition_point(|r| r.tick <= tick);
        let r = *self.reported.get(i.checked_sub(1)?)?;
        (tick - r.tick <= REPORT_REACH).then_some(r)
    }

    /// Tick `tick` passed without its command though later ones had come: the
    /// violation, once that is kept up ([`SKIPPED_PER_SECOND`] over [`REFUSAL_SECONDS`]).
    pub(crate) fn skipped(&mut self, tick: u64, rate: u32) -> Option<Violation> {
        let n = kept_up(&mut self.skipped, tick, rate, SKIPPED_PER_SECOND)?;
        Some(Violation {
            kind: ViolationKind::Gaps,
            tick,
            evidence: format!(
                "{n} ticks in {REFUSAL_SECONDS} s whose commands never came though later \
                 ones did (every datagram carries the last few)"
            ),
        })
    }

    /// Another shot this tick, if the budget allows it.
    pub(crate) fn take_shot(&mut self, tick: u64) -> bool {
        if self.tick != tick {
            (self.tick, self.judged) = (tick, 0);
        }
        self.judged += 1;
        self.judged <= MAX_SHOTS_PER_TICK
    }

    /// The view shot `claimed` is judged at: its own if the client could have had it,
    /// else the nearest it could have (see the module docs). `None`: nothing was drawn
    /// yet (no snapshot acknowledged is held).
    pub(crate) fn judge(
        &self,
        claimed: &Claimed,
        sent: &SnapshotEncoder,
        history: &History,
        input_every: u64,
    ) -> Option<Judged> {
        let ack = claimed.ack;
        // The snapshots a view may lie between: sent, held, and no newer than the ack.
        let usable: Vec<u64> = sent
            .sent_ticks()
            .filter(|t| *t <= ack && history.holds(*t))
            .collect();
        let (&oldest, &newest) = (usable.first()?, usable.last()?);
        let late = (INPUT_REDUNDANCY as u64 * input_every) as f64;
        let mut lower = ack as f64 - MAX_INTERPOLATION_TICKS - late - BASE_SLACK;
        if let Some(floor) = self.trips.iter().min() {
            let jitter = 3.0 * self.deviation + late + BASE_SLACK;
            let by_trip = claimed.arrived as f64 - *floor as f64 - MAX_INTERPOLATION_TICKS;
            lower = lower.max(by_trip - jitter);
        }
        let upper = ack as f64;
        let Some(v) = claimed.view else {
            let x = (ack as f64 - DEFAULT_INTERPOLATION_TICKS).max(lower);
            return Some(Judged {
                view: view_near(&usable, x),
                clamped: None,
            });
        };
        let held = |t: u64| usable.binary_search(&t).is_ok();
        let at = v.tick();
        let why = if v.from > v.to || !held(v.from) || !held(v.to) {
            Some(format!(
                "view between snapshots {} and {} (not a pair it was sent and could draw; \
                 it had {oldest} to {newest})",
                v.from, v.to
            ))
        } else if at < lower {
            Some(format!(
                "view at tick {at:.2}, {:.2} ticks older than the oldest it could have had \
                 ({lower:.2}: acknowledged {ack}, arrived at {})",
                lower - at,
                claimed.arrived
            ))
        } else if at > upper {
            Some(format!(
                "view at tick {at:.2}, newer than the newest snapshot it had ({ack})"
            ))
        } else {
            None
        };
        Some(match why {
            None => Judged {
                view: v,
                clamped: None,
            },
            Some(why) => Judged {
                view: view_near(&usable, at.clamp(lower.min(upper), upper)),
                clamped: Some(why),
            },
        })
    }

    /// Counts a shot judged at `tick` (clamped, or aimed through a player not shown):
    /// the violation it makes, once such shots are kept up.
    pub(crate) fn count(
        &mut self,
        tick: u64,
        rate: u32,
        clamped: Option<&str>,
        unseen: Option<Unseen>,
    ) -> Option<Violation> {
        let window = WINDOW_SECONDS * u64::from(rate);
        let since = tick.saturating_sub(window);
        for q in [&mut self.shots, &mut self.clamped, &mut self.unseen] {
            while q.front().is_some_and(|t| *t < since) {
                q.pop_front();
            }
        }
        self.shots.push_back(tick);
        let shots = self.shots.len();
        // A quarter of its shots clamped; half of them through the unseen (a crowd's
        // blind fire crosses someone hidden by chance: a quarter of honest bots' shots
        // did, firing along their heading with nobody in sight, 64 in the arena).
        let kept_up = |n: usize, part: usize| n >= FLAG_AFTER && part * n >= shots;
        if let Some(why) = clamped {
            self.clamped.push_back(tick);
            if kept_up(self.clamped.len(), 4) {
                let n = std::mem::take(&mut self.clamped).len();
                // The shots that made a flag are spent: the next counts from here.
                self.shots.clear();
                return Some(Violation {
                    kind: ViolationKind::Backtrack,
                    tick,
                    evidence: format!(
                        "{n} of {shots} shots in {WINDOW_SECONDS} s clamped; last: {why}"
                    ),
                });
            }
        }
        if let Some(u) = unseen {
            self.unseen.push_back(tick);
            if kept_up(self.unseen.len(), 2) {
                let n = std::mem::take(&mut self.unseen).len();
                self.shots.clear();
                let last = match u {
                    Unseen::NeverShown(p) => format!("player {p}, never shown to it"),
                    Unseen::BehindWall(p) => format!("player {p}, behind the wall the shot met"),
                };
                return Some(Violation {
                    kind: ViolationKind::UnseenTarget,
                    tick,
                    evidence: format!(
                        "{n} of {shots} shots in {WINDOW_SECONDS} s aimed at players it could \
                         not see; last: {last}"
                    ),
                });
            }
        }
        None
    }
}

/// One more event at `tick` in the window `events` (the last [`REFUSAL_SECONDS`] at
/// `rate` ticks a second): how many there were, once they reach `per_second` a second
/// over the window (then the count starts again).
fn kept_up(events: &mut VecDeque<u64>, tick: u64, rate: u32, per_second: u64) -> Option<u64> {
    let since = tick.saturating_sub(REFUSAL_SECONDS * u64::from(rate));
    while events.front().is_some_and(|t| *t < since) {
        events.pop_front();
    }
    events.push_back(tick);
    let n = events.len() as u64;
    (n >= per_second * REFUSAL_SECONDS).then(|| {
        events.clear();
        n
    })
}

/// The view at (fractional) tick `x` between the snapshots `usable` (sorted, not empty):
/// between the two around it, or held at the nearer end.
fn view_near(usable: &[u64], x: f64) -> ShotView {
    let i = usable.partition_point(|t| (*t as f64) <= x);
    match (i.checked_sub(1).map(|j| usable[j]), usable.get(i)) {
        (Some(a), Some(&b)) => ShotView {
            from: a,
            to: b,
            k: (((x - a as f64) / (b - a) as f64).clamp(0.0, 1.0) * 255.0).round() as u8,
        },
        (Some(a), None) => ShotView::at(a),
        (None, Some(&b)) => ShotView::at(b),
        (None, None) => ShotView::default(),
    }
}

/// A shot traced as its shooter saw the world
/// ([`Game::shot_as_seen`](crate::server::Game::shot_as_seen)).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeenShot {
    /// What it met first: the map, a mover, or a player where the shooter saw it.
    pub hit: Option<(Struck, Hit)>,
    /// The view it was judged at.
    pub view: ShotView,
    /// The view the command claimed was not one the client could have had: the shot
    /// was judged at the nearest one it could.
    pub clamped: bool,
    /// A player the client was never shown that the ray passes through (the map aside).
    pub unseen: Option<PlayerId>,
}

/// Why a shot was not judged.
#[derive(Clone, Debug, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ShotError {
    /// The shooter is not playing.
    #[error("player {0} is not playing")]
    NotPlaying(PlayerId),
    /// Its command for this tick did not arrive (the server repeated its last).
    #[error("player {0} has no command for this tick")]
    NoCommand(PlayerId),
    /// It was judged [`MAX_SHOTS_PER_TICK`] times this tick.
    #[error("player {0} shot more than {max} times this tick", max = MAX_SHOTS_PER_TICK)]
    Budget(PlayerId),
    /// No snapshot it acknowledged is held: it has drawn nothing to aim at.
    #[error("player {0} has drawn nothing yet")]
    NothingDrawn(PlayerId),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_between_the_snapshots_around_it_or_at_the_nearer_end() {
        let sent = [10, 12, 14, 18];
        assert_eq!(
            view_near(&sent, 13.0),
            ShotView {
                from: 12,
                to: 14,
                k: 128
            }
        );
        assert_eq!(
            view_near(&sent, 16.0),
            ShotView {
                from: 14,
                to: 18,
                k: 128
            }
        );
        assert_eq!(
            view_near(&sent, 12.0),
            ShotView {
                from: 12,
                to: 14,
                k: 0
            }
        );
        assert_eq!(view_near(&sent, 3.0), ShotView::at(10));
        assert_eq!(view_near(&sent, 30.0), ShotView::at(18));
        assert_eq!(view_near(&sent, f64::NAN), ShotView::at(10));
    }
}
