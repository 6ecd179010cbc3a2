//! `expel serve`, `expel token` and `expel connect`: wiring of the server and client
//! libraries to flags, a TOML file and standard output.

use crate::load::{self, Loaded};
use crate::named::{lookup, named};
use anyhow::{bail, Context, Result};
use expel_bots::RunOptions;
use expel_client::{ConnectOptions, Impairment, Trust};
use expel_core::{MoveCommand, PlayerId};
use expel_modes::{Mode, MODES};
use expel_protocol::token;
use expel_protocol::MovementAuthority;
use expel_server::Identity;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `expel serve` settings; each may also come from the TOML file, flags winning.
#[derive(Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeArgs {
    /// Map file (default: the embedded arena).
    pub map: Option<PathBuf>,
    /// QUIC address (default 127.0.0.1:27960; port 0 picks a free one).
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Simulation ticks per second (10 to 240; default 60).
    #[arg(long)]
    pub tick_rate: Option<u32>,
    /// Snapshots per second (default 30, at most the tick rate).
    #[arg(long)]
    pub snapshot_rate: Option<u32>,
    /// Input datagrams per second clients send at most, each with the commands since the
    /// last (default 30, or the tick rate if lower; the tick rate: one a tick).
    #[arg(long)]
    pub input_rate: Option<u32>,
    /// Most players at once (default 64).
    #[arg(long)]
    pub max_players: Option<usize>,
    /// Connect-token secret (else $EXPEL_SECRET, else one is generated and stored).
    #[arg(long)]
    pub secret: Option<String>,
    /// HTTP address for the live view (/), /metrics, /healthz, /readyz and /players.json
    /// (default: TCP on loopback at the QUIC port, where local bots look for it; port 0
    /// picks a free one). Anywhere but loopback it needs --operator-token.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Token the HTTP endpoint asks for on every path but /healthz and /readyz
    /// (`Authorization: Bearer TOKEN`; else $EXPEL_OPERATOR_TOKEN). Required for a
    /// --metrics address off loopback.
    #[arg(long)]
    pub operator_token: Option<String>,
    /// This server's id: it accepts only connect tokens minted for it
    /// (`expel token --server-id ID`); else $EXPEL_SERVER_ID, else the Agones
    /// GameServer's name under the Fleet in deploy/, which sets it).
    #[arg(long)]
    pub server_id: Option<String>,
    /// Other players per snapshot, the nearest (default 32; any more within the exact
    /// reach, 512 units, are shown too, up to 48).
    #[arg(long)]
    pub interest: Option<usize>,
    /// Snapshot bytes a second each client may receive (default 4096, at least 2048):
    /// past it, far players are held where the client draws them, those it would notice
    /// last first; players within its exact reach are always sent.
    #[arg(long)]
    pub client_budget: Option<usize>,
    /// Threads for a tick's per-player work, the players' moves and their snapshots
    /// (default: the cores this process may run on; the state is the same bits on any
    /// number).
    #[arg(long)]
    pub threads: Option<usize>,
    /// I/O threads, each with a QUIC socket of its own on the port (SO_REUSEPORT), doing
    /// the packet work of the connections it accepted (default: the cores this process
    /// may run on, at most 64; more than one needs Linux). The state is the same bits on
    /// any number.
    #[arg(long)]
    pub io_threads: Option<usize>,
    /// Who moves the players: `server` (simulates every command; the default) or
    /// `client` (clients claim their states, the server validates each).
    #[arg(long, value_parser = named(&AUTHORITIES))]
    #[serde(default, deserialize_with = "authority_from_str")]
    pub movement: Option<MovementAuthority>,
    /// The game the server runs on top of movement (`none`, the default, is movement
    /// alone); its score goes to every player as messages and to operators at
    /// /game.json.
    #[arg(long, value_parser = named(&MODES))]
    #[serde(default, deserialize_with = "mode_from_str")]
    pub mode: Option<Mode>,
    /// PEM certificate chain (with --key) instead of a self-signed certificate.
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// PEM private key for --cert.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Open the browser's door here: the page that plays in a browser over TCP, and its
    /// WebTransport sessions over UDP on the same port (port 0 picks one). The page
    /// joins with the token in its address (`?token=`, from `expel token`).
    #[arg(long)]
    pub web: Option<SocketAddr>,
    /// PEM certificate chain (with --web-key) for the browser's door; without it a
    /// development certificate is made (14 days, pinned by the page by its hash).
    #[arg(long)]
    pub web_cert: Option<PathBuf>,
    /// PEM private key for --web-cert.
    #[arg(long)]
    pub web_key: Option<PathBuf>,
    /// Record the match into this folder as it is played, for `expel replay` (one file
    /// per run, in parts of --record-part-mb).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Megabytes past which a recording goes on in a new part.
    #[arg(long)]
    pub record_part_mb: Option<u64>,
    /// TOML file with any of these settings (flags win).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

