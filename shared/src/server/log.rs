//! The machine's recording and replaying of matches (see [`crate::record`]). Recording,
//! each thing the machine takes from outside the simulation goes into the recording where
//! it takes it; replaying, it comes from the recording there instead, and whatever the
//! network judged (violations, leaves) is applied from it in the same order.

use super::{control, ServerMachine};
use crate::record::{Call, Entry, Header, Recorder, ShotEvidence, Tape, FORMAT};
use crate::shots::server::SeenShot;
use expel_core::movement::MoveCommand;
use expel_core::sim::PlayerId;
use expel_core::validate::{Violation, ViolationKind};

/// The most ticks a replay skips at once, or in all (years at any tick rate).
const MAX_SKIPPED: u64 = 1 << 40;

/// What the machine does with what it takes.
#[derive(Debug, Default)]
pub(crate) enum Log {
    /// Nothing kept.
    #[default]
    Off,
    /// Kept in a recording.
    Recording(Box<Recorder>),
    /// Taken from a recording.
    Replaying(Box<Tape>),
}

impl Log {
    fn recorder(&mut self) -> Option<&mut Recorder> {
        match self {
            Log::Recording(r) => Some(r),
            _ => None,
        }
    }

    pub(crate) fn tape(&mut self) -> Option<&mut Tape> {
        match self {
            Log::Replaying(t) => Some(t),
            _ => None,
        }
    }

    pub(crate) fn replaying(&self) -> bool {
        matches!(self, Log::Replaying(_))
    }
}

/// Why a recording could not start.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RecordingError {
    /// Trusted clients' claims move the world: a replay would need every claim.
    #[error("a recording needs the server to move the players (movement authority \"server\")")]
    TrustedClients,
    /// A recording holds a match from its start.
    #[error("a recording starts before the first tick and the first player (tick {0})")]
    Started(u64),
}

impl ServerMachine {
    /// Records the match from now on: what each tick takes from outside the simulation,
    /// for [`crate::record::Replay`]. `rules` names the rules as a replay will find
    /// them (`"none"` without); `unix_now` stamps it. The bytes come out through
    /// [`ServerMachine::poll_record`].
    pub fn start_recording(&mut self, rules: &str, unix_now: u64) -> Result<(), RecordingError> {
        if self.settings.movement == crate::wire::MovementAuthority::Client {
            return Err(RecordingError::TrustedClients);
        }
        if self.world.tick != 0 || !self.players.is_empty() {
            return Err(RecordingError::Started(self.world.tick));
        }
        let mut seed = blake3::Hasher::new();
        seed.update(&self.map_hash);
        seed.update(&unix_now.to_le_bytes());
        seed.update(&self.settings.secret);
        let mut id = [0; 16];
        id.copy_from_slice(&seed.finalize().as_bytes()[..16]);
        let s = &self.settings;
        let header = Header {
            format: FORMAT,
            id,
            map_name: s.map_name.clone(),
            map_hash: self.map_hash,
            movement: self.sim.config().clone(),
            rules: rules.to_string(),
            started_unix: unix_now,
            interest: s.interest,
            snapshot_rate: s.snapshot_rate,
            input_rate: s.input_rate,
            client_budget: s.client_budget,
            max_players: s.max_players,
        };
        self.log = Log::Recording(Box::new(Recorder::new(&header)));
        Ok(())
    }

    /// The recording's next bytes to write, in order (none when not recording).
    pub fn poll_record(&mut self) -> Option<Vec<u8>> {
        self.log.recorder()?.take()
    }

    /// Why the recording stopped, if it did (the shell took too little of it).
    pub fn recording_failed(&self) -> Option<&str> {
        match &self.log {
            Log::Recording(r) => r.failed(),
            _ => None,
        }
    }

    /// Stops recording (a full disk): the match plays on.
    pub fn stop_recording(&mut self) {
        if matches!(self.log, Log::Recording(_)) {
            self.log = Log::Off;
        }
    }

    /// Whether the match is being recorded.
    pub fn recording(&self) -> bool {
        matches!(&self.log, Log::Recording(r) if r.failed().is_none())
    }
}

/// A player entered the world.
pub(super) fn joined(server: &mut ServerMachine, id: PlayerId) {
    if let Some(r) = server.log.recorder() {
        r.joined(id);
    }
}

