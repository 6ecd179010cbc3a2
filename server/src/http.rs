//! The server's HTTP/1.1 endpoint (GET only, one request per connection): Prometheus
//! metrics, health, the flagged players, and the live view (a page, the map, and a
//! server-sent events stream of the world at about 10 Hz).

use crate::admission::PerAddress;
use crate::live::Live;
use crate::metrics::Metrics;
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
/// Longest pause after a failed accept (the descriptor limit, say): the loop backs off
/// from 10 ms, doubling, instead of spinning on an error that persists.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Serves until the listener task is dropped. Connections are bounded in total and per
/// address; an accept error backs off.
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>, live: Arc<Live>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let open = PerAddress::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (sock, from) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                metrics.http_accept_errors.fetch_add(1, Relaxed);
                warn!(error = %e, pause_ms = backoff.as_millis() as u64, "http accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        // The total is the semaphore's (past it, connections wait in the backlog).
        let Some(held) = open.take(from.ip(), PER_ADDRESS, usize::MAX) else {
            metrics.http_refused.fetch_add(1, Relaxed);
            continue; // dropped: closed at once
        };
        metrics.http_connections.fetch_add(1, Relaxed);
        let (m, live) = (metrics.clone(), live.clone());
        tokio::spawn(async move {
            request(sock, from.ip(), m, live).await;
            drop((permit, held));
        });
    }
}

/// The request line's path, once the head has arrived (within 5 s and `MAX_HEAD`).
async fn read_path(sock: &mut TcpStream) -> Option<(String, String)> {
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
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.split_whitespace();
    let method = parts.next()?.to_string();
    // The query string does not select anything.
    let path = parts.next()?.split('?').next()?.to_string();
    Some((method, path))
}

async fn request(mut sock: TcpStream, from: IpAddr, m: Arc<Metrics>, live: Arc<Live>) {
    let Some((method, path)) = read_path(&mut sock).await else {
        return;
    };
    let (status, ctype, body): (&str, &str, String) = match (method.as_str(), path.as_str()) {
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
        ("GET", "/map.json") => ("200 OK", "application/json", live.map_json.clone()),
        ("GET", "/") | ("GET", "/index.html") => (
            "200 OK",
            "text/html; charset=utf-8",
            crate::live::PAGE.to_string(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
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
        let _ = sock
            .write_all(
                format!(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return;
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
