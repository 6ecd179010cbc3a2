//! Expel's authoritative server: a shell of threads around the protocol's server state
//! machine, [`expel_protocol::server::ServerMachine`]. Everything the protocol decides
//! (hellos, tokens, player slots, inputs, validation, ticks, snapshots, kicks) is the
//! machine's; this crate moves bytes and fires timers:
//!
//! * The machine's thread (`machine.rs`) owns the [`Machine`]: it calls its timeout
//!   when a tick is due, feeds it what the I/O threads gathered and hands them what it
//!   says. It hands the machine's counters to [`Metrics`], which exposes them.
//! * The I/O threads (`io.rs`) each own a QUIC socket on the port, a quinn-proto endpoint
//!   and its connections, driven by hand (`quic/`). They admit connection attempts
//!   (bounds on pending handshakes, a stateless retry under load; `admission.rs`), hold
//!   each handshake to its deadline, and carry out the machine's datagrams, control
//!   writes (each within the write deadline; a peer that grants no flow-control credit in
//!   time is dropped as stalled), map transfers and closes.
//! * The HTTP task (`http.rs`, on hyper) serves metrics, health, flagged players and the
//!   live view.
//! * Under Agones, a task reports readiness, health, players and shutdown to the SDK
//!   sidecar ([`agones`]).
//!
//! The machine, HTTP and Agones tasks are supervised: if either ends on its own (a panic is a
//! bug), [`Server::stopped`] says why and the server stops accepting players.

mod admission;
pub mod agones;
mod builder;
mod http;
mod io;
mod live;
mod machine;
mod meter;
mod metrics;
mod quic;
mod record;
mod replay_view;
mod tls;
pub mod udp;
pub mod web;

use admission::Admission;
pub use admission::{Decision, Limits};
pub use agones::AgonesConfig;
pub use builder::{Builder, Map};
// The rules API a game hands `Builder::rules`, and what it names.
pub use expel_core::{EntityId, EntityState, Motion, PlayerId};
pub use expel_protocol::messages::Channel;
pub use expel_protocol::server::{
    Game, GameRules, RuleError, Sender, ServerSettings, SettingsError, ShotError, SpawnError,
    StateError, REFUSALS,
};
pub use expel_protocol::snapshot::Scope;
pub use metrics::{Gauge, IoWork, Labelled, Metrics, Seconds, Share};
pub use record::RecordConfig;
pub use replay_view::ReplayView;
pub use tls::{fingerprint, Identity};
pub use web::{WebCertificate, WebConfig, WebError, WebPage};

