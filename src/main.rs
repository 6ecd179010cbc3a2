//! `expel`: command-line front end to Expel's shared core.

mod cli_trace;
mod load;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "expel", version, about = "Expel: movement that never tunnels")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Map tools: statistics and traces.
    Map {
        #[command(subcommand)]
        command: MapCommand,
    },
    /// Walk a box hull through a map along a scripted route, sliding along walls, and
    /// report what it met (the default map when MAP is absent).
    Walk {
        map: Option<PathBuf>,
        /// Number of moves.
        #[arg(long, default_value_t = 2000)]
        steps: usize,
    },
}

#[derive(Subcommand)]
enum MapCommand {
    /// Print one JSON object describing the compiled collision model.
    Info { map: PathBuf },
    /// Trace JSON lines from standard input, one result line each on standard output.
    Trace { map: PathBuf },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Map {
            command: MapCommand::Info { map },
        } => {
            let loaded = load::load_model(Some(&map))?;
            println!("{}", serde_json::to_string(&loaded.info_json())?);
        }
        Command::Map {
            command: MapCommand::Trace { map },
        } => {
            let loaded = load::load_model(Some(&map))?;
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout().lock();
            cli_trace::run(&loaded.model, stdin, stdout)?;
        }
        Command::Walk { map, steps } => {
            let loaded = load::load_model(map.as_deref())?;
            cli_trace::walk(&loaded, steps)?;
        }
    }
    Ok(())
}
