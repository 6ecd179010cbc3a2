//! Expel's authoritative server: a thin async shell (tokio + quinn) around the shared
//! simulation and the sans-IO protocol in `expel_shared::protocol`.
//!
//! * One task runs the fixed-rate tick: it drains every client's queued inputs into its
//!   [`InputBuffer`], steps the [`Sim`] once, and sends each client its snapshot with
//!   `send_datagram`, which never blocks: the tick never waits on I/O or a slow client.
//! * One task per connection reads the control stream and datagrams, checks the hello
//!   (version, token, capacity), queues inputs (bounded) and writes control messages.
//! * Connection tasks and the tick share the client table (`DashMap`) and the metrics.
//! * Movement is the server's ([`MovementAuthority::Server`]: every command simulated,
//!   the clients' predictions compared) or the clients' ([`MovementAuthority::Client`]:
//!   each claimed state judged by [`Sim::step_claims`], a rejected one corrected).

mod admission;
mod http;
mod live;
mod metrics;
mod tls;

use admission::{Admission, Pending};
pub use admission::{Decision, Limits};
pub use metrics::{Metrics, REFUSALS};
pub use tls::{fingerprint, Identity};

use bytes::Bytes;
use dashmap::DashMap;
use expel_shared::protocol::frame::{encode_frame, FrameDecoder, MAX_CLIENT_FRAME};
use expel_shared::protocol::input::{InputBuffer, InputStats};
use expel_shared::protocol::snapshot::{Feedback, SnapshotEncoder};
use expel_shared::protocol::token::{self, ReplayGuard, TokenError};
use expel_shared::protocol::{
    decode, ClientControl, ClientDatagram, InputMsg, MovementAuthority, ServerControl, Welcome,
    CLOSE_KICKED, CLOSE_REFUSED, CLOSE_SHUTDOWN, MAP_CHUNK, VERSION,
};
use expel_shared::validate::{
    TickClaim, ValidationConfig, Validator, Violation, ViolationKind, MAX_SPAN,
};
use expel_shared::{MoveCommand, MoveMode, Obstacle, PlayerState, Sim, SimScratch, WorldState};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// Input messages queued per client between ticks; older ones are dropped beyond it.
const INBOX: usize = 64;
/// Predictions (or claims) remembered per client until the server reaches their tick.
const CLAIMS: usize = 256;

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

/// How to run a server.
pub struct ServerConfig {
    /// UDP address for QUIC (port 0 picks one).
    pub addr: SocketAddr,
    /// Snapshots per second (at most the tick rate).
    pub snapshot_rate: u32,
    /// Most players at once.
    pub max_players: usize,
    /// Connect-token secret.
    pub secret: Vec<u8>,
    /// HTTP address for the live view, metrics, health and flagged players (port 0 picks
    /// one; equal to `addr`, it takes the QUIC port over TCP once that is chosen).
    pub metrics: Option<SocketAddr>,
    /// Other players per snapshot (the nearest).
    pub interest: usize,
    /// Snapshot bytes per second each client may receive; a snapshot that would exceed
    /// it carries fewer players (the farthest go first).
    pub client_budget: usize,
    /// The map's name, as clients see it.
    pub map_name: String,
    /// The map file's bytes (sent to clients that lack it).
    pub map_bytes: Arc<Vec<u8>>,
    /// TLS certificate and key.
    pub identity: Identity,
    /// How long a new connection may take to say hello.
    pub hello_timeout: Duration,
    /// How long a joined client may go without sending input.
    pub input_timeout: Duration,
    /// Who moves the players.
    pub movement: MovementAuthority,
    /// Bounds on connections not yet joined and on how long the server waits for a peer.
    pub limits: Limits,
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
    endpoint: quinn::Endpoint,
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
        self.endpoint
            .close(CLOSE_SHUTDOWN.into(), reason.as_bytes());
    }
}

struct Client {
    conn: quinn::Connection,
    inbox: Mutex<VecDeque<InputMsg>>,
}

enum Event {
    Join(u32),
    Leave(u32),
}

