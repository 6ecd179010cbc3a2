//! Expel's authoritative server: a thin async shell (tokio + quinn) around the protocol's
//! server state machine, [`expel_shared::protocol::server::Server`]. Everything the
//! protocol decides (hellos, tokens, player slots, inputs, validation, ticks, snapshots,
//! kicks) is the machine's; this crate moves bytes and fires timers:
//!
//! * The machine task owns the [`Server`] machine and, beside it, QUIC as state machines
//!   too ([`quic`]: quinn-proto's endpoint and connections, and the socket). It admits
//!   connection attempts (bounds on pending handshakes, a stateless retry under load;
//!   [`admission`]), holds each handshake to its deadline, feeds the machine the control
//!   stream's bytes and the datagrams, calls its timeout when a tick is due, and carries
//!   out what it says: datagrams, control writes (each within the write deadline; a peer
//!   that grants no flow-control credit in time is dropped as stalled), the map, closes.
//!   It copies the machine's counters into [`Metrics`].
//! * The HTTP task serves metrics, health, flagged players and the live view.
//! * Under Agones, a task reports readiness, health, players and shutdown to the SDK
//!   sidecar ([`agones`]).
//!
//! The machine, HTTP and Agones tasks are supervised: if either ends on its own (a panic is a
//! bug), [`Running::stopped`] says why and the server stops accepting players.

mod admission;
pub mod agones;
mod http;
mod live;
mod load;
mod metrics;
mod quic;
mod tls;
pub mod udp;

use admission::Admission;
pub use admission::{Decision, Limits};
pub use agones::AgonesConfig;
pub use expel_shared::protocol::server::{ServerSettings, REFUSALS};
pub use metrics::Metrics;
pub use tls::{fingerprint, Identity};

use expel_shared::protocol::server::{Event, Output, Server};
use expel_shared::Sim;
use quic::{Quic, QuicParts};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// How long a shutdown waits for players to read their last words before it closes
/// every connection.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// The least time between two looks at the socket. Woken for every datagram, a server of
/// a thousand players spent a wake-up, an `epoll_wait` and two receive calls on each of
/// its 30,000 or more a second; looking at most once a millisecond takes them in batches
/// of about thirty. A command arrives a millisecond late at worst, which the clients'
/// lead absorbs.
const READ_GAP: Duration = Duration::from_millis(1);
/// The longest the machine's thread spends on waiting handshakes in one go, so the
/// playing connections' datagrams are read in between.
const ADMIT_SLICE: Duration = Duration::from_millis(2);

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Certificate or TLS configuration.
    #[error("tls: {0}")]
    Tls(String),
    /// A socket could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A setting out of range.
    #[error("config: {0}")]
    Config(String),
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
    pub game: ServerSettings,
    /// Report to an Agones SDK sidecar ([`AgonesConfig::from_env`]).
    pub agones: Option<AgonesConfig>,
}

/// A running server.
pub struct Running {
    /// The QUIC address.
    pub addr: SocketAddr,
    /// The metrics address.
    pub metrics_addr: Option<SocketAddr>,
    /// SHA-256 of the certificate, for clients to pin.
    pub fingerprint: String,
    /// BLAKE3 of the map's bytes, hex.
    pub map_hash: String,
    /// The counters.
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    failed: watch::Receiver<Option<String>>,
    stall: mpsc::Sender<Duration>,
}

