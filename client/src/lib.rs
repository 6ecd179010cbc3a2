//! Expel's client library: what a game loop calls each frame, over a thin async shell
//! (tokio + quinn) around the protocol's client state machine
//! ([`expel_shared::protocol::client::Client`]).
//!
//! ```no_run
//! # async fn game(addr: std::net::SocketAddr, token: String, fingerprint: String) {
//! use expel_client::{connect, ConnectOptions, Trust};
//! use std::time::Instant;
//! let mut session = connect(addr, &ConnectOptions::new(token, Trust::Fingerprint(fingerprint)))
//!     .await
//!     .unwrap();
//! loop {
//!     // Each frame: this frame's input, then the update.
//!     session.input(expel_shared::MoveCommand::new(1.0, 0.0, 0.0, 90.0, 0.0));
//!     let now = Instant::now();
//!     session.update(now);
//!     let me = session.display_origin(); // our player, predicted, corrections smoothed
//!     let others = session.others(now); // the others, interpolated
//!     while let Some(event) = session.poll_event() { /* joined, corrected, ended */ }
//!     # break;
//! }
//! # }
//! ```
//!
//! [`connect`] (or [`connect_blocking`] for a loop without async) joins the server; the
//! [`Session`] then moves bytes between quinn and the machine whenever the game calls
//! [`Session::update`]. Background tasks only read the connection into a queue. A
//! [`LinkConditioner`] can add loss, delay, jitter and duplication to its datagrams, to
//! feel prediction under lag. [`run`] is a headless player built on the same API (the
//! `expel connect` command, the bots and the tests use it).

mod tls;

pub use expel_shared::protocol::backoff::Backoff;
pub use expel_shared::protocol::client::{ClientEvent, ClientStats, End, Status};
pub use expel_shared::protocol::conditioner::LinkConditioner;
pub use expel_shared::protocol::interp::Interpolator;
pub use expel_shared::protocol::predict::{PredictStats, Predictor};
pub use quinn::Endpoint;
pub use tls::{client_config, Trust};

use bytes::Bytes;
use expel_shared::mover::MoverState;
use expel_shared::protocol::client::{Client, ClientOutput, ClientSettings};
use expel_shared::protocol::conditioner::Conditioner;
use expel_shared::protocol::{Welcome, ALPN};
use expel_shared::{MoveCommand, PlayerState, Sim};
use glam::DVec3;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::mpsc;

/// How long a QUIC handshake may take before the attempt fails.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a client could not connect or play.
#[derive(Debug, Error)]
pub enum ClientError {
    /// TLS configuration.
    #[error("tls: {0}")]
    Tls(String),
    /// The QUIC connection failed.
    #[error("connecting to {addr}: {detail}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// The server refused the hello.
    #[error("refused by the server: {0}")]
    Refused(String),
    /// The server broke the protocol (or sent a map that cannot be used).
    #[error("protocol: {0}")]
    Protocol(String),
}

impl ClientError {
    /// Whether trying again later may work: the server could not be reached, or refused
    /// for now (full, or this player's previous connection not yet gone), in the server's
    /// wording of those refusals.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connect { .. } => true,
            ClientError::Refused(r) => {
                r.starts_with("server full")
                    || r.ends_with("is already connected")
                    || r.contains("shutting down")
            }
            ClientError::Tls(_) | ClientError::Protocol(_) => false,
        }
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Connect token.
    pub token: String,
    /// How to trust the server.
    pub trust: Trust,
    /// A map the client already has (the server sends its map otherwise).
    pub have_map: Option<Arc<Vec<u8>>>,
    /// A simulation of `have_map` to reuse (many bots in one process share one), used
    /// when the server's map and movement settings match it.
    pub sim: Option<Arc<Sim>>,
    /// The endpoint (socket) to connect from: many sessions of a swarm on a few sockets
    /// cost far less than a socket and its task each. By default a session has its own.
    pub endpoint: Option<quinn::Endpoint>,
}