struct Shared {
    sim: Arc<Sim>,
    cfg: ServerConfig,
    map_hash: [u8; 32],
    metrics: Arc<Metrics>,
    clients: DashMap<u32, Arc<Client>>,
    replay: Mutex<ReplayGuard>,
    /// Player slots held: from the welcome (map transfer included) until the client leaves.
    slots: AtomicUsize,
    admission: Admission,
    tick: AtomicU64,
    events: mpsc::UnboundedSender<Event>,
    live: Arc<live::Live>,
}

/// Starts the server: binds QUIC (and metrics), starts the tick and accept tasks.
pub async fn start(sim: Arc<Sim>, cfg: ServerConfig) -> Result<Running, ServerError> {
    let rate = sim.config().tick_rate;
    if cfg.snapshot_rate == 0 || cfg.snapshot_rate > rate {
        return Err(ServerError::Config(format!(
            "snapshot rate {} must be 1 to the tick rate {rate}",
            cfg.snapshot_rate
        )));
    }
    if cfg.max_players == 0 || cfg.secret.is_empty() {
        return Err(ServerError::Config(
            "max players and the secret must not be empty".into(),
        ));
    }
    let endpoint =
        quinn::Endpoint::server(cfg.identity.quic_config()?, cfg.addr).map_err(|source| {
            ServerError::Bind {
                addr: cfg.addr,
                source,
            }
        })?;
    let addr = endpoint.local_addr().map_err(|source| ServerError::Bind {
        addr: cfg.addr,
        source,
    })?;
    let metrics = Arc::new(Metrics::new());
    let live = Arc::new(live::Live::new(&sim, &cfg.map_name));
    let mut tasks = Vec::new();
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
            tokio::spawn(http::serve(l, metrics.clone(), live.clone()));
            Some(local)
        }
        None => None,
    };
    let (shutdown, shutdown_rx) = watch::channel(None::<String>);
    let (events, events_rx) = mpsc::unbounded_channel();
    let map_hash = *blake3::hash(&cfg.map_bytes).as_bytes();
    let fingerprint = cfg.identity.fingerprint.clone();
    let shared = Arc::new(Shared {
        sim,
        map_hash,
        metrics: metrics.clone(),
        clients: DashMap::new(),
        replay: Mutex::new(ReplayGuard::new()),
        slots: AtomicUsize::new(0),
        admission: Admission::new(cfg.limits.clone()),
        tick: AtomicU64::new(0),
        events,
        live,
        cfg,
    });
    tasks.push(tokio::spawn(tick_loop(
        shared.clone(),
        events_rx,
        shutdown_rx.clone(),
    )));
    tasks.push(tokio::spawn(accept_loop(
        endpoint.clone(),
        shared.clone(),
        shutdown_rx,
    )));
    metrics.ready.store(true, Relaxed);
    info!(%addr, "listening");
    Ok(Running {
        addr,
        metrics_addr,
        fingerprint,
        map_hash: hex::encode(map_hash),
        metrics,
        shutdown,
        tasks,
        endpoint,
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
                        conns.spawn(connection(incoming, p, shared.clone(), shutdown.clone()));
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
            // is a bug: logged here; the task's guards gave back its slot and admission.
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

/// Per-client state owned by the tick.
struct Session {
    client: Arc<Client>,
    inputs: InputBuffer,
    snapshots: SnapshotEncoder,
    seen: InputStats,
    /// States the client predicted (authoritative mode) or claims (trusted-client mode),
    /// by tick, to compare or judge once the server steps that tick.
    claims: BTreeMap<u64, PlayerState>,
    /// Snapshot bytes this client may still receive (a token bucket).
    budget: f64,
    /// Move validation.
    validator: Validator,
    /// Trusted-client mode: ticks since the last claim was judged (its next one is judged
    /// over the gap).
    missed: u32,
    /// Trusted-client mode: the newest tick whose claim was rejected.
    corrected: u64,
    /// The newest tick on which this player's move touched another player.
    contact: u64,
    /// The newest tick without this client's command (or claim).
    missed_tick: u64,
}

/// Counts, logs and, past the threshold, acts on a violation: the player is kicked with
/// the reason (in the close frame; its connection task then sees it leave).
fn violation(m: &Metrics, id: u32, s: &mut Session, v: &Violation) {
    m.violation(id, v.kind);
    warn!(player = id, kind = v.kind.name(), evidence = %v.evidence, "violation");
    if s.validator.record(v) {
        let reason = format!("kicked for cheating ({}: {})", v.kind.name(), v.evidence);
        m.kicks.fetch_add(1, Relaxed);
        s.client.conn.close(CLOSE_KICKED.into(), reason.as_bytes());
    }
}

async fn tick_loop(
    shared: Arc<Shared>,
    mut events: mpsc::UnboundedReceiver<Event>,
    mut shutdown: watch::Receiver<Option<String>>,
) {
    let sim = shared.sim.clone();
    let rate = sim.config().tick_rate;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let snapshot_every = (rate / shared.cfg.snapshot_rate).max(1) as u64;
    let frame_every = (rate / live::FRAME_RATE).max(1) as u64;
    let mut longest = Duration::ZERO;
    let mut interval = tokio::time::interval(period);
    let began = Instant::now();
    // A late tick is stepped at once: the simulation keeps to wall-clock time, which the
    // clients' clocks follow.
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut world = sim.new_state();
    let mut scratch = SimScratch::new();
    let mut sessions: BTreeMap<u32, Session> = BTreeMap::new();
    let m = &shared.metrics;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.changed() => break,
        }
        let started = Instant::now();
        while let Ok(e) = events.try_recv() {
            match e {
                Event::Join(id) => {
                    let Some(client) = shared.clients.get(&id).map(|c| c.clone()) else {
                        continue;
                    };
                    let spawn = sim.join_state(&world, id, MoveMode::Walk);
                    if sim.add_player(&mut world, id, spawn).is_ok() {
                        sessions.insert(
                            id,
                            Session {
                                client,
                                inputs: InputBuffer::new(),
                                snapshots: SnapshotEncoder::new(),
                                seen: InputStats::default(),
                                claims: BTreeMap::new(),
                                budget: shared.cfg.client_budget as f64 / 4.0,
                                validator: Validator::new(ValidationConfig::for_tick_rate(rate)),
                                missed: 0,
                                corrected: 0,
                                contact: 0,
                                missed_tick: 0,
                            },
                        );
                    }
                }
                Event::Leave(id) => {
                    sessions.remove(&id);
                    world.remove_player(id);
                }
            }
        }
        let refill = shared.cfg.client_budget as f64 / rate as f64;
        let cap = (shared.cfg.client_budget as f64 / 4.0).max(1200.0);
        for s in sessions.values_mut() {
            s.budget = (s.budget + refill).min(cap);
        }
        let next = world.tick + 1;
        // Wall-clock ticks since the loop began: what an honest client's clock follows.
        let clock = (began.elapsed().as_secs_f64() * rate as f64) as u64;
        let trusted = shared.cfg.movement == MovementAuthority::Client;
        let mut commands: BTreeMap<u32, MoveCommand> = BTreeMap::new();
        for (id, s) in sessions.iter_mut() {
            let msgs: Vec<InputMsg> = match s.client.inbox.lock() {
                Ok(mut q) => q.drain(..).collect(),
                Err(_) => Vec::new(),
            };
            for msg in msgs {
                if let Some(v) = s.validator.input(&msg, next, clock) {
                    let invalid = v.kind == ViolationKind::Invalid;
                    violation(m, *id, s, &v);
                    if invalid {
                        continue; // refused, never clamped
                    }
                }
                s.inputs.receive(&msg, next);
                s.snapshots.ack(msg.ack);
                if trusted {
                    // A claim per command; the first copy to arrive stands.
                    for ((t, _), c) in msg.ticked().zip(&msg.claims) {
                        if t >= next && s.claims.len() < CLAIMS {
                            s.claims.entry(t).or_insert(*c);
                        }
                    }
                } else if let Some(p) = msg.predicted {
                    // The state the client predicted after its last command: checked
                    // against its previous one now, compared when the server steps that
                    // tick.
                    let at = msg.newest_tick();
                    if let Some(v) = s.validator.report(&sim, *id, at, &p, msg.ack) {
                        violation(m, *id, s, &v);
                    }
                    if at >= next && s.claims.len() < CLAIMS {
                        s.claims.insert(at, p);
                    }
                }
            }
            if let Some(c) = s.inputs.take(next) {
                commands.insert(*id, c);
            }
            let st = s.inputs.stats;
            m.inputs_applied
                .fetch_add(st.applied - s.seen.applied, Relaxed);
            m.inputs_missing
                .fetch_add(st.missing - s.seen.missing, Relaxed);
            m.inputs_late.fetch_add(st.late - s.seen.late, Relaxed);
            m.inputs_duplicate
                .fetch_add(st.duplicate - s.seen.duplicate, Relaxed);
            m.inputs_too_far_ahead
                .fetch_add(st.too_far_ahead - s.seen.too_far_ahead, Relaxed);
            s.seen = st;
        }
        if trusted {
            by_claims(&sim, m, &mut world, &mut sessions, &mut scratch);
        } else {
            authoritative(&sim, m, &mut world, &commands, &mut sessions, &mut scratch);
        }
        shared.tick.store(world.tick, Relaxed);
        send_snapshots(&shared, &world, &mut sessions, snapshot_every);
        m.players.store(world.players.len() as u64, Relaxed);
        if world.tick.is_multiple_of(frame_every) && shared.live.watched() {
            let ms = longest.as_secs_f64() * 1000.0;
            shared.live.publish(live::frame(&sim, &world, m, ms));
            longest = Duration::ZERO;
        }
        let took = started.elapsed();
        longest = longest.max(took);
        if took > period {
            m.overruns.fetch_add(1, Relaxed);
        }
        m.tick(took.as_secs_f64());
    }
}

