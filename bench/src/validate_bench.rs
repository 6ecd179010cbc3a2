//! Trusted-client validation cost: the time to judge one claim (median, p99), beside the
//! time of the `pmove` tick that produced it, measured on the same claims in one run.
//!
//! `cargo run --release -p expel-bench --bin validate-bench [MAP...]` (default: the
//! embedded arena and, when present, ../shared/maps/oa_q3dm6ish.bsp).

mod bench_maps;

use anyhow::Result;
use expel_bots::percentile;
use expel_core::movement::buttons;
use expel_core::validate::ClaimValidator;
use expel_core::PlayerId;
use expel_core::{CollisionModel, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

const TICKS: usize = 20_000;

fn main() -> Result<()> {
    let maps = bench_maps::from_args();
    println!(
        "{:<22} {:>7} {:>12} {:>10} {:>12} {:>10} {:>8} {:>9}",
        "map", "claims", "judge med us", "p99 us", "pmove med us", "p99 us", "ratio", "rejected"
    );
    for path in maps {
        let map = MapData::parse_any(&std::fs::read(&path)?)?;
        let (sim, _) = Sim::from_map(
            Arc::new(CollisionModel::build(&map)),
            &map,
            Movement::default(),
        );
        let spawn = sim.spawns().first().copied().unwrap_or_default();
        let start = PlayerState::at(spawn);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        // Honest claims: one player running, turning, jumping and crouching, timed per tick.
        let mut world = sim.new_state();
        sim.add_player(&mut world, PlayerId(0), start)?;
        let mut s = SimScratch::new();
        let mut cmds = BTreeMap::new();
        let mut cmd = MoveCommand::default();
        let mut claims = Vec::with_capacity(TICKS);
        let mut pmove_us = Vec::with_capacity(TICKS);
        for _ in 0..TICKS {
            if rng.gen_bool(0.05) {
                let mut b = 0;
                if rng.gen_bool(0.3) {
                    b |= buttons::JUMP;
                }
                if rng.gen_bool(0.1) {
                    b |= buttons::CROUCH;
                }
                cmd = MoveCommand::new(
                    rng.gen_range(-1.0..=1.0),
                    rng.gen_range(-1.0..=1.0),
                    0.0,
                    rng.gen_range(0.0..360.0),
                    0.0,
                )
                .with_buttons(b);
            }
            cmds.insert(PlayerId(0), cmd);
            let t = Instant::now();
            sim.step(&mut world, &cmds, &mut s);
            pmove_us.push(t.elapsed().as_secs_f64() * 1e6);
            if let Some(p) = world.player(PlayerId(0)) {
                claims.push(*p);
            }
        }
        let mut v = ClaimValidator::new(&sim, start)?;
        let mut judge_us = Vec::with_capacity(claims.len());
        let mut rejected = 0;
        for c in &claims {
            let t = Instant::now();
            let out = v.check(&sim, c);
            judge_us.push(t.elapsed().as_secs_f64() * 1e6);
            rejected += usize::from(!out.accepted);
        }
        let (jm, j99) = (
            percentile(&mut judge_us, 0.5),
            percentile(&mut judge_us, 0.99),
        );
        let (pm, p99) = (
            percentile(&mut pmove_us, 0.5),
            percentile(&mut pmove_us, 0.99),
        );
        println!(
            "{:<22} {:>7} {:>12.2} {:>10.2} {:>12.2} {:>10.2} {:>8.2} {:>9}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            claims.len(),
            jm,
            j99,
            pm,
            p99,
            jm / pm,
            rejected
        );
    }
    Ok(())
}
