//! Lag compensation's cost: one rewound hitscan at 1,000 players on the arena, as
//! `Game::shot_as_seen` runs it (the boxes of the 32 players a client is shown, put back
//! where it drew them between two ticks of the history, then the core's sweep against
//! the map, the movers and those boxes), and the check for an aim through a player not
//! shown (every other player's box, then and now), on one core; and the history's
//! memory for 1,000 players.
//!
//! `cargo run --release -p expel-bench --bin rewind-bench [PLAYERS]` (default 1000).

mod bench_maps;

use anyhow::{Context, Result};
use expel_core::sim::{History, ShotView};
use expel_core::PlayerId;
use expel_core::{Hull, MoveCommand, PlayerBox, SimScratch};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Instant;

/// Players a client is shown.
const SHOWN: usize = 32;
const SHOTS: usize = 20_000;

fn main() -> Result<()> {
    let players: u32 = std::env::args().nth(1).map_or(Ok(1000), |a| a.parse())?;
    let (sim, mut world) = bench_maps::arena_crowd(players)?;
    let rate = sim.movement().tick_rate();
    let mut s = SimScratch::with_threads(1)?;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut history = History::for_rate(rate);
    let mut cmds = BTreeMap::new();
    for _ in 0..history.capacity() {
        for id in 0..players {
            if rng.gen_bool(1.0 / 30.0) || !cmds.contains_key(&PlayerId(id)) {
                let yaw = rng.gen_range(0.0..360.0);
                cmds.insert(PlayerId(id), MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0));
            }
        }
        sim.step(&mut world, &cmds, &mut s);
        history.record(&world);
    }
    let (oldest, newest) = history.span().context("a history")?;
    let mut poses = Vec::new();
    sim.poses(&world.movers, &mut poses);
    let mut boxes: Vec<PlayerBox> = Vec::new();
    let ids: Vec<PlayerId> = (0..players).map(PlayerId).collect();
    let mut hits = 0usize;
    let mut unseen = 0usize;
    let (mut rewind_s, mut aim_s, mut present_s) = (0.0, 0.0, 0.0);
    for i in 0..SHOTS {
        let shooter = ids[i % ids.len()];
        let Some(me) = world.player(shooter).map(|p| p.origin()) else {
            continue;
        };
        // A view a few ticks back, between two snapshots two ticks apart.
        let from = rng.gen_range(oldest..newest - 1);
        let view = ShotView {
            from,
            to: from + 2,
            k: rng.gen(),
        };
        // The 32 nearest shown (ids chosen by place, as interest does).
        let mut near: Vec<(f64, PlayerId)> = (world.players.iter())
            .map(|(id, p)| (p.state.origin().distance_squared(me), *id))
            .collect();
        let nth = SHOWN.min(near.len() - 1);
        near.select_nth_unstable_by(nth, |a, b| a.0.total_cmp(&b.0));
        let mut shown: Vec<PlayerId> = near.iter().take(SHOWN).map(|n| n.1).collect();
        shown.sort_unstable();
        let yaw = rng.gen_range(0.0..std::f64::consts::TAU);
        let eye = me + DVec3::Z * 26.0;
        let end = eye + DVec3::new(yaw.cos(), yaw.sin(), 0.0) * 8192.0;
        let shoot = |boxes: &[PlayerBox], s: &mut SimScratch| {
            let (_, hit) = sim.shot(&Hull::point(), eye, end, &poses, boxes, Some(shooter), s);
            hit.is_some()
        };
        // As `Game::shot_as_seen` does: the shown players' boxes where they were drawn.
        let t0 = Instant::now();
        history.boxes_of(&sim, &view, &shown, &mut boxes);
        hits += shoot(&boxes, &mut s) as usize;
        let t1 = Instant::now();
        // The unseen aim's check: every player not shown (nor the shooter), then and now.
        if let Err(i) = shown.binary_search(&shooter) {
            shown.insert(i, shooter);
        }
        let ray = (eye, end);
        unseen += history
            .first_crossed(&sim, (view.from, newest), &shown, ray)
            .is_some() as usize;
        // The same shot unrewound: the shown players' boxes as they stand now.
        let t2 = Instant::now();
        boxes.clear();
        let now = |id: &PlayerId| sim.player_box(*id, world.player(*id)?);
        boxes.extend(shown.iter().filter(|id| **id != shooter).filter_map(now));
        shoot(&boxes, &mut s);
        present_s += t2.elapsed().as_secs_f64();
        rewind_s += (t1 - t0).as_secs_f64();
        aim_s += (t2 - t1).as_secs_f64();
    }
    println!(
        "{players} players on the arena, {} ticks of history, one thread",
        history.capacity()
    );
    println!(
        "rewound hitscan: {:6.2} us a shot ({SHOWN} players shown; {hits} of {SHOTS} met something)",
        rewind_s * 1e6 / SHOTS as f64
    );
    println!(
        "the same shot unrewound (the shown players' boxes now): {:6.2} us a shot",
        present_s * 1e6 / SHOTS as f64
    );
    println!(
        "unseen-aim check: {:6.2} us a shot ({} hidden players' boxes at four ticks of the span; {unseen} crossed one)",
        aim_s * 1e6 / SHOTS as f64,
        players as usize - SHOWN - 1
    );
    println!(
        "history: {} bytes for {players} players ({} bytes a player-tick, {:.0} bytes a player)",
        history.bytes(),
        expel_core::sim::history::HISTORY_BYTES_PER_PLAYER_TICK,
        history.bytes() as f64 / f64::from(players)
    );
    Ok(())
}
