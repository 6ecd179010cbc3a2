//! Expel's deterministic core, shared by the server and every client.
//!
//! * [`map`] reads `.map` sources (Quake, Valve 220, Quake 3 legacy and brush primitives)
//!   and compiled Quake 3 `.bsp` files into brushes and entities, and decides which brushes
//!   are solid world geometry ([`map::solidity`]).
//! * [`collision`] compiles those brushes into an immutable [`CollisionModel`] (welded
//!   polygons, shared edges, internal-edge flags, mitred expel normals, axial BSP broad
//!   phase) and traces convex [`Hull`]s through it with continuous collision detection by
//!   trajectory parameterization of polyhedral features (van Waveren 2005) and an expel zone.
//!
//! Nothing here does I/O or async work: every query is a pure function of `&CollisionModel`
//! plus caller-owned scratch, so any number of threads can trace one model at once.

pub mod collision;
pub mod geom;
pub mod map;
pub mod movement;
pub mod mover;
pub mod world;

pub use collision::{
    hull::Hull, CollisionModel, Contact, Contents, Feature, ModelStats, Trace, TraceScratch,
};
pub use geom::{Aabb, Plane, EXPEL, MAX_COORD};
pub use map::{MapData, MapError};
pub use movement::{pmove, MoveCommand, MoveConfig, MoveMode, Movement, PlayerState};
pub use world::World;
