//! `expel replay`: a recorded match (`expel serve --record`) played again by the
//! server's own simulation and rules, every recorded world hash checked.

use crate::load;
use anyhow::{bail, Context, Result};
use clap::Args;
use expel_core::sim::WorldState;
use expel_modes::{Mode, MODES};
use expel_protocol::record::{Counted, Replay, ReplayError, Replayed};
use expel_server::ReplayView;
use serde_json::{json, Value};
use std::collections::BTreeSet;
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
    /// After replaying, show the match in the live view's page here (loopback only; port
    /// 0 picks one) until Ctrl-C: a timeline with pause, speed and seek, and each
    /// violation with its evidence. The summary line gains its address ("view").
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    view: Option<std::net::SocketAddr>,
    /// Replay nothing: print what the recording is made of (entries by kind, their
    /// count and bytes before deflating; the blocks and the file's bytes).
    #[arg(long, conflicts_with_all = ["to", "violation", "view"])]
    entries: bool,
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
    if args.entries {
        return entries(&args.file, opened.1);
    }
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
    let mut player_ticks = 0u64;
    let sim = r.machine().sim().clone();
    let mut view = args.view.map(|_| ReplayView::new(&sim, &header.map_name));
    let frame_ticks = u64::from((header.movement.tick_rate / 10).max(1));
    // The frame each violation was counted at, for the view's seek.
    let mut frames_at: Vec<usize> = Vec::new();
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
                let players = r.machine().world().players.len();
                most = most.max(players);
                player_ticks += players as u64;
                if let Some(v) = view.as_mut() {
                    let n = r.violations().len();
                    frames_at.resize(n, v.frames());
                    if t % frame_ticks == 0 {
                        let flagged: BTreeSet<u32> =
                            r.violations().iter().map(|v| v.player.0).collect();
                        v.frame(&sim, r.machine().world(), &|id| flagged.contains(&id));
                    }
                }
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
    let bytes: u64 = (0..=part)
        .map(|k| match k {
            0 => args.file.clone(),
            k => PathBuf::from(format!("{}.{k}", args.file.display())),
        })
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let player_minutes = player_ticks as f64 / f64::from(header.movement.tick_rate) / 60.0;
    let out = json!({
        "file": args.file.display().to_string(),
        "parts": part + 1,
        "bytes": bytes,
        "player_minutes": player_minutes,
        "bytes_per_player_minute": if player_minutes > 0.0 { bytes as f64 / player_minutes } else { 0.0 },
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
    if let (Some(mut v), Some(addr)) = (view, args.view) {
        let mut summary = out.clone();
        summary["tick_rate"] = json!(header.movement.tick_rate);
        summary["frame_ticks"] = json!(frame_ticks);
        summary["frames_cut"] = json!(v.cut());
        summary["frames"] = json!(v.frames());
        summary["violations"] = (r.violations().iter().enumerate())
            .map(|(i, c)| {
                let mut e = evidence_json(i + 1, c);
                e["frame"] = json!(frames_at.get(i).copied().unwrap_or(0));
                e
            })
            .collect();
        v.set_summary(summary.to_string());
        return show(v, addr, out);
    }
    println!("{out}");
    Ok(())
}

/// Serves the replay's view until Ctrl-C, after printing `out` with its address.
fn show(view: ReplayView, addr: std::net::SocketAddr, mut out: Value) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (at, task) = expel_server::serve_replay_view(addr, view).await?;
        out["view"] = json!(format!("http://{at}/"));
        println!("{out}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = task => {}
        }
        Ok(())
    })
}

/// A violation for the view: as listed, and for one counted in a shot, the shot as the
/// server judged it (its view, what it met, where, and every player's box rewound to
/// the view: `[id, min x, min y, max x, max y]`).
fn evidence_json(n: usize, c: &Counted) -> Value {
    let mut v = violation_json(n, c);
    if let Some(s) = &c.shot {
        let k = f64::from(s.view.k) / 255.0;
        let at = s.view.from as f64 + (s.view.to - s.view.from) as f64 * k;
        let rewound: Vec<Value> = (s.rewound.iter())
            .map(|b| {
                let (lo, hi) = (b.bounds.min, b.bounds.max);
                json!([b.id.0, lo.x, lo.y, hi.x, hi.y])
            })
            .collect();
        v["shot"] = json!({
            "shooter": s.shooter.0,
            "view_tick": at,
            "hit": s.hit.map(|(_, p)| p),
            "struck": s.hit.map(|(st, _)| format!("{st:?}").to_lowercase()),
            "unseen": s.unseen.map(|p| p.0),
            "rewound": rewound,
        });
    }
    v
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

/// `--entries`: what the recording's first part is made of, by kind of entry.
fn entries(file: &Path, mut blocks: expel_protocol::record::Blocks<Parts>) -> Result<()> {
    use expel_protocol::record::{Call, Entry};
    let mut kinds: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    let (mut count, mut inflated) = (0u64, 0u64);
    while let Some((at, payload)) = blocks.next_block().map_err(|e| on(file, e.into()))? {
        count += 1;
        inflated += payload.len() as u64;
        let got = expel_protocol::record::entries(&payload, at).map_err(|e| on(file, e.into()))?;
        for (_, e) in got {
            let kind = match &e {
                Entry::Tick { .. } => "tick",
                Entry::Hash { .. } => "hash",
                Entry::Joined { .. } => "joined",
                Entry::Left { .. } => "left",
                Entry::Skipped { .. } => "skipped",
                Entry::Violation { .. } => "violation",
                Entry::End { .. } => "end",
                Entry::Call { call, .. } => match call {
                    Call::Message { .. } => "message",
                    Call::Malformed { .. } => "malformed",
                    Call::Shot { .. } => "shot",
                    Call::Refused { .. } => "refused",
                    Call::Removed { .. } => "removed",
                },
            };
            let slot = kinds.entry(kind).or_default();
            slot.0 += 1;
            slot.1 += postcard::to_allocvec(&e).map_or(0, |b| b.len() as u64);
        }
    }
    let kinds: serde_json::Map<String, Value> = (kinds.into_iter())
        .map(|(k, (n, b))| (k.to_string(), json!({"count": n, "bytes": b})))
        .collect();
    let out = json!({
        "file": file.display().to_string(),
        "file_bytes": blocks.offset(),
        "blocks": count,
        "inflated_bytes": inflated,
        "entries": kinds,
    });
    println!("{out}");
    Ok(())
}
