//! A recorded match in the operator's live view (`expel replay FILE --view`): the same
//! page, fed from a replay's frames instead of the live stream, with a timeline (pause,
//! speed, seek) and each violation's evidence. The operator's alone: it listens on
//! loopback only.

use crate::live::{frame_of, map_json};
use expel_core::{Sim, WorldState};

/// Frames kept at most (ten a second for four hours); past them the rest of the match
/// is not drawn (the summary says so).
const MAX_FRAMES: usize = 10 * 3600 * 4;
/// Frames one request asks for at most.
pub(crate) const MAX_FRAMES_ASKED: usize = 600;

/// A replay as the live view draws it: the map, a frame ten times a second of play, and
/// the recording's summary (its violations and their evidence).
pub struct ReplayView {
    pub(crate) map_json: String,
    pub(crate) frames: Vec<String>,
    pub(crate) summary: String,
    cut: bool,
}

impl ReplayView {
    /// The view of a replay on `sim`'s map, named `name`.
    pub fn new(sim: &Sim, name: &str) -> ReplayView {
        ReplayView {
            map_json: map_json(sim, name),
            frames: Vec::new(),
            summary: "{}".into(),
            cut: false,
        }
    }

    /// Adds a frame of `world`, its players ringed where `flagged` says.
    pub fn frame(&mut self, sim: &Sim, world: &WorldState, flagged: &dyn Fn(u32) -> bool) {
        if self.frames.len() >= MAX_FRAMES {
            self.cut = true;
            return;
        }
        self.frames.push(frame_of(sim, world, flagged, 0.0, (0, 0)));
    }

    /// Frames kept.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Whether frames past the most kept (ten a second for four hours) were left out.
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// The recording's summary (JSON) the page shows: `tick_rate`, `frame_ticks`,
    /// `violations` (each with its `frame` and evidence) and what else the caller adds.
    pub fn set_summary(&mut self, json: String) {
        self.summary = json;
    }

    /// Frames `from` to `from + count` (at most `MAX_FRAMES_ASKED`) as a JSON array.
    pub(crate) fn frames_json(&self, from: usize, count: usize) -> String {
        let end = from
            .saturating_add(count.min(MAX_FRAMES_ASKED))
            .min(self.frames.len());
        let slice = self.frames.get(from..end).unwrap_or_default();
        format!("[{}]", slice.join(","))
    }
}
