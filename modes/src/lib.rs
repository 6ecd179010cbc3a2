//! The game modes Expel ships, written against the rules API as any game would be:
//! [`tag`] (the demo's) and [`deathmatch`] (a hitscan gun judged as the shooter saw it,
//! and rockets the core sweeps). `expel serve --mode` runs them by their names in [`MODES`]; their
//! messages, buttons and rocket launcher are what a client needs of them.

#![warn(missing_docs)]

pub mod deathmatch;
pub mod tag;

/// A game mode `expel serve --mode` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Movement alone: no rules.
    None,
    /// [`tag::Tag`].
    Tag,
    /// [`deathmatch::Deathmatch`].
    Deathmatch,
}

/// Every mode, by the name the command line gives it.
pub const MODES: [(&str, Mode); 3] = [
    ("none", Mode::None),
    ("tag", Mode::Tag),
    ("deathmatch", Mode::Deathmatch),
];

#[cfg(feature = "server")]
impl Mode {
    /// Its rules for the server (none for movement alone).
    pub fn rules(self) -> Option<Box<dyn expel_protocol::server::GameRules>> {
        match self {
            Mode::None => None,
            Mode::Tag => Some(Box::new(tag::Tag::new())),
            Mode::Deathmatch => Some(Box::new(deathmatch::Deathmatch::new())),
        }
    }
}