/// A trusted-client tick: each player's claim for the tick is judged; a rejected one is
/// a violation and a correction (the snapshot carries the state that stands).
fn by_claims(
    sim: &Sim,
    m: &Metrics,
    world: &mut WorldState,
    sessions: &mut BTreeMap<u32, Session>,
    scratch: &mut SimScratch,
) {
    let next = world.tick + 1;
    let mut claims = BTreeMap::new();
    for (id, s) in sessions.iter_mut() {
        s.claims = s.claims.split_off(&next);
        if let Some(state) = s.claims.remove(&next) {
            let span = s.missed + 1;
            claims.insert(*id, TickClaim { state, span });
        }
    }
    let reports = sim.step_claims(world, &claims, scratch);
    for r in reports {
        let Some(s) = sessions.get_mut(&r.id) else {
            continue;
        };
        s.missed = match r.outcome {
            None => (s.missed + 1).min(MAX_SPAN - 1),
            Some(_) => 0,
        };
        if r.outcome.is_none() {
            s.missed_tick = world.tick;
        }
        match r.outcome {
            None => m.claims_missing.fetch_add(1, Relaxed),
            Some(o) if o.accepted => m.claims_accepted.fetch_add(1, Relaxed),
            Some(o) => {
                m.corrections.fetch_add(1, Relaxed);
                s.corrected = world.tick;
                if let Some(v) = &o.violation {
                    violation(m, r.id, s, v);
                }
                m.claims_rejected.fetch_add(1, Relaxed)
            }
        };
    }
}

