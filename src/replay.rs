//! `expel replay`: a recorded match (`expel serve --record`) played again by the
//! server's own simulation and rules, every recorded world hash checked.

use crate::load;
use anyhow::{bail, Context, Result};
use clap::Args;
use expel_core::sim::WorldState;
use expel_modes::{Mode, MODES};
use expel_protocol::record::{Counted, Replay, ReplayError, Replayed};
use serde_json::{json, Value};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// `expel replay`'s arguments.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    /// The recording: its first file (the parts after it, FILE.1, FILE.2, ..., are read
    /// from beside it).
    file: PathBuf,
    /// The map it was recorded on (default: the embedded arena).
    #[arg(long)]
    map: Option<PathBuf>,
    /// Stop after this tick and print the world there (JSON).
    #[arg(long)]
    to: Option<u64>,
    /// Stop at the Nth violation (from 1, as the summary lists them) and print it with
    /// the world when it was counted (JSON).
    #[arg(long)]
    violation: Option<usize>,
}

type Parts = BufReader<File>;

fn open(path: &Path) -> Result<Parts> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(BufReader::new(f))
}

/// Runs `expel replay`: prints one JSON object (the summary, the world at `--to`, or
/// the violation asked for); an error names the first tick that differs.
pub(crate) fn run(args: ReplayArgs) -> Result<()> {
    if let Some(n) = args.file.extension().and_then(|e| e.to_str()) {
        if n.parse::<u32>().is_ok() {
            bail!(
                "{} is a later part of a recording: replay its first file (without .{n})",
                args.file.display()
            );
        }
    }
    let opened = Replay::open(open(&args.file)?).map_err(|e| on(&args.file, e))?;
    let header = opened.0.clone();
    let Some(mode) = MODES.iter().find(|(n, _)| *n == header.rules).map(|m| m.1) else {
        let names: Vec<&str> = MODES.iter().map(|m| m.0).collect();
        bail!(
            "{} was recorded with the rules \"{}\", which this build does not have ({}): \
             replay it with the game's own build (expel_protocol::record::Replay)",
            args.file.display(),
            header.rules,
            names.join(", ")
        );
    };
    let loaded = load::load_model(args.map.as_deref())?;
    let bytes = Arc::new(loaded.bytes.clone());
    let sim = Arc::new(loaded.into_sim(header.movement.clone())?);
    let started = Instant::now();
    let mut r = Replay::new(opened, sim, bytes, Mode::rules(mode), started)
        .map_err(|e| on(&args.file, e))?;
    let (mut ticks, mut most, mut part) = (0u64, 0usize, 0u32);
    let ended = loop {
        if let Some(n) = args.violation {
            if let Some(v) = r.violations().get(n.saturating_sub(1)).filter(|_| n > 0) {
                let out = json!({
                    "violation": violation_json(n, v),
                    "judged_again": v.kind == expel_core::validate::ViolationKind::Rules,
                    "world": world_json(r.machine().world()),
                });
                println!("{out}");
                return Ok(());
            }
        }
        match r.step().map_err(|e| on(&args.file, e))? {
            Replayed::Tick(t) => {
                ticks += 1;
                most = most.max(r.machine().world().players.len());
                if args.to == Some(t) {
                    println!("{}", world_json(r.machine().world()));
                    return Ok(());
                }
            }
            Replayed::End(why) => break Some(why),
            Replayed::Part => {
                let next = PathBuf::from(format!("{}.{}", args.file.display(), part + 1));
                if !next.exists() {
                    break None;
                }
                part += 1;
                r.next_part(open(&next)?).map_err(|e| on(&next, e))?;
            }
        }
    };
    if let Some(t) = args.to {
        bail!(
            "the recording ends before tick {t} (its last is {})",
            r.machine().world().tick
        );
    }
    if let Some(n) = args.violation {
        bail!(
            "the recording has {} violations, not {n}",
            r.violations().len()
        );
    }
    let secs = started.elapsed().as_secs_f64();
    let played = ticks as f64 / f64::from(header.movement.tick_rate);
    let (short, full) = r.hashes();
    let violations: Vec<Value> = (r.violations().iter().enumerate())
        .map(|(i, v)| violation_json(i + 1, v))
        .collect();
    let out = json!({
        "file": args.file.display().to_string(),
        "parts": part + 1,
        "map": header.map_name,
        "rules": header.rules,
        "started_unix": header.started_unix,
        "ticks": ticks,
        "last_tick": r.machine().world().tick,
        "most_players": most,
        "hashes_checked": short,
        "full_hashes_checked": full,
        "all_equal": true,
        "ended": ended,
        "violations": violations,
        "seconds": secs,
        "speed": if secs > 0.0 { played / secs } else { 0.0 },
    });
    println!("{out}");
    Ok(())
}

fn on(path: &Path, e: ReplayError) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", path.display())
}

fn violation_json(n: usize, v: &Counted) -> Value {
    json!({
        "n": n,
        "tick": v.tick,
        "player": v.player.0,
        "kind": v.kind.name(),
        "evidence": v.evidence,
    })
}

/// The world as the replay has it: each player's place, speed and mode, the entities and
/// the movers.
fn world_json(w: &WorldState) -> Value {
    let players: Vec<Value> = (w.players.iter())
        .map(|(id, p)| {
            json!({
                "id": id.0,
                "origin": p.state.origin().to_array(),
                "velocity": p.state.velocity().to_array(),
                "mode": format!("{:?}", p.state.mode).to_lowercase(),
            })
        })
        .collect();
    let entities: Vec<Value> = (w.entities.iter())
        .map(|(id, e)| json!({"id": id.0, "kind": e.kind, "owner": e.owner.map(|o| o.0), "origin": e.origin}))
        .collect();
    let movers: Vec<Value> = (w.movers.iter())
        .map(|m| json!({"progress": m.progress, "phase": format!("{:?}", m.phase).to_lowercase()}))
        .collect();
    json!({
        "tick": w.tick,
        "hash": format!("{:016x}", w.hash()),
        "players": players,
        "entities": entities,
        "movers": movers,
    })
}
