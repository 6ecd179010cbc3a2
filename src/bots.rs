//! `expel bots`: a swarm of real QUIC clients against a server, with a JSON report and an
//! SVG chart. The swarm itself is the `expel-bots` crate; this is its command line.

use anyhow::{bail, Context, Result};
use expel_bots::{
    self, Behavior, CheatKind, Operator, ServerFigures, SwarmOptions, SwarmProgress, SwarmReport,
};
use expel_client::Trust;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// `expel bots` settings.
#[derive(Debug, clap::Args)]
pub(crate) struct BotsArgs {
    /// Server address (HOST:PORT).
    #[arg(long)]
    pub server: SocketAddr,
    /// The server's secret: tokens are minted here, for players --first-player onwards.
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    pub secret: Option<String>,
    /// A file of connect tokens, one per line (one per bot).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// SHA-256 fingerprint of the server's certificate, as `expel serve` prints it.
    #[arg(long)]
    pub fingerprint: String,
    /// Bots (one QUIC connection each).
    #[arg(long)]
    pub count: usize,
    /// Seconds each bot plays.
    #[arg(long)]
    pub duration: f64,
    /// How the honest bots move.
    #[arg(long, default_value = "mixed", value_parser = crate::named::named(&Behavior::NAMES))]
    pub behavior: Behavior,
    /// Cheats, comma separated.
    #[arg(long, value_delimiter = ',', value_parser = crate::named::named(&CheatKind::ALL))]
    pub cheat: Vec<CheatKind>,
    /// Cheaters per cheat kind (default 1 when --cheat is given).
    #[arg(long)]
    pub cheaters: Option<usize>,
    /// Seconds of honest play before cheaters start.
    #[arg(long, default_value_t = 2.0)]
    pub cheat_after: f64,
    /// The link conditioner, for every bot.
    #[command(flatten)]
    pub link: crate::net::ImpairmentArgs,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Draw tick time, players and bandwidth over the run here (SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// The server's HTTP endpoint for its metrics (default: the server address, TCP).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// The operator token the server's HTTP endpoint asks for (else
    /// $EXPEL_OPERATOR_TOKEN).
    #[arg(long)]
    pub operator_token: Option<String>,
    /// The server's id, for tokens minted with --secret (`expel serve --server-id`).
    #[arg(long)]
    pub server_id: Option<String>,
    /// First player id for minted tokens (default: random, so runs do not collide).
    #[arg(long)]
    pub first_player: Option<u32>,
    /// Handshakes in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrent_connects: usize,
    /// A bot whose server goes away (killed, restarting, draining) connects again with
    /// jittered, capped backoff and plays on until its time is up.
    #[arg(long)]
    pub reconnect: bool,
    /// Light bots: no prediction, honest scripted inputs, snapshots decoded and
    /// acknowledged, so a thousand fit in one core and the server is what a load test
    /// measures (an authoritative server; no --cheat).
    #[arg(long, conflicts_with = "cheat")]
    pub light: bool,
    /// Bots shoot with deathmatch's buttons (`expel serve --mode deathmatch`): at the
    /// nearest player they see, or (light bots, which decode no other players) along
    /// their heading.
    #[arg(long)]
    pub fire: bool,
}

/// The tokens: read from the file, or minted with the secret.
fn tokens(args: &BotsArgs) -> Result<Vec<String>> {
    if let Some(path) = &args.tokens {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading tokens from {}", path.display()))?;
        let list: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        if list.len() < args.count {
            bail!(
                "{}: {} tokens for {} bots",
                path.display(),
                list.len(),
                args.count
            );
        }
        return Ok(list.into_iter().take(args.count).collect());
    }
    let secret = args.secret.as_deref().unwrap_or_default();
    let first = args
        .first_player
        .unwrap_or_else(|| rand::Rng::gen_range(&mut rand::thread_rng(), 1..1u32 << 30));
    let server = args
        .server_id
        .as_deref()
        .map(crate::net::server_id_of)
        .transpose()?;
    (0..args.count as u32)
        .map(|i| crate::net::mint_token(secret, first.wrapping_add(i), 3600, server))
        .collect()
}

fn check(args: &BotsArgs) -> Result<()> {
    if args.count == 0 || args.count > 100_000 {
        bail!("--count must be 1 to 100000, got {}", args.count);
    }
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 86_400.0) {
        bail!(
            "--duration must be above 0 and at most 86400, got {}",
            args.duration
        );
    }
    if !(args.cheat_after.is_finite() && (0.0..=86_400.0).contains(&args.cheat_after)) {
        bail!("--cheat-after must be 0 to 86400, got {}", args.cheat_after);
    }
    args.link.conditioner()?;
    let cheaters = args.cheaters.unwrap_or(1) * args.cheat.len();
    if cheaters > args.count {
        bail!("{cheaters} cheaters do not fit in {} bots", args.count);
    }
    if args.cheaters.is_some_and(|k| k > 0) && args.cheat.is_empty() {
        bail!("--cheaters needs --cheat");
    }
    Ok(())
}

