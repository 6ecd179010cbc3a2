//! The server's HTTP/1.1 endpoint (GET only, one request per connection): Prometheus
//! metrics, health, the flagged players, and the live view (a page, the map, and a
//! server-sent events stream of the world at about 10 Hz).

use crate::live::Live;
use crate::metrics::Metrics;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of a request head read at most.
const MAX_HEAD: usize = 4096;

/// Serves until the listener task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, live: Arc<Live>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(request(sock, metrics.clone(), live.clone()));
    }
}

/// The request line's path, once the head has arrived (within 5 s and `MAX_HEAD`).
async fn read_path(sock: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut n = 0;
    tokio::time::timeout(Duration::from_secs(5), async {
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

async fn request(mut sock: TcpStream, m: Arc<Metrics>, live: Arc<Live>) {
    let Some((method, path)) = read_path(&mut sock).await else {
        return;
    };
    let (status, ctype, body): (&str, &str, String) = match (method.as_str(), path.as_str()) {
        ("GET", "/live") => return live_stream(sock, &live).await,
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            m.render(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".into()),
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
/// or the server stops. Viewers are bounded; a slow one skips frames (only the newest is
/// kept), so it never holds memory or the tick.
async fn live_stream(mut sock: TcpStream, live: &Live) {
    let Some(_seat) = live.seat() else {
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
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    if sock.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut frames = live.subscribe();
    loop {
        let frame = frames.borrow_and_update().clone();
        if !frame.is_empty() {
            let event = format!("data: {frame}\n\n");
            let write =
                tokio::time::timeout(Duration::from_secs(5), sock.write_all(event.as_bytes()));
            if !matches!(write.await, Ok(Ok(()))) {
                return;
            }
        }
        if frames.changed().await.is_err() {
            return; // the server stopped
        }
    }
}
