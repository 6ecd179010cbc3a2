//! Expel's authoritative server: a thin async shell (tokio + quinn) around the protocol's
//! server state machine, [`expel_shared::protocol::server::Server`]. Everything the
//! protocol decides (hellos, tokens, player slots, inputs, validation, ticks, snapshots,
//! kicks) is the machine's; this crate moves bytes and fires timers:
//!
//! * The accept loop admits QUIC connection attempts (bounds on pending handshakes, a
//!   stateless retry under load; [`admission`]) and gives each connection a task.
//! * A connection task finishes the handshake within its deadline, then carries the
//!   control stream's bytes and the datagrams to the machine task, and writes what the
//!   machine tells it to (each write within the write deadline; a peer that grants no
//!   flow-control credit in time is dropped as stalled).
//! * The machine task owns the [`Server`] machine: it feeds it what the connections
//!   report, calls its timeout when a tick is due, sends its datagrams, hands its control
//!   writes and closes to the connection tasks, and copies its counters into [`Metrics`].
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
mod metrics;
mod tls;
pub mod udp;

use admission::{Admission, Pending};
pub use admission::{Decision, Limits};
pub use agones::AgonesConfig;
pub use expel_shared::protocol::server::{ServerSettings, REFUSALS};
pub use metrics::Metrics;
pub use tls::{fingerprint, Identity};

use bytes::Bytes;
use expel_shared::protocol::server::{map_frames, ConnId, Event, Output, Server};
use expel_shared::protocol::CLOSE_KICKED;
use expel_shared::Sim;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// Messages from connection tasks waiting for the machine task; datagrams beyond it are
/// dropped (and counted), control bytes wait.
const INBOX: usize = 4096;

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
    /// one; equal to `addr`, it takes the QUIC port over TCP once that is chosen).
    pub metrics: Option<SocketAddr>,
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
    endpoint: quinn::Endpoint,
    inbox: mpsc::Sender<ToMachine>,
}

impl Running {
    /// Tells every client why, closes every connection and stops.
    pub async fn shutdown(self, reason: &str) {
        self.metrics.ready.store(false, Relaxed);
        let _ = self.shutdown.send(Some(reason.to_string()));
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
        self.endpoint.close(
            expel_shared::protocol::CLOSE_SHUTDOWN.into(),
            reason.as_bytes(),
        );
    }

