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

mod http;
mod live;
mod metrics;
mod tls;

pub use metrics::{Metrics, REFUSALS};
pub use tls::{fingerprint, Identity};

use bytes::Bytes;
use dashmap::DashMap;
use expel_shared::protocol::frame::{encode_frame, FrameDecoder};
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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
        cfg,
        map_hash,
        metrics: metrics.clone(),
        clients: DashMap::new(),
        replay: Mutex::new(ReplayGuard::new()),
        tick: AtomicU64::new(0),
        events,
        live,
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
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                conns.spawn(connection(incoming, shared.clone(), shutdown.clone()));
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
                    let spawn = sim.spawn_state(id, MoveMode::Walk);
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
                    let at = msg.first_tick + msg.commands.len() as u64 - 1;
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

async fn send_control(send: &mut quinn::SendStream, msg: &ServerControl) -> bool {
    send.write_all(&encode_frame(msg)).await.is_ok()
}

/// Refuses a connection: the reason on the control stream and in the close frame.
async fn refuse(
    conn: &quinn::Connection,
    send: Option<&mut quinn::SendStream>,
    m: &Metrics,
    label: &str,
    reason: String,
) {
    m.refused(label);
    info!(remote = %conn.remote_address(), %reason, "refused");
    if let Some(send) = send {
        send_control(
            send,
            &ServerControl::Refused {
                reason: reason.clone(),
            },
        )
        .await;
        let _ = send.finish();
        // Give the client a moment to read it before the close frame.
        let _ = tokio::time::timeout(Duration::from_millis(500), conn.closed()).await;
    }
    conn.close(CLOSE_REFUSED.into(), reason.as_bytes());
}

async fn connection(
    incoming: quinn::Incoming,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<Option<String>>,
) {
    let m = &shared.metrics;
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            m.handshake_failures.fetch_add(1, Relaxed);
            debug!(error = %e, "handshake failed");
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
        let mut dec = FrameDecoder::new();
        let frame = next_frame(&mut recv, &mut dec).await?.ok_or_else(|| {
            FrameError::Malformed("control stream closed before the hello".into())
        })?;
        Ok::<_, FrameError>((send, recv, dec, frame))
    })
    .await;
    let (mut send, mut recv, mut dec, frame) = match hello {
        Err(_) => {
            let t = shared.cfg.hello_timeout.as_secs_f64();
            refuse(
                &conn,
                None,
                m,
                "hello_timeout",
                format!("no hello within {t} s"),
            )
            .await;
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
            send_control(
                &mut send,
                &ServerControl::Refused {
                    reason: reason.clone(),
                },
            )
            .await;
            let _ = send.finish();
            conn.close(CLOSE_REFUSED.into(), reason.as_bytes());
            return;
        }
    };
    if version != VERSION {
        let reason =
            format!("protocol version {version} is not supported (this server speaks {VERSION})");
        refuse(&conn, Some(&mut send), m, "version", reason).await;
        return;
    }
    let now = now_unix();
    let claims = token::verify(&shared.cfg.secret, &token, now).and_then(|c| {
        let mut g = shared.replay.lock().map_err(|_| TokenError::Malformed)?;
        g.admit(&c, now).map(|()| c)
    });
    let claims = match claims {
        Ok(c) => c,
        Err(e) => {
            let label = match e {
                TokenError::Malformed => "token_malformed",
                TokenError::Forged => "token_forged",
                TokenError::Expired => "token_expired",
                TokenError::Replayed => "token_replayed",
            };
            refuse(&conn, Some(&mut send), m, label, e.to_string()).await;
            return;
        }
    };
    let id = claims.player_id;
    if shared.clients.len() >= shared.cfg.max_players {
        let reason = format!("server full ({} players)", shared.cfg.max_players);
        refuse(&conn, Some(&mut send), m, "full", reason).await;
        return;
    }
    let client = Arc::new(Client {
        conn: conn.clone(),
        inbox: Mutex::new(VecDeque::new()),
    });
    match shared.clients.entry(id) {
        dashmap::mapref::entry::Entry::Occupied(_) => {
            let reason = format!("player {id} is already connected");
            refuse(&conn, Some(&mut send), m, "player_in_use", reason).await;
            return;
        }
        dashmap::mapref::entry::Entry::Vacant(v) => {
            v.insert(client.clone());
        }
    }
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
    let mut ok = send_control(&mut send, &ServerControl::Welcome(Box::new(welcome))).await;
    if sending_map {
        for (i, chunk) in shared.cfg.map_bytes.chunks(MAP_CHUNK).enumerate() {
            let msg = ServerControl::MapData {
                offset: (i * MAP_CHUNK) as u64,
                bytes: chunk.to_vec(),
            };
            ok &= send_control(&mut send, &msg).await;
        }
    }
    info!(id, remote = %conn.remote_address(), sending_map, "joined");
    let _ = shared.events.send(Event::Join(id));
    let reason = if ok {
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
    } else {
        "control stream failed".into()
    };
    info!(id, %reason, "left");
    shared.clients.remove(&id);
    let _ = shared.events.send(Event::Leave(id));
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
    let kick = |reason: String| async move {
        m.kicks.fetch_add(1, Relaxed);
        reason
    };
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
                        let reason = "malformed control message".to_string();
                        send_control(send, &ServerControl::Kick { reason: reason.clone() }).await;
                        let _ = send.finish();
                        conn.close(CLOSE_KICKED.into(), reason.as_bytes());
                        return kick(reason).await;
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let t = shared.cfg.input_timeout.as_secs_f64();
                let reason = format!("no input for {t} s");
                send_control(send, &ServerControl::Kick { reason: reason.clone() }).await;
                let _ = send.finish();
                let _ = tokio::time::timeout(Duration::from_millis(200), conn.closed()).await;
                conn.close(CLOSE_KICKED.into(), reason.as_bytes());
                return kick(reason).await;
            }
            _ = shutdown.changed() => {
                let reason = shutdown.borrow().clone().unwrap_or_else(|| "server shutting down".into());
                send_control(send, &ServerControl::Shutdown { reason: reason.clone() }).await;
                let _ = send.finish();
                let _ = tokio::time::timeout(Duration::from_millis(500), conn.closed()).await;
                conn.close(CLOSE_SHUTDOWN.into(), reason.as_bytes());
                return format!("shutdown: {reason}");
            }
        }
    }
}

/// Logs a warning once the server is started with a generated secret.
pub fn warn_generated_secret(path: &std::path::Path) {
    warn!(file = %path.display(), "no --secret given: generated one and stored it");
}
