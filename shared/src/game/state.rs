//! A game's own state of its players and entities, as types the game registers.
//!
//! A game names one serde type for a player's state (health, ammo, score) and one for an
//! entity's (a pickup's charge, a flag's team): [`Replicated`] gives each a name on the
//! wire. The server's rules register them ([`GameRules::states`](crate::server::GameRules::states)),
//! and the welcome tells each client their names, so a client built for another game (or
//! another version of this one) is stopped at the door with both names, not left
//! decoding bytes of the wrong type. Snapshots carry a state as its postcard bytes, four
//! to a field, each field a delta against what the client acknowledged: a state that did
//! not change costs nothing, and one whose health dropped costs the piece that changed.
//!
//! The bound: at most [`MAX_STATE_BYTES`] encoded, checked each time the rules set a
//! state ([`StateError::TooLarge`] names the type and its size). A state counts against
//! the client's snapshot budget like the rest of the snapshot.
//!
//! The engine's own fields of an entity (origin, kind, owner, at rest or moving, the tick
//! it was spawned for) stay outside the game's type: the engine reads them (interest by
//! origin, [`Scope::Owner`](crate::snapshot::Scope::Owner) by owner, a shooter's predicted
//! projectile matched by kind, owner and tick), so a game cannot leave them out.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::TypeId;

pub use crate::snapshot::MAX_STATE_BYTES;

/// Longest name of a state type ([`Replicated::NAME`]), in bytes.
pub const MAX_STATE_NAME: usize = 64;

/// A game's type of a player's or an entity's state.
///
/// ```
/// use expel_protocol::game::state::Replicated;
/// #[derive(serde::Serialize, serde::Deserialize, Clone, PartialEq, Debug)]
/// struct Fighter { health: i32, ammo: u8 }
/// impl Replicated for Fighter {
///     const NAME: &'static str = "mygame.fighter/1";
/// }
/// ```
pub trait Replicated: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Its name on the wire (at most [`MAX_STATE_NAME`] bytes, not empty): the game's
    /// and the type's, with a version to change when its encoding changes.
    const NAME: &'static str;
}

/// One registered type.
#[derive(Clone, Copy, Debug)]
pub struct StateType {
    name: &'static str,
    rust_name: &'static str,
    type_id: TypeId,
    /// Whether bytes decode as the type (a client checks each state as it arrives).
    decodes: fn(&[u8]) -> bool,
}

impl PartialEq for StateType {
    fn eq(&self, other: &StateType) -> bool {
        self.type_id == other.type_id && self.name == other.name
    }
}

impl StateType {
    fn of<T: Replicated>() -> StateType {
        const {
            assert!(
                !T::NAME.is_empty() && T::NAME.len() <= MAX_STATE_NAME,
                "a Replicated's NAME is 1 to MAX_STATE_NAME bytes"
            )
        };
        StateType {
            name: T::NAME,
            rust_name: std::any::type_name::<T>(),
            type_id: TypeId::of::<T>(),
            decodes: |bytes| crate::codec::decode::<T>("state", bytes).is_ok(),
        }
    }

    /// Its name on the wire.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether `bytes` decode as the type.
    pub fn decodes(&self, bytes: &[u8]) -> bool {
        (self.decodes)(bytes)
    }
}

/// The state types of a game, one for players and one for entities, each optional.
///
/// ```
/// # use expel_protocol::game::state::{Replicated, StateTypes};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Fighter { health: i32 }
/// # impl Replicated for Fighter { const NAME: &'static str = "mygame.fighter/1"; }
/// let types = StateTypes::new().player::<Fighter>();
/// assert_eq!(types.player_name(), Some("mygame.fighter/1"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateTypes {
    player: Option<StateType>,
    entity: Option<StateType>,
}

/// Which of a game's things a state is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateOf {
    /// A player's.
    Player,
    /// An entity's.
    Entity,
}

impl std::fmt::Display for StateOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StateOf::Player => "player",
            StateOf::Entity => "entity",
        })
    }
}