/// Who decides where a player is, by the name `--movement` takes.
const AUTHORITIES: [(&str, MovementAuthority); 2] = [
    ("server", MovementAuthority::Server),
    ("client", MovementAuthority::Client),
];

fn mode_from_str<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
    from_table(&MODES, "mode", d)
}

fn authority_from_str<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<MovementAuthority>, D::Error> {
    from_table(&AUTHORITIES, "movement", d)
}

/// A config file's setting named from `table`, refused with the names it may take.
fn from_table<'de, D: serde::Deserializer<'de>, T: Copy>(
    table: &[(&str, T)],
    what: &str,
    d: D,
) -> Result<Option<T>, D::Error> {
    let s: Option<String> = serde::Deserialize::deserialize(d)?;
    s.map(|s| {
        let names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
        let names = names.join(", ");
        lookup(table, &s).ok_or_else(|| format!("unknown {what} '{s}' ({names})"))
    })
    .transpose()
    .map_err(serde::de::Error::custom)
}

impl ServeArgs {
    /// These flags over the file's settings.
    fn merged(self) -> Result<ServeArgs> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        let f: ServeArgs =
            toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
        Ok(ServeArgs {
            map: self.map.or(f.map),
            addr: self.addr.or(f.addr),
            tick_rate: self.tick_rate.or(f.tick_rate),
            snapshot_rate: self.snapshot_rate.or(f.snapshot_rate),
            input_rate: self.input_rate.or(f.input_rate),
            max_players: self.max_players.or(f.max_players),
            secret: self.secret.or(f.secret),
            metrics: self.metrics.or(f.metrics),
            operator_token: self.operator_token.or(f.operator_token),
            server_id: self.server_id.or(f.server_id),
            interest: self.interest.or(f.interest),
            client_budget: self.client_budget.or(f.client_budget),
            threads: self.threads.or(f.threads),
            io_threads: self.io_threads.or(f.io_threads),
            movement: self.movement.or(f.movement),
            mode: self.mode.or(f.mode),
            cert: self.cert.or(f.cert),
            key: self.key.or(f.key),
            web: self.web.or(f.web),
            web_cert: self.web_cert.or(f.web_cert),
            web_key: self.web_key.or(f.web_key),
            record: self.record.or(f.record),
            record_part_mb: self.record_part_mb.or(f.record_part_mb),
            config: self.config,
        })
    }
}

fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("expel");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/state/expel"),
        None => std::env::temp_dir().join("expel"),
    }
}

/// The secret: given, from the environment, or generated and stored (then reused).
fn secret(given: Option<String>) -> Result<Vec<u8>> {
    if let Some(s) = given.or_else(|| std::env::var("EXPEL_SECRET").ok()) {
        if s.is_empty() {
            bail!("the secret must not be empty");
        }
        return Ok(s.into_bytes());
    }
    let path = state_dir().join("secret");
    if let Ok(s) = std::fs::read_to_string(&path) {
        if !s.trim().is_empty() {
            tracing::warn!(file = %path.display(), "no --secret given: using the stored one");
            return Ok(s.trim().as_bytes().to_vec());
        }
    }
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill(&mut raw);
    let s = hex::encode(raw);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, &s)
        .with_context(|| format!("storing the secret in {}", path.display()))?;
    expel_server::warn_generated_secret(&path);
    Ok(s.into_bytes())
}

fn map_name(path: Option<&Path>) -> String {
    path.and_then(|p| p.file_stem())
        .map_or("arena".to_string(), |s| s.to_string_lossy().into_owned())
}