/// An authoritative tick: every player moves by its command; the predictions clients
/// reported for the tick are compared with the result.
fn authoritative(
    sim: &Sim,
    m: &Metrics,
    world: &mut WorldState,
    commands: &BTreeMap<u32, MoveCommand>,
    sessions: &mut BTreeMap<u32, Session>,
    scratch: &mut SimScratch,
) {
    let reports = sim.step(world, commands, scratch);
    for r in &reports {
        let Some(s) = sessions.get_mut(&r.id) else {
            continue;
        };
        if r.reverted || r.events.touched.any_player() {
            s.contact = world.tick;
        }
        if r.repeated_command {
            s.missed_tick = world.tick;
        }
        if r.respawned {
            s.validator.relocated(world.tick);
        }
    }
    for (id, s) in sessions.iter_mut() {
        // Claims for ticks already stepped can never be checked: forget them.
        s.claims = s.claims.split_off(&world.tick);
        if let (Some(claim), Some(p)) = (s.claims.remove(&world.tick), world.player(*id)) {
            if claim != *p {
                m.corrections.fetch_add(1, Relaxed);
            }
            // Contact with players, and with movers (whose state may hang on triggers
            // by players outside this client's view), explains a divergence.
            // Reports come in id order: a search, not a scan per player.
            let report = reports
                .binary_search_by_key(id, |r| r.id)
                .ok()
                .map(|i| &reports[i]);
            let contact = report.is_some_and(|r| {
                r.reverted
                    || r.events
                        .touched
                        .as_slice()
                        .iter()
                        .any(|o| matches!(o, Obstacle::Player(_) | Obstacle::Mover(_)))
            });
            if let Some(v) = s.validator.claim(sim, world, *id, &claim, contact) {
                violation(m, *id, s, &v);
            }
        }
    }
}