impl ConnectOptions {
    /// Options with a token and a way to trust the server, and no map of its own.
    pub fn new(token: String, trust: Trust) -> Self {
        ConnectOptions {
            token,
            trust,
            have_map: None,
            sim: None,
            endpoint: None,
        }
    }
}

/// What arrived and waits for the game's next [`Session::update`], at most: past it a
/// datagram is dropped (counted: [`Session::inbound_dropped`]) and the control stream is
/// not read (QUIC's flow control then holds the server back), so a game that stops
/// updating, or a server that floods, holds a bounded amount of memory.
const INBOUND: usize = 1024;

/// What the connection's reader tasks report.
enum Inbound {
    Control(Bytes),
    Datagram(Bytes),
    Closed(Option<u32>, String),
}

/// A joined session: the protocol machine and its connection.
pub struct Session {
    /// What the server said.
    pub welcome: Welcome,
    /// The map's bytes.
    pub map: Arc<Vec<u8>>,
    /// The simulation, as the server runs it.
    pub sim: Arc<Sim>,
    machine: Client,
    endpoint: quinn::Endpoint,
    /// Whether the endpoint is this session's alone (a shared one outlives it).
    own_endpoint: bool,
    conn: quinn::Connection,
    inbound: mpsc::Receiver<Inbound>,
    /// Datagrams dropped because [`INBOUND`] were waiting.
    inbound_dropped: Arc<AtomicU64>,
    /// Inbound messages taken while waiting, not yet given to the machine.
    held: VecDeque<Inbound>,
    control: mpsc::UnboundedSender<Vec<u8>>,
    /// Conditioned datagrams, when a conditioner is set: (out, in).
    link: Option<(Conditioner<Bytes>, Conditioner<Bytes>)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The runtime of a blocking session (its tasks run there).
    runtime: Option<tokio::runtime::Runtime>,
}

/// The address a client socket binds to reach `server`: any of this host's, of the
/// server's family, on a free port.
pub fn bind_address(server: SocketAddr) -> SocketAddr {
    if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    }
}

/// A client endpoint (a socket on a free port) that can reach `server`, for
/// [`ConnectOptions::endpoint`].
pub fn client_endpoint(server: SocketAddr) -> Result<quinn::Endpoint, ClientError> {
    let bind = bind_address(server);
    quinn::Endpoint::client(bind).map_err(|e| ClientError::Connect {
        addr: server,
        detail: format!("binding {bind}: {e}"),
    })
}

/// How a client tells a refusal at the server's door (QUIC's CONNECTION_REFUSED, before
/// any handshake): the server sheds joins so, cheaply, while its load is full or too many
/// joins are under way.
pub const REFUSED_AT_THE_DOOR: &str =
    "server full for its load: refused before the handshake (its load, or the joins under way)";

/// What the server's closing of a connection says: its application code and reason, or
/// QUIC's (a refusal at the door reads as [`REFUSED_AT_THE_DOOR`]).
pub fn close_reason(e: &quinn::ConnectionError) -> (Option<u32>, String) {
    match e {
        quinn::ConnectionError::ApplicationClosed(a) => (
            u32::try_from(a.error_code.into_inner()).ok(),
            String::from_utf8_lossy(&a.reason).into_owned(),
        ),
        quinn::ConnectionError::ConnectionClosed(c)
            if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
        {
            (None, REFUSED_AT_THE_DOOR.into())
        }
        other => (None, other.to_string()),
    }
}