/// What `expel serve` was asked for beside the server itself.
pub(crate) struct Prepared {
    /// The map's name.
    pub name: String,
    /// Who moves the players.
    pub movement: MovementAuthority,
    /// The operator endpoint's token, if any.
    pub operator_token: Option<String>,
    /// The server's id, if any (tokens are minted for it).
    pub server_id: Option<token::ServerId>,
}

/// The server's builder from its settings: the same path a game embedding the server
/// takes ([`expel_server::Server::builder`]), with the map's model from the cache.
pub(crate) fn prepare(args: ServeArgs) -> Result<(expel_server::Builder, Prepared)> {
    let args = args.merged()?;
    let web = web_config(&args)?;
    let mut loaded: Loaded = load::load_model(args.map.as_deref())?;
    let name = map_name(args.map.as_deref());
    loaded.name = name.clone();
    let map = loaded.into_map();
    let identity = match (&args.cert, &args.key) {
        (Some(c), Some(k)) => Identity::from_pem(
            &std::fs::read(c).with_context(|| format!("reading {}", c.display()))?,
            &std::fs::read(k).with_context(|| format!("reading {}", k.display()))?,
        )?,
        (None, None) => Identity::self_signed()?,
        _ => bail!("--cert and --key go together"),
    };
    let addr = args.addr.unwrap_or_else(|| ([127, 0, 0, 1], 27960).into());
    let operator_token = args
        .operator_token
        .or_else(|| std::env::var("EXPEL_OPERATOR_TOKEN").ok());
    let agones = expel_server::AgonesConfig::from_env().map_err(anyhow::Error::msg)?;
    // Under Agones the Fleet sets EXPEL_SERVER_ID to the pod's name, which is the
    // GameServer's: the name an allocation returns, for which tokens are minted.
    let server_id = args
        .server_id
        .or_else(|| std::env::var("EXPEL_SERVER_ID").ok())
        .as_deref()
        .map(server_id_of)
        .transpose()?;
    let threads = match args.threads {
        Some(t @ 1..=256) => Some(t),
        Some(t) => bail!("--threads must be 1 to 256, got {t}"),
        None => None,
    };
    let movement = args.movement.unwrap_or_default();
    let secret = secret(args.secret)?;
    let mut b = expel_server::Server::builder(map)
        .addr(addr)
        .identity(identity)
        .secret(secret)
        .tick_rate(args.tick_rate.unwrap_or(60))
        // QUIC is UDP, so the same port number on TCP is normally free. The endpoint is
        // the operator's: on loopback unless asked elsewhere.
        .metrics(args.metrics.unwrap_or_else(|| loopback_of(addr)))
        // Under Agones, the SDK sidecar's port is in the environment.
        .agones(agones)
        .boxed_rules(args.mode.and_then(Mode::rules))
        .settings(|s| {
            s.server_id = server_id;
            s.snapshot_rate = args.snapshot_rate.unwrap_or(s.snapshot_rate);
            s.input_rate = args.input_rate;
            s.max_players = args.max_players.unwrap_or(s.max_players);
            s.interest = args.interest.unwrap_or(s.interest);
            s.client_budget = args.client_budget.unwrap_or(s.client_budget);
            s.movement = movement;
            s.threads = threads.unwrap_or(s.threads);
        });
    if let Some(t) = &operator_token {
        b = b.operator_token(t.clone());
    }
    if let Some(web) = web {
        b = b.web(web);
    }
    if let Some(dir) = args.record {
        let rules = MODES.iter().find(|(_, m)| Some(*m) == args.mode);
        let mut r = expel_server::RecordConfig::new(dir, rules.map_or("none", |r| r.0));
        match args.record_part_mb {
            Some(mb @ 1..=65_536) => r.part_bytes = mb << 20,
            Some(mb) => bail!("--record-part-mb must be 1 to 65536, got {mb}"),
            None => {}
        }
        if movement == MovementAuthority::Client {
            bail!("--record needs --movement server: trusted clients' claims are not recorded");
        }
        b = b.record(r);
    }
    match args.io_threads {
        Some(t @ 1..=expel_server::MAX_IO_THREADS) => b = b.io_threads(t),
        Some(t) => bail!(
            "--io-threads must be 1 to {}, got {t}",
            expel_server::MAX_IO_THREADS
        ),
        None => {}
    }
    let prepared = Prepared {
        name,
        movement,
        operator_token,
        server_id,
    };
    Ok((b, prepared))
}

