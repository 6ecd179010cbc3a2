//! The server's HTTP/1.1 endpoint, on hyper (GET only, one request per connection):
//! Prometheus metrics, health, the flagged players, and the live view (a page, the map,
//! and a server-sent events stream of the world at about 10 Hz).
//!
//! Everything but the bare health answers is the operator's: the live view shows every
//! player through every wall, so with an operator token set every other path asks for it
//! ([`OperatorAuth`]); without one the endpoint may only listen on loopback (checked
//! where the server starts).
//!
//! hyper speaks HTTP; the limits are this module's: connections bounded in all and per
//! address, a deadline on the request head, viewers bounded and dropped when they stop
//! reading.

use crate::admission::{Held, PerAddress};
use crate::live::Live;
use crate::metrics::{Metrics, CLASSIC, OPENMETRICS};
use crate::replay_view::ReplayView;
use crate::web::WebPage;
use base64::Engine as _;
use bytes::Bytes;
use expel_protocol::backoff::Backoff;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Semaphore};
use tracing::warn;

/// A live viewer's socket send buffer, bytes (the kernel doubles it): small, so a viewer
/// that stops reading fills it soon rather than after the kernel has queued megabytes.
const LIVE_SEND_BUFFER: usize = 8 * 1024;
/// How long a viewer may leave the newest frame unread (hyper stops taking frames from
/// the stream while the viewer's socket is full): past it the viewer is not reading.
const LIVE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// HTTP connections open at once; the next waits in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// HTTP connections open at once from one IP address; more are closed at once.
const PER_ADDRESS: usize = 32;
/// How long a request head may take to arrive (from the connection's start).
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes hyper buffers of a request (its smallest setting): a head past it is refused.
const MAX_BUFFER: usize = 8192;
/// Pauses after a failed accept (the descriptor limit, say): the loop backs off from
/// 10 ms, doubling to 1 s, instead of spinning on an error that persists.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

type Body = BoxBody<Bytes, Infallible>;

/// What an HTTP listener answers: the operator's endpoint, or the browser's page.
pub(crate) enum Site {
    Operator {
        live: Arc<Live>,
        auth: Arc<OperatorAuth>,
    },
    Page {
        page: WebPage,
        /// `door.json` (see [`crate::web::door_json`]).
        door: String,
    },
    /// A replay in the live view's page (on loopback: see [`crate::replay_view`]).
    Replay { view: Arc<ReplayView> },
}

/// Serves until the listener task is dropped. Connections are bounded in total and per
/// address; an accept error backs off.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    site: Arc<Site>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let open = PerAddress::new();
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, 1);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (sock, from) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                metrics.http_accept_errors.inc();
                let pause = backoff.next_delay();
                warn!(error = %e, pause_ms = pause.as_millis() as u64, "http accept failed");
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        backoff.reset();
        // The total is the semaphore's (past it, connections wait in the backlog).
        let Some(held) = open.take(from.ip(), PER_ADDRESS, usize::MAX) else {
            metrics.http_refused.inc();
            continue; // dropped: closed at once
        };
        metrics.http_connections.inc();
        let (arm, armed) = oneshot::channel();
        let cx = Arc::new(Cx {
            sock: Shared(Arc::new(sock)),
            metrics: metrics.clone(),
            site: site.clone(),
            from: from.ip(),
            watch: Mutex::new(Some(arm)),
        });
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(cx, armed).await,
                Some(tls) => tls_connection(cx, tls).await,
            }
            drop((permit, held));
        });
    }
}

/// What one connection's request is answered from.
struct Cx {
    sock: Shared,
    metrics: Arc<Metrics>,
    site: Arc<Site>,
    from: IpAddr,
    /// Where a live stream hands its [`Watch`] to the connection's watchdog.
    watch: Mutex<Option<oneshot::Sender<Watch>>>,
}

/// What the watchdog of a live stream reads: the frames as published, and when the
/// stream last took one.
struct Watch {
    frames: watch::Receiver<Arc<str>>,
    taken: Arc<Mutex<Instant>>,
}

/// One connection: one request, answered by hyper, and closed. A live stream's viewer
/// that leaves the newest frame unread too long is cut off.
async fn connection(cx: Arc<Cx>, armed: oneshot::Receiver<Watch>) {
    let service = hyper::service::service_fn({
        let cx = cx.clone();
        move |req| answered(cx.clone(), req)
    });
    let conn = http1().serve_connection(TokioIo::new(cx.sock.clone()), service);
    tokio::select! {
        _ = conn => {}
        () = stalled(armed) => {
            cx.metrics.live_dropped.inc();
        }
    }
}

