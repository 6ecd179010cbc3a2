//! `expel`: command-line front end to Expel's shared core.

mod bots;
mod cli_trace;
mod demo;
mod lines;
mod load;
mod named;
mod net;
mod page;
mod replay;
mod shots;
mod sim;
mod validate;
mod walk;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// jemalloc (see Cargo.toml): a thousand connections' small, short-lived buffers
/// (datagrams in, packets out, per-tick lists) cost glibc's malloc more, not least its
/// consolidation of free chunks whenever a tick asks for a large block.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "expel", version, about = "Expel: movement that never tunnels")]
struct Cli {
    /// How log lines on standard error look: `text` (coloured only on a terminal, and not
    /// under NO_COLOR) or `json`, one object a line for log collectors (else
    /// $EXPEL_LOG_FORMAT, else text). RUST_LOG picks what is logged (default: warn).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs to standard error as asked.
fn init_logs(format: Option<LogFormat>) -> Result<()> {
    use std::io::IsTerminal;
    let format = match (format, std::env::var("EXPEL_LOG_FORMAT").ok().as_deref()) {
        (Some(f), _) => f,
        (None, None | Some("" | "text")) => LogFormat::Text,
        (None, Some("json")) => LogFormat::Json,
        (None, Some(other)) => {
            anyhow::bail!("EXPEL_LOG_FORMAT must be text or json, got {other:?}")
        }
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().with_current_span(false).init(),
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            logs.with_ansi(colour).init()
        }
    }
    Ok(())
}

#[derive(Subcommand)]
enum Command {
    /// Map tools: statistics and traces.
    Map {
        #[command(subcommand)]
        command: MapCommand,
    },
    /// Bots wander a map (the embedded default when MAP is absent) with the shared
    /// movement code; prints their progress and checks nobody ever ends in solid.
    Walk {
        map: Option<PathBuf>,
        /// Number of bots.
        #[arg(long, default_value_t = 16)]
        bots: u32,
        /// Game seconds to simulate.
        #[arg(long, default_value_t = 30.0)]
        seconds: f64,
    },
    /// Run the authoritative server over QUIC; prints one JSON line when listening.
    Serve(net::ServeArgs),
    /// Play a recorded match (`expel serve --record`) again with the server's own
    /// simulation and rules, checking every recorded world hash; prints one JSON object.
    Replay(replay::ReplayArgs),
    /// Print a connect token for a player.
    Token {
        /// The server's secret.
        #[arg(long)]
        secret: String,
        /// The player id.
        #[arg(long)]
        player: u32,
        /// Seconds the token stays valid.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
        /// The only server that accepts it (its `expel serve --server-id`); without it,
        /// only servers without an id do.
        #[arg(long)]
        server_id: Option<String>,
    },
    /// One headless client: plays inputs (or wanders) and prints its figures as JSON.
    Connect(net::ConnectArgs),
    /// Runs a swarm of bots (real QUIC clients, some cheating) against a server and
    /// reports what they and the server measured.
    Bots(bots::BotsArgs),
    /// A server and a crowd of bots in one process, with a live view to watch them.
    Demo(demo::DemoArgs),
    /// Simulate one player from a file of per-tick JSON inputs; print each tick and the
    /// final state hash.
    Sim {
        map: PathBuf,
        /// Start position x,y,z (default: the map's first info_player_* spawn point).
        #[arg(long, value_parser = sim::parse_vec3, allow_hyphen_values = true)]
        spawn: Option<glam::DVec3>,
        /// One JSON line per tick: {"forward","side","up","yaw","pitch","jump","crouch"}.
        #[arg(long)]
        inputs: PathBuf,
        /// Ticks per second (10 to 240).
        #[arg(long, default_value_t = 60)]
        tick_rate: u32,
        /// How the player moves.
        #[arg(long, default_value = "walk", value_parser = named::named(&MOVE_MODES))]
        mode: expel_core::MoveMode,
    },
    /// Projectiles swept by the server's simulation: reads JSON lines {"start","dir",
    /// "speed","mins","maxs","gravity","bounce","ticks"}, writes one line per shot:
    /// {"impacts":[{"tick","point","normal","hit"},...],"end","velocity","state","ticks"}.
    Shots {
        map: PathBuf,
        /// Ticks per second (10 to 240).
        #[arg(long, default_value_t = 60)]
        tick_rate: u32,
    },
    /// Trusted-client validation offline: reads one player's claimed states (the per-tick
    /// lines `expel sim` prints) on standard input, writes one verdict line per claim:
    /// {"tick","accepted","origin","violation"}.
    Validate {
        map: PathBuf,
        /// Start position x,y,z (default: the map's first info_player_* spawn point).
        #[arg(long, value_parser = sim::parse_vec3, allow_hyphen_values = true)]
        spawn: Option<glam::DVec3>,
        /// Ticks per second (10 to 240).
        #[arg(long, default_value_t = 60)]
        tick_rate: u32,
    },
}