use expel_core::Sim;
use expel_protocol::server::ServerMachine as Machine;
use expel_protocol::token::keyed::KeyedHash;
use expel_protocol::token::{mint, Grant, ServerId};
use io::{IoThreads, Wake};
use quic::QuicParts;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long a shutdown waits for players to read their last words before it closes
/// every connection.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// The least time between two looks at the socket. Woken for every datagram, a server of
/// a thousand players spent a wake-up, an `epoll_wait` and two receive calls on each of
/// its 30,000 or more a second; looking at most once a millisecond takes them in batches
/// of about thirty. A command arrives a millisecond late at worst, which the clients'
/// lead absorbs.
const READ_GAP: Duration = Duration::from_millis(1);
/// Most I/O threads: the first byte of a connection id names its thread.
pub const MAX_IO_THREADS: usize = 64;

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The browser's door could not open.
    #[error(transparent)]
    Web(#[from] WebError),
    /// Certificate or TLS configuration: what was being done, and what failed.
    #[error("tls: {what}")]
    Tls {
        /// What was being done.
        what: &'static str,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A socket could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A setting out of range, or two that do not go together.
    #[error("config: {0}")]
    Config(String),
    /// The match could not be recorded.
    #[error("recording the match in {dir}: {why}")]
    Record {
        /// The folder.
        dir: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// The protocol's settings were refused.
    #[error("server settings")]
    Settings(#[source] expel_protocol::server::SettingsError),
    /// The movement settings were refused.
    #[error("movement settings")]
    Movement(#[source] expel_core::movement::ConfigError),
    /// A thread could not be started.
    #[error("starting the {what}")]
    Thread {
        /// Which.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The map file could not be read.
    #[error("reading map {path}")]
    ReadMap {
        /// Where.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The map could not be parsed.
    #[error("loading map {name}")]
    Map {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: expel_core::MapError,
    },
}

/// How to run a server: where it listens and how it guards itself; how it plays is the
/// protocol machine's [`ServerSettings`].
pub struct ServerConfig {
    /// UDP address for QUIC (port 0 picks one).
    pub addr: SocketAddr,
    /// HTTP address for the live view, metrics, health and flagged players (port 0 picks
    /// one; equal to `addr`, it takes the QUIC port over TCP once that is chosen). Off
    /// loopback it needs `operator_token`.
    pub metrics: Option<SocketAddr>,
    /// The token every HTTP path but `/healthz` and `/readyz` asks for
    /// (`Authorization: Bearer TOKEN`); without one the endpoint must be on loopback.
    pub operator_token: Option<String>,
    /// TLS certificate and key.
    pub identity: Identity,
    /// Bounds on connections not yet joined and on how long the server waits for a peer.
    pub limits: Limits,
    /// How the server plays: rates, players, secret, interest, budget, map, timeouts,
    /// who moves the players.
    pub settings: ServerSettings,
    /// Report to an Agones SDK sidecar ([`AgonesConfig::from_env`]).
    pub agones: Option<AgonesConfig>,
    /// I/O threads, each with a socket of its own on the QUIC port (1 to
    /// [`MAX_IO_THREADS`]; more than one needs `SO_REUSEPORT`, so Linux).
    pub io_threads: usize,
    /// The game's own rules, run in the machine's tick (none: movement alone, and the
    /// players' messages are dropped).
    pub rules: Option<Box<dyn GameRules>>,
    /// The browser's door: WebTransport sessions and the page that plays through them
    /// (none: native clients only).
    pub web: Option<WebConfig>,
    /// Record the match to files, for `expel replay` (none: nothing is kept).
    pub record: Option<RecordConfig>,
}

/// A running server.
pub struct Server {
    /// The QUIC address.
    pub addr: SocketAddr,
    /// The metrics address.
    pub metrics_addr: Option<SocketAddr>,
    /// The browser's door's address (its page over TCP, its sessions over UDP), when open.
    pub web_addr: Option<SocketAddr>,
    /// The browser's page: `http://ADDR/`, or `https://ADDR/` with the operator's
    /// certificate.
    pub web_url: Option<String>,
    /// The recording's first file, when the match is recorded.
    pub recording: Option<std::path::PathBuf>,
    /// SHA-256 of the certificate, for clients to pin.
    pub fingerprint: String,
    /// BLAKE3 of the map's bytes, hex.
    pub map_hash: String,
    /// The counters.
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    failed: watch::Receiver<Option<TaskEnded>>,
    /// Reaches the machine's thread.
    wake: std::sync::mpsc::Sender<Wake>,
    sim: Arc<Sim>,
    /// What connect tokens for this server are signed with and bound to.
    secret: Vec<u8>,
    server_id: Option<ServerId>,
}

impl Server {
    /// Tells every client why, closes every connection and stops.
    pub async fn shutdown(self, reason: &str) {
        self.metrics.set_ready(false);
        let _ = self.shutdown.send(Some(reason.to_string()));
        let _ = self.wake.send(Wake::Shutdown(reason.to_string()));
        // The machine task closes every connection within its grace, then ends.
        for t in self.tasks {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(2), t).await;
        }
    }

    /// Fault injection for drills and tests: the tick loop blocks for `d` as a stuck
    /// simulation would (its thread held, nothing stepped), then runs on.
    pub async fn stall_tick(&self, d: Duration) {
        let _ = self.wake.send(Wake::Stall(d));
    }

    /// The simulation the server runs (its map and movement settings).
    pub fn sim(&self) -> &Arc<Sim> {
        &self.sim
    }

    /// A fresh connect token for `player`, good on this server for `valid_for` and once.
    /// A game that hands out tokens elsewhere mints them with the same secret
    /// ([`expel_protocol::token::mint`]).
    pub fn token(&self, player: PlayerId, valid_for: Duration) -> String {
        new_token(&self.secret, player, valid_for, self.server_id)
    }

    /// Resolves when a supervised task (the machine or the HTTP endpoint) ended on its
    /// own, with why: the process should stop (or restart) the server.
    pub async fn stopped(&self) -> TaskEnded {
        let mut f = self.failed.clone();
        loop {
            if let Some(why) = f.borrow_and_update().clone() {
                return why;
            }
            if f.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A fresh connect token for `player`, signed with `secret`, good for `valid_for` from now
/// and once, on the server with id `server` only (`None`: a server without an id).
pub fn new_token(
    secret: &[u8],
    player: PlayerId,
    valid_for: Duration,
    server: Option<ServerId>,
) -> String {
    let mut nonce = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut nonce);
    let grant = Grant {
        player,
        expires: now_unix().saturating_add(valid_for.as_secs()),
        nonce,
        server,
    };
    mint(secret, &grant)
}

/// What the machine's and the I/O threads use of the rest of the server.
struct Shared {
    cfg: ServerConfig,
    /// The QUIC port.
    port: u16,
    metrics: Arc<Metrics>,
    admission: Admission,
    /// Players in the server, for the Agones reporter.
    players: Arc<agones::Players>,
}

/// Starts the server: binds QUIC (and metrics), starts the machine and accept tasks.
pub async fn start(sim: Arc<Sim>, cfg: ServerConfig) -> Result<Server, ServerError> {
    let mut cfg = cfg;
    let mut machine = Machine::new(
        sim.clone(),
        cfg.settings.clone(),
        Instant::now(),
        now_unix(),
    )
    .map_err(ServerError::Settings)?;
    if let Some(rules) = cfg.rules.take() {
        machine.set_rules(rules);
    }
    let metrics = Arc::new(Metrics::new());
    metrics.capacity.set(cfg.settings.max_players as u64);
    let quic = bind(&cfg, metrics.udp_counts())?;
    let addr = quic[0]
        .socket
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: cfg.addr,
            source,
        })?;
    let live = Arc::new(live::Live::new(&sim, &cfg.settings.map_name));
    let (failed_tx, failed) = watch::channel(None::<TaskEnded>);
    let failed_tx = Arc::new(failed_tx);
    let mut tasks = Vec::new();
    let (shutdown, shutdown_rx) = watch::channel(None::<String>);
    // The HTTP endpoint at the QUIC address means the QUIC port once chosen (TCP and UDP
    // ports are separate, so it is normally free).
    let http = cfg.metrics.map(|a| if a == cfg.addr { addr } else { a });
    let metrics_addr = match http {
        Some(a) => {
            check_operator_endpoint(a, cfg.operator_token.as_deref())?;
            let auth = Arc::new(http::OperatorAuth::new(cfg.operator_token.as_deref()));
            let l = tokio::net::TcpListener::bind(a)
                .await
                .map_err(|source| ServerError::Bind { addr: a, source })?;
            let local = l
                .local_addr()
                .map_err(|source| ServerError::Bind { addr: a, source })?;
            let site = Arc::new(http::Site::Operator {
                live: live.clone(),
                auth,
            });
            let serve = http::serve(l, metrics.clone(), site, None);
            let mut stop = shutdown_rx.clone();
            let task = tokio::spawn(async move {
                tokio::select! {
                    _ = serve => Some("the listener stopped".to_string()),
                    _ = stop.changed() => None,
                }
            });
            tasks.push(supervise("http", task, failed_tx.clone(), metrics.clone()));
            Some(local)
        }
        None => None,
    };
    let (web, web_addr, web_url) = match cfg.web.clone() {
        Some(w) => {
            let (bound, task) = open_web(w, &metrics, shutdown_rx.clone()).await?;
            tasks.push(supervise(
                "web page",
                task,
                failed_tx.clone(),
                metrics.clone(),
            ));
            let (a, url) = (bound.addr, bound.url());
            (Some(bound), Some(a), Some(url))
        }
        None => (None, None, None),
    };
    let (wake, wake_rx) = std::sync::mpsc::channel();
    let map_hash = hex::encode(machine.map_hash());
    let fingerprint = cfg.identity.fingerprint.clone();
    let (secret, server_id) = (cfg.settings.secret.clone(), cfg.settings.server_id);
    let players = Arc::new(agones::Players::default());
    if let Some(a) = cfg.agones.clone() {
        let m = metrics.clone();
        let status = move || {
            let capacity = m.capacity.get();
            (m.ready(), m.tick_healthy(), capacity)
        };
        let report = agones::run(a, players.clone(), status, shutdown_rx.clone());
        let task = tokio::spawn(async move {
            report.await;
            None
        });
        tasks.push(supervise(
            "agones",
            task,
            failed_tx.clone(),
            metrics.clone(),
        ));
    }
    metrics.io_threads.set(quic.len() as u64);
    let shared = Arc::new(Shared {
        metrics: metrics.clone(),
        admission: Admission::new(cfg.limits.clone()),
        players,
        port: addr.port(),
        cfg,
    });
    let mut io = IoThreads::start(quic, &shared, &wake).map_err(|source| ServerError::Thread {
        what: "I/O threads",
        source,
    })?;
    if let Some(bound) = web {
        io.add_web(|woken, index| web::start(bound, &shared, &wake, woken, index))
            .map_err(|source| ServerError::Thread {
                what: "the web door's thread",
                source,
            })?;
    }
    let writer = record_to(&mut machine, &shared)?;
    let recording = writer.as_ref().map(|w| w.path().to_path_buf());
    let task = machine::spawn(machine, io, shared, live, wake_rx, writer).map_err(|source| {
        ServerError::Thread {
            what: "machine thread",
            source,
        }
    })?;
    tasks.push(supervise("machine", task, failed_tx, metrics.clone()));
    metrics.set_ready(true);
    info!(%addr, "listening");
    Ok(Server {
        addr,
        metrics_addr,
        web_addr,
        web_url,
        recording,
        fingerprint,
        map_hash,
        metrics,
        shutdown,
        tasks,
        failed,
        wake,
        sim,
        secret,
        server_id,
    })
}

/// Serves a replay's `view` (`expel replay --view`) at `addr` (loopback only: it shows
/// every player through every wall) until the returned task is dropped or
/// aborted: the address it listens on, and the task.
pub async fn serve_replay_view(
    addr: SocketAddr,
    view: ReplayView,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ServerError> {
    if !addr.ip().is_loopback() {
        return Err(ServerError::Config(format!(
            "a replay's view shows every player through every wall: it listens on loopback only, not {addr}"
        )));
    }
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    let local = l
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;
    let site = Arc::new(http::Site::Replay {
        view: Arc::new(view),
    });
    let task = tokio::spawn(http::serve(l, Arc::new(Metrics::new()), site, None));
    Ok((local, task))
}

/// Starts recording the match when the config asks: the machine records, a writer
/// thread writes.
fn record_to(
    machine: &mut expel_protocol::server::ServerMachine,
    shared: &Shared,
) -> Result<Option<record::Writer>, ServerError> {
    let Some(r) = &shared.cfg.record else {
        return Ok(None);
    };
    let failed = |why: String| ServerError::Record {
        dir: r.dir.clone(),
        why,
    };
    let unix = now_unix();
    machine
        .start_recording(&r.rules, unix)
        .map_err(|e| failed(e.to_string()))?;
    let writer = record::Writer::start(r, unix, shared.port, shared.metrics.clone());
    writer.map(Some).map_err(|e| failed(e.to_string()))
}

/// Opens the browser's door: its WebTransport socket, then its page on the same port
/// over TCP, served by a task that ends with the server.
async fn open_web(
    w: WebConfig,
    metrics: &Arc<Metrics>,
    mut stop: watch::Receiver<Option<String>>,
) -> Result<(web::Bound, tokio::task::JoinHandle<Option<String>>), ServerError> {
    let bound = web::bind(&w).await?;
    let at = bound.addr;
    let l = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|source| ServerError::Bind { addr: at, source })?;
    let site = http::Site::Page {
        page: w.page,
        door: web::door_json(at.port(), &bound.cert_hash, bound.development),
    };
    let serve = http::serve(l, metrics.clone(), Arc::new(site), bound.tls.clone());
    let task = tokio::spawn(async move {
        tokio::select! {
            _ = serve => Some("the web page's listener stopped".to_string()),
            _ = stop.changed() => None,
        }
    });
    info!(addr = %at, "browser door open");
    Ok((bound, task))
}

/// The operator's endpoint shows every player through every wall: anywhere but loopback
/// it needs a token, or any player who opens the address would see it.
fn check_operator_endpoint(addr: SocketAddr, token: Option<&str>) -> Result<(), ServerError> {
    match token {
        Some("") => Err(ServerError::Config(
            "the operator token must not be empty".into(),
        )),
        Some(_) => Ok(()),
        None if addr.ip().is_loopback() => Ok(()),
        None => Err(ServerError::Config(format!(
            "the HTTP endpoint {addr} is not on loopback: it serves the live view and \
             metrics, so it needs an operator token (--operator-token, \
             EXPEL_OPERATOR_TOKEN or operator_token in the config), or a loopback \
             address (--metrics 127.0.0.1:PORT)"
        ))),
    }
}

/// The QUIC sockets and their endpoints' settings, one per I/O thread, all on the same
/// port. The endpoints' stateless-reset key comes from the server's secret, so a server
/// started again after a crash (same secret, same address) resets the connections of its
/// previous life the moment their clients send anything: they learn at once that they
/// must reconnect, instead of waiting out an idle timeout (or the client's silence limit).
fn bind(cfg: &ServerConfig, counts: udp::UdpCounts) -> Result<Vec<QuicParts>, ServerError> {
    let threads = cfg.io_threads;
    if !(1..=MAX_IO_THREADS).contains(&threads) {
        return Err(ServerError::Config(format!(
            "io threads must be 1 to {MAX_IO_THREADS}, got {threads}"
        )));
    }
    let secret = KeyedHash::new(&cfg.settings.secret);
    let reset = Arc::new(
        secret
            .derive(b"expel quic stateless reset key")
            .ring_key()
            .clone(),
    );
    // Connection ids carry a keyed hash the endpoint checks before resetting: the key
    // must survive the restart too, or the old ids are dropped as forged.
    let ids = crate::udp::CidGenerator::new(secret.derive(b"expel quic connection id key"));
    // One server configuration for every endpoint: a retry token one issues, another
    // accepts.
    let server = Arc::new(cfg.identity.quic_config()?);
    let sockets = sockets(cfg.addr, threads).map_err(|source| ServerError::Bind {
        addr: cfg.addr,
        source,
    })?;
    Ok(sockets
        .into_iter()
        .enumerate()
        .map(|(i, socket)| {
            let index = i as u8; // at most MAX_IO_THREADS
            let mut endpoint_cfg = quinn_proto::EndpointConfig::new(reset.clone());
            let issue = ids.for_owner(index);
            endpoint_cfg.cid_generator(move || Box::new(issue.clone()));
            // Clients then keep the fixed bit set, and the socket's doorman can drop
            // packets without it.
            endpoint_cfg.grease_quic_bit(false);
            QuicParts {
                socket,
                config: endpoint_cfg,
                server: server.clone(),
                ids: ids.clone(),
                counts: counts.clone(),
                index,
            }
        })
        .collect())
}

/// `n` UDP sockets bound to `addr` (its port chosen by the first when 0). Several share
/// the port with `SO_REUSEPORT`, where the kernel spreads datagrams over them by the
/// sender's address; one alone is bound plainly, so a taken address fails the start.
fn sockets(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::UdpSocket>> {
    if n == 1 {
        return Ok(vec![std::net::UdpSocket::bind(addr)?]);
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use socket2::{Domain, Protocol, Socket, Type};
        let mut at = addr;
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            let s = Socket::new(Domain::for_address(at), Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_port(true)?;
            s.bind(&at.into())?;
            let s: std::net::UdpSocket = s.into();
            at = s.local_addr()?;
            all.push(s);
        }
        Ok(all)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "several I/O threads need SO_REUSEPORT's load balancing (Linux)",
    ))
}

/// Watches a task that must run until shutdown: if it ends otherwise (a panic is a bug),
/// the server stops taking players and [`Server::stopped`] reports why.
/// A supervised task of the server's that ended on its own (a panic is a bug): which,
/// and why.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("the {task} task ended: {reason}")]
pub struct TaskEnded {
    /// The task: `machine`, `http` or `agones`.
    pub task: &'static str,
    /// Why, in words.
    pub reason: String,
}

fn supervise(
    name: &'static str,
    task: tokio::task::JoinHandle<Option<String>>,
    failed: Arc<watch::Sender<Option<TaskEnded>>>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let reason = match task.await {
            Ok(None) => return, // stopped by shutdown
            Ok(Some(why)) => why,
            Err(e) => format!("it failed: {e}"),
        };
        let why = TaskEnded { task: name, reason };
        tracing::error!(%why, "supervised task ended");
        metrics.set_ready(false);
        let _ = failed.send(Some(why));
    })
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Logs a warning once the server is started with a generated secret.
pub fn warn_generated_secret(path: &std::path::Path) {
    warn!(file = %path.display(), "no --secret given: generated one and stored it");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_supervised_task_that_dies_stops_the_server_with_the_reason() {
        let metrics = Arc::new(Metrics::new());
        metrics.set_ready(true);
        let (tx, mut rx) = watch::channel(None::<TaskEnded>);
        let tx = Arc::new(tx);
        let dies = tokio::spawn(async { panic!("a bug") });
        supervise("machine", dies, tx.clone(), metrics.clone())
            .await
            .unwrap();
        rx.changed().await.unwrap();
        let why = rx.borrow().clone().unwrap();
        assert_eq!(why.task, "machine");
        assert!(why.reason.contains("panicked"), "{why}");
        assert!(!metrics.ready(), "no longer ready");
        // A task stopped by shutdown reports nothing.
        let (tx2, rx2) = watch::channel(None::<TaskEnded>);
        let done = tokio::spawn(async { None });
        supervise("http", done, Arc::new(tx2), metrics)
            .await
            .unwrap();
        assert!(rx2.borrow().is_none());
    }
}