/// A player left the world.
pub(super) fn left(server: &mut ServerMachine, id: PlayerId, reason: &str) {
    if let Some(r) = server.log.recorder() {
        r.left(id, reason);
    }
}

/// Ticks were skipped.
pub(super) fn skipped(server: &mut ServerMachine, ticks: u64) {
    if let Some(r) = server.log.recorder() {
        r.skipped(ticks);
    }
}

/// A violation was counted.
pub(super) fn violation(server: &mut ServerMachine, id: PlayerId, v: &Violation) {
    if let Some(r) = server.log.recorder() {
        r.violation(v.tick, id, v);
    }
}

/// Replaying, a violation the replay judged itself: kept to compare with the recorded
/// one (which is what counts). False when not replaying.
pub(super) fn reproduced(server: &mut ServerMachine, id: PlayerId, v: &Violation) -> bool {
    let Some(t) = server.log.tape() else {
        return false;
    };
    (t.reproduced).push_back((id, v.kind.name().to_string(), v.evidence.clone()));
    true
}

/// The commands tick `next` steps: recorded as they came, or replayed in their place.
pub(super) fn commands(
    server: &mut ServerMachine,
    next: u64,
    commands: &mut Vec<(PlayerId, MoveCommand)>,
) {
    let ServerMachine {
        log,
        players,
        world,
        ..
    } = server;
    match log {
        Log::Off => {}
        Log::Recording(r) => {
            let mut given = commands.iter().peekable();
            let each = players.keys().map(|id| {
                let c = given.next_if(|(g, _)| g == id).map(|(_, c)| c);
                (*id, c)
            });
            r.tick(next, each.collect::<Vec<_>>().into_iter());
        }
        Log::Replaying(t) => {
            let tick = world.tick;
            let Some(Entry::Tick {
                tick: recorded,
                players: n,
                commands: bytes,
            }) = t.pop()
            else {
                return t.diverged(tick, "a tick was stepped where none was recorded".into());
            };
            if recorded != next || n as usize != players.len() {
                let what = format!(
                    "tick {next} with {} players stepped where tick {recorded} with {n} was recorded",
                    players.len()
                );
                return t.diverged(tick, what);
            }
            match t.last.decode(players.keys().copied(), &bytes) {
                Some(decoded) => {
                    commands.clear();
                    commands.extend(decoded.into_iter().filter_map(|(id, c)| Some((id, c?))));
                }
                None => t.diverged(tick, "the tick's commands do not decode".into()),
            }
        }
    }
}

/// The world's hash after a tick: recorded, or compared with the recording's.
pub(super) fn hash(server: &mut ServerMachine) {
    let tick = server.world.tick;
    match &mut server.log {
        Log::Off => {}
        Log::Recording(r) => r.hash(tick, server.world.hash()),
        Log::Replaying(t) => {
            let hash = server.world.hash();
            match t.pop() {
                Some(Entry::Hash { short, full }) => {
                    t.hashes.0 += 1;
                    t.hashes.1 += u64::from(full.is_some());
                    if short != hash as u16 || full.is_some_and(|f| f != hash) {
                        t.mismatch(tick);
                    }
                }
                _ => t.diverged(tick, "no hash recorded after the tick".into()),
            }
        }
    }
}

/// Recording, runs a call of the rules into the machine: `call` says what it took from
/// outside (`None`: nothing), and what followed from it is its effects.
pub(super) fn recorded_call<T>(
    server: &mut ServerMachine,
    body: impl FnOnce(&mut ServerMachine) -> T,
    call: impl FnOnce(&T) -> Option<Call>,
) -> T {
    if let Some(r) = server.log.recorder() {
        r.begin_call();
    }
    let out = body(server);
    if let Some(r) = server.log.recorder() {
        r.end_call(call(&out));
    }
    out
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
    if let Call::Shot {
        shooter,
        outcome: Ok(seen),
    } = &call
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
            control::enter(server, u64::from(player), id, now);
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

impl ServerMachine {
    /// Replaying: applies what the network decided before the next tick.
    pub(crate) fn replay_between(&mut self) {
        drain(self);
    }

    /// Replaying: steps tick `tick` from the recording, at the time it was due.
    pub(crate) fn replay_tick(&mut self, tick: u64) {
        let at = self.wall.tick_at(tick);
        self.wall.called(at);
        self.step(false);
        self.outputs.clear();
    }
}