impl StateTypes {
    /// No types: the game sets no state of its own.
    pub const fn new() -> StateTypes {
        StateTypes {
            player: None,
            entity: None,
        }
    }

    /// With `T` as a player's state.
    pub fn player<T: Replicated>(mut self) -> StateTypes {
        self.player = Some(StateType::of::<T>());
        self
    }

    /// With `T` as an entity's state.
    pub fn entity<T: Replicated>(mut self) -> StateTypes {
        self.entity = Some(StateType::of::<T>());
        self
    }

    /// The type registered for `of`.
    pub fn get(&self, of: StateOf) -> Option<&StateType> {
        match of {
            StateOf::Player => self.player.as_ref(),
            StateOf::Entity => self.entity.as_ref(),
        }
    }

    /// The name of the players' state type.
    pub fn player_name(&self) -> Option<&'static str> {
        self.player.map(|t| t.name)
    }

    /// The name of the entities' state type.
    pub fn entity_name(&self) -> Option<&'static str> {
        self.entity.map(|t| t.name)
    }

    /// Their names, as the welcome carries them.
    pub fn names(&self) -> StateNames {
        StateNames {
            player: self.player_name().map(str::to_owned),
            entity: self.entity_name().map(str::to_owned),
        }
    }

    /// Refuses `T` as the state of `of` unless it is the type registered for it.
    pub fn check<T: Replicated>(&self, of: StateOf) -> Result<(), StateError> {
        match self.get(of) {
            Some(t) if t.type_id == TypeId::of::<T>() => Ok(()),
            other => Err(StateError::NotRegistered {
                of,
                ty: std::any::type_name::<T>(),
                registered: other.map(|t| t.rust_name),
            }),
        }
    }

    /// Why a client registering `self` cannot play a server whose types are `server`'s
    /// (a type the client registered is not the server's; one it left out it does not
    /// read, so any will do).
    pub fn mismatch(&self, server: &StateNames) -> Option<String> {
        let pairs = [
            (StateOf::Player, self.player_name(), &server.player),
            (StateOf::Entity, self.entity_name(), &server.entity),
        ];
        pairs.into_iter().find_map(|(of, ours, theirs)| {
            let ours = ours?;
            (theirs.as_deref() != Some(ours)).then(|| match theirs {
                Some(t) => format!("the server's {of} state is {t:?}; this client reads {ours:?}"),
                None => format!("the server's game sets no {of} state; this client reads {ours:?}"),
            })
        })
    }
}

/// The names of a game's state types, as the welcome tells a client.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateNames {
    /// The players' state type's.
    pub player: Option<String>,
    /// The entities' state type's.
    pub entity: Option<String>,
}

impl StateNames {
    /// The name for `of`.
    pub fn get(&self, of: StateOf) -> Option<&str> {
        match of {
            StateOf::Player => self.player.as_deref(),
            StateOf::Entity => self.entity.as_deref(),
        }
    }

    /// Whether each name is 1 to [`MAX_STATE_NAME`] bytes.
    pub fn valid(&self) -> bool {
        [&self.player, &self.entity]
            .into_iter()
            .flatten()
            .all(|n| !n.is_empty() && n.len() <= MAX_STATE_NAME)
    }
}

/// Why a game's state could not be set or read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StateError {
    /// Its encoding is larger than [`MAX_STATE_BYTES`].
    #[error("{ty}: a state of {bytes} bytes exceeds the limit of {MAX_STATE_BYTES}")]
    TooLarge {
        /// The type.
        ty: &'static str,
        /// Its size encoded.
        bytes: usize,
    },
    /// The type is not the one the game registered for it.
    #[error("{ty} is not the {of} state type registered ({})", registered.unwrap_or("none"))]
    NotRegistered {
        /// A player's or an entity's.
        of: StateOf,
        /// The type given.
        ty: &'static str,
        /// The type registered.
        registered: Option<&'static str>,
    },
    /// The type read is not the server's (the welcome named another, or none).
    #[error("the server's {of} state is {}, not {ours:?}", servers.as_deref().map_or("none".into(), |s| format!("{s:?}")))]
    NotTheServers {
        /// A player's or an entity's.
        of: StateOf,
        /// The name of the type read.
        ours: &'static str,
        /// The server's, if any.
        servers: Option<String>,
    },
    /// The state did not encode, or the server's bytes do not decode.
    #[error("{ty}: {detail}")]
    Codec {
        /// The type.
        ty: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// The player is not in the game.
    #[error("player {0} is not in the world")]
    NotPlaying(expel_core::sim::PlayerId),
    /// No such entity in the world.
    #[error("entity {0} is not in the world")]
    NoEntity(expel_core::sim::EntityId),
}

