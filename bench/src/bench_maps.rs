//! The maps a benchmark runs on: those named on the command line, else the embedded arena
//! and, when present, ../shared/maps/oa_q3dm6ish.bsp.

use anyhow::{Context, Result};
use expel_core::PlayerId;
use expel_core::{MapData, MoveConfig, MoveMode, Sim, WorldState};
use std::path::PathBuf;
use std::sync::Arc;

/// The embedded arena's simulation with default movement, and a world of `players`
/// walking players (ids 0 onwards) at its spawn points.
#[allow(dead_code)] // not every bench that reads maps builds a crowd
pub(crate) fn arena_crowd(players: u32) -> Result<(Sim, WorldState)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map");
    let map = MapData::parse_map(&std::fs::read_to_string(path).context(path)?)?;
    let movement = MoveConfig::default().validate()?;
    let model = Arc::new(expel_core::CollisionModel::build(&map));
    let (sim, _) = Sim::from_map(model, &map, movement);
    let mut world = sim.new_state();
    for id in 0..players {
        let p = sim.join_state(&world, PlayerId(id), MoveMode::Walk);
        sim.add_player(&mut world, PlayerId(id), p)?;
    }
    Ok((sim, world))
}

#[allow(dead_code)] // not every bench that builds a crowd reads maps
pub(crate) fn from_args() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut maps: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if maps.is_empty() {
        maps.push(root.join("maps/arena.map"));
        let real = root.join("../shared/maps/oa_q3dm6ish.bsp");
        if real.exists() {
            maps.push(real);
        }
    }
    maps
}
