//! Playing a recording again: a fresh machine with the same simulation and rules, fed
//! from the recording where the original was fed from the network, its world's hash
//! checked after every tick.

use super::{entries, Blocks, Entry, Header, RecordError, Tape};
use crate::server::{Event, GameRules, Log, ServerMachine, ServerSettings};
use crate::time::Instant;
use expel_core::sim::{PlayerId, Sim};
use expel_core::validate::ViolationKind;
use std::io::Read;
use std::sync::Arc;

/// Why a replay stopped.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplayError {
    /// The file cannot be read.
    #[error(transparent)]
    File(#[from] RecordError),
    /// The world after a tick is not the one recorded.
    #[error(
        "tick {tick}: the world's hash differs from the recording's (the entry at byte {offset})"
    )]
    Mismatch {
        /// The first tick that differs.
        tick: u64,
        /// The byte of the entry compared.
        offset: u64,
    },
    /// The replay asked for something the recording does not have there.
    #[error("tick {tick}, byte {offset}: the replay differs from the recording: {what}")]
    Diverged {
        /// The world's tick.
        tick: u64,
        /// The byte of the entry taken last.
        offset: u64,
        /// What differs.
        what: String,
    },
    /// This recording needs another map, movement or build.
    #[error("this recording cannot be replayed with what was given: {0}")]
    Setup(String),
}

/// What one [`Replay::step`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Replayed {
    /// It stepped this tick.
    Tick(u64),
    /// The part ended: the next part goes on ([`Replay::next_part`]), if there is one.
    Part,
    /// The recording ended (the server shut down for this reason).
    End(String),
}

/// A violation as the replay counted it.
#[derive(Clone, Debug, PartialEq)]
pub struct Counted {
    /// The world's tick when it was counted.
    pub tick: u64,
    /// The player.
    pub player: PlayerId,
    /// Its kind.
    pub kind: ViolationKind,
    /// Its evidence.
    pub evidence: String,
    /// The shot it was counted in, if it was.
    pub shot: Option<super::ShotEvidence>,
}

/// A recording being played again.
pub struct Replay<R> {
    machine: ServerMachine,
    header: Header,
    blocks: Blocks<R>,
    violations: Vec<Counted>,
    ended: Option<String>,
}

impl<R: Read> Replay<R> {
    /// Reads a recording's start: its header (to find its map, movement and rules), and
    /// its blocks to come.
    pub fn open(read: R) -> Result<(Header, Blocks<R>), ReplayError> {
        Ok(Blocks::open(read, 0)?)
    }

    /// A replay of the recording `header` opened, on `sim` of the map `map_bytes` with
    /// `rules` (the same ones, made the same way), its tick 0 at `now`.
    pub fn new(
        (header, blocks): (Header, Blocks<R>),
        sim: Arc<Sim>,
        map_bytes: Arc<Vec<u8>>,
        rules: Option<Box<dyn GameRules>>,
        now: Instant,
    ) -> Result<Replay<R>, ReplayError> {
        let hash = *blake3::hash(&map_bytes).as_bytes();
        if hash != header.map_hash {
            return Err(ReplayError::Setup(format!(
                "it was recorded on the map \"{}\" (BLAKE3 {}), and the map given is another",
                header.map_name,
                hex::encode(header.map_hash)
            )));
        }
        if *sim.config() != header.movement {
            let why = "it was recorded with other movement settings".into();
            return Err(ReplayError::Setup(why));
        }
        let settings = ServerSettings {
            interest: header.interest,
            snapshot_rate: header.snapshot_rate,
            input_rate: header.input_rate,
            client_budget: header.client_budget,
            max_players: header.max_players,
            ..ServerSettings::new(header.map_name.clone(), map_bytes, b"replay".to_vec())
        };
        let mut machine = ServerMachine::new(sim, settings, now, header.started_unix)
            .map_err(|e| ReplayError::Setup(e.to_string()))?;
        if let Some(rules) = rules {
            machine.set_rules(rules);
        }
        machine.log = Log::Replaying(Box::default());
        Ok(Replay {
            machine,
            header,
            blocks,
            violations: Vec::new(),
            ended: None,
        })
    }

    /// The recording's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The machine replaying (its world, stats, rules' summary).
    pub fn machine(&self) -> &ServerMachine {
        &self.machine
    }

    /// The violations counted so far, in order.
    pub fn violations(&self) -> &[Counted] {
        &self.violations
    }

    /// Hashes compared so far: after each tick (16 bits), and whole.
    pub fn hashes(&self) -> (u64, u64) {
        match &self.machine.log {
            Log::Replaying(t) => t.hashes,
            _ => (0, 0),
        }
    }

    /// Goes on into the recording's next part.
    pub fn next_part(&mut self, read: R) -> Result<(), ReplayError> {
        let (header, blocks) = Blocks::open(read, self.blocks.offset())?;
        if header.id != self.header.id {
            let why = "the next part is of another recording".into();
            return Err(ReplayError::Setup(why));
        }
        self.blocks = blocks;
        Ok(())
    }

    fn tape(&mut self) -> &mut Tape {
        // Made replaying, it stays so.
        match &mut self.machine.log {
            Log::Replaying(t) => t,
            other => {
                *other = Log::Replaying(Box::default());
                other.tape().expect("just set")
            }
        }
    }

    /// Steps the next tick recorded (and what the network decided before it).
    pub fn step(&mut self) -> Result<Replayed, ReplayError> {
        loop {
            if let Some(reason) = &self.ended {
                return Ok(Replayed::End(reason.clone()));
            }
            if self.tape().is_empty() {
                let Some((at, payload)) = self.blocks.next_block()? else {
                    return Ok(Replayed::Part);
                };
                let got = entries(&payload, at)?;
                self.tape().load(got);
                continue;
            }
            self.machine.replay_between();
            self.settle()?;
            let now = self.machine.world().tick;
            let t = self.tape();
            let tick = match t.head() {
                None => continue,
                Some(Entry::Tick { tick, .. }) if *tick == now + 1 => *tick,
                Some(Entry::Tick { tick, .. }) => {
                    let what = format!("tick {tick} recorded where tick {} was due", now + 1);
                    t.pop();
                    t.diverged(now, what);
                    self.settle()?;
                    continue;
                }
                Some(Entry::End { reason }) => {
                    self.ended = Some(reason.clone());
                    continue;
                }
                Some(other) => {
                    let what = format!("{other:?} where a tick was due");
                    t.pop();
                    t.diverged(now, what);
                    self.settle()?;
                    continue;
                }
            };
            self.machine.replay_tick(tick);
            self.settle()?;
            return Ok(Replayed::Tick(tick));
        }
    }

    /// Takes the machine's events (its violations) and its first difference, if any.
    fn settle(&mut self) -> Result<(), ReplayError> {
        let tick = self.machine.world().tick;
        while let Some(e) = self.machine.poll_event() {
            if let Event::Violation {
                player,
                kind,
                evidence,
            } = e
            {
                let shot = self.tape().evidence.pop_front().flatten();
                self.violations.push(Counted {
                    tick,
                    player,
                    kind,
                    evidence,
                    shot,
                });
            }
        }
        while self.machine.poll_output().is_some() {}
        match self.tape().take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