/// Connects, says hello, and plays until the welcome and the map have arrived.
pub async fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<Session, ClientError> {
    let fail = |detail: String| ClientError::Connect { addr, detail };
    let (endpoint, own_endpoint) = match &opts.endpoint {
        Some(e) => (e.clone(), false),
        None => (client_endpoint(addr)?, true),
    };
    let connecting = endpoint
        .connect_with(client_config(&opts.trust, ALPN)?, addr, "localhost")
        .map_err(|e| fail(e.to_string()))?;
    // A server that is down answers nothing: give up long before QUIC's idle timeout.
    let conn = tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting)
        .await
        .map_err(|_| {
            fail(format!(
                "no handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| match close_reason(&e) {
            (_, why) if why == REFUSED_AT_THE_DOOR => ClientError::Refused(why),
            (_, why) => fail(why),
        })?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| fail(e.to_string()))?;
    let (tx, inbound) = mpsc::channel(INBOUND);
    let inbound_dropped = Arc::new(AtomicU64::new(0));
    let (control, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut tasks = Vec::new();
    // Control stream in.
    let t = tx.clone();
    tasks.push(tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(Some(n)) = recv.read(&mut buf).await {
            if t.send(Inbound::Control(Bytes::copy_from_slice(&buf[..n])))
                .await
                .is_err()
            {
                break;
            }
        }
    }));
    // Control stream out.
    tasks.push(tokio::spawn(async move {
        while let Some(b) = outgoing.recv().await {
            if send.write_all(&b).await.is_err() {
                break;
            }
        }
        let _ = send.finish();
    }));
    // Datagrams in, and the close.
    let c = conn.clone();
    let dropped = inbound_dropped.clone();
    tasks.push(tokio::spawn(async move {
        loop {
            match c.read_datagram().await {
                Ok(b) => match tx.try_send(Inbound::Datagram(b)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        dropped.fetch_add(1, Relaxed);
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                },
                Err(e) => {
                    let (code, reason) = close_reason(&e);
                    let _ = tx.send(Inbound::Closed(code, reason)).await;
                    break;
                }
            }
        }
    }));
    let settings = ClientSettings {
        have_map: opts.have_map.clone(),
        sim: opts.sim.clone(),
        ..ClientSettings::new(opts.token.clone())
    };
    let mut machine = Client::new(settings, Instant::now());
    let mut held = VecDeque::new();
    // Until the welcome and the map have come (or the session ended).
    let mut inbound = inbound;
    loop {
        let now = Instant::now();
        while let Some(m) = held.pop_front() {
            match m {
                Inbound::Control(b) => machine.handle_control(&b, now),
                Inbound::Datagram(_) => {}
                Inbound::Closed(code, reason) => machine.handle_closed(code, &reason),
            }
        }
        while let Some(out) = machine.poll_output() {
            if let ClientOutput::Control(b) = out {
                let _ = control.send(b);
            }
        }
        match machine.status() {
            Status::Playing => break,
            Status::Ended(End::Refused(r) | End::Disconnected(r)) => {
                return Err(ClientError::Refused(r.clone()))
            }
            Status::Ended(e) => return Err(ClientError::Protocol(e.reason().to_string())),
            Status::Connecting | Status::ReceivingMap => {}
        }
        match inbound.recv().await {
            Some(m) => held.push_back(m),
            None => return Err(ClientError::Protocol("connection tasks ended".into())),
        }
    }
    let (Some(welcome), Some(sim), Some(map)) = (
        machine.welcome().cloned(),
        machine.sim().cloned(),
        machine.map().cloned(),
    ) else {
        return Err(ClientError::Protocol("joined without a welcome".into()));
    };
    Ok(Session {
        welcome,
        sim,
        map,
        machine,
        endpoint,
        own_endpoint,
        conn,
        inbound,
        inbound_dropped,
        held,
        control,
        link: None,
        tasks,
        runtime: None,
    })
}

/// [`connect`] for a game loop that is not async: the session keeps its own runtime,
/// whose one worker thread reads the connection in the background.
pub fn connect_blocking(addr: SocketAddr, opts: &ConnectOptions) -> Result<Session, ClientError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| ClientError::Connect {
            addr,
            detail: format!("starting a runtime: {e}"),
        })?;
    let mut s = rt.block_on(connect(addr, opts))?;
    s.runtime = Some(rt);
    Ok(s)
}

impl Session {
    /// Gives the machine everything that arrived, runs the ticks due by `now` and sends
    /// what they made. Call it every frame (or when [`Session::next_wake`] says).
    pub fn update(&mut self, now: Instant) {
        self.update_with(now, &mut |_, _| None);
    }

