//! The server's tick without the network: a crowd on the arena stepped at 60 Hz with
//! scripted honest commands (as the light bots send), and each player's snapshot encoded
//! at 30 Hz against a baseline acknowledged a few ticks late, on one thread. It prints the
//! cost of the step, of the tick's interest grid and of one client's snapshot, and the
//! snapshot's payload per client-second (QUIC's own bytes come on top), and the spread of
//! the whole tick's time.
//!
//! `cargo run --release -p expel-bench --bin tick-bench [PLAYERS] [TICKS] [CHURN] [BUDGET]`
//! (default 1000 players, 600 ticks, no churn, the server's default byte budget). With
//! CHURN, that many players a second leave and a new player joins in each one's place (a
//! server in play: the crowd's membership changes while the ticks run). Each client's
//! snapshots keep to BUDGET bytes a second as the server keeps them (0: only the
//! datagram's size), so the far players' squeeze costs what it costs in the load test.

mod bench_maps;

use anyhow::Result;
use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{MoveCommand, MoveMode, SimScratch};
use expel_protocol::server::DEFAULT_CLIENT_BUDGET;
use expel_protocol::snapshot::{Crowd, Feedback, Room, SnapshotEncoder};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Ticks between a snapshot and its acknowledgement (about 70 ms at 60 Hz).
const ACK_DELAY: u64 = 4;
const SNAPSHOT_EVERY: u64 = 2;
const INTEREST: usize = 32;
const DATAGRAM: usize = 1200;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let players: u32 = args.next().map_or(Ok(1000), |a| a.parse())?;
    let ticks: u64 = args.next().map_or(Ok(600), |a| a.parse())?;
    let churn: u32 = args.next().map_or(Ok(0), |a| a.parse())?;
    let budget: usize = args
        .next()
        .map_or(Ok(DEFAULT_CLIENT_BUDGET), |a| a.parse())?;
    // The server's bucket (`tick.rs`): a tick's share of the budget in, at most a quarter
    // second's worth (a datagram at least) saved up or spent ahead.
    let refill = budget as f64 / 60.0;
    let cap = (budget as f64 / 4.0).max(DATAGRAM as f64);
    let mut left: Vec<f64> = vec![cap; players as usize];
    let (sim, mut world) = bench_maps::arena_crowd(players)?;
    let mut s = SimScratch::with_threads(1)?;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut cmds: BTreeMap<PlayerId, MoveCommand> = BTreeMap::new();
    let mut encoders: Vec<SnapshotEncoder> = (0..players).map(|_| SnapshotEncoder::new()).collect();
    let mut acks: VecDeque<(u64, usize, u64)> = VecDeque::new();
    let (mut step, mut crowd_t, mut encode) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut snaps, mut bytes) = (0u64, 0u64);
    // Each tick's whole time (step, grid, snapshots), for its spread.
    let mut whole: Vec<f64> = Vec::with_capacity(ticks as usize);
    let mut crowd = Crowd::new(&sim, &world, INTEREST);
    // Players who left, by slot; each slot's next player takes a new id.
    let mut ids: Vec<u32> = (0..players).collect();
    let mut next_id = players;
    let mut due_churn = 0.0;
    for _ in 0..ticks {
        due_churn += f64::from(churn) / 60.0;
        while due_churn >= 1.0 && players > 0 {
            due_churn -= 1.0;
            let slot = rng.gen_range(0..players) as usize;
            world.remove_player(PlayerId(ids[slot]));
            cmds.remove(&PlayerId(ids[slot]));
            ids[slot] = next_id;
            let p = sim.join_state(&world, PlayerId(next_id), MoveMode::Walk);
            sim.add_player(&mut world, PlayerId(next_id), p)?;
            encoders[slot] = SnapshotEncoder::new();
            left[slot] = cap;
            next_id += 1;
        }
        // Honest walkers: a heading held for about a second, now and then a jump.
        for &id in &ids {
            if rng.gen_bool(1.0 / 60.0) || !cmds.contains_key(&PlayerId(id)) {
                let jump = if rng.gen_bool(0.1) { buttons::JUMP } else { 0 };
                let yaw = rng.gen_range(0.0..360.0);
                let cmd = MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0).with_buttons(jump);
                cmds.insert(PlayerId(id), cmd);
            }
        }
        let t0 = Instant::now();
        sim.step(&mut world, &cmds, &mut s);
        let t1 = Instant::now();
        crowd.renew(&sim, &world, INTEREST);
        let t2 = Instant::now();
        let tick = world.tick;
        while acks.front().is_some_and(|a| a.0 <= tick) {
            // (A slot that changed hands meanwhile ignores an ack of what it never sent.)
            let (_, slot, acked) = acks.pop_front().unwrap_or_default();
            encoders[slot].ack(acked);
        }
        for (slot, &id) in ids.iter().enumerate() {
            left[slot] = (left[slot] + refill).min(cap);
            if (tick + u64::from(id)) % SNAPSHOT_EVERY != 0 {
                continue;
            }
            let fb = Feedback::default();
            let room = match budget {
                0 => Room::datagram(DATAGRAM),
                _ => Room {
                    budget: left[slot].max(0.0) as usize,
                    datagram: DATAGRAM,
                },
            };
            let encoded =
                encoders[slot].encode_in(&world, &crowd, PlayerId(id), fb, INTEREST, room);
            if let Some(b) = encoded {
                snaps += 1;
                bytes += b.len() as u64;
                if budget > 0 {
                    left[slot] = (left[slot] - b.len() as f64).max(-cap);
                }
                acks.push_back((tick + ACK_DELAY, slot, tick));
            }
        }
        step += t1 - t0;
        crowd_t += t2 - t1;
        encode += t2.elapsed();
        whole.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let per_tick = |d: Duration| d.as_secs_f64() * 1e6 / ticks as f64;
    let player_ticks = f64::from(players) * ticks as f64;
    println!(
        "{players} players, {ticks} ticks on the arena, one thread, {churn} leaving and joining a second"
    );
    println!(
        "step:      {:8.1} us/tick  {:6.2} us per player-tick",
        per_tick(step),
        step.as_secs_f64() * 1e6 / player_ticks
    );
    println!(
        "interest:  {:8.1} us/tick (the tick's grid)",
        per_tick(crowd_t)
    );
    println!(
        "snapshots: {:8.1} us/tick  {:6.2} us per snapshot ({snaps} encoded)",
        per_tick(encode),
        encode.as_secs_f64() * 1e6 / snaps.max(1) as f64
    );
    let squeezed: u64 = encoders.iter_mut().map(|e| e.take_held().squeezed).sum();
    let budget = match budget {
        0 => "no byte budget".to_string(),
        b => format!("a budget of {b} B/s"),
    };
    println!(
        "squeezed:  {:8.1}% of the snapshots ({budget}; the last {players} encoders' count)",
        squeezed as f64 * 100.0 / snaps.max(1) as f64
    );
    let per_snap = bytes as f64 / snaps.max(1) as f64;
    let rate = 60.0 / SNAPSHOT_EVERY as f64;
    println!(
        "payload:   {per_snap:8.1} B per snapshot, {:.0} B/s per client at {rate} Hz",
        per_snap * rate
    );
    let all = step + crowd_t + encode;
    println!(
        "total:     {:8.3} ms of CPU per player-second",
        all.as_secs_f64() * 1e3 / player_ticks * 60.0
    );
    whole.sort_by(f64::total_cmp);
    let at = |q: f64| whole[((whole.len() - 1) as f64 * q).round() as usize];
    if !whole.is_empty() {
        println!(
            "tick:      p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (the load test's tick \
             without the network)",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    Ok(())
}