    /// Fault injection for drills and tests: the tick loop blocks for `d` as a stuck
    /// simulation would (its thread held, nothing stepped), then runs on.
    pub async fn stall_tick(&self, d: Duration) {
        let _ = self.inbox.send(ToMachine::Stall(d)).await;
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

/// What a connection task tells the machine task.
enum ToMachine {
    Connected {
        conn: ConnId,
        handle: ConnHandle,
    },
    Control {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    Datagram {
        conn: ConnId,
        bytes: Bytes,
    },
    MapSent {
        conn: ConnId,
    },
    Closed {
        conn: ConnId,
        reason: String,
    },
    /// Block the machine task this long ([`Running::stall_tick`]).
    Stall(Duration),
}

/// What the machine task tells a connection task to do.
enum Write {
    /// Control frames to write.
    Bytes(Vec<u8>),
    /// Stream the map.
    Map,
    /// The player joined: it no longer counts against admission.
    Joined,
    /// Write the last words (a refusal, kick or shutdown notice), then close: together,
    /// so a peer that stops reading still gets the reason in the close frame.
    Close {
        last: Vec<u8>,
        code: u32,
        reason: String,
    },
}

/// The machine task's way to one connection.
struct ConnHandle {
    conn: quinn::Connection,
    writes: mpsc::UnboundedSender<Write>,
}

/// What the accept loop and connection tasks share.
struct Shared {
    cfg: ServerConfig,
    metrics: Arc<Metrics>,
    admission: Admission,
    inbox: mpsc::Sender<ToMachine>,
    next_conn: AtomicU64,
    /// Players in the server, for the Agones reporter.
    players: Arc<agones::Players>,
}

/// Starts the server: binds QUIC (and metrics), starts the machine and accept tasks.
pub async fn start(sim: Arc<Sim>, cfg: ServerConfig) -> Result<Running, ServerError> {
    let machine = Server::new(sim.clone(), cfg.game.clone(), Instant::now(), now_unix())
        .map_err(|e| ServerError::Config(e.to_string()))?;
    let metrics = Arc::new(Metrics::new());
    let endpoint = endpoint(&cfg, metrics.udp.clone())?;
    let addr = endpoint.local_addr().map_err(|source| ServerError::Bind {
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
            let l = tokio::net::TcpListener::bind(a)
                .await
                .map_err(|source| ServerError::Bind { addr: a, source })?;
            let local = l
                .local_addr()
                .map_err(|source| ServerError::Bind { addr: a, source })?;
            let serve = http::serve(l, metrics.clone(), live.clone());
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
    let (inbox, inbox_rx) = mpsc::channel(INBOX);
    let map_hash = hex::encode(machine.map_hash());
    let fingerprint = cfg.identity.fingerprint.clone();
    let players = Arc::new(agones::Players::default());
    if let Some(a) = cfg.agones.clone() {
        let m = metrics.clone();
        let status = move || (m.ready.load(Relaxed), m.tick_healthy());
        let capacity = cfg.game.max_players as u64;
        let report = agones::run(a, capacity, players.clone(), status, shutdown_rx.clone());
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
        inbox: inbox.clone(),
        next_conn: AtomicU64::new(1),
        players,
        cfg,
    });
    let task = tokio::spawn(machine_loop(
        machine,
        shared.clone(),
        live,
        inbox_rx,
        shutdown_rx.clone(),
    ));
    tasks.push(supervise("machine", task, failed_tx, metrics.clone()));
    tasks.push(tokio::spawn(accept_loop(
        endpoint.clone(),
        shared,
        shutdown_rx,
    )));
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
        endpoint,
        inbox,
    })
}

/// The QUIC endpoint. Its stateless-reset key comes from the server's secret, so a
/// server started again after a crash (same secret, same address) resets the connections
/// of its previous life the moment their clients send anything: they learn at once that
/// they must reconnect, instead of waiting out an idle timeout (or the client's silence
/// limit).
fn endpoint(
    cfg: &ServerConfig,
    counts: Arc<udp::UdpCounts>,
) -> Result<quinn::Endpoint, ServerError> {
    use quinn::Runtime as _;
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
    let mut cid_key = [0u8; 8];
    cid_key.copy_from_slice(&cid.as_ref()[..8]);
    let cid_key = u64::from_le_bytes(cid_key);
    let mut endpoint_cfg = quinn::EndpointConfig::new(Arc::new(reset));
    endpoint_cfg.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    // Clients then keep the fixed bit set, and the socket's doorman can drop packets
    // without it.
    endpoint_cfg.grease_quic_bit(false);
    let socket = std::net::UdpSocket::bind(cfg.addr).map_err(bind)?;
    let socket = quinn::TokioRuntime.wrap_udp_socket(socket).map_err(bind)?;
    let doorman = udp::Doorman::new(socket, cid_key, counts);
    quinn::Endpoint::new_with_abstract_socket(
        endpoint_cfg,
        Some(cfg.identity.quic_config()?),
        Arc::new(doorman),
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(bind)
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

async fn accept_loop(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<Option<String>>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let m = &shared.metrics;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let from = incoming.remote_address();
                let (decision, pending) = shared
                    .admission
                    .decide(from.ip(), incoming.remote_address_validated());
                m.incoming(decision);
                m.pending.store(shared.admission.pending() as u64, Relaxed);
                match (decision, pending) {
                    (Decision::Accept, Some(p)) => {
                        conns.spawn(connection(incoming, p, shared.clone()));
                    }
                    (Decision::Retry, _) => {
                        // Stateless: the peer must echo the token from its address.
                        if let Err(e) = incoming.retry() {
                            e.into_incoming().refuse();
                        }
                    }
                    (d, _) => {
                        debug!(%from, outcome = d.label(), "connection attempt refused");
                        incoming.refuse();
                    }
                }
            }
            // Reap finished connection tasks (a JoinSet keeps them until joined). A panic
            // is a bug: logged here; the task's guards gave back its admission.
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(error = %e, "connection task panicked");
                    }
                }
                m.pending.store(shared.admission.pending() as u64, Relaxed);
            }
            _ = shutdown.changed() => break,
        }
    }
    // Let every connection tell its client why and close.
    while tokio::time::timeout(Duration::from_secs(3), conns.join_next())
        .await
        .is_ok_and(|r| r.is_some())
    {}
}

