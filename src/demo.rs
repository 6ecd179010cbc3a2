//! `expel demo`: a server and a crowd of bots (a few of them cheating) in one process, and
//! the address of the live view to watch them. Bots play in rounds, so cheaters that were
//! kicked come back and are caught again.

use crate::net::{self, ServeArgs};
use anyhow::{Context, Result};
use expel_bots::{Behavior, CheatKind, SwarmOptions, SwarmProgress};
use expel_client::{Impairment, Trust};
use expel_modes::Mode;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `expel demo` settings.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Map file (default: the embedded arena).
    pub map: Option<PathBuf>,
    /// QUIC address; the live view is on the same address and port over TCP.
    #[arg(long, default_value = "127.0.0.1:27960")]
    pub addr: SocketAddr,
    /// The browser's door (the page that plays, and its WebTransport sessions; default:
    /// the QUIC address's next port, or any free one with port 0). Open only in an
    /// `expel` built with the page (web/build.sh).
    #[arg(long)]
    pub web: Option<SocketAddr>,
    /// Bots.
    #[arg(long, default_value_t = 64)]
    pub bots: usize,
    /// Cheaters of each kind the game can show: in tag, every cheat but those at
    /// shooting (backtrack, wallshot, rapidfire: tag has no gun); in deathmatch, all.
    #[arg(long, default_value_t = 1)]
    pub cheaters: usize,
    /// Seconds to run (default: until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds per round of bots.
    #[arg(long, default_value_t = 60.0)]
    pub round: f64,
    /// The game the bots play (in deathmatch they shoot at whom they see).
    #[arg(long, default_value = "tag", value_parser = crate::named::named(&DEMO_MODES))]
    pub mode: Mode,
}

/// The games `expel demo` plays, by name: tag, or deathmatch (the bots shoot at whom
/// they see).
const DEMO_MODES: [(&str, Mode); 2] = [("tag", Mode::Tag), ("deathmatch", Mode::Deathmatch)];

/// The cheats the demo's game can show: a cheat at shooting needs a gun.
pub(crate) fn demo_cheats(mode: Mode) -> Vec<CheatKind> {
    (CheatKind::ALL.iter().map(|(_, k)| *k))
        .filter(|k| mode == Mode::Deathmatch || !k.shoots())
        .collect()
}

/// The player id of the demo's browser token, far above the bots' (whose ids grow by
/// a crowd each round).
const BROWSER_PLAYER: u32 = 4_000_000_000;

/// The browser's door: as asked, else the QUIC address's next port (any with port 0).
fn web_addr(args: &DemoArgs) -> SocketAddr {
    args.web.unwrap_or_else(|| {
        let port = match args.addr.port() {
            0 => 0,
            p => p.wrapping_add(1).max(1),
        };
        SocketAddr::new(args.addr.ip(), port)
    })
}

/// Runs the demo.
pub(crate) fn run(args: DemoArgs) -> Result<()> {
    let cheats = demo_cheats(args.mode);
    let cheaters = args.cheaters.min(args.bots / cheats.len().max(1));
    let secret = hex::encode(rand::random::<[u8; 16]>());
    let (builder, asked) = net::prepare(ServeArgs {
        map: args.map.clone(),
        addr: Some(args.addr),
        max_players: Some(args.bots + 16),
        secret: Some(secret.clone()),
        // The bots play a game on top of moving (the live view shows the score).
        mode: Some(args.mode),
        web: crate::page::available().then(|| web_addr(&args)),
        ..ServeArgs::default()
    })?;
    let operator_token = asked.operator_token.clone();
    // The bots' tokens are for this server ($EXPEL_SERVER_ID may give it an id).
    let server_id = asked.server_id;
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    rt.block_on(async move {
        let running = builder.start().await?;
        let signalled = net::shutdown_signal();
        let http = running.metrics_addr.unwrap_or(running.addr);
        println!("{}", net::ready_line(&running, &asked));
        let names: Vec<&str> = cheats.iter().map(|c| c.name()).collect();
        println!(
            "live view: http://{http}/   ({} bots, {} cheating: {}; Ctrl-C stops)",
            args.bots,
            cheaters * cheats.len(),
            names.join(", ")
        );
        match &running.web_url {
            Some(web) => {
                // One token, good once: the page joins with it (`expel token` mints more).
                let t = net::mint_token(&secret, BROWSER_PLAYER, 3600, server_id)?;
                println!("play in the browser: {web}?token={t}");
            }
            None => println!("(no browser client in this build: web/build.sh, then build again)"),
        }
        let started = std::time::Instant::now();
        let mut round = 0u32;
        let rounds = async {
            loop {
                let left = args.duration.map_or(f64::INFINITY, |d| d - started.elapsed().as_secs_f64());
                if left <= 0.5 {
                    return Ok::<_, anyhow::Error>(());
                }
                let first = 1 + round * (args.bots as u32 + 1);
                let tokens = (0..args.bots as u32)
                    .map(|i| net::mint_token(&secret, first + i, 3600, server_id))
                    .collect::<Result<Vec<_>>>()?;
                let opts = SwarmOptions {
                    server: running.addr,
                    trust: Trust::Fingerprint(running.fingerprint.clone()),
                    tokens,
                    seconds: args.round.min(left),
                    behavior: Behavior::Mixed,
                    cheats: cheats.clone(),
                    cheaters,
                    link: Impairment::default(),
                    concurrent_connects: 16,
                    cheat_after: 5.0,
                    // Rounds bring bots back; a lost one waits for the next.
                    reconnect: false,
                    buffer_ticks: expel_bots::RunOptions::default().buffer_ticks,
                    light: false,
                    fire: args.mode == Mode::Deathmatch,
                };
                let http = expel_bots::Operator {
                    addr: http,
                    token: operator_token.clone(),
                };
                let r = crate::bots::run_swarm(opts, http, Arc::new(SwarmProgress::default())).await;
                println!(
                    "round {}: {} bots connected, {} kicked; {} of {} cheaters caught, {} honest flagged; tick p99 {} ms",
                    round + 1,
                    r.connected,
                    r.kicked,
                    r.cheaters_detected,
                    cheaters * cheats.len(),
                    r.honest_flagged,
                    r.server_tick_ms_p99.map_or("n/a".into(), |v| format!("{v:.2}"))
                );
                round += 1;
            }
        };
        tokio::select! {
            r = rounds => r?,
            _ = signalled => {}
        }
        running.shutdown("demo over").await;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_runs_only_the_cheats_its_game_can_show() {
        let tag = demo_cheats(Mode::Tag);
        assert!(
            !tag.is_empty() && tag.iter().all(|c| !c.shoots()),
            "{tag:?}"
        );
        assert!(tag.contains(&CheatKind::Gaps) && tag.contains(&CheatKind::Noclip));
        assert_eq!(demo_cheats(Mode::Deathmatch).len(), CheatKind::ALL.len());
    }
}