impl Running {
    /// Tells every client why, closes every connection and stops.
    pub async fn shutdown(self, reason: &str) {
        self.metrics.ready.store(false, Relaxed);
        let _ = self.shutdown.send(Some(reason.to_string()));
        // The machine task closes every connection within its grace, then ends.
        for t in self.tasks {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(2), t).await;
        }
    }

    /// Fault injection for drills and tests: the tick loop blocks for `d` as a stuck
    /// simulation would (its thread held, nothing stepped), then runs on.
    pub async fn stall_tick(&self, d: Duration) {
        let _ = self.stall.send(d).await;
    }

    /// Resolves when a supervised task (the machine or the HTTP endpoint) ended on its
    /// own, with why: the process should stop (or restart) the server.
    pub async fn stopped(&self) -> String {
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

/// What the machine task uses of the rest of the server.
struct Shared {
    cfg: ServerConfig,
    metrics: Arc<Metrics>,
    admission: Admission,
    /// Players in the server, for the Agones reporter.
    players: Arc<agones::Players>,
}

/// Starts the server: binds QUIC (and metrics), starts the machine and accept tasks.
pub async fn start(sim: Arc<Sim>, cfg: ServerConfig) -> Result<Running, ServerError> {
    let machine = Server::new(sim.clone(), cfg.game.clone(), Instant::now(), now_unix())
        .map_err(|e| ServerError::Config(e.to_string()))?;
    let metrics = Arc::new(Metrics::new());
    metrics.capacity.store(cfg.game.max_players as u64, Relaxed);
    let quic = bind(&cfg, metrics.udp.clone())?;
    let addr = quic
        .socket
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: cfg.addr,
            source,
        })?;
    let live = Arc::new(live::Live::new(&sim, &cfg.game.map_name));
    let (failed_tx, failed) = watch::channel(None::<String>);
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
            let serve = http::serve(l, metrics.clone(), live.clone(), auth);
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
    let (stall, stall_rx) = mpsc::channel(4);
    let map_hash = hex::encode(machine.map_hash());
    let fingerprint = cfg.identity.fingerprint.clone();
    let players = Arc::new(agones::Players::default());
    if let Some(a) = cfg.agones.clone() {
        let m = metrics.clone();
        let status = move || {
            let capacity = m.capacity.load(Relaxed);
            (m.ready.load(Relaxed), m.tick_healthy(), capacity)
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
    let shared = Arc::new(Shared {
        metrics: metrics.clone(),
        admission: Admission::new(cfg.limits.clone()),
        players,
        cfg,
    });
    let task = spawn_machine(machine, quic, shared, live, stall_rx, shutdown_rx)
        .map_err(|e| ServerError::Config(format!("starting the machine thread: {e}")))?;
    tasks.push(supervise("machine", task, failed_tx, metrics.clone()));
    metrics.ready.store(true, Relaxed);
    info!(%addr, "listening");
    Ok(Running {
        addr,
        metrics_addr,
        fingerprint,
        map_hash,
        metrics,
        shutdown,
        tasks,
        failed,
        stall,
    })
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

/// The QUIC socket and endpoint. The endpoint's stateless-reset key comes from the server's secret, so a
/// server started again after a crash (same secret, same address) resets the connections
/// of its previous life the moment their clients send anything: they learn at once that
/// they must reconnect, instead of waiting out an idle timeout (or the client's silence
/// limit).
fn bind(cfg: &ServerConfig, counts: Arc<udp::UdpCounts>) -> Result<QuicParts, ServerError> {
    let bind = |source| ServerError::Bind {
        addr: cfg.addr,
        source,
    };
    let derive = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &cfg.game.secret);
    let reset = ring::hmac::sign(&derive, b"expel quic stateless reset key");
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset.as_ref());
    // Connection ids carry a keyed hash the endpoint checks before resetting: the key
    // must survive the restart too, or the old ids are dropped as forged.
    let cid = ring::hmac::sign(&derive, b"expel quic connection id key");
    let ids = crate::udp::CidGenerator::new(cid.as_ref());
    let mut endpoint_cfg = quinn_proto::EndpointConfig::new(Arc::new(reset));
    let issue = ids.clone();
    endpoint_cfg.cid_generator(move || Box::new(issue.clone()));
    // Clients then keep the fixed bit set, and the socket's doorman can drop packets
    // without it.
    endpoint_cfg.grease_quic_bit(false);
    let server = Arc::new(cfg.identity.quic_config()?);
    Ok(QuicParts {
        socket: std::net::UdpSocket::bind(cfg.addr).map_err(bind)?,
        config: endpoint_cfg,
        server,
        ids,
        counts,
    })
}

/// Watches a task that must run until shutdown: if it ends otherwise (a panic is a bug),
/// the server stops taking players and [`Running::stopped`] reports why.
fn supervise(
    name: &'static str,
    task: tokio::task::JoinHandle<Option<String>>,
    failed: Arc<watch::Sender<Option<String>>>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let why = match task.await {
            Ok(None) => return, // stopped by shutdown
            Ok(Some(why)) => format!("{name} task ended: {why}"),
            Err(e) => format!("{name} task failed: {e}"),
        };
        tracing::error!(%why, "supervised task ended");
        metrics.ready.store(false, Relaxed);
        let _ = failed.send(Some(why));
    })
}

