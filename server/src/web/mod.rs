//! The browser's door: WebTransport sessions (HTTP/3 over QUIC, by `wtransport` on
//! quinn) beside the native QUIC clients, and the page that plays through them.
//!
//! A session is a player like any other: its control stream (the one bidirectional
//! stream the page opens) and its datagrams go to the same protocol machine as a native
//! connection's, as the same `Up`s, and the machine's outputs come back as the same
//! `Down`s; tokens, validation, limits and codes are the machine's, so they are the
//! same on both doors. The door runs on a thread of its own with its own runtime, like an
//! I/O thread, and its connection ids carry `WEB_IDS` so the machine's outputs find it.
//!
//! What the door bounds itself: attempts by the server's admission (in all and per
//! address, as the QUIC door), the handshake and the control stream's arrival by the
//! handshake timeout, each session's datagrams by a rate, each control write by the
//! write timeout and the map by its transfer deadline, the streams a browser may open.
//! Every session is a task of a [`JoinSet`]: one that panics is counted and ends as a
//! closed connection, never the door.

mod page;
mod session;

pub(crate) use page::door_json;
pub use page::WebPage;

use crate::admission::Decision;
use crate::io::{Down, Slot, Wake, WEB_IDS};
use crate::quic::{Up, Waker};
use crate::Shared;
use expel_protocol::server::{ConnId, Output};
use session::{Session, ToSession};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use wtransport::{Endpoint, Identity, ServerConfig as WtConfig};

/// The path a page's session asks for.
pub const SESSION_PATH: &str = "/expel";
/// What one session's queue from the door holds at most: a tick's outputs for one
/// player are a few; past it the session is too far behind and is closed.
const SESSION_QUEUE: usize = 1024;
/// How long the development certificate is good for: browsers pin a certificate by its
/// hash only if it is valid for at most 14 days.
pub const DEV_CERT_DAYS: u32 = 14;

/// The browser's door: where it listens and with which certificate.
#[derive(Clone, Debug)]
pub struct WebConfig {
    /// The page's address (TCP) and the WebTransport sessions' (UDP, same port).
    pub addr: SocketAddr,
    /// The certificate sessions are served with.
    pub certificate: WebCertificate,
    /// What the page serves.
    pub page: WebPage,
}

/// The certificate of the browser's door.
#[derive(Clone, Debug)]
pub enum WebCertificate {
    /// Made at start: self-signed, ECDSA P-256, valid for [`DEV_CERT_DAYS`] days, for
    /// `localhost` and the door's address. The page pins it by its SHA-256 hash
    /// (`serverCertificateHashes`), which it reads from the door. A server that runs
    /// longer than that must be restarted (or given a real certificate).
    Development,
    /// The operator's certificate chain and key (PEM files), which browsers check as
    /// they check any site's; the page is then served over HTTPS with it.
    Files {
        /// The certificate chain.
        chain: PathBuf,
        /// The private key.
        key: PathBuf,
    },
}

/// Why the browser's door did not open.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The certificate could not be made or read.
    #[error("the web door's certificate: {0}")]
    Certificate(String),
    /// The WebTransport socket could not be bound.
    #[error("binding the web door's WebTransport socket on {addr}: {source}")]
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The door once bound: where sessions go, and the certificate's hash for pinning.
pub(crate) struct Bound {
    /// The endpoint's settings, its socket bound.
    config: WtConfig,
    pub(crate) addr: SocketAddr,
    /// SHA-256 of the leaf certificate, hex (what a page pins).
    pub(crate) cert_hash: String,
    pub(crate) development: bool,
    /// The page's TLS, with the operator's certificate (none: plain HTTP, where the
    /// development certificate serves only pages from localhost).
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Bound {
    /// The page's address.
    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/", self.addr)
    }
}