/// The modes `expel sim --mode` plays, by name (frozen is a game's, not a player's).
const MOVE_MODES: [(&str, expel_core::MoveMode); 3] = [
    ("walk", expel_core::MoveMode::Walk),
    ("noclip", expel_core::MoveMode::Noclip),
    ("spectator", expel_core::MoveMode::Spectator),
];

#[derive(Subcommand)]
enum MapCommand {
    /// Print one JSON object describing the compiled collision model.
    Info { map: PathBuf },
    /// Trace JSON lines from standard input, one result line each on standard output.
    Trace { map: PathBuf },
    /// Rotation traces: JSON lines {"mins","maxs","position","origin","axis","angle"}
    /// (degrees) in, {"fraction","normal","startsolid"} out.
    Rotate { map: PathBuf },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_logs(cli.log_format)?;
    match cli.command {
        Command::Map {
            command: MapCommand::Info { map },
        } => {
            let loaded = load::load_model(Some(&map))?;
            println!("{}", serde_json::to_string(&loaded.info_json())?);
        }
        Command::Map {
            command: MapCommand::Trace { map },
        } => stream(&map, cli_trace::Kind::Trace)?,
        Command::Map {
            command: MapCommand::Rotate { map },
        } => stream(&map, cli_trace::Kind::Rotate)?,
        Command::Sim {
            map,
            spawn,
            inputs,
            tick_rate,
            mode,
        } => {
            let loaded = load::load_model(Some(&map))?;
            let args = sim::SimArgs {
                spawn,
                inputs,
                tick_rate,
                mode,
            };
            sim::run(loaded, args, std::io::stdout().lock())?;
        }
        Command::Validate {
            map,
            spawn,
            tick_rate,
        } => {
            let loaded = load::load_model(Some(&map))?;
            let stdin = std::io::stdin().lock();
            validate::run(loaded, tick_rate, spawn, stdin, std::io::stdout().lock())?;
        }
        Command::Shots { map, tick_rate } => {
            let loaded = load::load_model(Some(&map))?;
            let stdin = std::io::stdin().lock();
            shots::run(loaded, tick_rate, stdin, std::io::stdout().lock())?;
        }
        Command::Serve(args) => net::serve(args)?,
        Command::Replay(args) => replay::run(args)?,
        Command::Token {
            secret,
            player,
            ttl,
            server_id,
        } => println!(
            "{}",
            net::mint_token(
                &secret,
                player,
                ttl,
                server_id.as_deref().map(net::server_id_of).transpose()?
            )?
        ),
        Command::Connect(args) => net::connect(args)?,
        Command::Bots(args) => bots::run(args)?,
        Command::Demo(args) => demo::run(args)?,
        Command::Walk { map, bots, seconds } => {
            let loaded = load::load_model(map.as_deref())?;
            walk::run(loaded, bots, seconds)?;
        }
    }
    Ok(())
}

/// Answers JSON-line requests of `kind` from standard input against the map's model.
fn stream(map: &std::path::Path, kind: cli_trace::Kind) -> Result<()> {
    let loaded = load::load_model(Some(map))?;
    cli_trace::run(
        &loaded.model,
        kind,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )
}