/// Sends each client due this tick its snapshot, within its byte budget. Clients are
/// spread over the `every` ticks between snapshots by id, so each tick encodes a share
/// of them rather than every other tick all of them (the tick's worst case halves at
/// 60 Hz ticks and 30 Hz snapshots); each client still gets one every `every` ticks.
fn send_snapshots(
    shared: &Shared,
    world: &WorldState,
    sessions: &mut BTreeMap<u32, Session>,
    every: u64,
) {
    let m = &shared.metrics;
    let due = sessions
        .iter_mut()
        .filter(|(id, _)| (world.tick + u64::from(**id)).is_multiple_of(every));
    for (id, s) in due {
        let max = s
            .client
            .conn
            .max_datagram_size()
            .unwrap_or(1200)
            .min(s.budget.max(0.0) as usize);
        let fb = Feedback {
            last_command: s.inputs.last_applied(),
            input_lead: s.inputs.take_lead(),
            corrected: s.corrected,
            contact: s.contact,
            missed: s.missed_tick,
        };
        let interest = shared.cfg.interest;
        let Some(bytes) = s
            .snapshots
            .encode(&shared.sim, world, *id, fb, interest, max)
        else {
            m.snapshot_drops.fetch_add(1, Relaxed);
            continue;
        };
        let n = bytes.len() as u64;
        s.budget -= n as f64;
        match s.client.conn.send_datagram(Bytes::from(bytes)) {
            Ok(()) => {
                m.datagrams_out.fetch_add(1, Relaxed);
                m.bytes_out.fetch_add(n, Relaxed);
            }
            Err(_) => {
                m.snapshot_drops.fetch_add(1, Relaxed);
            }
        }
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads control frames from `recv` into `dec` until one is whole.
/// Why no frame came: the peer sent bytes that are not a frame, or the stream went away.
/// Only the first is the client's fault; a connection closed before its goodbye arrived
/// (the close frame can overtake stream data) is not counted as malformed.
enum FrameError {
    Malformed(String),
    Lost(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Malformed(e) => write!(f, "malformed frame: {e}"),
            FrameError::Lost(e) => write!(f, "stream lost: {e}"),
        }
    }
}

async fn next_frame(
    recv: &mut quinn::RecvStream,
    dec: &mut FrameDecoder,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut buf = [0u8; 4096];
    loop {
        match dec.next_frame() {
            Ok(Some(f)) => return Ok(Some(f)),
            Ok(None) => {}
            Err(e) => return Err(FrameError::Malformed(e.to_string())),
        }
        match recv.read(&mut buf).await {
            Ok(Some(n)) => dec.push(&buf[..n]),
            Ok(None) => return Ok(None),
            Err(e) => return Err(FrameError::Lost(e.to_string())),
        }
    }
}

/// Why a write to a peer did not happen: the stream went away, or the peer granted no
/// flow-control credit before the deadline (it stalled, on purpose or not).
enum WriteError {
    Lost,
    Stalled,
}

/// Writes one control message, waiting for the peer's credit until `deadline` at most.
async fn send_control(
    send: &mut quinn::SendStream,
    msg: &ServerControl,
    deadline: Instant,
) -> Result<(), WriteError> {
    match tokio::time::timeout_at(deadline.into(), send.write_all(&encode_frame(msg))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(WriteError::Lost),
        Err(_) => Err(WriteError::Stalled),
    }
}

/// Writes a last message (a refusal, kick or shutdown notice) within the write timeout,
/// gives the peer a moment to read it, and closes with `code` and the reason. A peer that
/// stalls the write is closed all the same, and counted.
async fn last_word(
    shared: &Shared,
    conn: &quinn::Connection,
    send: Option<&mut quinn::SendStream>,
    msg: ServerControl,
    code: u32,
    reason: &str,
) {
    if let Some(send) = send {
        let deadline = Instant::now() + shared.cfg.limits.write_timeout;
        match send_control(send, &msg, deadline).await {
            Ok(()) => {
                let _ = send.finish();
                // Let the client read it before the close frame, which can overtake it.
                let _ = tokio::time::timeout(Duration::from_millis(500), conn.closed()).await;
            }
            Err(WriteError::Stalled) => {
                shared.metrics.stalls.fetch_add(1, Relaxed);
                debug!(remote = %conn.remote_address(), "stalled before its last message");
            }
            Err(WriteError::Lost) => {}
        }
    }
    conn.close(code.into(), reason.as_bytes());
}

/// Refuses a connection: the reason on the control stream and in the close frame.
async fn refuse(
    shared: &Shared,
    conn: &quinn::Connection,
    send: Option<&mut quinn::SendStream>,
    label: &str,
    reason: String,
) {
    shared.metrics.refused(label);
    info!(remote = %conn.remote_address(), %reason, "refused");
    let msg = ServerControl::Refused {
        reason: reason.clone(),
    };
    last_word(shared, conn, send, msg, CLOSE_REFUSED, &reason).await;
}

/// A player slot held from the welcome until the client leaves: dropping it (on any
/// exit, a panic included) frees the slot, removes the client and tells the tick loop.
struct Seat<'a> {
    shared: &'a Shared,
    id: u32,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let s = self.shared;
        s.clients.remove(&self.id);
        let held = s.slots.fetch_sub(1, Relaxed).saturating_sub(1);
        s.metrics.clients.store(held as u64, Relaxed);
        let _ = s.events.send(Event::Leave(self.id));
    }
}

