//! The ids of players and entities: numbers on the wire (serde sees the number alone, so
//! the bytes are the same as a bare `u32`), distinct types in the code, so a player's id
//! is never passed where an entity's belongs.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize,
            Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<u32> for $name {
            fn from(n: u32) -> Self {
                $name(n)
            }
        }

        impl From<$name> for u32 {
            fn from(id: $name) -> u32 {
                id.0
            }
        }
    };
}

id!(
    /// A player's id: the number its connect token names, unique among a server's
    /// players.
    PlayerId
);
id!(
    /// An entity's id, unique within a world (never reused while a client may still
    /// hold the old one).
    EntityId
);
