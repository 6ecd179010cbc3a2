//! The machine's recordings of matches (see [`crate::record`]): each thing the machine
//! takes from outside the simulation goes into the recording where it takes it. Where
//! both sides meet (the commands, the hashes), the replaying side is here too; the rest of
//! it is [`super::replaying`].

use super::ServerMachine;
use crate::record::{Call, Entry, Header, Recorder, Tape, FORMAT};
use expel_core::movement::MoveCommand;
use expel_core::sim::PlayerId;
use expel_core::validate::Violation;

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
    pub(super) fn recorder(&mut self) -> Option<&mut Recorder> {
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

/// The work of [`ServerMachine::start_recording`].
pub(super) fn start(
    server: &mut ServerMachine,
    rules: &str,
    unix_now: u64,
) -> Result<(), RecordingError> {
    if server.settings.movement == crate::wire::MovementAuthority::Client {
        return Err(RecordingError::TrustedClients);
    }
    if server.world.tick != 0 || !server.players.is_empty() {
        return Err(RecordingError::Started(server.world.tick));
    }
    let mut seed = blake3::Hasher::new();
    seed.update(&server.map_hash);
    seed.update(&unix_now.to_le_bytes());
    seed.update(&server.settings.secret);
    let mut id = [0; 16];
    id.copy_from_slice(&seed.finalize().as_bytes()[..16]);
    let s = &server.settings;
    let header = Header {
        format: FORMAT,
        id,
        map_name: s.map_name.clone(),
        map_hash: server.map_hash,
        movement: server.sim.config().clone(),
        rules: rules.to_string(),
        started_unix: unix_now,
        interest: s.interest,
        snapshot_rate: s.snapshot_rate,
        input_rate: s.input_rate,
        client_budget: s.client_budget,
        max_players: s.max_players,
    };
    server.log = Log::Recording(Box::new(Recorder::new(&header)));
    Ok(())
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
            r.tick(next, each);
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
