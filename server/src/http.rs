//! The server's HTTP/1.1 endpoint (GET only, one request per connection): Prometheus
//! metrics, health, the flagged players, and the live view (a page, the map, and a
//! server-sent events stream of the world at about 10 Hz).
//!
//! Everything but the bare health answers is the operator's: the live view shows every
//! player through every wall, so with an operator token set every other path asks for it
//! ([`OperatorAuth`]); without one the endpoint may only listen on loopback (checked
//! where the server starts).

use crate::admission::PerAddress;
use crate::live::Live;
use crate::metrics::Metrics;
use base64::Engine as _;
use expel_shared::protocol::backoff::Backoff;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::warn;

/// A live viewer's socket send buffer, bytes (the kernel doubles it).
const LIVE_SEND_BUFFER: usize = 8 * 1024;
/// How long one frame's write to a viewer may wait: past it the viewer is not reading.
const LIVE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes of a request head read at most.
const MAX_HEAD: usize = 4096;
/// HTTP connections open at once; the next waits in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// HTTP connections open at once from one IP address; more are closed at once.
const PER_ADDRESS: usize = 32;
/// How long a request head may take to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Pauses after a failed accept (the descriptor limit, say): the loop backs off from
/// 10 ms, doubling to 1 s, instead of spinning on an error that persists.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Serves until the listener task is dropped. Connections are bounded in total and per
/// address; an accept error backs off.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    live: Arc<Live>,
    auth: Arc<OperatorAuth>,
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
                metrics.http_accept_errors.fetch_add(1, Relaxed);
                let pause = backoff.next_delay();
                warn!(error = %e, pause_ms = pause.as_millis() as u64, "http accept failed");
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        backoff.reset();
        // The total is the semaphore's (past it, connections wait in the backlog).
        let Some(held) = open.take(from.ip(), PER_ADDRESS, usize::MAX) else {
            metrics.http_refused.fetch_add(1, Relaxed);
            continue; // dropped: closed at once
        };
        metrics.http_connections.fetch_add(1, Relaxed);
        let (m, live, auth) = (metrics.clone(), live.clone(), auth.clone());
        tokio::spawn(async move {
            request(sock, from.ip(), m, live, &auth).await;
            drop((permit, held));
        });
    }
}

/// What the endpoint uses of a request head.
struct Head {
    method: String,
    /// Without its query string, which selects nothing.
    path: String,
    /// The `Authorization` header's value, if any.
    authorization: Option<String>,
}

/// The request head, once it has arrived (within 5 s and `MAX_HEAD`).
async fn read_head(sock: &mut TcpStream) -> Option<Head> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut n = 0;
    tokio::time::timeout(HEAD_TIMEOUT, async {
        while n < buf.len() {
            let k = sock.read(&mut buf[n..]).await.ok()?;
            if k == 0 {
                break;
            }
            n += k;
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        Some(())
    })
    .await
    .ok()??;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    // A head cut short (no blank line within the limit) still names its path.
    req.parse(&buf[..n]).ok()?;
    let path = req.path?.split('?').next()?.to_string();
    let authorization = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Some(Head {
        method: req.method?.to_string(),
        path,
        authorization,
    })
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

async fn request(
    mut sock: TcpStream,
    from: IpAddr,
    m: Arc<Metrics>,
    live: Arc<Live>,
    auth: &OperatorAuth,
) {
    let Some(head) = read_head(&mut sock).await else {
        return;
    };
    let (method, path) = (head.method.as_str(), head.path.as_str());
    if !public(path) && !auth.allows(head.authorization.as_deref()) {
        m.http_unauthorized.fetch_add(1, Relaxed);
        let challenge = "WWW-Authenticate: Bearer realm=\"expel operator\"\r\nWWW-Authenticate: Basic realm=\"expel operator\", charset=\"UTF-8\"\r\n";
        let body = "operator token required (Authorization: Bearer TOKEN)\n";
        return respond(sock, "401 Unauthorized", challenge, "text/plain", body).await;
    }
    let (status, ctype, body): (&str, &str, String) = match (method, path) {
        ("GET", "/live") => return live_stream(sock, from, &live, &m).await,
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            m.render(),
        ),
        ("GET", "/healthz") if m.tick_healthy() => ("200 OK", "text/plain", "ok\n".into()),
        ("GET", "/healthz") => (
            "503 Service Unavailable",
            "text/plain",
            "tick stalled\n".into(),
        ),
        ("GET", "/readyz") if m.ready.load(Relaxed) => ("200 OK", "text/plain", "ready\n".into()),
        ("GET", "/readyz") => (
            "503 Service Unavailable",
            "text/plain",
            "not ready\n".into(),
        ),
        ("GET", "/players.json") => ("200 OK", "application/json", m.flagged_json()),
        ("GET", "/game.json") => ("200 OK", "application/json", m.game()),
        ("GET", "/map.json") => ("200 OK", "application/json", live.map_json.clone()),
        ("GET", "/") | ("GET", "/index.html") => (
            "200 OK",
            "text/html; charset=utf-8",
            crate::live::PAGE.to_string(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    respond(sock, status, "", ctype, &body).await;
}

/// Writes a whole response (`headers`: extra header lines, each ending in CRLF) and
/// closes.
async fn respond(mut sock: TcpStream, status: &str, headers: &str, ctype: &str, body: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// Server-sent events: every frame the tick loop publishes, until the viewer goes away
/// or the server stops. Viewers are bounded in all and per address; a slow one skips
/// frames (only the newest is kept), so it never holds memory or the tick; one that does
/// not read at all (its socket's small send buffer stays full past the write timeout)
/// loses its seat.
async fn live_stream(mut sock: TcpStream, from: IpAddr, live: &Live, m: &Metrics) {
    let Some(_seat) = live.seat(from) else {
        let body = "too many viewers\n";
        return respond(sock, "503 Service Unavailable", "", "text/plain", body).await;
    };
    // A small send buffer, so a viewer that stops reading blocks the writes soon rather
    // than after the kernel has queued megabytes for it.
    let _ = socket2::SockRef::from(&sock).set_send_buffer_size(LIVE_SEND_BUFFER);
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    if sock.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut frames = live.subscribe();
    loop {
        let frame = frames.borrow_and_update().clone();
        if !frame.is_empty() {
            let event = format!("data: {frame}\n\n");
            let write = tokio::time::timeout(LIVE_WRITE_TIMEOUT, sock.write_all(event.as_bytes()));
            match write.await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    m.live_dropped.fetch_add(1, Relaxed);
                    return;
                }
            }
        }
        if frames.changed().await.is_err() {
            return; // the server stopped
        }
    }
}