/// One connection over TLS (the browser's page with the operator's certificate): the
/// handshake within the request head's deadline, then one request, answered by hyper.
async fn tls_connection(cx: Arc<Cx>, tls: tokio_rustls::TlsAcceptor) {
    let Ok(Ok(stream)) = tokio::time::timeout(HEAD_TIMEOUT, tls.accept(cx.sock.clone())).await
    else {
        return;
    };
    let service = hyper::service::service_fn({
        let cx = cx.clone();
        move |req| answered(cx.clone(), req)
    });
    let _ = http1()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// One request's answer, as hyper's service gives it.
async fn answered(
    cx: Arc<Cx>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(answer(&req, &cx))
}

/// hyper's HTTP/1.1 settings for every connection: the head's deadline, the smallest
/// buffer, one request.
fn http1() -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_BUFFER)
        .keep_alive(false);
    b
}

/// Returns once the live stream armed through `armed` has left a published frame
/// untaken past [`LIVE_WRITE_TIMEOUT`]; never for a connection without one.
async fn stalled(armed: oneshot::Receiver<Watch>) {
    let Ok(mut w) = armed.await else {
        return std::future::pending().await;
    };
    loop {
        if w.frames.changed().await.is_err() {
            return std::future::pending().await; // the server stopped: hyper ends it
        }
        let taken = w.taken.lock().map_or(Instant::now(), |t| *t);
        if taken.elapsed() > LIVE_WRITE_TIMEOUT {
            return;
        }
    }
}

/// The answer to one request.
fn answer(req: &Request<hyper::body::Incoming>, cx: &Cx) -> Response<Body> {
    match &*cx.site {
        Site::Operator { live, auth } => operator(req, cx, live, auth),
        Site::Page { page, door } => page_answer(req, page, door),
        Site::Replay { view } => replay_answer(req, view),
    }
}

/// A replay's view: the live view's page, the map, the recording's summary and its
/// frames by range (`/frames.json?from=I&count=N`).
fn replay_answer(req: &Request<hyper::body::Incoming>, view: &ReplayView) -> Response<Body> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    let ok = StatusCode::OK;
    match req.uri().path() {
        "/" | "/index.html" => text(ok, "text/html; charset=utf-8", crate::live::PAGE),
        "/map.json" => text(ok, "application/json", view.map_json.clone()),
        "/recording.json" => text(ok, "application/json", view.summary.clone()),
        "/frames.json" => {
            let q = req.uri().query().unwrap_or("");
            let arg = |name: &str| {
                (q.split('&'))
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.parse::<usize>().ok())
            };
            let (from, count) = (arg("from").unwrap_or(0), arg("count").unwrap_or(100));
            text(ok, "application/json", view.frames_json(from, count))
        }
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// The browser's page: its files and `door.json`, GET only, to anyone.
fn page_answer(req: &Request<hyper::body::Incoming>, page: &WebPage, door: &str) -> Response<Body> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/door.json" => text(StatusCode::OK, "application/json", door.to_string()),
        path => match page.get(path) {
            Some(f) => text(StatusCode::OK, f.content_type, f.body.clone()),
            None => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        },
    }
}

