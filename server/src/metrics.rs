//! Prometheus text metrics and the health endpoints, served over plain HTTP/1.1 by a small
//! listener (GET only, one request per connection).

use expel_shared::validate::ViolationKind;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Upper bounds (seconds) of the tick duration histogram's buckets.
const TICK_BUCKETS: [f64; 10] = [
    0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128,
];

/// Why connections were refused, as label values.
pub const REFUSALS: [&str; 8] = [
    "version",
    "token_malformed",
    "token_forged",
    "token_expired",
    "token_replayed",
    "full",
    "player_in_use",
    "hello_timeout",
];

/// The server's counters. Updated with relaxed atomics from any task.
#[derive(Default, Debug)]
pub struct Metrics {
    /// Players in the world.
    pub players: AtomicU64,
    /// Ticks stepped.
    pub ticks: AtomicU64,
    /// Tick lengths over the budget (the loop fell behind).
    pub overruns: AtomicU64,
    /// Datagrams received.
    pub datagrams_in: AtomicU64,
    /// Datagrams sent.
    pub datagrams_out: AtomicU64,
    /// Datagram bytes received.
    pub bytes_in: AtomicU64,
    /// Datagram bytes sent.
    pub bytes_out: AtomicU64,
    /// Snapshots that could not be sent (no room, connection gone).
    pub snapshot_drops: AtomicU64,
    /// Commands applied on their tick.
    pub inputs_applied: AtomicU64,
    /// Ticks that passed without a joined client's command.
    pub inputs_missing: AtomicU64,
    /// Commands that arrived after their tick.
    pub inputs_late: AtomicU64,
    /// Redundant copies of commands.
    pub inputs_duplicate: AtomicU64,
    /// Commands stamped too far ahead.
    pub inputs_too_far_ahead: AtomicU64,
    /// Client-reported predictions that differed from the server's state, and rejected
    /// claims (corrections).
    pub corrections: AtomicU64,
    /// Trusted-client claims accepted.
    pub claims_accepted: AtomicU64,
    /// Trusted-client claims rejected (each also counted as a violation).
    pub claims_rejected: AtomicU64,
    /// Trusted-client ticks without a claim (the player held its state).
    pub claims_missing: AtomicU64,
    /// Datagrams that did not decode.
    pub malformed_datagrams: AtomicU64,
    /// Control messages that did not decode.
    pub malformed_control: AtomicU64,
    /// Connections accepted at the QUIC level.
    pub connections: AtomicU64,
    /// Handshakes that failed (wrong ALPN, TLS errors).
    pub handshake_failures: AtomicU64,
    /// Clients kicked.
    pub kicks: AtomicU64,
    /// Move-validation violations, by kind in [`ViolationKind::ALL`] order.
    pub violations: [AtomicU64; 7],
    /// Refusals by reason, in [`REFUSALS`] order.
    pub refusals: [AtomicU64; REFUSALS.len()],
    tick_hist: Mutex<([u64; TICK_BUCKETS.len()], u64, f64)>,
    /// Whether the server accepts players (false while shutting down).
    pub ready: AtomicBool,
}

impl Metrics {
    /// Counts a refusal by its label.
    pub fn refused(&self, reason: &str) {
        if let Some(i) = REFUSALS.iter().position(|r| *r == reason) {
            self.refusals[i].fetch_add(1, Relaxed);
        }
    }