/// Takes a slot for player `id` and burns its token's nonce, in that order and only if
/// both succeed: a token refused because the server is full or its player is connected
/// stays good for later.
fn take_seat<'a>(
    shared: &'a Shared,
    id: u32,
    grant: &token::Claims,
    client: &Arc<Client>,
    now: u64,
) -> Result<Seat<'a>, (&'static str, String)> {
    let max = shared.cfg.max_players;
    shared
        .slots
        .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
        .map_err(|_| ("full", format!("server full ({max} players)")))?;
    let free = |why| {
        shared.slots.fetch_sub(1, Relaxed);
        why
    };
    match shared.clients.entry(id) {
        dashmap::mapref::entry::Entry::Occupied(_) => Err(free((
            "player_in_use",
            format!("player {id} is already connected"),
        ))),
        dashmap::mapref::entry::Entry::Vacant(v) => {
            let admitted = match shared.replay.lock() {
                Ok(mut g) => g.admit(grant, now),
                Err(_) => Err(TokenError::Malformed),
            };
            if let Err(e) = admitted {
                return Err(free((token_label(&e), e.to_string())));
            }
            v.insert(client.clone());
            let held = shared.slots.load(Relaxed);
            shared.metrics.clients.store(held as u64, Relaxed);
            Ok(Seat { shared, id })
        }
    }
}

fn token_label(e: &TokenError) -> &'static str {
    match e {
        TokenError::Malformed => "token_malformed",
        TokenError::Forged => "token_forged",
        TokenError::Expired => "token_expired",
        TokenError::Replayed => "token_replayed",
    }
}

