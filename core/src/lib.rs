//! Expel's deterministic core, shared by the server and every client: no protocol, no
//! networking types, no I/O.
//!
//! * [`map`] reads `.map` sources (Quake, Valve 220, Quake 3 legacy and brush primitives)
//!   and compiled Quake 3 `.bsp` files into brushes and entities, and decides which brushes
//!   are solid world geometry ([`map::solidity`]).
//! * [`collision`] compiles those brushes into an immutable [`CollisionModel`] (welded
//!   polygons, shared edges, internal-edge flags, mitred expel normals, axial BSP broad
//!   phase) and traces convex [`Hull`]s through it with continuous collision detection by
//!   trajectory parameterization of polyhedral features (van Waveren 2005) and an expel zone.
//!
//! * [`movement`] is the one player movement function ([`pmove`]) the server and every
//!   client run, over quantized [`PlayerState`]s and [`MoveCommand`]s.
//! * [`mover`] turns doors, platforms, trains and rotators into moving collision models.
//! * [`sim`] is the simulation as a server steps it and a client predicts it: an immutable
//!   [`Sim`] shared by `Arc`, a cloneable, serializable [`WorldState`], and one function
//!   per player tick.
//! * [`validate`] judges what clients claim of their moves against the same rules.
//!
//! Nothing here does I/O or async work: every query is a pure function of `&CollisionModel`
//! plus caller-owned scratch, so any number of threads can trace one model at once. The
//! wire protocol that carries it is `expel-protocol`.

#![warn(missing_docs)]

pub mod collision;
pub mod geom;
mod id;
pub mod map;
pub mod movement;
pub mod mover;
pub mod sim;
pub mod validate;

pub use collision::{
    hull::Hull, CollisionModel, Contact, Contents, Feature, Hit, ModelStats, Sweep, Target, Trace,
    TraceScratch,
};
pub use geom::{Aabb, Plane, EXPEL, MAX_COORD};
pub use id::{EntityId, PlayerId};
pub use map::{MapData, MapError, MapWarning};
pub use movement::{
    pmove, ConfigError, MoveCommand, MoveConfig, MoveEvents, MoveMode, Movement, Obstacle,
    PlayerState,
};
pub use sim::{
    EntityState, Impact, Motion, PlayerBox, PlayerTick, Sim, SimError, SimScratch, StepReport,
    Struck, WorldState,
};