/// `bytes` read as `T`, the type the server named `servers` for `of`.
pub fn read_state<T: Replicated>(
    of: StateOf,
    servers: Option<&str>,
    bytes: &[u8],
) -> Result<T, StateError> {
    if servers != Some(T::NAME) {
        return Err(StateError::NotTheServers {
            of,
            ours: T::NAME,
            servers: servers.map(str::to_owned),
        });
    }
    crate::codec::decode::<T>("state", bytes).map_err(|e| StateError::Codec {
        ty: std::any::type_name::<T>(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Health(u8);
    impl Replicated for Health {
        const NAME: &'static str = "test.health/1";
    }
    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Charge(u32, u32);
    impl Replicated for Charge {
        const NAME: &'static str = "test.charge/1";
    }

    #[test]
    fn only_the_registered_type_is_taken() {
        let types = StateTypes::new().player::<Health>();
        assert_eq!(types.check::<Health>(StateOf::Player), Ok(()));
        let err = types.check::<Charge>(StateOf::Player).unwrap_err();
        assert!(err.to_string().contains("Charge"), "{err}");
        assert!(err.to_string().contains("Health"), "{err}");
        let none = types.check::<Health>(StateOf::Entity).unwrap_err();
        assert!(none.to_string().contains("registered (none)"), "{none}");
    }

    #[test]
    fn a_client_of_another_type_is_told_both_names() {
        let client = StateTypes::new().player::<Health>();
        let same = StateTypes::new().player::<Health>().entity::<Charge>();
        assert_eq!(
            client.mismatch(&same.names()),
            None,
            "the entity's is not read"
        );
        let other = StateTypes::new().player::<Charge>();
        let why = client.mismatch(&other.names()).unwrap();
        assert!(
            why.contains("test.charge/1") && why.contains("test.health/1"),
            "{why}"
        );
        let why = client.mismatch(&StateNames::default()).unwrap();
        assert!(why.contains("sets no player state"), "{why}");
        assert_eq!(StateTypes::new().mismatch(&other.names()), None);
    }

    #[test]
    fn reads_check_the_name_and_the_bytes() {
        let bytes = postcard::to_allocvec(&Health(7)).unwrap();
        let name = Some(Health::NAME);
        assert_eq!(
            read_state::<Health>(StateOf::Player, name, &bytes),
            Ok(Health(7))
        );
        let other = read_state::<Charge>(StateOf::Player, name, &bytes).unwrap_err();
        assert!(matches!(other, StateError::NotTheServers { .. }), "{other}");
        let short = read_state::<Charge>(StateOf::Player, Some(Charge::NAME), &[1]);
        assert!(matches!(short, Err(StateError::Codec { .. })), "{short:?}");
        let t = StateTypes::new().player::<Charge>();
        assert!(!t.get(StateOf::Player).unwrap().decodes(&[1]));
        assert!(t.get(StateOf::Player).unwrap().decodes(&[1, 2]));
    }

    #[test]
    fn names_past_the_bound_are_invalid() {
        let long = StateNames {
            player: Some("x".repeat(MAX_STATE_NAME + 1)),
            entity: None,
        };
        assert!(!long.valid());
        assert!(!StateNames {
            player: Some(String::new()),
            entity: None
        }
        .valid());
        assert!(StateTypes::new().player::<Health>().names().valid());
    }
}