/// The swarm, with the server's metrics read once a second alongside.
pub(crate) async fn run_swarm(
    opts: SwarmOptions,
    http: Operator,
    progress: Arc<SwarmProgress>,
) -> SwarmReport {
    let stop = Arc::new(tokio::sync::Notify::new());
    let watcher = tokio::spawn(expel_bots::watch_server(
        http.clone(),
        Duration::from_secs(1),
        stop.clone(),
    ));
    let outcomes = expel_bots::swarm(opts, progress).await;
    stop.notify_one();
    let figures: Option<ServerFigures> = match watcher.await {
        Ok(Ok(f)) => Some(f),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "no server metrics: the server_* fields are null");
            None
        }
        Err(_) => None,
    };
    let flagged = match expel_bots::http_get(&http, "/players.json").await {
        Ok(text) => expel_bots::flagged_players(&text).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "flagged players unreadable");
            Vec::new()
        }),
        Err(e) => {
            tracing::warn!(error = %e, "no flagged players: only kicks count as detections");
            Vec::new()
        }
    };
    expel_bots::summarize(&outcomes, figures.as_ref(), &flagged)
}

/// Runs `expel bots`.
pub(crate) fn run(args: BotsArgs) -> Result<()> {
    check(&args)?;
    let tokens = tokens(&args)?;
    let opts = SwarmOptions {
        server: args.server,
        trust: Trust::Fingerprint(args.fingerprint.clone()),
        tokens,
        seconds: args.duration,
        behavior: args.behavior,
        cheats: args.cheat.clone(),
        cheaters: if args.cheat.is_empty() {
            0
        } else {
            args.cheaters.unwrap_or(1)
        },
        link: args.link.conditioner()?,
        concurrent_connects: args.concurrent_connects,
        cheat_after: args.cheat_after,
        reconnect: args.reconnect,
        buffer_ticks: expel_bots::RunOptions::default().buffer_ticks,
        light: args.light,
        fire: args.fire,
    };
    let http = Operator {
        addr: args.metrics.unwrap_or(args.server),
        token: args
            .operator_token
            .clone()
            .or_else(|| std::env::var("EXPEL_OPERATOR_TOKEN").ok()),
    };
    let progress = Arc::new(SwarmProgress::default());
    let bar = progress_line(args.count, args.duration, progress.clone());
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let report = rt.block_on(run_swarm(opts, http, progress));
    if let Some((bar, task)) = bar {
        bar.finish_and_clear();
        let _ = task.join();
    }
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("writing the report {}", path.display()))?;
    }
    if let Some(path) = &args.chart {
        chart(&report, path)?;
    }
    print_summary(&report);
    Ok(())
}