async fn connection(
    incoming: quinn::Incoming,
    pending: Pending,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<Option<String>>,
) {
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
    // The hello, within the timeout.
    let hello = tokio::time::timeout(shared.cfg.hello_timeout, async {
        let (send, mut recv) = conn
            .accept_bi()
            .await
            .map_err(|e| FrameError::Lost(e.to_string()))?;
        let mut dec = FrameDecoder::with_limit(MAX_CLIENT_FRAME);
        let frame = next_frame(&mut recv, &mut dec).await?.ok_or_else(|| {
            FrameError::Malformed("control stream closed before the hello".into())
        })?;
        Ok::<_, FrameError>((send, recv, dec, frame))
    })
    .await;
    let (mut send, mut recv, mut dec, frame) = match hello {
        Err(_) => {
            let t = shared.cfg.hello_timeout.as_secs_f64();
            let reason = format!("no hello within {t} s");
            refuse(&shared, &conn, None, "hello_timeout", reason).await;
            return;
        }
        Ok(Err(FrameError::Lost(e))) => {
            debug!(error = %e, "left before the hello");
            return;
        }
        Ok(Err(e)) => {
            m.malformed_control.fetch_add(1, Relaxed);
            conn.close(CLOSE_REFUSED.into(), format!("bad hello: {e}").as_bytes());
            return;
        }
        Ok(Ok(x)) => x,
    };
    let (version, token, have_map) = match decode::<ClientControl>("hello", &frame) {
        Ok(ClientControl::Hello {
            version,
            token,
            have_map,
        }) => (version, token, have_map),
        Ok(_) | Err(_) => {
            m.malformed_control.fetch_add(1, Relaxed);
            let reason = "the first message must be a hello".to_string();
            let msg = ServerControl::Refused {
                reason: reason.clone(),
            };
            last_word(&shared, &conn, Some(&mut send), msg, CLOSE_REFUSED, &reason).await;
            return;
        }
    };
    if version != VERSION {
        let reason =
            format!("protocol version {version} is not supported (this server speaks {VERSION})");
        refuse(&shared, &conn, Some(&mut send), "version", reason).await;
        return;
    }
    let now = now_unix();
    let grant = match token::verify(&shared.cfg.secret, &token, now) {
        Ok(c) => c,
        Err(e) => {
            refuse(
                &shared,
                &conn,
                Some(&mut send),
                token_label(&e),
                e.to_string(),
            )
            .await;
            return;
        }
    };
    let id = grant.player_id;
    let client = Arc::new(Client {
        conn: conn.clone(),
        inbox: Mutex::new(VecDeque::new()),
    });
    let seat = match take_seat(&shared, id, &grant, &client, now) {
        Ok(s) => s,
        Err((label, reason)) => {
            refuse(&shared, &conn, Some(&mut send), label, reason).await;
            return;
        }
    };
    // Joined: it now counts against the player slots, no longer against admission.
    drop(pending);
    m.pending.store(shared.admission.pending() as u64, Relaxed);
    let sending_map = have_map != Some(shared.map_hash);
    let welcome = Welcome {
        player_id: id,
        tick_rate: shared.sim.config().tick_rate,
        snapshot_rate: shared.cfg.snapshot_rate,
        config: shared.sim.config().clone(),
        map_name: shared.cfg.map_name.clone(),
        map_hash: shared.map_hash,
        map_size: shared.cfg.map_bytes.len() as u64,
        sending_map,
        server_tick: shared.tick.load(Relaxed),
        movement: shared.cfg.movement,
    };
    let welcomed = welcome_and_map(&shared, &mut send, welcome).await;
    let reason = match welcomed {
        Ok(()) => {
            info!(id, remote = %conn.remote_address(), sending_map, "joined");
            let _ = shared.events.send(Event::Join(id));
            serve_client(
                &shared,
                &conn,
                &client,
                &mut send,
                &mut recv,
                &mut dec,
                &mut shutdown,
            )
            .await
        }
        Err(WriteError::Lost) => "control stream failed".into(),
        Err(WriteError::Stalled) => {
            m.stalls.fetch_add(1, Relaxed);
            let reason = "stalled: the welcome or map transfer got no flow-control credit in time";
            conn.close(CLOSE_KICKED.into(), reason.as_bytes());
            reason.into()
        }
    };
    info!(id, %reason, "left");
    drop(seat);
}