    /// [`Session::update`], asking `command` for each tick's command as it runs (see
    /// [`Client::handle_timeout_with`]).
    pub fn update_with(
        &mut self,
        now: Instant,
        command: &mut dyn FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    ) {
        // What is waiting now, not what keeps arriving meanwhile.
        for _ in 0..INBOUND {
            match self.inbound.try_recv() {
                Ok(m) => self.held.push_back(m),
                Err(_) => break,
            }
        }
        while let Some(m) = self.held.pop_front() {
            match m {
                Inbound::Control(b) => self.machine.handle_control(&b, now),
                Inbound::Datagram(b) => match self.link.as_mut() {
                    Some((_, down)) => down.push(b, now),
                    None => self.machine.handle_datagram(&b, now),
                },
                Inbound::Closed(code, reason) => self.machine.handle_closed(code, &reason),
            }
        }
        if let Some((_, down)) = self.link.as_mut() {
            while let Some(b) = down.pop(now) {
                self.machine.handle_datagram(&b, now);
            }
        }
        self.machine.set_rtt(self.conn.rtt());
        self.machine.handle_timeout_with(now, command);
        self.flush(now);
    }

    fn flush(&mut self, now: Instant) {
        while let Some(out) = self.machine.poll_output() {
            match out {
                ClientOutput::Control(b) => {
                    let _ = self.control.send(b);
                }
                ClientOutput::Datagram(b) => match self.link.as_mut() {
                    Some((up, _)) => up.push(Bytes::from(b), now),
                    None => {
                        let _ = self.conn.send_datagram(Bytes::from(b));
                    }
                },
            }
        }
        if let Some((up, _)) = self.link.as_mut() {
            while let Some(b) = up.pop(now) {
                let _ = self.conn.send_datagram(b);
            }
        }
    }

    /// Waits until `until`, or until something arrives from the server (then
    /// [`Session::update`] has work).
    pub async fn wait(&mut self, until: Instant) {
        tokio::select! {
            m = self.inbound.recv() => {
                if let Some(m) = m {
                    self.held.push_back(m);
                }
            }
            _ = tokio::time::sleep_until(until.into()) => {}
        }
    }

    /// Datagrams from the server dropped unread because the game had not called
    /// [`Session::update`] while a full queue of them waited.
    pub fn inbound_dropped(&self) -> u64 {
        self.inbound_dropped.load(Relaxed)
    }

    /// What waits for the next [`Session::update`]: messages from the connection.
    pub fn inbound_waiting(&self) -> usize {
        self.inbound.len() + self.held.len()
    }

    /// When the next tick is due (or a conditioned datagram), while playing.
    pub fn next_wake(&self) -> Option<Instant> {
        let link = self
            .link
            .as_ref()
            .and_then(|(u, d)| match (u.next_due(), d.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            });
        match (self.machine.poll_timeout(), link) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Conditions for this session's datagrams, both ways (loss, delay, jitter,
    /// duplication), with the seed of their randomness: to feel prediction under lag.
    pub fn set_link(&mut self, link: LinkConditioner, seed: u64) {
        self.link = link.active().then(|| {
            (
                Conditioner::new(link, seed),
                Conditioner::new(link, seed ^ 0x5eed),
            )
        });
    }

    /// Ticks to stay ahead of the server beyond the path's delay (2 by default).
    pub fn set_buffer_ticks(&mut self, ticks: f64) {
        self.machine.set_buffer_ticks(ticks);
    }

    /// Plays light: no prediction (see [`ClientSettings::light`](expel_shared::protocol::client::ClientSettings::light)).
    pub fn set_light(&mut self, light: bool) {
        self.machine.set_light(light);
    }

    /// This frame's input: the command for every tick from the next one on.
    pub fn input(&mut self, cmd: MoveCommand) {
        self.machine.input(cmd);
    }

    /// The newest tick predicted (the next one gets the input given now).
    pub fn tick(&self) -> u64 {
        self.machine.tick()
    }

    /// Our player, predicted at the newest tick.
    pub fn local_player(&self) -> Option<PlayerState> {
        self.machine.local_player()
    }

    /// Where to draw our player: the prediction, with the last correction fading.
    pub fn display_origin(&self) -> Option<DVec3> {
        self.machine.display_origin()
    }

    /// The other players, interpolated for drawing at `now`.
    pub fn others(&self, now: Instant) -> BTreeMap<u32, DVec3> {
        self.machine.others(self.machine.render_tick(now))
    }

    /// The movers as predicted.
    pub fn movers(&self) -> &[MoverState] {
        self.machine.movers()
    }

    /// The next event (welcomed, joined, corrected, ended with the reason).
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.machine.poll_event()
    }

