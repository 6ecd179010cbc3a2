//! The game modes Expel ships, written against the rules API as any game would be:
//! [`tag`] (the demo's) and [`deathmatch`] (a hitscan gun judged as the shooter saw it,
//! and rockets the core sweeps). `expel serve --mode tag|deathmatch` runs them; their
//! messages, buttons and rocket launcher are what a client needs of them.

#![warn(missing_docs)]

pub mod deathmatch;
pub mod tag;