/// The operator's endpoint.
fn operator(
    req: &Request<hyper::body::Incoming>,
    cx: &Cx,
    live: &Live,
    auth: &OperatorAuth,
) -> Response<Body> {
    let m = &cx.metrics;
    let path = req.uri().path();
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if !public(path) && !auth.allows(header(AUTHORIZATION)) {
        m.http_unauthorized.inc();
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "text/plain",
            "operator token required (Authorization: Bearer TOKEN)\n",
        );
        for challenge in [
            "Bearer realm=\"expel operator\"",
            "Basic realm=\"expel operator\", charset=\"UTF-8\"",
        ] {
            r.headers_mut().append(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        return r;
    }
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    let ok = StatusCode::OK;
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    match path {
        "/live" => live_stream(cx, live),
        "/metrics"
            if header(ACCEPT).is_some_and(|a| a.contains("application/openmetrics-text")) =>
        {
            text(ok, OPENMETRICS, m.render())
        }
        "/metrics" => text(ok, CLASSIC, m.render_classic()),
        "/healthz" if m.tick_healthy() => text(ok, "text/plain", "ok\n"),
        "/healthz" => text(unavailable, "text/plain", "tick stalled\n"),
        "/readyz" if m.ready() => text(ok, "text/plain", "ready\n"),
        "/readyz" => text(unavailable, "text/plain", "not ready\n"),
        "/players.json" => text(ok, "application/json", m.flagged_json()),
        "/game.json" => text(ok, "application/json", m.game()),
        "/map.json" => text(ok, "application/json", live.map_json.clone()),
        "/" | "/index.html" => text(ok, "text/html; charset=utf-8", crate::live::PAGE),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// A whole response, never cached.
fn text(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    response(status, ctype, Full::new(body.into()).boxed())
}

fn response(status: StatusCode, ctype: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Who may read the operator's paths: with a token, only a request that carries it
/// (`Authorization: Bearer TOKEN`, or HTTP Basic with the token as the password, which
/// a browser asks for and then sends with the live view's own requests); without one,
/// anyone who can reach the endpoint, which the server then binds to loopback only.
#[derive(Debug, Default)]
pub(crate) struct OperatorAuth {
    /// SHA-256 of the token: compared digest to digest, so the time a comparison takes
    /// says nothing of the token.
    token: Option<[u8; 32]>,
}

impl OperatorAuth {
    /// Requests must carry `token`, if given.
    pub(crate) fn new(token: Option<&str>) -> OperatorAuth {
        OperatorAuth {
            token: token.map(digest),
        }
    }

    /// Whether a request with this `Authorization` value may read the operator's paths.
    fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let Some((scheme, value)) = authorization.and_then(|a| a.trim().split_once(' ')) else {
            return false;
        };
        let given = if scheme.eq_ignore_ascii_case("bearer") {
            value.trim().to_string()
        } else if scheme.eq_ignore_ascii_case("basic") {
            let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(value.trim()) else {
                return false;
            };
            let text = String::from_utf8_lossy(&raw);
            match text.split_once(':') {
                Some((_user, password)) => password.to_string(),
                None => return false,
            }
        } else {
            return false;
        };
        digest(&given) == *want
    }
}

fn digest(token: &str) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// The paths anyone may read: health answers that carry no data.
fn public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

/// Server-sent events: every frame the tick loop publishes, until the viewer goes away
/// or the server stops. Viewers are bounded in all and per address; a slow one skips
/// frames (only the newest is kept), so it never holds memory or the tick; one that does
/// not read at all loses its seat (see [`stalled`]).
fn live_stream(cx: &Cx, live: &Live) -> Response<Body> {
    let Some(seat) = live.seat(cx.from) else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "too many viewers\n",
        );
    };
    let _ = socket2::SockRef::from(&*cx.sock.0).set_send_buffer_size(LIVE_SEND_BUFFER);
    let taken = Arc::new(Mutex::new(Instant::now()));
    let arm = cx.watch.lock().ok().and_then(|mut w| w.take());
    if let Some(arm) = arm {
        let _ = arm.send(Watch {
            frames: live.subscribe(),
            taken: taken.clone(),
        });
    }
    struct Viewer {
        frames: watch::Receiver<Arc<str>>,
        taken: Arc<Mutex<Instant>>,
        first: bool,
        _seat: Held,
    }
    let viewer = Viewer {
        frames: live.subscribe(),
        taken,
        first: true,
        _seat: seat,
    };
    let events = futures_util::stream::unfold(viewer, |mut v| async move {
        loop {
            // The current frame first, then each newer one.
            if !std::mem::take(&mut v.first) && v.frames.changed().await.is_err() {
                return None; // the server stopped
            }
            let frame = v.frames.borrow_and_update().clone();
            if let Ok(mut t) = v.taken.lock() {
                *t = Instant::now();
            }
            if !frame.is_empty() {
                let event = Bytes::from(format!("data: {frame}\n\n"));
                return Some((Ok(Frame::data(event)), v));
            }
        }
    });
    response(
        StatusCode::OK,
        "text/event-stream",
        BodyExt::boxed(StreamBody::new(events)),
    )
}

/// A connection's socket, shared: hyper reads and writes it, and a live stream shrinks its
/// send buffer once the request shows it is one (hyper owns what it serves, so the
/// stream needs a handle of its own).
#[derive(Clone)]
struct Shared(Arc<TcpStream>);

impl AsyncRead for Shared {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(data) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(())) // a socket holds nothing back
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}
