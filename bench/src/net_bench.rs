//! Network figures: bytes per client per second and server CPU per player per tick, with
//! the real `expel serve` in its own process (so its CPU time is its own) and bot clients
//! in this one, all on loopback.
//!
//! `cargo build --release && cargo run --release -p expel-bench --bin net-bench [COUNTS]`
//! (default counts: 33, 64 and 256 clients for 15 s each; `SECONDS` overrides). With 33
//! clients packed in the arena every client has the other 32 in view.

mod served;

use anyhow::Result;
use expel_bots::RunOptions;
use expel_client::{ConnectOptions, Trust};
use expel_core::{CollisionModel, MapData, MoveCommand, MoveConfig, PlayerState, Sim};
use served::Served;
use std::path::PathBuf;
use std::sync::Arc;

const SECRET: &str = "bench-secret";

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let counts = if counts.is_empty() {
        vec![33, 64, 256]
    } else {
        counts
    };
    let seconds: f64 = std::env::var("SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15.0);
    let bytes = Arc::new(std::fs::read(root.join("maps/arena.map"))?);
    let map = MapData::parse_any(&bytes)?;
    let sim = Arc::new(
        Sim::from_map(
            Arc::new(CollisionModel::build(&map)),
            &map,
            MoveConfig::default().validate()?,
        )
        .0,
    );
    println!(
        "{:>8} {:>12} {:>12} {:>10} {:>14} {:>16} {:>12}",
        "clients", "down B/s", "up B/s", "snap/s", "server CPU %", "CPU us/player", "tick ms p50~"
    );
    for n in counts {
        let served = Served::start(&["--secret", SECRET, "--max-players", &n.to_string()])?;
        let (addr, fp) = (served.addr, served.fingerprint.clone());
        let rt = tokio::runtime::Runtime::new()?;
        let (reports, cpu, ticks) = rt.block_on(async {
            let mut joined = Vec::new();
            for i in 0..n as u32 {
                let token = served::token(SECRET, i, i)?;
                let o = ConnectOptions {
                    have_map: Some(bytes.clone()),
                    sim: Some(sim.clone()),
                    ..ConnectOptions::new(token, Trust::Fingerprint(fp.clone()))
                };
                joined.push(expel_client::connect(addr, &o).await?);
            }
            let cpu0 = served.cpu_seconds()?;
            let ticks0 = served.metric("expel_ticks_total")?;
            let mut tasks = Vec::new();
            for (i, j) in joined.into_iter().enumerate() {
                let mut k = (i as u32).wrapping_mul(2_654_435_761);
                let driver = move |t: u64, _: Option<&PlayerState>| {
                    if t.is_multiple_of(120) {
                        k = k.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    }
                    Some(MoveCommand::new(1.0, 0.3, 0.0, (k % 360) as f64, 0.0))
                };
                let opts = RunOptions {
                    seconds,
                    seed: i as u64,
                    ..Default::default()
                };
                tasks.push(tokio::spawn(expel_bots::run(j, driver, opts)));
            }
            let mut reports = Vec::new();
            for t in tasks {
                reports.push(t.await??);
            }
            let cpu = served.cpu_seconds()? - cpu0;
            let ticks = served.metric("expel_ticks_total")? - ticks0;
            Ok::<_, anyhow::Error>((reports, cpu, ticks))
        })?;
        let sum = served.metric("expel_tick_duration_seconds_sum")?;
        let count = served.metric("expel_tick_duration_seconds_count")?;
        drop(served);
        let k = reports.len() as f64;
        let down = reports.iter().map(|r| r.down_bytes_per_s).sum::<f64>() / k;
        let up = reports.iter().map(|r| r.up_bytes_per_s).sum::<f64>() / k;
        let snaps = reports
            .iter()
            .map(|r| r.stats.predict.snapshots as f64)
            .sum::<f64>()
            / k
            / seconds;
        let wall = ticks / 60.0;
        println!(
            "{:>8} {:>12.0} {:>12.0} {:>10.1} {:>14.1} {:>16.2} {:>12.3}",
            n,
            down,
            up,
            snaps,
            100.0 * cpu / wall,
            cpu * 1e6 / (ticks * n as f64),
            sum / count * 1000.0
        );
    }
    Ok(())
}
