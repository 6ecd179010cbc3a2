//! The replaying side: a recording's entries as a replaying machine takes them, and the
//! first place where what it does differs from what was recorded.

use super::commands::Last;
use super::{Entry, ReplayError};
use expel_core::sim::{PlayerBox, ShotView, Struck};
use expel_core::PlayerId;
use std::collections::VecDeque;

/// A shot that a violation was counted in, as the server judged it: the view it was
/// judged at, what it met, and every player's box at that view as the server had them.
#[derive(Clone, Debug, PartialEq)]
pub struct ShotEvidence {
    /// Who shot.
    pub shooter: PlayerId,
    /// The moment the shooter's client drew the others at.
    pub view: ShotView,
    /// What it met first, and where.
    pub hit: Option<(Struck, [f64; 3])>,
    /// A player it passed through that the client was never shown.
    pub unseen: Option<PlayerId>,
    /// The players' boxes at the view (rewound), as the server had them.
    pub rewound: Vec<PlayerBox>,
}

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
    /// The shot being replayed, while its effects are applied.
    pub(crate) shot: Option<ShotEvidence>,
    /// Each violation counted, in order: the shot it was counted in, if any.
    pub(crate) evidence: VecDeque<Option<ShotEvidence>>,
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