    /// What the session measured so far.
    pub fn stats(&self) -> &ClientStats {
        self.machine.stats()
    }

    /// Where the session stands.
    pub fn status(&self) -> &Status {
        self.machine.status()
    }

    /// The transport's figures (bytes both ways, round trip).
    pub fn transport(&self) -> quinn::ConnectionStats {
        self.conn.stats()
    }

    /// Makes this client misbehave (tests of a server's validation).
    pub fn set_tamper(&mut self, t: Box<dyn expel_shared::protocol::client::Tamper>) {
        self.machine.set_tamper(t);
    }

    /// Says goodbye (unless the server ended the session) and closes, waiting a moment
    /// for the server to read it.
    pub async fn close(mut self, reason: &str) {
        let by_server = matches!(self.machine.status(), Status::Ended(e) if e.by_server());
        if !by_server {
            self.machine.leave(reason);
            self.flush(Instant::now());
            // The server closes once it has read the goodbye; closing first could drop it.
            let _ = tokio::time::timeout(Duration::from_secs(1), self.conn.closed()).await;
        }
        self.conn.close(0u32.into(), reason.as_bytes());
        for t in &self.tasks {
            t.abort();
        }
        if self.own_endpoint {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        }
    }
}

impl Session {
    /// [`Session::close`] for a session from [`connect_blocking`].
    pub fn close_blocking(mut self, reason: &str) {
        if let Some(rt) = self.runtime.take() {
            rt.block_on(self.close(reason));
            rt.shutdown_background();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// What a headless run measured: the session's own figures, and the transport's.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// What the session measured (ticks, prediction, snapshots lost, the last state, ...).
    pub stats: ClientStats,
    /// Round-trip time samples, milliseconds (one per update that took a snapshot).
    pub rtt_ms: Vec<f64>,
    /// Bytes received per second (UDP, all of QUIC).
    pub down_bytes_per_s: f64,
    /// Bytes sent per second.
    pub up_bytes_per_s: f64,
    /// UDP datagrams received per second (snapshots, and packets of QUIC's own).
    pub down_datagrams_per_s: f64,
    /// UDP datagrams sent per second.
    pub up_datagrams_per_s: f64,
    /// The protocol's datagram bytes received per second (snapshots: what QUIC carries,
    /// not its headers, tags and acknowledgements).
    pub down_payload_bytes_per_s: f64,
    /// Why the server ended the session, if it did (kick or shutdown).
    pub ended_by_server: Option<String>,
    /// Whether the server kicked this client.
    pub kicked: bool,
    /// Whether the session ended because the server went away or shut down (connecting
    /// again may work).
    pub lost: bool,
    /// Units between where the server first and last held this player.
    pub moved: f64,
    /// Snapshots taken per second while it was followed.
    pub snapshots_per_s: f64,
    /// Seconds from the start until the session ended.
    pub ended_after: f64,
}

impl RunReport {
    /// The `p`-th percentile of the RTT samples (milliseconds).
    pub fn rtt_percentile(&self, p: f64) -> f64 {
        percentile(&mut self.rtt_ms.clone(), p)
    }

    /// The one-line JSON summary `expel connect` and the play example print.
    pub fn summary_line(&self) -> String {
        serde_json::json!({
            "ticks": self.stats.ticks,
            "snapshots": self.stats.predict.snapshots,
            "snapshots_per_s": self.snapshots_per_s,
            "corrections": self.stats.predict.corrections,
            "unexplained_corrections": self.stats.unexplained_corrections,
            "max_correction": self.stats.predict.max_correction,
            "snapshots_lost": self.stats.snapshots_lost,
            "inputs_missed": self.stats.inputs_missed,
            "moved": self.moved,
            "rtt_ms_p50": self.rtt_percentile(0.5),
            "rtt_ms_p99": self.rtt_percentile(0.99),
            "down_bytes_per_s": self.down_bytes_per_s,
            "up_bytes_per_s": self.up_bytes_per_s,
        })
        .to_string()
    }
}

/// Follows a session for its report: a round-trip sample per snapshot taken, and where
/// the server first held our player.
pub struct Recorder {
    rtt_ms: Vec<f64>,
    /// Snapshots taken when it started, and since.
    began_with: u64,
    snapshots: u64,
    /// The protocol's bytes received when it started.
    payload_in: u64,
    first: Option<PlayerState>,
}

impl Recorder {
    /// Starts following `s`.
    pub fn new(s: &Session) -> Recorder {
        Recorder::of(s.stats())
    }

    /// Starts following a protocol machine whose stats are `st` (a shell of its own).
    pub fn of(st: &ClientStats) -> Recorder {
        Recorder {
            rtt_ms: Vec::new(),
            began_with: st.predict.snapshots,
            snapshots: st.predict.snapshots,
            payload_in: st.bytes_in,
            first: st.final_state,
        }
    }

    /// Takes what the last [`Session::update`] brought.
    pub fn update(&mut self, s: &Session) {
        self.take(s.stats(), s.conn.rtt());
    }

    /// Takes what the machine's last update brought, when the transport's round trip is
    /// `rtt`.
    pub fn take(&mut self, st: &ClientStats, rtt: Duration) {
        if st.predict.snapshots > self.snapshots {
            self.snapshots = st.predict.snapshots;
            self.rtt_ms.push(rtt.as_secs_f64() * 1000.0);
        }
        if self.first.is_none() {
            self.first = st.final_state;
        }
    }

    /// The report of the session since `started`, when the transport stood at `t0`.
    pub fn finish(self, s: &Session, started: Instant, t0: &quinn::ConnectionStats) -> RunReport {
        self.report(s.stats(), s.status(), started, t0, &s.transport())
    }

    /// [`Recorder::finish`] from the machine's stats and status and the transport's
    /// stats then (`t`) and when it started (`t0`).
    pub fn report(
        self,
        st: &ClientStats,
        status: &Status,
        started: Instant,
        t0: &quinn::ConnectionStats,
        t: &quinn::ConnectionStats,
    ) -> RunReport {
        let st = st.clone();
        let ended_after = started.elapsed().as_secs_f64();
        let secs = ended_after.max(1e-9);
        let (ended_by_server, kicked, lost) = match status {
            Status::Ended(e) => (
                e.by_server().then(|| e.reason().to_string()),
                matches!(e, End::Kicked(_)),
                e.worth_reconnecting(),
            ),
            _ => (None, false, false),
        };
        RunReport {
            rtt_ms: self.rtt_ms,
            down_bytes_per_s: (t.udp_rx.bytes - t0.udp_rx.bytes) as f64 / secs,
            up_bytes_per_s: (t.udp_tx.bytes - t0.udp_tx.bytes) as f64 / secs,
            down_datagrams_per_s: (t.udp_rx.datagrams - t0.udp_rx.datagrams) as f64 / secs,
            up_datagrams_per_s: (t.udp_tx.datagrams - t0.udp_tx.datagrams) as f64 / secs,
            down_payload_bytes_per_s: (st.bytes_in - self.payload_in) as f64 / secs,
            ended_by_server,
            kicked,
            lost,
            snapshots_per_s: (st.predict.snapshots - self.began_with) as f64 / secs,
            moved: match (self.first, st.final_state) {
                (Some(a), Some(b)) => (b.origin() - a.origin()).length(),
                _ => 0.0,
            },
            ended_after,
            stats: st,
        }
    }
}

/// The `p`-th percentile (0..=1, nearest rank) of `v`, sorting it; 0 when empty.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// How to run headless.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Stop after this many seconds.
    pub seconds: f64,
    /// Datagram conditions.
    pub link: LinkConditioner,
    /// Ticks the client stays ahead of the server beyond the path's delay.
    pub buffer_ticks: f64,
    /// Seed of the conditioner's randomness.
    pub seed: u64,
    /// Plays light: commands and snapshots, no prediction (load tests).
    pub light: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seconds: 10.0,
            link: LinkConditioner::default(),
            buffer_ticks: 2.0,
            seed: 1,
            light: false,
        }
    }
}