/// Whether a tick's work spreads over the machine's workers: only while a tick on one
/// thread takes over half the period, where a slow tick would soon make the next late.
/// Under that, one thread is cheaper, and a spread tick waits for every worker it handed
/// work to, which the system may not run at once when other processes share the cores
/// (at 1,000 players with the bots on both cores, always spread: tick p99 6.8 to 8.7 ms;
/// on one thread 5.9 to 7.4, alternated). The tick time is averaged over about twenty
/// ticks; spread, a tick takes about its time on one thread over the workers, so it goes
/// back to one thread only under half the period over the workers (no flapping).
struct Spread {
    on: bool,
    workers: f64,
    /// Mean tick time (seconds), as ticks run now.
    mean: f64,
    period: f64,
}

impl Spread {
    /// Weight of the newest tick in the mean.
    const WEIGHT: f64 = 0.05;

    fn new(workers: usize, period: Duration) -> Self {
        Spread {
            on: false,
            workers: workers.max(1) as f64,
            mean: 0.0,
            period: period.as_secs_f64(),
        }
    }

    /// Takes one tick's time; returns the new setting when it changes.
    fn tick(&mut self, took: Duration) -> Option<bool> {
        self.mean += (took.as_secs_f64() - self.mean) * Self::WEIGHT;
        let half = self.period / 2.0;
        let on = if self.on {
            self.mean >= half / self.workers
        } else {
            self.mean > half
        };
        (on != self.on).then(|| {
            self.on = on;
            on
        })
    }
}

/// Runs [`machine_loop`] on a thread of its own, with a runtime of its own: between its
/// looks at the socket (see READ_GAP) it sleeps without the socket's reactor, which would
/// wake it for every datagram that arrives. The handle is a task's, for the supervisor; a
/// panic on the thread surfaces as the task's.
fn spawn_machine(
    server: Server,
    quic: QuicParts,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    stall: mpsc::Receiver<Duration>,
    shutdown: watch::Receiver<Option<String>>,
) -> std::io::Result<tokio::task::JoinHandle<Option<String>>> {
    let (done, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("expel-machine".into())
        .spawn(move || {
            let run = std::panic::AssertUnwindSafe(move || {
                let workers = server.workers();
                let machine = move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    let rt = match rt {
                        Ok(rt) => rt,
                        Err(e) => return Some(format!("the machine's runtime failed: {e}")),
                    };
                    rt.block_on(async move {
                        match Quic::new(quic) {
                            Ok(quic) => {
                                machine_loop(server, quic, shared, live, stall, shutdown).await
                            }
                            Err(e) => Some(format!("the QUIC socket failed: {e}")),
                        }
                    })
                };
                // On one of the tick's workers, so the machine's thread works on each
                // tick rather than waiting for the others to be scheduled.
                match workers {
                    Some(pool) => pool.install(machine),
                    None => machine(),
                }
            });
            let _ = done.send(std::panic::catch_unwind(run));
        })?;
    Ok(tokio::spawn(async move {
        match ended.await {
            Ok(Ok(why)) => why,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Some("the machine thread ended without a word".into()),
        }
    }))
}

