//! Player movement throughput: player ticks per second on one core, with 64 and with
//! 1,000 players wandering a map (each colliding with the map and with the others).
//!
//! `cargo run --release -p expel-bench --bin pmove-bench [MAP]` (default: the embedded
//! arena and, when present, ../shared/maps/oa_q3dm6ish.bsp).

mod bench_maps;

use anyhow::Result;
use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, Contents, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch,
    TraceScratch,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<()> {
    let maps = bench_maps::from_args();
    println!(
        "{:<22} {:>8} {:>8} {:>14} {:>12}",
        "map", "players", "ticks", "player-ticks/s", "us/tick"
    );
    for path in maps {
        let map = MapData::parse_any(&std::fs::read(&path)?)?;
        let model = Arc::new(CollisionModel::build(&map));
        let counts: Vec<usize> = std::env::var("PLAYERS")
            .map(|v| v.split(',').map(|x| x.parse().unwrap()).collect())
            .unwrap_or(vec![64, 1000]);
        for players in counts {
            // Movement alone, as in earlier figures: no movers.
            let sim = Sim::new(model.clone(), Movement::default(), Vec::new(), Vec::new());
            let mut world = sim.new_state();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            // Scatter players over free standing spots.
            let hull = sim.movement().stand();
            let mut s = TraceScratch::new();
            let b = model.bounds();
            let mut placed = 0;
            let mut boxes = Vec::new();
            while placed < players {
                let p = DVec3::new(
                    rng.gen_range(b.min.x..b.max.x),
                    rng.gen_range(b.min.y..b.max.y),
                    rng.gen_range(b.min.z..b.max.z),
                );
                if model.position_solid(hull, p, Contents::PLAYER, &mut s) {
                    continue;
                }
                let t = model.sweep(hull, p, p - DVec3::Z * 2048.0, Contents::PLAYER, &mut s);
                if t.hit.is_none() {
                    continue;
                }
                // Not inside another player: nobody starts the bench stuck.
                let at = t.end + DVec3::Z;
                let me = hull.bounds().offset(at).expand(1.0);
                if boxes
                    .iter()
                    .any(|b: &expel_core::geom::Aabb| b.overlaps(&me))
                {
                    continue;
                }
                boxes.push(me);
                sim.add_player(&mut world, PlayerId(placed as u32), PlayerState::at(at))?;
                placed += 1;
            }
            let ticks = (200_000 / players).clamp(60, 3000);
            let mut cmds: BTreeMap<PlayerId, MoveCommand> = BTreeMap::new();
            let mut scratch = SimScratch::new();
            let t0 = Instant::now();
            for _ in 0..ticks {
                for id in 0..players as u32 {
                    let c = cmds.entry(PlayerId(id)).or_default();
                    if rng.gen_bool(0.05) {
                        let jump = if rng.gen_bool(0.2) { buttons::JUMP } else { 0 };
                        *c = MoveCommand::new(
                            1.0,
                            rng.gen_range(-1.0..1.0),
                            0.0,
                            rng.gen_range(0.0..360.0),
                            0.0,
                        )
                        .with_buttons(jump);
                    }
                }
                sim.step(&mut world, &cmds, &mut scratch);
            }
            let secs = t0.elapsed().as_secs_f64();
            let pt = (players * ticks) as f64;
            println!(
                "{:<22} {:>8} {:>8} {:>14.0} {:>12.2}",
                path.file_name().unwrap().to_string_lossy(),
                players,
                ticks,
                pt / secs,
                secs * 1e6 / pt
            );
        }
    }
    Ok(())
}