    /// Records one tick's duration.
    pub fn tick(&self, seconds: f64) {
        self.ticks.fetch_add(1, Relaxed);
        if let Ok(mut h) = self.tick_hist.lock() {
            for (i, b) in TICK_BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.0[i] += 1;
                }
            }
            h.1 += 1;
            h.2 += seconds;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let mut counter = |name: &str, help: &str, v: &AtomicU64, kind: &str| {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Relaxed)
            );
        };
        counter(
            "expel_players",
            "Players in the world.",
            &self.players,
            "gauge",
        );
        counter(
            "expel_ticks_total",
            "Simulation ticks stepped.",
            &self.ticks,
            "counter",
        );
        counter(
            "expel_tick_overruns_total",
            "Ticks that took longer than the tick period.",
            &self.overruns,
            "counter",
        );
        counter(
            "expel_datagrams_in_total",
            "Datagrams received.",
            &self.datagrams_in,
            "counter",
        );
        counter(
            "expel_datagrams_out_total",
            "Datagrams sent.",
            &self.datagrams_out,
            "counter",
        );
        counter(
            "expel_bytes_in_total",
            "Datagram bytes received.",
            &self.bytes_in,
            "counter",
        );
        counter(
            "expel_bytes_out_total",
            "Datagram bytes sent.",
            &self.bytes_out,
            "counter",
        );
        counter(
            "expel_snapshot_drops_total",
            "Snapshots that could not be sent.",
            &self.snapshot_drops,
            "counter",
        );
        counter(
            "expel_inputs_applied_total",
            "Commands applied on their tick.",
            &self.inputs_applied,
            "counter",
        );
        counter(
            "expel_inputs_missing_total",
            "Ticks without the client's command (the last one repeated).",
            &self.inputs_missing,
            "counter",
        );
        counter(
            "expel_inputs_late_total",
            "Commands that arrived after their tick.",
            &self.inputs_late,
            "counter",
        );
        counter(
            "expel_inputs_duplicate_total",
            "Redundant copies of commands.",
            &self.inputs_duplicate,
            "counter",
        );
        counter(
            "expel_inputs_too_far_ahead_total",
            "Commands stamped too far ahead, refused.",
            &self.inputs_too_far_ahead,
            "counter",
        );
        counter(
            "expel_corrections_total",
            "Client predictions that differed from the server.",
            &self.corrections,
            "counter",
        );
        counter(
            "expel_claims_accepted_total",
            "Trusted-client claims accepted.",
            &self.claims_accepted,
            "counter",
        );
        counter(
            "expel_claims_rejected_total",
            "Trusted-client claims rejected and corrected.",
            &self.claims_rejected,
            "counter",
        );
        counter(
            "expel_claims_missing_total",
            "Trusted-client ticks without a claim; the player held its state.",
            &self.claims_missing,
            "counter",
        );
        counter(
            "expel_malformed_datagrams_total",
            "Datagrams that did not decode.",
            &self.malformed_datagrams,
            "counter",
        );
        counter(
            "expel_malformed_control_total",
            "Control messages that did not decode.",
            &self.malformed_control,
            "counter",
        );
        counter(
            "expel_connections_total",
            "QUIC connections accepted.",
            &self.connections,
            "counter",
        );
        counter(
            "expel_handshake_failures_total",
            "QUIC handshakes that failed.",
            &self.handshake_failures,
            "counter",
        );
        counter(
            "expel_kicks_total",
            "Clients kicked.",
            &self.kicks,
            "counter",
        );
        let _ = writeln!(o, "# HELP expel_refusals_total Connections refused, by reason.\n# TYPE expel_refusals_total counter");
        for (r, v) in REFUSALS.iter().zip(&self.refusals) {
            let _ = writeln!(
                o,
                "expel_refusals_total{{reason=\"{r}\"}} {}",
                v.load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP expel_violations_total Move-validation violations, by kind.\n# TYPE expel_violations_total counter"
        );
        for (k, v) in ViolationKind::ALL.iter().zip(&self.violations) {
            let _ = writeln!(
                o,
                "expel_violations_total{{kind=\"{}\"}} {}",
                k.name(),
                v.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP expel_tick_duration_seconds Time to step one tick and send its snapshots.\n# TYPE expel_tick_duration_seconds histogram");
        if let Ok(h) = self.tick_hist.lock() {
            for (b, c) in TICK_BUCKETS.iter().zip(h.0) {
                let _ = writeln!(o, "expel_tick_duration_seconds_bucket{{le=\"{b}\"}} {c}");
            }
            let _ = writeln!(
                o,
                "expel_tick_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                h.1
            );
            let _ = writeln!(o, "expel_tick_duration_seconds_sum {}", h.2);
            let _ = writeln!(o, "expel_tick_duration_seconds_count {}", h.1);
        }
        o
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the listener task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            // Read the request head (bounded); only the request line matters.
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
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
            .await;
            if !matches!(read, Ok(Some(()))) {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let mut parts = head.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (status, ctype, body) = match (method, path) {
                ("GET", "/metrics") => (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    m.render(),
                ),
                ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
                ("GET", "/readyz") if m.ready.load(Relaxed) => {
                    ("200 OK", "text/plain", "ready\n".to_string())
                }
                ("GET", "/readyz") => (
                    "503 Service Unavailable",
                    "text/plain",
                    "not ready\n".to_string(),
                ),
                ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET only\n".to_string(),
                ),
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
