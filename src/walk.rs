//! `expel walk`: bots wander the map with the shared movement code, as the server will
//! run them; prints where they go and checks every tick that nobody ends in solid.

use crate::load::Loaded;
use anyhow::{ensure, Result};
use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{Contents, MoveCommand, MoveConfig, PlayerState, SimScratch, TraceScratch};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Instant;

/// Longest walk: a day of game time.
const MAX_SECONDS: f64 = 86_400.0;

pub(crate) fn run(loaded: Loaded, bots: u32, seconds: f64) -> Result<()> {
    ensure!(
        (1..=100_000).contains(&bots),
        "--bots must be 1 to 100000, got {bots}"
    );
    ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS,
        "--seconds must be a number above 0 and at most {MAX_SECONDS}, got {seconds}"
    );
    println!(
        "{}: {} polygons, {} solid brushes, model ready in {:.1} ms{}",
        loaded.name,
        loaded.model.stats().polygons,
        loaded.model.stats().solid_brushes,
        loaded.build_ms,
        if loaded.cached { " (cached)" } else { "" }
    );
    let name = loaded.name.clone();
    let sim = loaded.into_sim(MoveConfig::default())?;
    let spawns = sim.spawns().to_vec();
    ensure!(!spawns.is_empty(), "{name} has no usable spawn points");
    let model = sim.map().clone();
    let mut world = sim.new_state();
    for id in 0..bots {
        // Bots share spawn points, lifted apart so they do not start inside each other.
        let sp = spawns[id as usize % spawns.len()];
        let lift = 64.0 * (id as usize / spawns.len()) as f64;
        sim.add_player(
            &mut world,
            PlayerId(id),
            PlayerState::at(sp + DVec3::Z * lift),
        )?;
    }
    let rate = sim.config().tick_rate;
    let ticks = (seconds * rate as f64).round() as u64;
    let mut scratch = SimScratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut cmds: BTreeMap<PlayerId, MoveCommand> = BTreeMap::new();
    let mut s = TraceScratch::new();
    let (mut in_solid, mut travelled, mut jumps) = (0u64, 0.0f64, 0u64);
    let started = Instant::now();
    let mut sim_time = 0.0;
    for tick in 1..=ticks {
        for id in 0..bots {
            let c = cmds.entry(PlayerId(id)).or_default();
            // Wander: keep a heading for a while, turn, sometimes hop or crouch.
            if rng.gen_bool(0.02) || tick == 1 {
                let mut b = 0;
                if rng.gen_bool(0.3) {
                    b |= buttons::JUMP;
                    jumps += 1;
                }
                if rng.gen_bool(0.1) {
                    b |= buttons::CROUCH;
                }
                *c = MoveCommand::new(
                    1.0,
                    rng.gen_range(-0.5..0.5),
                    0.0,
                    rng.gen_range(0.0..360.0),
                    0.0,
                )
                .with_buttons(b);
            }
        }
        let before: Vec<DVec3> = world.players.values().map(|p| p.state.origin()).collect();
        let t0 = Instant::now();
        sim.step(&mut world, &cmds, &mut scratch);
        sim_time += t0.elapsed().as_secs_f64();
        for (p, b) in world.players.values().map(|p| &p.state).zip(&before) {
            travelled += (p.origin() - *b).length();
            let hull = sim.movement().hull(p);
            if model.position_solid(hull, p.origin(), Contents::PLAYER, &mut s) {
                in_solid += 1;
            }
        }
        if tick % (ticks / 6).max(1) == 0 {
            let shown: Vec<String> = world
                .players
                .iter()
                .take(3)
                .map(|(id, p)| {
                    let o = p.state.origin();
                    let p = &p.state;
                    format!(
                        "bot {id} [{:7.1} {:7.1} {:6.1}]{}",
                        o.x,
                        o.y,
                        o.z,
                        if p.on_ground() { "" } else { " airborne" }
                    )
                })
                .collect();
            println!("t={:5.1}s  {}", tick as f64 / rate as f64, shown.join("  "));
        }
    }
    let player_ticks = ticks * bots as u64;
    println!(
        "{bots} bots x {ticks} ticks: {travelled:.0} units walked, {jumps} jump orders, {:.2} us per player tick ({:.1} s wall), state hash {:016x}",
        sim_time * 1e6 / player_ticks as f64,
        started.elapsed().as_secs_f64(),
        world.hash()
    );
    println!("player ticks ending in solid: {in_solid}");
    ensure!(in_solid == 0, "{in_solid} player ticks ended in solid");
    Ok(())
}
