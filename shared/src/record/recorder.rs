//! The recording side: entries into blocks, in the machine, as they happen; the shell
//! takes the finished bytes ([`Recorder::take`]) and writes them where it likes.

use super::commands::Last;
use super::{block, start, Call, Entry, Header, BLOCK_BYTES, BLOCK_TICKS, FULL_HASH_EVERY};
use super::{MAX_BLOCK, MAX_WAITING};
use expel_core::movement::MoveCommand;
use expel_core::validate::Violation;
use expel_core::PlayerId;
use std::collections::VecDeque;

/// A recording being made (see the [module docs](super)).
#[derive(Debug)]
pub struct Recorder {
    /// The block being filled.
    buf: Vec<u8>,
    /// Entries in it.
    entries: u32,
    /// Calls under way: where each one's entry goes, and the entries before it.
    calls: Vec<(usize, u32)>,
    ticks: u64,
    last: Last,
    /// Finished bytes, for the shell.
    ready: VecDeque<Vec<u8>>,
    waiting: usize,
    /// Why it stopped, if it did.
    failed: Option<String>,
}

impl Recorder {
    /// A recording of `header`'s match: its start is ready at once.
    pub fn new(header: &Header) -> Recorder {
        let first = start(header);
        Recorder {
            buf: Vec::new(),
            entries: 0,
            calls: Vec::new(),
            ticks: 0,
            last: Last::default(),
            waiting: first.len(),
            ready: VecDeque::from([first]),
            failed: None,
        }
    }

    /// The next finished bytes to write, in order.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let b = self.ready.pop_front()?;
        self.waiting -= b.len();
        Some(b)
    }

    /// Why the recording stopped (too much untaken, a tick past a block's limit).
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn push(&mut self, e: &Entry) {
        if self.failed.is_some() {
            return;
        }
        // Plain data always encodes.
        if postcard::to_extend(e, std::mem::take(&mut self.buf))
            .map(|b| self.buf = b)
            .is_err()
        {
            self.fail("an entry did not encode".into());
            return;
        }
        self.entries += 1;
        if self.buf.len() > MAX_BLOCK - 8 {
            self.fail(format!("a tick's entries passed {MAX_BLOCK} bytes"));
        }
    }

    fn fail(&mut self, why: String) {
        self.failed.get_or_insert(why);
        self.buf = Vec::new();
        self.calls.clear();
    }

    /// Closes the block being filled.
    fn flush(&mut self) {
        if self.buf.is_empty() || self.failed.is_some() {
            return;
        }
        let b = block(&self.buf);
        self.buf.clear();
        self.entries = 0;
        self.ticks = 0;
        self.waiting += b.len();
        self.ready.push_back(b);
        if self.waiting > MAX_WAITING {
            self.fail(format!("over {MAX_WAITING} bytes waiting to be written"));
        }
    }

    /// Tick `tick` is about to be stepped with `commands` (each player in the world, in
    /// id order, with its command if one came).
    pub(crate) fn tick<'a>(
        &mut self,
        tick: u64,
        commands: impl ExactSizeIterator<Item = (PlayerId, Option<&'a MoveCommand>)>,
    ) {
        if self.buf.len() >= BLOCK_BYTES || self.ticks >= BLOCK_TICKS {
            self.flush();
        }
        self.ticks += 1;
        let players = commands.len() as u32;
        let mut bytes = Vec::with_capacity(2 * commands.len());
        self.last.encode(commands, &mut bytes);
        self.push(&Entry::Tick {
            tick,
            players,
            commands: bytes,
        });
    }

    /// The world's hash after tick `tick`.
    pub(crate) fn hash(&mut self, tick: u64, hash: u64) {
        let full = tick.is_multiple_of(FULL_HASH_EVERY).then_some(hash);
        self.push(&Entry::Hash {
            short: hash as u16,
            full,
        });
    }

    /// A player entered the world.
    pub(crate) fn joined(&mut self, id: PlayerId) {
        self.last.joined(id);
        self.push(&Entry::Joined { player: id.0 });
    }

    /// A player left the world.
    pub(crate) fn left(&mut self, id: PlayerId, reason: &str) {
        self.last.left(id);
        let reason = reason.to_string();
        self.push(&Entry::Left {
            player: id.0,
            reason,
        });
    }

    /// Ticks skipped.
    pub(crate) fn skipped(&mut self, ticks: u64) {
        self.push(&Entry::Skipped { ticks });
    }

    /// A violation counted after tick `tick`.
    pub(crate) fn violation(&mut self, tick: u64, id: PlayerId, v: &Violation) {
        self.push(&Entry::Violation {
            tick,
            player: id.0,
            kind: v.kind.name().to_string(),
            evidence: v.evidence.clone(),
        });
    }

    /// A call of the rules begins: what it leads to is its effects.
    pub(crate) fn begin_call(&mut self) {
        self.calls.push((self.buf.len(), self.entries));
    }

    /// The call begun last ended as `call` (`None`: it took nothing from outside, and
    /// nothing followed from it).
    pub(crate) fn end_call(&mut self, call: Option<Call>) {
        let Some((at, before)) = self.calls.pop() else {
            return;
        };
        let effects = self.entries - before;
        let Some(call) = call else {
            debug_assert_eq!(effects, 0, "a call that took nothing had effects");
            return;
        };
        let entry = Entry::Call { call, effects };
        match postcard::to_allocvec(&entry) {
            Ok(bytes) if at <= self.buf.len() => {
                self.buf.splice(at..at, bytes);
                self.entries += 1;
            }
            _ => self.fail("a call did not encode".into()),
        }
    }

    /// The recording ends: the last block is closed.
    pub(crate) fn end(&mut self, reason: &str) {
        let reason = reason.to_string();
        self.push(&Entry::End { reason });
        self.flush();
    }
}
