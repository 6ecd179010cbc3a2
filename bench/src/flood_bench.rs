//! What an input flood costs the server: the real `expel serve` in its own process, one
//! honest client throughout, and in alternate periods one flooder sending 20,000 input
//! datagrams a second, one per packet, joining again with a fresh token each time it is
//! kicked (as a determined attacker would). Prints the server's CPU in each period (from
//! `/proc/PID/schedstat`, nanoseconds on the CPU) and what the flood added.
//!
//! `cargo build --release && cargo run --release -p expel-bench --bin flood-bench`
//! (`SECONDS` per period, default 5; `RATE` datagrams a second, default 20000; `ROUNDS`
//! honest/flood pairs, default 3).

mod served;

use anyhow::Result;
use expel_bots::RunOptions;
use expel_client::{ConnectOptions, Trust};
use expel_core::MoveCommand;
use served::Served;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "flood-bench";

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn token(player: u32, n: u32) -> Result<String> {
    served::token(SECRET, player, n)
}

/// What the server counted over one period.
#[derive(Default)]
struct Period {
    cpu: f64,
    seconds: f64,
    packets: f64,
    datagrams: f64,
    dropped: f64,
}

const COUNTED: [&str; 3] = [
    "expel_udp_datagrams_total",
    "expel_datagrams_in_total",
    "expel_datagrams_over_rate_total",
];

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let seconds = env("SECONDS", 5.0);
    let rate = env("RATE", 20_000.0);
    let rounds = env("ROUNDS", 3.0) as usize;
    let map = std::fs::read(root.join("maps/arena.map"))?;
    let map_hash = *blake3::hash(&map).as_bytes();
    let served = Served::start(&["--secret", SECRET, "--max-players", "8"])?;
    let addr = served.addr;
    let trust = Trust::Fingerprint(served.fingerprint.clone());
    let rt = tokio::runtime::Runtime::new()?;
    let result = rt.block_on(async {
        let o = ConnectOptions {
            have_map: Some(Arc::new(map.clone())),
            ..ConnectOptions::new(token(1, 0)?, trust.clone())
        };
        let joined = expel_client::connect(addr, &o).await?;
        let total = seconds * 2.0 * rounds as f64 + 2.0;
        let honest = tokio::spawn(expel_bots::run(
            joined,
            |_, _| Some(MoveCommand::new(1.0, 0.3, 0.0, 90.0, 0.0)),
            RunOptions {
                seconds: total,
                ..Default::default()
            },
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let joins = Arc::new(AtomicU64::new(0));
        let kicks = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        // The flooder over one period: joins, floods until kicked, joins again.
        let flood_for = |period: f64| {
            let (joins, kicks, sent, trust) =
                (joins.clone(), kicks.clone(), sent.clone(), trust.clone());
            tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs_f64(period);
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    let n = joins.fetch_add(1, Relaxed) as u32 + 1;
                    let t = token(2, n)?;
                    let out = expel_bots::flood::flood(
                        addr,
                        &trust,
                        t,
                        map_hash,
                        rate,
                        left.as_secs_f64(),
                    )
                    .await;
                    match out {
                        Ok(o) => {
                            sent.fetch_add(o.sent, Relaxed);
                            if o.closed.is_some() {
                                kicks.fetch_add(1, Relaxed);
                            }
                        }
                        Err(e) => {
                            eprintln!("flood join failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        };
        let mut honest_only = Vec::new();
        let mut with_flood = Vec::new();
        for _ in 0..rounds {
            for flood in [false, true] {
                let flooder = flood.then(|| flood_for(seconds));
                let cpu0 = served.cpu_seconds()?;
                let c0: Vec<f64> = COUNTED
                    .iter()
                    .map(|n| served.metric(n).unwrap_or(0.0))
                    .collect();
                let t0 = Instant::now();
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                let c1: Vec<f64> = COUNTED
                    .iter()
                    .map(|n| served.metric(n).unwrap_or(0.0))
                    .collect();
                if let Some(f) = flooder {
                    f.await??;
                }
                let p = Period {
                    cpu: served.cpu_seconds()? - cpu0,
                    seconds: t0.elapsed().as_secs_f64(),
                    packets: c1[0] - c0[0],
                    datagrams: c1[1] - c0[1],
                    dropped: c1[2] - c0[2],
                };
                if flood {
                    with_flood.push(p);
                } else {
                    honest_only.push(p);
                }
            }
        }
        let report = honest.await??;
        Ok::<_, anyhow::Error>((
            honest_only,
            with_flood,
            report,
            joins.load(Relaxed),
            kicks.load(Relaxed),
            sent.load(Relaxed),
        ))
    });
    drop(served);
    let (honest_only, with_flood, report, joins, kicks, sent) = result?;
    println!(
        "{:>14} {:>14} {:>14} {:>16} {:>14}",
        "period", "server cores", "UDP in/s", "datagrams in/s", "over rate/s"
    );
    let mut sums = [(0.0, 0.0); 2];
    for (i, (a, b)) in honest_only.iter().zip(&with_flood).enumerate() {
        for (k, (name, p)) in [("honest", a), ("honest+flood", b)].into_iter().enumerate() {
            println!(
                "{:>14} {:>14.4} {:>14.0} {:>16.0} {:>14.0}",
                format!("{name} {}", i + 1),
                p.cpu / p.seconds,
                p.packets / p.seconds,
                p.datagrams / p.seconds,
                p.dropped / p.seconds
            );
            sums[k].0 += p.cpu;
            sums[k].1 += p.seconds;
        }
    }
    let (a, b) = (sums[0].0 / sums[0].1, sums[1].0 / sums[1].1);
    println!(
        "flood of {rate:.0} datagrams/s: server {a:.4} cores honest, {b:.4} with the flood: +{:.2}% of a core (target under 5%); flooder joined {joins} times, kicked {kicks}, sent {:.0} datagrams/s while flooding; honest client: {} corrections, {:.1} snapshots/s, ended by server: {:?}",
        (b - a) * 100.0,
        sent as f64 / sums[1].1,
        report.stats.predict.corrections,
        report.snapshots_per_s,
        report.ended_by_server
    );
    Ok(())
}