/// The browser's door, when asked for.
fn web_config(args: &ServeArgs) -> Result<Option<expel_server::WebConfig>> {
    let certificate = match (&args.web_cert, &args.web_key) {
        (Some(chain), Some(key)) => expel_server::WebCertificate::Files {
            chain: chain.clone(),
            key: key.clone(),
        },
        (None, None) => expel_server::WebCertificate::Development,
        _ => bail!("--web-cert and --web-key go together"),
    };
    let Some(addr) = args.web else {
        if args.web_cert.is_some() {
            bail!("--web-cert is for the browser's door: give --web ADDR too");
        }
        return Ok(None);
    };
    Ok(Some(expel_server::WebConfig {
        addr,
        certificate,
        page: crate::page::web_page()?,
    }))
}

/// The QUIC address's port on loopback (the address itself when it is loopback).
fn loopback_of(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_loopback() {
        return addr;
    }
    let ip: std::net::IpAddr = if addr.is_ipv6() {
        std::net::Ipv6Addr::LOCALHOST.into()
    } else {
        std::net::Ipv4Addr::LOCALHOST.into()
    };
    SocketAddr::new(ip, addr.port())
}

/// The one line `expel serve` prints once it accepts connections.
pub(crate) fn ready_line(running: &expel_server::Server, asked: &Prepared) -> serde_json::Value {
    json!({
        "listening": running.addr.to_string(),
        "fingerprint": running.fingerprint,
        "metrics": running.metrics_addr.map(|a| a.to_string()),
        "web": running.web_url,
        "recording": running.recording.as_ref().map(|p| p.display().to_string()),
        "map": asked.name,
        "map_hash": running.map_hash,
        "tick_rate": running.sim().config().tick_rate,
        "movement": asked.movement.name(),
    })
}

/// Runs the server until SIGTERM or Ctrl-C (or until one of its tasks fails), then tells
/// clients why and exits.
pub(crate) fn serve(args: ServeArgs) -> Result<()> {
    let (builder, asked) = prepare(args)?;
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    rt.block_on(async move {
        let running = builder.start().await?;
        // Before the line that tells a supervisor it may signal us: a SIGTERM that came
        // before the handler would kill the process uncleanly.
        let signalled = shutdown_signal();
        let line = ready_line(&running, &asked);
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        let failed = tokio::select! {
            _ = signalled => None,
            why = running.stopped() => Some(why),
        };
        tracing::info!("shutting down");
        match failed {
            None => {
                running.shutdown("server shutting down").await;
                Ok(())
            }
            Some(why) => {
                running.shutdown("server failed").await;
                Err(anyhow::anyhow!("the server stopped: {why}"))
            }
        }
    })
}

