//! The replaying side: a recording's entries as a replaying machine takes them, and the
//! first place where what it does differs from what was recorded.

use super::commands::Last;
use super::{Entry, ReplayError};
use expel_core::PlayerId;
use std::collections::VecDeque;

/// A recording's entries, read block by block, as a replaying machine takes them.
#[derive(Debug, Default)]
pub struct Tape {
    entries: VecDeque<(u64, Entry)>,
    pub(crate) last: Last,
    /// The first difference from the recording.
    error: Option<ReplayError>,
    /// Violations the replay judged again itself (the rules' refusals), to compare with
    /// those recorded.
    pub(crate) reproduced: VecDeque<(PlayerId, String, String)>,
    /// The offset of the entry taken last.
    at: u64,
    /// Hashes compared: the short ones, and the whole ones.
    pub(crate) hashes: (u64, u64),
}

impl Tape {
    /// Adds a block's entries.
    pub(crate) fn load(&mut self, entries: Vec<(u64, Entry)>) {
        self.entries.extend(entries);
    }

    /// Whether every entry loaded was taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The next entry.
    pub(crate) fn head(&self) -> Option<&Entry> {
        self.entries.front().map(|(_, e)| e)
    }

    /// Takes the next entry.
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        let (at, e) = self.entries.pop_front()?;
        self.at = at;
        Some(e)
    }

    /// The replay differs from the recording at `tick`: kept if it is the first.
    pub(crate) fn diverged(&mut self, tick: u64, what: String) {
        let offset = self.at;
        self.error
            .get_or_insert(ReplayError::Diverged { tick, offset, what });
    }

    /// The world's hash after `tick` differs from the recording's.
    pub(crate) fn mismatch(&mut self, tick: u64) {
        let offset = self.at;
        self.error
            .get_or_insert(ReplayError::Mismatch { tick, offset });
    }

    /// The first difference, taken.
    pub(crate) fn take_error(&mut self) -> Option<ReplayError> {
        self.error.take()
    }
}