/// The machine task: feeds the protocol machine what QUIC receives and carries out what
/// it says. Returns `None` on shutdown, else why it stopped.
async fn machine_loop(
    mut server: Server,
    mut quic: Quic,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    mut stall: mpsc::Receiver<Duration>,
    mut shutdown: watch::Receiver<Option<String>>,
) -> Option<String> {
    let m = shared.metrics.clone();
    let cx = quic::Context {
        metrics: &m,
        admission: &shared.admission,
        limits: &shared.cfg.limits,
        map: &shared.cfg.game.map_bytes,
        max_players: shared.cfg.game.max_players as u64,
    };
    let rate = server.sim().config().tick_rate;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let frame_every = u64::from((rate / live::FRAME_RATE).max(1));
    let mut longest = Duration::ZERO;
    let workers = server.workers().map_or(1, |w| w.current_num_threads());
    let mut spread = (workers > 1).then(|| {
        server.set_spread(false);
        Spread::new(workers, period)
    });
    m.tick_threads.store(1, Relaxed);
    let max_players = cx.max_players;
    let mut meter = load::LoadMeter::new(quic.port(), Instant::now());
    let timer = tokio::time::sleep_until(server.poll_timeout().into());
    tokio::pin!(timer);
    // The socket is not looked at again before this: see READ_GAP.
    let mut read_from = Instant::now();
    loop {
        // QUIC's timers wait for the next look at the socket (they are acknowledgement
        // delays, probes and idle limits, none of them finer than READ_GAP): a thousand
        // connections' timers each woke the loop at their own instant.
        let due = server.poll_timeout();
        let due = quic.next_timer().map_or(due, |t| t.max(read_from).min(due));
        let now = Instant::now();
        // Connection attempts wait for the time between ticks: a slice now, then round
        // again (ticks and the socket first) while any are left.
        if quic.has_waiting() && now < due {
            quic.admit_waiting(&cx, due.min(now + ADMIT_SLICE));
            drive(&mut server, &mut quic, &shared, &cx);
            if quic.has_waiting() {
                read_from = read_from.min(Instant::now());
            }
        }
        let due = if quic.has_waiting() {
            due.min(Instant::now() + ADMIT_SLICE)
        } else {
            due
        };
        if now < read_from {
            // Not looking at the socket yet: asleep, the thread is not woken by what
            // arrives meanwhile (the reactor would be, for each datagram).
            if shutdown.has_changed().unwrap_or(true) {
                break;
            }
            let until = due.min(read_from);
            if until > now {
                std::thread::sleep(until - now);
            }
        }
        let reading = Instant::now() >= read_from;
        timer
            .as_mut()
            .reset(if reading { due } else { due.min(read_from) }.into());
        // Ticks and QUIC's timers first: a flood of datagrams must not starve them.
        // (The timer also fires for `read_from`; nothing is due then, and nothing runs.)
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = &mut timer => {
                // Behind (a stall, a starved core): what clients sent meanwhile is read
                // first, so the ticks caught up on meet the commands made for them.
                if server.poll_timeout() + period <= Instant::now() {
                    if let Err(e) = quic.receive_now(&cx) {
                        return Some(format!("the QUIC socket failed: {e}"));
                    }
                    drive(&mut server, &mut quic, &shared, &cx);
                }
                quic.fire_timers(Instant::now());
                let before = server.world().tick;
                let ran = server.stats().ticks;
                let started = Instant::now();
                server.handle_timeout(started);
                // Ticks run, not skipped ones: only those took time.
                let stepped = server.stats().ticks - ran;
                if stepped > 0 {
                    // A late call steps every due tick at once: each is charged its share.
                    let each = started.elapsed() / stepped as u32;
                    for _ in 0..stepped {
                        m.tick(each.as_secs_f64());
                    }
                    if each > period {
                        m.overruns.fetch_add(stepped, Relaxed);
                    }
                    longest = longest.max(each);
                    if let Some(on) = spread.as_mut().and_then(|s| s.tick(each)) {
                        debug!(on, "tick work spread over the workers");
                        server.set_spread(on);
                        m.tick_threads.store(if on { workers } else { 1 } as u64, Relaxed);
                    }
                    if let Some(l) = meter.sample(Instant::now()) {
                        server.handle_load(l);
                        let cap = server.stats().capacity.unwrap_or(max_players);
                        m.capacity.store(cap.min(max_players), Relaxed);
                    }
                    let world = server.world();
                    m.players.store(world.players.len() as u64, Relaxed);
                    if world.tick / frame_every != before / frame_every && live.watched() {
                        let ms = longest.as_secs_f64() * 1000.0;
                        live.publish(live::frame(server.sim(), world, &m, ms));
                        longest = Duration::ZERO;
                    }
                }
            }
            r = quic.io(&cx), if reading => {
                if let Err(e) = r {
                    return Some(format!("the QUIC socket failed: {e}"));
                }
                read_from = Instant::now() + READ_GAP;
            }
            Some(d) = stall.recv() => {
                warn!(
                    ms = d.as_millis() as u64,
                    "tick stalled on purpose (fault injection)"
                );
                std::thread::sleep(d);
            }
        }
        drive(&mut server, &mut quic, &shared, &cx);
    }
    // Shutdown: every player is told why; the rest are closed; those who read their last
    // words within the grace are closed by then too.
    let reason = shutdown
        .borrow()
        .clone()
        .unwrap_or_else(|| "server shutting down".into());
    server.shutdown(&reason);
    quic.stop_accepting(&reason, Instant::now());
    drive(&mut server, &mut quic, &shared, &cx);
    let end = Instant::now() + SHUTDOWN_GRACE;
    while !quic.all_closed() && Instant::now() < end {
        let due = quic.next_timer().map_or(end, |t| t.min(end));
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => quic.fire_timers(Instant::now()),
            r = quic.io(&cx) => {
                if r.is_err() {
                    break;
                }
            }
        }
        drive(&mut server, &mut quic, &shared, &cx);
    }
    quic.close_all(&reason, Instant::now());
    drive(&mut server, &mut quic, &shared, &cx);
    debug!(connections = quic.len(), "closed");
    None
}

