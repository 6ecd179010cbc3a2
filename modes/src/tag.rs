//! Tag, the game mode shipped with the server (`expel serve --mode tag`): one player is
//! "it" and passes it on by touching another, which scores the passer a point. After a
//! pass the new "it" stands frozen for a second ([`MoveMode::Frozen`](expel_core::MoveMode))
//! while the others run. The score goes to every player (reliable, [`TagNews::Score`])
//! whenever it changes, and to each player who joins. A player's chat line ([`Say`])
//! goes to everyone ([`TagNews::Said`]).

use expel_core::sim::PlayerId;
use serde::{Deserialize, Serialize};

/// Horizontal distance between two players' origins within which "it" touches the other
/// (players are 32 units wide: a little more than shoulder to shoulder).
pub const TAG_REACH: f64 = 40.0;
/// Vertical distance between origins within which players touch (a player's height).
pub const TAG_HEIGHT: f64 = 56.0;
/// Ticks after a pass that the new "it" stands frozen, before it can pass it on.
pub const TAG_COOLDOWN_TICKS: u64 = 60;

/// The game's state as every player is told it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagScore {
    /// The tick it was made at.
    pub tick: u64,
    /// Who is "it" (none while nobody plays).
    pub it: Option<PlayerId>,
    /// Passes made, all told.
    pub passes: u64,
    /// Points per player in the game, in id order.
    pub scores: Vec<(PlayerId, u32)>,
}

/// Longest chat line passed on, in characters (a longer one is cut).
pub const MOST_SAID: usize = 200;

/// What a player sends at tag: a chat line for everyone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Say(pub String);

/// What tag sends its players (reliable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagNews {
    /// The score, changed.
    Score(TagScore),
    /// A player's chat line, clean for display ([`display_line`](expel_protocol::text::display_line):
    /// nothing that reorders, hides or stacks), at most [`MOST_SAID`] characters.
    Said {
        /// Who said it.
        from: PlayerId,
        /// What.
        line: String,
    },
}

#[cfg(feature = "server")]
pub use rules::Tag;

#[cfg(feature = "server")]
mod rules {
    use super::{Say, TagNews, TagScore, MOST_SAID, TAG_COOLDOWN_TICKS, TAG_HEIGHT, TAG_REACH};
    use expel_core::movement::MoveMode;
    use expel_core::sim::PlayerId;
    use expel_protocol::messages::Channel;
    use expel_protocol::server::{Game, GameRules, Sender};
    use std::collections::BTreeMap;

    /// Tag's rules (see the module docs).
    #[derive(Debug, Default)]
    pub struct Tag {
        it: Option<PlayerId>,
        scores: BTreeMap<PlayerId, u32>,
        passes: u64,
        /// The first tick "it" may pass it on.
        ready_at: u64,
        /// The mode "it" had before it was frozen, until it is thawed.
        thaw_to: Option<MoveMode>,
        /// The score changed since it was last sent.
        changed: bool,
        /// The score as last sent, for the operator's summary (taken once).
        summary: Option<String>,
    }

    impl Tag {
        /// A game with nobody in it.
        pub fn new() -> Tag {
            Tag::default()
        }

        fn score(&self, tick: u64) -> TagScore {
            TagScore {
                tick,
                it: self.it,
                passes: self.passes,
                scores: self.scores.iter().map(|(p, s)| (*p, *s)).collect(),
            }
        }

        /// Makes `player` "it", frozen for the cooldown.
        fn make_it(&mut self, game: &mut Game<'_>, player: Option<PlayerId>) {
            self.it = player;
            self.ready_at = game.tick() + TAG_COOLDOWN_TICKS;
            self.thaw_to = None;
            let Some(p) = player else { return };
            let mode = game.world().player(p).map(|s| s.mode);
            if let Some(m) = mode.filter(|m| *m != MoveMode::Frozen) {
                if game.set_mode(p, MoveMode::Frozen).is_ok() {
                    self.thaw_to = Some(m);
                }
            }
        }

        /// The first other player "it" touches, in id order.
        fn touched(&self, game: &Game<'_>, it: PlayerId) -> Option<PlayerId> {
            let world = game.world();
            let me = world.player(it)?.origin();
            game.players().filter(|p| *p != it).find(|p| {
                world.player(*p).is_some_and(|o| {
                    let d = o.origin() - me;
                    let flat = d.x * d.x + d.y * d.y;
                    flat <= TAG_REACH * TAG_REACH && d.z.abs() <= TAG_HEIGHT
                })
            })
        }
    }

    impl GameRules for Tag {
        fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
            self.scores.insert(player, 0);
            if self.it.is_none() {
                self.make_it(game, Some(player));
            }
            self.changed = true;
        }

        fn left(&mut self, game: &mut Game<'_>, player: PlayerId, _reason: &str) {
            self.scores.remove(&player);
            if self.it == Some(player) {
                // The lowest id left takes over, after the cooldown.
                let next = self.scores.keys().next().copied();
                self.make_it(game, next);
            }
            self.changed = true;
        }

        fn tick(&mut self, game: &mut Game<'_>) {
            // ANCHOR: chat
            while let Some((from, _, Say(line))) = game.poll::<Say>() {
                let line = expel_protocol::text::display_line(&line, MOST_SAID);
                // In the speaker's turn at each recipient: no flood crowds out the others.
                let said = TagNews::Said { from, line };
                let _ = game.broadcast_from(Sender::Player(from), Channel::Reliable, &said);
            }
            // ANCHOR_END: chat
            let tick = game.tick();
            if let Some(it) = self.it.filter(|_| tick >= self.ready_at) {
                if let Some(mode) = self.thaw_to.take() {
                    let _ = game.set_mode(it, mode);
                }
                if let Some(next) = self.touched(game, it) {
                    *self.scores.entry(it).or_default() += 1;
                    self.passes += 1;
                    self.make_it(game, Some(next));
                    self.changed = true;
                }
            }
            if std::mem::take(&mut self.changed) {
                let score = self.score(tick);
                // The game's own turn at each player: no chat flood holds it back.
                let _ = game.broadcast(Channel::Reliable, &TagNews::Score(score.clone()));
                self.summary = serde_json::to_string(&score).ok();
            }
        }

        fn summary(&mut self) -> Option<String> {
            self.summary.take()
        }
    }
}