/// The live progress line, on a terminal only (never in piped output).
fn progress_line(
    count: usize,
    seconds: f64,
    p: Arc<SwarmProgress>,
) -> Option<(indicatif::ProgressBar, std::thread::JoinHandle<()>)> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(count as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let b = bar.clone();
    let task = std::thread::spawn(move || {
        while !b.is_finished() {
            b.set_message(format!(
                "{} connected, {} failed, {} done of {count} ({seconds} s each)",
                p.connected.load(Relaxed),
                p.failed.load(Relaxed),
                p.finished.load(Relaxed)
            ));
            b.tick();
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    Some((bar, task))
}

/// Prints the summary, a few lines on stdout.
fn print_summary(r: &SwarmReport) {
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    println!(
        "bots: {} connected, {} failed, {} disconnected, {} kicked",
        r.connected, r.failed, r.disconnected, r.kicked
    );
    println!(
        "per bot: rtt p50 {:.1} ms, p99 {:.1} ms; {:.1} snapshots/s; down {:.0} B/s, up {:.0} B/s",
        r.rtt_ms_p50, r.rtt_ms_p99, r.snapshots_per_s, r.down_bytes_per_s, r.up_bytes_per_s
    );
    println!(
        "per bot: {:.1} datagrams/s down, {:.1} up; snapshot payload {:.0} B/s",
        r.down_datagrams_per_s, r.up_datagrams_per_s, r.down_payload_bytes_per_s
    );
    println!(
        "corrections: honest {:.2}/min ({} unexplained), cheaters {:.2}/min",
        r.corrections_per_min_honest, r.unexplained_corrections, r.corrections_per_min_cheaters
    );
    println!(
        "cheats: {} attempted, {} detected; honest flagged {}",
        r.cheats_attempted, r.cheaters_detected, r.honest_flagged
    );
    if r.shots > 0 {
        println!(
            "shots: {} fired, {} hits seen on the shooters' screens, {} of them confirmed, {} \
             confirmed that they saw miss",
            r.shots, r.hits_seen, r.hits_confirmed, r.hits_confirmed_unseen
        );
    }
    let v = &r.sight;
    if v.projectiles_ended > 0 || v.teleports > 0 {
        println!(
            "drawn: {} of {} ended projectiles seen to start, largest step back {:.2} units; \
             {} teleports, {} drawn sliding; {} messages released with the view, at most \
             {:.2} ticks late",
            v.projectiles_started,
            v.projectiles_ended,
            v.max_backstep,
            v.teleports,
            v.teleports_slid,
            v.messages_released,
            v.max_release_late_ticks
        );
    }
    println!(
        "server: tick p50 {} ms, p99 {} ms, max {} ms; cpu {} %, {} ms per player-second with everyone on",
        opt(r.server_tick_ms_p50),
        opt(r.server_tick_ms_p99),
        opt(r.server_tick_ms_max),
        opt(r.server_cpu_percent),
        opt(r.server_cpu_ms_per_player_s)
    );
    for e in &r.errors {
        println!("error: {e}");
    }
}

/// Tick time, players and bandwidth over the run, one panel each.
pub(crate) fn chart(r: &SwarmReport, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let t = &r.timeline;
    let end = t.last().map_or(1.0, |p| p.t).max(1.0);
    let root = SVGBackend::new(path, (900, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((3, 1));
    type Series = (&'static str, RGBColor, Vec<(f64, f64)>);
    let tick_p99: Vec<(f64, f64)> = t
        .iter()
        .filter_map(|p| p.tick_ms_p99.map(|v| (p.t, v)))
        .collect();
    let sets: [(&str, Vec<Series>); 3] = [
        (
            "server tick, ms",
            vec![
                ("p99 per second", BLUE, tick_p99),
                (
                    "longest",
                    RED,
                    t.iter().map(|p| (p.t, p.tick_ms_max)).collect(),
                ),
            ],
        ),
        (
            "players",
            vec![(
                "players",
                BLACK,
                t.iter().map(|p| (p.t, p.players)).collect(),
            )],
        ),
        (
            "server bandwidth, KB/s",
            vec![
                (
                    "down (to clients)",
                    BLUE,
                    t.iter()
                        .map(|p| (p.t, p.down_bytes_per_s / 1024.0))
                        .collect(),
                ),
                (
                    "up (from clients)",
                    GREEN,
                    t.iter().map(|p| (p.t, p.up_bytes_per_s / 1024.0)).collect(),
                ),
            ],
        ),
    ];
    for (area, (title, series)) in panels.iter().zip(sets) {
        let top = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            .max(1e-3)
            * 1.15;
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        c.configure_mesh().x_desc("seconds").draw()?;
        for (name, colour, points) in series {
            c.draw_series(LineSeries::new(points, colour.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()
        .with_context(|| format!("writing the chart {}", path.display()))?;
    Ok(())
}