/// Runs the connections something happened to, carrying out the machine's outputs as
/// they come, until all is quiet; then copies the machine's counters.
fn drive(server: &mut Server, quic: &mut Quic, shared: &Shared, cx: &quic::Context) {
    let now = Instant::now();
    loop {
        carry_out(server, quic, shared, cx, now);
        if !quic.service_one(now, server, cx) {
            break;
        }
    }
    shared.metrics.absorb(server.stats());
}

/// Carries out the machine's outputs and logs its events.
fn carry_out(
    server: &mut Server,
    quic: &mut Quic,
    shared: &Shared,
    cx: &quic::Context,
    now: Instant,
) {
    let m = &shared.metrics;
    while let Some(out) = server.poll_output() {
        match out {
            Output::Datagram { conn, bytes } => {
                if !quic.send_datagram(conn, bytes) {
                    m.datagram_send_errors.fetch_add(1, Relaxed);
                }
            }
            Output::Control { conn, bytes } => quic.write(conn, bytes),
            Output::Map { conn } => quic.send_map(conn, now, cx),
            Output::Close {
                conn,
                last,
                code,
                reason,
            } => quic.close(conn, last, code, reason),
        }
    }
    while let Some(e) = server.poll_event() {
        match e {
            Event::Joined {
                conn,
                player,
                sending_map,
            } => {
                info!(player, conn, sending_map, "joined");
                quic.joined(conn, cx);
                shared.players.joined(player);
            }
            Event::Left { player, reason } => {
                info!(player, %reason, "left");
                shared.players.left(player);
            }
            Event::Refused { conn, reason } => info!(conn, %reason, "refused"),
            Event::CaughtUp {
                from,
                ticks,
                behind,
                took,
            } => {
                let (behind_ms, took_ms) = (behind.as_millis() as u64, took.as_millis() as u64);
                let what = "the server ran late and caught up; nobody was judged for it";
                // A tick or two late is a neighbour's time slice: counted, not told.
                if behind >= LATE_TOLD {
                    warn!(from, ticks, behind_ms, took_ms, "{what}");
                } else {
                    debug!(from, ticks, behind_ms, took_ms, "{what}");
                }
            }
            Event::Violation {
                player,
                kind,
                evidence,
            } => {
                warn!(player, kind = kind.name(), %evidence, "violation");
                m.flag(player, kind);
            }
        }
    }
}

/// Lateness worth a warning in the log.
const LATE_TOLD: Duration = Duration::from_millis(100);

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

    #[test]
    fn ticks_spread_over_the_workers_only_while_they_are_long() {
        let period = Duration::from_micros(16_000);
        let mut s = Spread::new(2, period);
        let ms = Duration::from_millis;
        // Ticks under half the period stay on one thread.
        assert!((0..200).all(|_| s.tick(ms(7)).is_none()));
        // Longer ones (over 8 ms) spread, once the mean has moved.
        let turned = (0..200).position(|_| s.tick(ms(10)) == Some(true));
        assert!(turned.is_some_and(|i| i > 3), "{turned:?}");
        // Spread, a tick of 5 ms is one of about 10 on one thread: it stays spread...
        assert!((0..200).all(|_| s.tick(ms(5)).is_none()));
        // ...and goes back under 4 ms (8 ms over the two workers).
        assert!((0..200).any(|_| s.tick(ms(3)) == Some(false)));
        assert!((0..200).all(|_| s.tick(ms(7)).is_none()));
    }

    #[tokio::test]
    async fn a_supervised_task_that_dies_stops_the_server_with_the_reason() {
        let metrics = Arc::new(Metrics::new());
        metrics.ready.store(true, Relaxed);
        let (tx, mut rx) = watch::channel(None::<String>);
        let tx = Arc::new(tx);
        let dies = tokio::spawn(async { panic!("a bug") });
        supervise("machine", dies, tx.clone(), metrics.clone())
            .await
            .unwrap();
        rx.changed().await.unwrap();
        let why = rx.borrow().clone().unwrap();
        assert!(
            why.contains("machine task failed") && why.contains("panicked"),
            "{why}"
        );
        assert!(!metrics.ready.load(Relaxed), "no longer ready");
        // A task stopped by shutdown reports nothing.
        let (tx2, rx2) = watch::channel(None::<String>);
        let done = tokio::spawn(async { None });
        supervise("http", done, Arc::new(tx2), metrics)
            .await
            .unwrap();
        assert!(rx2.borrow().is_none());
    }
}
