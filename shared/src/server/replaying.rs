//! The machine replaying a recording (see [`crate::record`]): what it took from the
//! network comes from the recording where it took it, and whatever the network decided
//! (joins, leaves, violations) is applied from it in the same order.

use super::ServerMachine;
use crate::record::{Call, Entry, ShotEvidence, Tape};
use crate::shots::server::SeenShot;
use expel_core::sim::PlayerId;
use expel_core::validate::{Violation, ViolationKind};

/// The most ticks a replay skips at once, or in all (years at any tick rate).
const MAX_SKIPPED: u64 = 1 << 40;

/// A call of the rules whose body runs alike recording and replaying (a refusal, a
/// removal, a message not read): recorded as `called` with what followed from it, or,
/// replaying, what followed from it applied from the recording (`what` names it).
pub(super) fn call(
    server: &mut ServerMachine,
    what: &str,
    called: Call,
    body: impl FnOnce(&mut ServerMachine),
) {
    super::log::recorded_call(server, body, |_| Some(called.clone()));
    replay_call(server, what, |c| *c == called);
}

/// Replaying, takes the call `want` accepts (`what` names it) and applies what followed
/// from it; `None` when not replaying or the recording differs.
pub(super) fn replay_call(
    server: &mut ServerMachine,
    what: &str,
    want: impl Fn(&Call) -> bool,
) -> Option<Call> {
    let tick = server.world.tick;
    let t = server.log.tape()?;
    let found = match t.head() {
        Some(Entry::Call { call, effects }) if want(call) => Ok(*effects),
        Some(Entry::Call { call, .. }) => Err(format!("{what} where the recording has {call:?}")),
        _ => Err(format!("{what} where the recording has none")),
    };
    let effects = match found {
        Ok(effects) => effects,
        Err(why) => {
            t.diverged(tick, why);
            return None;
        }
    };
    let Some(Entry::Call { call, .. }) = t.pop() else {
        return None;
    };
    let refused = matches!(call, Call::Refused { .. });
    // Only a shot that led to a flag needs its evidence.
    if let (
        Call::Shot {
            shooter,
            outcome: Ok(seen),
        },
        1..,
    ) = (&call, effects)
    {
        let evidence = shot_evidence(server, PlayerId(*shooter), seen);
        if let Some(t) = server.log.tape() {
            t.shot = Some(evidence);
        }
    }
    for _ in 0..effects {
        let Some(e) = server.log.tape().and_then(Tape::pop) else {
            break;
        };
        apply(server, e, refused);
    }
    if let Some(t) = server.log.tape() {
        t.shot = None;
        if refused && !t.reproduced.is_empty() {
            let extra = format!("{:?} judged again but not recorded", t.reproduced);
            t.reproduced.clear();
            t.diverged(tick, extra);
        }
    }
    Some(call)
}

/// Replaying, the rules' next message if the recording has one for them now.
pub(super) fn replay_message(
    server: &mut ServerMachine,
) -> Option<(PlayerId, crate::messages::Channel, Vec<u8>)> {
    let t = server.log.tape()?;
    if !matches!(
        t.head(),
        Some(Entry::Call {
            call: Call::Message { .. },
            ..
        })
    ) {
        return None;
    }
    match replay_call(server, "a message", |c| matches!(c, Call::Message { .. }))? {
        Call::Message {
            player,
            channel,
            bytes,
        } => Some((PlayerId(player), channel, bytes)),
        _ => None,
    }
}

/// Replaying, applies the entries the network decided that come next (joins, leaves,
/// violations, ticks skipped), up to the next tick, hash or call.
pub(super) fn drain(server: &mut ServerMachine) {
    loop {
        let Some(t) = server.log.tape() else {
            return;
        };
        let next = matches!(
            t.head(),
            Some(
                Entry::Joined { .. }
                    | Entry::Left { .. }
                    | Entry::Violation { .. }
                    | Entry::Skipped { .. }
            )
        );
        if !next {
            return;
        }
        if let Some(e) = t.pop() {
            apply(server, e, false);
        }
    }
}

/// Replaying, applies one recorded entry (`judged_again`: a violation the replay judged
/// itself first, to compare).
fn apply(server: &mut ServerMachine, e: Entry, judged_again: bool) {
    let tick = server.world.tick;
    let diverged = |server: &mut ServerMachine, what: String| {
        if let Some(t) = server.log.tape() {
            t.diverged(tick, what);
        }
    };
    match e {
        Entry::Joined { player } => {
            let id = PlayerId(player);
            if server.players.contains_key(&id) {
                return diverged(server, format!("player {id} joined twice"));
            }
            if let Some(t) = server.log.tape() {
                t.last.joined(id);
            }
            let now = server.wall.last_call();
            server.enter(u64::from(player), id, now);
            if !server.players.contains_key(&id) {
                diverged(server, format!("player {id} could not enter the world"));
            }
        }
        Entry::Left { player, reason } => {
            let id = PlayerId(player);
            if !server.players.contains_key(&id) {
                return diverged(server, format!("player {id} left but was not playing"));
            }
            if let Some(t) = server.log.tape() {
                t.last.left(id);
            }
            server.leave(id, reason);
        }
        // A pause of years at most: the tick count never comes near overflowing.
        Entry::Skipped { ticks } if ticks <= MAX_SKIPPED && tick <= MAX_SKIPPED => {
            server.skip(ticks)
        }
        Entry::Skipped { ticks } => diverged(server, format!("{ticks} ticks skipped at once")),
        Entry::Violation {
            tick: at,
            player,
            kind,
            evidence,
        } => {
            let Some(k) = ViolationKind::ALL.iter().find(|k| k.name() == kind) else {
                return diverged(server, format!("a violation of no known kind ({kind})"));
            };
            let id = PlayerId(player);
            if judged_again {
                let again = server.log.tape().and_then(|t| t.reproduced.pop_front());
                let recorded = (id, kind.clone(), evidence.clone());
                if again.as_ref() != Some(&recorded) {
                    let what = format!("judged again as {again:?}, recorded as {recorded:?}");
                    diverged(server, what);
                }
            }
            let v = Violation {
                kind: *k,
                tick: at,
                evidence,
            };
            if let Some(t) = server.log.tape() {
                let shot = t.shot.clone().filter(|s| s.shooter == id);
                t.evidence.push_back(shot);
            }
            server.count_violation(id, &v);
        }
        other => diverged(server, format!("{other:?} out of its place")),
    }
}

/// A replayed shot's evidence: its judgement, and every player's box at its view as the
/// server's history has them.
fn shot_evidence(server: &ServerMachine, shooter: PlayerId, seen: &SeenShot) -> ShotEvidence {
    let ids: Vec<PlayerId> = server.players.keys().copied().collect();
    let mut rewound = Vec::new();
    (server.history).boxes_of(&server.sim, &seen.view, &ids, &mut rewound);
    ShotEvidence {
        shooter,
        view: seen.view,
        hit: seen.hit.map(|(s, h)| (s, h.point.to_array())),
        unseen: seen.unseen,
        rewound,
    }
}