/// A headless player's commands: before each tick, the driver's command for it (the
/// driver returns `None` when it has no more); after that the last one, for a second so
/// the server catches up.
pub struct Script<D> {
    driver: D,
    /// When the driver ran out.
    done: Option<Instant>,
}

impl<D: FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>> Script<D> {
    /// Commands from `driver` (tick, our player) until it returns `None`.
    pub fn new(driver: D) -> Script<D> {
        Script { driver, done: None }
    }

    /// Whether the driver ran out long enough ago: time to say goodbye.
    pub fn over(&self, now: Instant) -> bool {
        self.done
            .is_some_and(|d| now.saturating_duration_since(d) > Duration::from_secs(1))
    }

    /// The command for `tick` (our player predicted so far: `state`), asked just before
    /// it runs; `None` once the driver ran out (the last one is held).
    pub fn command(
        &mut self,
        tick: u64,
        state: Option<&PlayerState>,
        now: Instant,
    ) -> Option<MoveCommand> {
        if self.done.is_some() {
            return None;
        }
        let next = (self.driver)(tick, state);
        if next.is_none() {
            self.done = Some(now);
        }
        next
    }
}

/// Plays headless: before each tick asks `driver` for the command (it returns `None`
/// when it has no more), then keeps the last one for a second so the server catches up,
/// and says goodbye.
pub async fn run(
    mut s: Session,
    driver: impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    opts: RunOptions,
) -> Result<RunReport, ClientError> {
    s.set_link(opts.link, opts.seed);
    s.set_buffer_ticks(opts.buffer_ticks);
    s.set_light(opts.light);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds.max(0.0));
    let stats0 = s.transport();
    let mut script = Script::new(driver);
    let mut recorder = Recorder::new(&s);
    loop {
        let now = Instant::now();
        if now >= deadline || script.over(now) {
            break;
        }
        if let Status::Ended(_) = s.status() {
            break;
        }
        s.update_with(now, &mut |tick, st| script.command(tick, st, now));
        recorder.update(&s);
        let wake = s
            .next_wake()
            .unwrap_or(now + Duration::from_millis(5))
            .min(deadline);
        s.wait(wake).await;
    }
    let report = recorder.finish(&s, started, &stats0);
    s.close("done").await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(code: quinn::TransportErrorCode) -> quinn::ConnectionError {
        quinn::ConnectionError::ConnectionClosed(quinn::ConnectionClose {
            error_code: code,
            frame_type: None,
            reason: bytes::Bytes::new(),
        })
    }

    #[test]
    fn a_refusal_at_the_door_reads_as_full_for_load_and_is_worth_another_try() {
        let (code, why) = close_reason(&closed(quinn::TransportErrorCode::CONNECTION_REFUSED));
        assert_eq!((code, why.as_str()), (None, REFUSED_AT_THE_DOOR));
        assert!(ClientError::Refused(why).is_transient());
        let (_, other) = close_reason(&closed(quinn::TransportErrorCode::PROTOCOL_VIOLATION));
        assert!(!other.contains("full"), "{other}");
    }
}