/// Sends the welcome and, when the client lacks the map, the map: each write within the
/// write timeout, the whole transfer within the write timeout plus the map's size at the
/// slowest rate accepted.
async fn welcome_and_map(
    shared: &Shared,
    send: &mut quinn::SendStream,
    welcome: Welcome,
) -> Result<(), WriteError> {
    let limits = &shared.cfg.limits;
    let sending_map = welcome.sending_map;
    let began = Instant::now();
    send_control(
        send,
        &ServerControl::Welcome(Box::new(welcome)),
        began + limits.write_timeout,
    )
    .await?;
    if !sending_map {
        return Ok(());
    }
    let bytes = &shared.cfg.map_bytes;
    let transfer = Duration::from_secs_f64(bytes.len() as f64 / limits.min_map_rate.max(1) as f64);
    let whole = began + limits.write_timeout + transfer;
    for (i, chunk) in bytes.chunks(MAP_CHUNK).enumerate() {
        let msg = ServerControl::MapData {
            offset: (i * MAP_CHUNK) as u64,
            bytes: chunk.to_vec(),
        };
        send_control(send, &msg, whole.min(Instant::now() + limits.write_timeout)).await?;
    }
    Ok(())
}

/// Kicks a joined client with the reason (told on the control stream, within the write
/// timeout, and in the close frame); returns the reason.
async fn kick(
    shared: &Shared,
    conn: &quinn::Connection,
    send: &mut quinn::SendStream,
    reason: String,
) -> String {
    shared.metrics.kicks.fetch_add(1, Relaxed);
    let msg = ServerControl::Kick {
        reason: reason.clone(),
    };
    last_word(shared, conn, Some(send), msg, CLOSE_KICKED, &reason).await;
    reason
}

/// Serves a joined client until it leaves, is kicked, or the server shuts down; returns why.
async fn serve_client(
    shared: &Shared,
    conn: &quinn::Connection,
    client: &Client,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    dec: &mut FrameDecoder,
    shutdown: &mut watch::Receiver<Option<String>>,
) -> String {
    let m = &shared.metrics;
    let mut last_input = Instant::now();
    loop {
        let deadline = last_input + shared.cfg.input_timeout;
        tokio::select! {
            dg = conn.read_datagram() => {
                let Ok(bytes) = dg else { return "connection closed".into() };
                m.datagrams_in.fetch_add(1, Relaxed);
                m.bytes_in.fetch_add(bytes.len() as u64, Relaxed);
                match decode::<ClientDatagram>("input", &bytes) {
                    Ok(ClientDatagram::Input(msg)) if msg.validate().is_ok() => {
                        last_input = Instant::now();
                        if let Ok(mut q) = client.inbox.lock() {
                            if q.len() >= INBOX {
                                q.pop_front();
                            }
                            q.push_back(msg);
                        }
                    }
                    _ => {
                        m.malformed_datagrams.fetch_add(1, Relaxed);
                    }
                }
            }
            frame = next_frame(recv, dec) => {
                let parsed = match frame {
                    Ok(None) => return "control stream closed".into(),
                    Ok(Some(f)) => decode::<ClientControl>("control", &f).ok(),
                    Err(FrameError::Lost(e)) => return format!("connection lost: {e}"),
                    Err(FrameError::Malformed(_)) => None,
                };
                match parsed {
                    Some(ClientControl::Bye { reason }) => return format!("said bye: {reason}"),
                    Some(ClientControl::Hello { .. }) | None => {
                        m.malformed_control.fetch_add(1, Relaxed);
                        return kick(shared, conn, send, "malformed control message".into()).await;
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let t = shared.cfg.input_timeout.as_secs_f64();
                return kick(shared, conn, send, format!("no input for {t} s")).await;
            }
            _ = shutdown.changed() => {
                let reason = shutdown.borrow().clone().unwrap_or_else(|| "server shutting down".into());
                let msg = ServerControl::Shutdown { reason: reason.clone() };
                last_word(shared, conn, Some(send), msg, CLOSE_SHUTDOWN, &reason).await;
                return format!("shutdown: {reason}");
            }
        }
    }
}

/// Logs a warning once the server is started with a generated secret.
pub fn warn_generated_secret(path: &std::path::Path) {
    warn!(file = %path.display(), "no --secret given: generated one and stored it");
}