/// A future that ends at SIGTERM or Ctrl-C. The handlers are in place when this returns,
/// not when the future is first polled: a signal in between is not lost to the default
/// action (which ends the process at once).
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            match (term, int) {
                (Some(mut term), Some(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (Some(mut term), None) => {
                    term.recv().await;
                }
                (None, Some(mut int)) => {
                    int.recv().await;
                }
                (None, None) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The server id `name` stands for (`--server-id`).
pub(crate) fn server_id_of(name: &str) -> Result<token::ServerId> {
    token::ServerId::new(name).map_err(|e| anyhow::anyhow!("server id {name:?}: {e}"))
}

/// A fresh token for `player`, valid for `ttl` seconds, on the server `server` only
/// (`None`: a server without an id).
pub(crate) fn mint_token(
    secret: &str,
    player: u32,
    ttl: u64,
    server: Option<token::ServerId>,
) -> Result<String> {
    if secret.is_empty() {
        bail!("the secret must not be empty");
    }
    let valid_for = std::time::Duration::from_secs(ttl);
    Ok(expel_server::new_token(
        secret.as_bytes(),
        PlayerId(player),
        valid_for,
        server,
    ))
}

/// `expel connect` settings.
#[derive(Debug, clap::Args)]
pub(crate) struct ConnectArgs {
    /// Server address (HOST:PORT).
    pub addr: SocketAddr,
    /// Connect token (from `expel token`).
    #[arg(long, conflicts_with = "secret", required_unless_present = "secret")]
    pub token: Option<String>,
    /// The server's secret: mint a token here.
    #[arg(long)]
    pub secret: Option<String>,
    /// Player id for a token minted with --secret (default: random).
    #[arg(long)]
    pub player: Option<u32>,
    /// The server's id, for a token minted with --secret (`expel serve --server-id`).
    #[arg(long, requires = "secret")]
    pub server_id: Option<String>,
    /// SHA-256 fingerprint of the server's certificate, as `expel serve` prints it.
    #[arg(long, required_unless_present = "ca")]
    pub fingerprint: Option<String>,
    /// PEM certificate authority to trust instead of a fingerprint.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Commands, one JSON line per tick in the `expel sim` format (default: a wandering bot).
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Seconds to play (default: until the inputs end, or 10 for the bot).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// The link conditioner.
    #[command(flatten)]
    pub link: ImpairmentArgs,
}

/// Link conditioner flags, shared by `connect` and `bots`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImpairmentArgs {
    /// Datagram loss probability in each direction (link conditioner).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// One-way datagram delay, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub delay: f64,
    /// Datagram delay jitter, ± milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub jitter: f64,
}

impl ImpairmentArgs {
    /// The conditioner, once every value is in range.
    pub(crate) fn conditioner(&self) -> Result<Impairment> {
        for (name, v, hi) in [
            ("--loss", self.loss, 1.0),
            ("--delay", self.delay, 10_000.0),
            ("--jitter", self.jitter, 10_000.0),
        ] {
            if !(v.is_finite() && (0.0..=hi).contains(&v)) {
                bail!("{name} must be 0 to {hi}, got {v}");
            }
        }
        Ok(Impairment {
            loss: self.loss,
            delay_ms: self.delay,
            jitter_ms: self.jitter,
            duplicate: 0.0,
        })
    }
}

/// Plays one headless client and prints its figures as one JSON line.
pub(crate) fn connect(args: ConnectArgs) -> Result<()> {
    let token = match (&args.token, &args.secret) {
        (Some(t), _) => t.clone(),
        (None, Some(s)) => {
            let id = args
                .player
                .unwrap_or_else(|| rand::thread_rng().gen_range(1..1 << 30));
            let server = args.server_id.as_deref().map(server_id_of).transpose()?;
            mint_token(s, id, 3600, server)?
        }
        (None, None) => bail!("give --token or --secret"),
    };
    let trust = match (&args.fingerprint, &args.ca) {
        (Some(f), _) => Trust::Fingerprint(f.clone()),
        (None, Some(ca)) => Trust::Authority(
            std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?,
        ),
        (None, None) => bail!("give --fingerprint or --ca"),
    };
    let inputs = args
        .inputs
        .as_deref()
        .map(crate::sim::read_inputs)
        .transpose()?;
    let link = args.link.conditioner()?;
    let seconds = args.seconds.unwrap_or(match &inputs {
        Some(c) => c.len() as f64 / 10.0 + 30.0,
        None => 10.0,
    });
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0) {
        bail!("--seconds must be above 0 and at most 86400, got {seconds}");
    }
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let report = rt.block_on(async {
        let opts = ConnectOptions::new(token, trust);
        let joined = expel_client::connect(args.addr, &opts).await?;
        let mut next = 0usize;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(joined.welcome.player.0));
        let mut wander = MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0);
        let driver = move |_tick: u64, _state: Option<&expel_core::PlayerState>| match &inputs {
            Some(list) => {
                let c = list.get(next).copied();
                next += 1;
                c
            }
            None => {
                if rng.gen_bool(0.02) {
                    wander = MoveCommand::new(
                        1.0,
                        rng.gen_range(-0.5..0.5),
                        0.0,
                        rng.gen_range(0.0..360.0),
                        0.0,
                    );
                }
                Some(wander)
            }
        };
        let run = RunOptions {
            seconds,
            link,
            ..RunOptions::default()
        };
        Ok::<_, anyhow::Error>(expel_bots::run(joined, driver, run).await?)
    })?;
    let line = report.summary_line();
    println!("{line}");
    if let Some(reason) = report.ended_by_server {
        tracing::warn!(%reason, "the server ended the session");
    }
    Ok(())
}