/// The page's HTTPS settings with `identity`'s certificate and key.
fn page_tls(identity: &Identity) -> Result<tokio_rustls::TlsAcceptor, WebError> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let chain: Vec<CertificateDer<'static>> = identity
        .certificate_chain()
        .as_slice()
        .iter()
        .map(|c| CertificateDer::from(c.der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        identity.private_key().secret_der().to_vec(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| WebError::Certificate(format!("the page's TLS: {e}")))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// Makes the certificate and binds the WebTransport socket. Needs a Tokio runtime.
pub(crate) async fn bind(cfg: &WebConfig) -> Result<Bound, WebError> {
    let (identity, development) = match &cfg.certificate {
        WebCertificate::Development => {
            let ip = cfg.addr.ip().to_string();
            let names = [
                "localhost".to_string(),
                "127.0.0.1".into(),
                "::1".into(),
                ip,
            ];
            let id = Identity::self_signed_builder()
                .subject_alt_names(names)
                .from_now_utc()
                .validity_days(DEV_CERT_DAYS)
                .build()
                .map_err(|e| WebError::Certificate(e.to_string()))?;
            (id, true)
        }
        WebCertificate::Files { chain, key } => {
            let id = Identity::load_pemfiles(chain, key).await.map_err(|e| {
                WebError::Certificate(format!("{} and {}: {e}", chain.display(), key.display()))
            })?;
            (id, false)
        }
    };
    let tls = if development {
        None
    } else {
        Some(page_tls(&identity)?)
    };
    let cert_hash = identity
        .certificate_chain()
        .as_slice()
        .first()
        .map(|c| hex::encode(c.hash().as_ref()))
        .ok_or_else(|| WebError::Certificate("the chain is empty".into()))?;
    // The socket is bound here, so a taken port fails the start; the endpoint is made on
    // the door's own thread, where its driver and every session then run.
    let bind_err = |source| WebError::Bind {
        addr: cfg.addr,
        source,
    };
    let socket = std::net::UdpSocket::bind(cfg.addr).map_err(bind_err)?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    let addr = socket.local_addr().map_err(bind_err)?;
    let config = WtConfig::builder()
        .with_bind_socket(socket)
        .with_custom_transport(identity, transport())
        .build();
    Ok(Bound {
        config,
        addr,
        cert_hash,
        development,
        tls,
    })
}

/// QUIC's settings for browser sessions: the streams HTTP/3 needs (the request's and our
/// control stream; the browser's control and QPACK streams) and few more, a bounded
/// datagram buffer, and an idle limit like the native door's.
fn transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(4u32.into())
        .max_concurrent_uni_streams(8u32.into())
        .datagram_receive_buffer_size(Some(64 * 1024))
        .datagram_send_buffer_size(256 * 1024)
        .keep_alive_interval(Some(Duration::from_secs(2)))
        .mtu_discovery_config(expel_quic::mtu_discovery());
    if let Ok(idle) = quinn::IdleTimeout::try_from(Duration::from_secs(10)) {
        t.max_idle_timeout(Some(idle));
    }
    t
}

/// Where a session hands the machine what it did: the door's list, and the machine's
/// wake-up for anything that should not wait for its tick.
#[derive(Clone)]
pub(crate) struct UpSink {
    up: Arc<Mutex<Vec<Up>>>,
    woken: Arc<AtomicBool>,
    wake: Sender<Wake>,
}

impl UpSink {
    pub(crate) fn push(&self, u: Up) {
        let urgent = u.urgent();
        self.up.lock().unwrap_or_else(|e| e.into_inner()).push(u);
        if urgent && !self.woken.swap(true, Relaxed) {
            let _ = self.wake.send(Wake::Up);
        }
    }
}

/// Starts the door's thread. `index` is its place after the I/O threads (how it names
/// itself when it ends).
pub(crate) fn start(
    bound: Bound,
    shared: &Arc<Shared>,
    wake: &Sender<Wake>,
    woken: Arc<AtomicBool>,
    index: usize,
) -> std::io::Result<Slot> {
    let (down_tx, down_rx) = std::sync::mpsc::channel();
    let up = Arc::new(Mutex::new(Vec::new()));
    let notify = Arc::new(Notify::new());
    let schedstat = Arc::new(OnceLock::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let door = Door {
        shared: shared.clone(),
        down: down_rx,
        notify: notify.clone(),
        sink: UpSink {
            up: up.clone(),
            woken,
            wake: wake.clone(),
        },
        schedstat: schedstat.clone(),
    };
    let wake = wake.clone();
    let thread = std::thread::Builder::new()
        .name("expel-web".into())
        .spawn(move || {
            let why = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.block_on(door.run(bound.config))
            }))
            .unwrap_or_else(|_| Some("the web door panicked".into()));
            let _ = wake.send(Wake::Ended { index, why });
        })?;
    Ok(Slot {
        down: down_tx,
        waker: Waker {
            thread: thread.thread().clone(),
            notify,
        },
        up,
        schedstat,
        thread,
    })
}

/// The door's thread: accepts sessions, routes the machine's outputs to them, and
/// supervises their tasks.
struct Door {
    shared: Arc<Shared>,
    down: Receiver<Vec<Down>>,
    notify: Arc<Notify>,
    sink: UpSink,
    schedstat: Arc<OnceLock<String>>,
}

/// The door's record of one session task.
struct Seat {
    to: mpsc::Sender<ToSession>,
    /// Whether the machine was told it connected (and must be told it closed).
    told: Arc<AtomicBool>,
}