/// The machine task: feeds the protocol machine and carries out what it says. Returns
/// `None` on shutdown, else why it stopped.
async fn machine_loop(
    mut server: Server,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    mut inbox: mpsc::Receiver<ToMachine>,
    mut shutdown: watch::Receiver<Option<String>>,
) -> Option<String> {
    let m = shared.metrics.clone();
    let rate = server.sim().config().tick_rate;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let frame_every = u64::from((rate / live::FRAME_RATE).max(1));
    let mut conns: BTreeMap<ConnId, ConnHandle> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    loop {
        let due = server.poll_timeout();
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => {
                let before = server.world().tick;
                let started = Instant::now();
                server.handle_timeout(started);
                let stepped = server.world().tick - before;
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
                    let world = server.world();
                    m.players.store(world.players.len() as u64, Relaxed);
                    if world.tick / frame_every != before / frame_every && live.watched() {
                        let ms = longest.as_secs_f64() * 1000.0;
                        live.publish(live::frame(server.sim(), world, &m, ms));
                        longest = Duration::ZERO;
                    }
                }
            }
            msg = inbox.recv() => {
                let Some(msg) = msg else { return Some("every sender is gone".into()) };
                handle(&mut server, &mut conns, msg, Instant::now());
                // Take whatever else is waiting before acting on the outputs, each at the
                // time it is handled (a backlog after a long tick is not all "now").
                while let Ok(msg) = inbox.try_recv() {
                    handle(&mut server, &mut conns, msg, Instant::now());
                }
            }
            _ = shutdown.changed() => {
                let reason = shutdown
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| "server shutting down".into());
                server.shutdown(&reason);
                carry_out(&mut server, &mut conns, &shared);
                return None;
            }
        }
        carry_out(&mut server, &mut conns, &shared);
    }
}

/// Hands one connection task's report to the machine.
fn handle(
    server: &mut Server,
    conns: &mut BTreeMap<ConnId, ConnHandle>,
    msg: ToMachine,
    now: Instant,
) {
    match msg {
        ToMachine::Connected { conn, handle } => {
            let room = handle.conn.max_datagram_size().unwrap_or(1200);
            conns.insert(conn, handle);
            server.connected(conn, now);
            server.set_max_datagram(conn, room);
        }
        ToMachine::Control { conn, bytes } => server.handle_control(conn, &bytes, now),
        ToMachine::Datagram { conn, bytes } => server.handle_datagram(conn, &bytes, now),
        ToMachine::MapSent { conn } => server.handle_map_sent(conn, now),
        ToMachine::Closed { conn, reason } => {
            conns.remove(&conn);
            server.handle_closed(conn, &reason);
        }
        ToMachine::Stall(d) => {
            warn!(
                ms = d.as_millis() as u64,
                "tick stalled on purpose (fault injection)"
            );
            std::thread::sleep(d);
        }
    }
}