impl Door {
    async fn run(self, config: WtConfig) -> Option<String> {
        if let Some(me) = crate::meter::thread_schedstat() {
            let _ = self.schedstat.set(me);
        }
        let endpoint = match Endpoint::server(config) {
            Ok(e) => e,
            Err(e) => return Some(format!("the web door's endpoint failed: {e}")),
        };
        let m = &self.shared.metrics;
        let mut seats: BTreeMap<ConnId, Seat> = BTreeMap::new();
        let mut tasks: JoinSet<ConnId> = JoinSet::new();
        let mut task_ids = BTreeMap::new();
        let mut next: ConnId = 1;
        let mut stop: Option<(String, Instant)> = None;
        loop {
            // The machine's batches first: they are what is waiting to go out.
            loop {
                match self.down.try_recv() {
                    Ok(batch) => {
                        for d in batch {
                            if let Some(s) = route(&mut seats, d) {
                                stop = Some(s);
                            }
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stop.get_or_insert(("server stopping".into(), Instant::now()));
                        break;
                    }
                }
            }
            if let Some((why, until)) = &stop {
                if seats.is_empty() || Instant::now() >= *until {
                    endpoint.close(0u32.into(), why.as_bytes());
                    tasks.shutdown().await;
                    for (conn, seat) in std::mem::take(&mut seats) {
                        closed(&self.sink, conn, &seat, why);
                    }
                    return None;
                }
            }
            let accepting = stop.is_none();
            let until = stop.as_ref().map(|(_, u)| *u);
            tokio::select! {
                biased;
                () = self.notify.notified() => {}
                Some(done) = tasks.join_next_with_id() => {
                    let (conn, panicked) = match done {
                        Ok((id, conn)) => { task_ids.remove(&id); (conn, false) }
                        Err(e) => (task_ids.remove(&e.id()).unwrap_or(0), e.is_panic()),
                    };
                    if let Some(seat) = seats.remove(&conn) {
                        if panicked {
                            warn!(conn, "a web session's task panicked; its player is dropped");
                            closed(&self.sink, conn, &seat, "the session's task failed");
                        }
                    }
                    m.web_open.set(seats.len() as u64);
                }
                incoming = endpoint.accept(), if accepting => {
                    let from = incoming.remote_address();
                    let validated = incoming.remote_address_validated();
                    let (decision, pending) = if m.over_load(self.shared.cfg.settings.max_players as u64) {
                        (Decision::RefuseLoad, None)
                    } else {
                        self.shared.admission.decide(from.ip(), validated)
                    };
                    m.incoming(decision);
                    let pending = match (decision, pending) {
                        (Decision::Accept, Some(p)) => p,
                        // Stateless: the peer must echo the token from its address (never
                        // asked of an address already validated).
                        (Decision::Retry, _) if !validated => {
                            incoming.retry();
                            continue;
                        }
                        _ => {
                            debug!(%from, outcome = decision.label(), "web session refused");
                            m.web_refused.inc();
                            incoming.refuse();
                            continue;
                        }
                    };
                    m.pending.set(self.shared.admission.pending() as u64);
                    let conn = WEB_IDS | next;
                    next += 1;
                    let (to, rx) = mpsc::channel(SESSION_QUEUE);
                    let told = Arc::new(AtomicBool::new(false));
                    let session = Session::new(conn, &self.shared, self.sink.clone(), told.clone(), pending);
                    let h = tasks.spawn(async move {
                        session.run(incoming, rx).await;
                        conn
                    });
                    task_ids.insert(h.id(), conn);
                    seats.insert(conn, Seat { to, told });
                    m.web_open.set(seats.len() as u64);
                }
                () = sleep_until(until) => {}
            }
        }
    }
}

/// Sleeps until `t`, or forever without one.
async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// The machine is told a session is gone, once, if it was told it connected.
fn closed(sink: &UpSink, conn: ConnId, seat: &Seat, why: &str) {
    if seat.told.swap(false, Relaxed) {
        sink.push(Up::Closed {
            conn,
            reason: why.to_string(),
        });
    }
}

/// Hands one of the machine's outputs to its session; returns the stop, when it is one.
fn route(seats: &mut BTreeMap<ConnId, Seat>, d: Down) -> Option<(String, Instant)> {
    let (conn, msg) = match d {
        Down::Output(out, at) => (out.conn(), ToSession::Output(out, at)),
        Down::Joined { conn } => (conn, ToSession::Joined),
        Down::Stop { reason, until } => {
            info!("web door: taking nobody more");
            return Some((reason, until));
        }
    };
    let seat = seats.get(&conn)?;
    let closing = matches!(msg, ToSession::Output(Output::Close { .. }, _));
    // A session whose queue is full is far behind the machine: it is dropped (its task
    // ends when its sender goes) rather than let the queue grow.
    if seat.to.try_send(msg).is_err() && !closing {
        debug!(conn, "web session too far behind; dropped");
        seats.remove(&conn);
    }
    None
}