/// Carries out the machine's outputs, logs its events and copies its counters.
fn carry_out(server: &mut Server, conns: &mut BTreeMap<ConnId, ConnHandle>, shared: &Shared) {
    let m = &shared.metrics;
    while let Some(out) = server.poll_output() {
        match out {
            Output::Datagram { conn, bytes } => {
                let sent = conns
                    .get(&conn)
                    .map(|h| h.conn.send_datagram(Bytes::from(bytes)));
                if !matches!(sent, Some(Ok(()))) {
                    m.datagram_send_errors.fetch_add(1, Relaxed);
                }
            }
            Output::Control { conn, bytes } => tell(conns, conn, Write::Bytes(bytes)),
            Output::Map { conn } => tell(conns, conn, Write::Map),
            Output::Close {
                conn,
                last,
                code,
                reason,
            } => {
                tell(conns, conn, Write::Close { last, code, reason });
                // The connection task closes it and reports back; nothing more goes out.
                conns.remove(&conn);
            }
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
                tell(conns, conn, Write::Joined);
                shared.players.joined(player);
            }
            Event::Left { player, reason } => {
                info!(player, %reason, "left");
                shared.players.left(player);
            }
            Event::Refused { conn, reason } => info!(conn, %reason, "refused"),
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
    m.absorb(server.stats());
}

fn tell(conns: &BTreeMap<ConnId, ConnHandle>, conn: ConnId, w: Write) {
    if let Some(h) = conns.get(&conn) {
        let _ = h.writes.send(w);
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a write to a peer did not happen: the stream went away, or the peer granted no
/// flow-control credit before the deadline (it stalled, on purpose or not).
enum WriteError {
    Lost,
    Stalled,
}

/// Writes bytes on the control stream, waiting for the peer's credit until `deadline`.
async fn write(
    send: &mut quinn::SendStream,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), WriteError> {
    match tokio::time::timeout_at(deadline.into(), send.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(WriteError::Lost),
        Err(_) => Err(WriteError::Stalled),
    }
}

/// Streams the map: each write within the write timeout, the whole transfer within the
/// write timeout plus the map's size at the slowest rate accepted.
async fn send_map(shared: &Shared, send: &mut quinn::SendStream) -> Result<(), WriteError> {
    let limits = &shared.cfg.limits;
    let bytes = &shared.cfg.game.map_bytes;
    let transfer = Duration::from_secs_f64(bytes.len() as f64 / limits.min_map_rate.max(1) as f64);
    let whole = Instant::now() + limits.write_timeout + transfer;
    for frame in map_frames(bytes) {
        write(
            send,
            &frame,
            whole.min(Instant::now() + limits.write_timeout),
        )
        .await?;
    }
    Ok(())
}

/// One connection: the handshake, then bytes to and from the machine task until the
/// machine closes it or the peer goes away.
async fn connection(incoming: quinn::Incoming, pending: Pending, shared: Arc<Shared>) {
    let m = &shared.metrics;
    let limits = &shared.cfg.limits;
    let handshake = match incoming.accept() {
        Ok(c) => tokio::time::timeout(limits.handshake_timeout, c).await,
        Err(e) => Ok(Err(e)),
    };
    let conn = match handshake {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            m.handshake_failures.fetch_add(1, Relaxed);
            debug!(error = %e, "handshake failed");
            return;
        }
        Err(_) => {
            // Dropping the handshake closes it.
            m.handshake_timeouts.fetch_add(1, Relaxed);
            return;
        }
    };
    m.connections.fetch_add(1, Relaxed);
    let id = shared.next_conn.fetch_add(1, Relaxed);
    let (writes, mut todo) = mpsc::unbounded_channel();
    let handle = ConnHandle {
        conn: conn.clone(),
        writes,
    };
    let connected = ToMachine::Connected { conn: id, handle };
    if shared.inbox.send(connected).await.is_err() {
        return;
    }
    let reason = pump(&shared, &conn, id, &mut todo, pending).await;
    debug!(conn = id, %reason, "connection ended");
    let _ = shared
        .inbox
        .send(ToMachine::Closed { conn: id, reason })
        .await;
}

/// Moves one connection's bytes until it ends; returns why.
async fn pump(
    shared: &Shared,
    conn: &quinn::Connection,
    id: ConnId,
    todo: &mut mpsc::UnboundedReceiver<Write>,
    pending: Pending,
) -> String {
    let m = &shared.metrics;
    let write_timeout = shared.cfg.limits.write_timeout;
    let mut pending = Some(pending);
    let mut stream: Option<(quinn::SendStream, quinn::RecvStream)> = None;
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            bi = conn.accept_bi(), if stream.is_none() => match bi {
                Ok(s) => stream = Some(s),
                Err(e) => return format!("connection lost: {e}"),
            },
            read = read_some(&mut stream, &mut buf), if stream.is_some() => {
                match read {
                    Ok(Some(n)) => {
                        let bytes = buf[..n].to_vec();
                        if shared.inbox.send(ToMachine::Control { conn: id, bytes }).await.is_err() {
                            return "server stopped".into();
                        }
                    }
                    Ok(None) => return "control stream closed".into(),
                    Err(e) => return format!("connection lost: {e}"),
                }
            }
            dg = conn.read_datagram() => match dg {
                Ok(bytes) => {
                    if shared.inbox.try_send(ToMachine::Datagram { conn: id, bytes }).is_err() {
                        m.inbox_drops.fetch_add(1, Relaxed);
                    }
                }
                Err(e) => return format!("connection closed: {e}"),
            },
            w = todo.recv() => {
                let Some(w) = w else { return "server stopped".into() };
                let send = stream.as_mut().map(|s| &mut s.0);
                let done = match (w, send) {
                    (Write::Joined, _) => {
                        // Joined: it now counts against the player slots, not admission.
                        drop(pending.take());
                        m.pending.store(shared.admission.pending() as u64, Relaxed);
                        Ok(())
                    }
                    (Write::Bytes(b), Some(send)) => {
                        write(send, &b, Instant::now() + write_timeout).await
                    }
                    (Write::Map, Some(send)) => {
                        let r = send_map(shared, send).await;
                        if r.is_ok() {
                            let _ = shared.inbox.send(ToMachine::MapSent { conn: id }).await;
                        }
                        r
                    }
                    (Write::Close { last, code, reason }, send) => {
                        if let Some(send) = send {
                            let deadline = Instant::now() + write_timeout;
                            match write(send, &last, deadline).await {
                                Ok(()) => {
                                    let _ = send.finish();
                                    // Let the client read the last word before the close
                                    // frame, which can overtake it.
                                    let wait = Duration::from_millis(500);
                                    let _ = tokio::time::timeout(wait, conn.closed()).await;
                                }
                                Err(WriteError::Stalled) => {
                                    m.stalls.fetch_add(1, Relaxed);
                                }
                                Err(WriteError::Lost) => {}
                            }
                        }
                        // The reason is in the close frame whatever became of the words.
                        conn.close(code.into(), reason.as_bytes());
                        return reason;
                    }
                    (_, None) => Ok(()),
                };
                let why = match done {
                    Ok(()) => continue,
                    Err(WriteError::Lost) => "control stream failed",
                    Err(WriteError::Stalled) => {
                        m.stalls.fetch_add(1, Relaxed);
                        "stalled: a write got no flow-control credit in time"
                    }
                };
                conn.close(CLOSE_KICKED.into(), why.as_bytes());
                return why.to_string();
            }
        }
    }
}

/// Reads from the control stream once it is open (never resolves before).
async fn read_some(
    stream: &mut Option<(quinn::SendStream, quinn::RecvStream)>,
    buf: &mut [u8],
) -> Result<Option<usize>, quinn::ReadError> {
    match stream {
        Some((_, recv)) => recv.read(buf).await,
        None => std::future::pending().await,
    }
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
