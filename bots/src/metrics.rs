//! Reading the server's HTTP endpoint: one GET, one reader of the Prometheus text
//! exposition (a sample by name, and the series a swarm's report follows), and the tick
//! histogram's quantiles as Prometheus reads them.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A sample's value in the Prometheus text `text`: `name` with its labels, as the text
/// writes it (`expel_refusals_total{reason="full"}`).
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The server's HTTP endpoint, as its operator reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The operator token it asks for (`expel serve --operator-token`), if any.
    pub token: Option<String>,
}

impl Operator {
    /// The endpoint at `addr`, on loopback without a token.
    pub fn at(addr: SocketAddr) -> Operator {
        Operator { addr, token: None }
    }
}

/// Fetches `path` from the server's HTTP endpoint (a body of at most 16 MiB).
pub async fn http_get(to: &Operator, path: &str) -> Result<String, String> {
    let addr = to.addr;
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let auth = to
            .token
            .as_ref()
            .map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        s.take(16 << 20)
            .read_to_end(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let (head, rest) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("{addr}{path}: no HTTP response"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "{addr}{path}: {}",
                head.lines().next().unwrap_or("")
            ));
        }
        Ok(rest.to_string())
    };
    tokio::time::timeout(Duration::from_secs(10), get)
        .await
        .map_err(|_| format!("{addr}{path}: no answer within 10 s"))?
}

/// One reading of the server's metrics that the report uses.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Seconds since the swarm started.
    pub at: f64,
    /// `expel_tick_duration_seconds` buckets: (upper bound, cumulative count).
    pub buckets: Vec<(f64, f64)>,
    /// `expel_tick_duration_max_seconds`.
    pub tick_max: f64,
    /// `process_cpu_seconds_total`, if the platform reports it.
    pub cpu: Option<f64>,
    /// `expel_players`.
    pub players: f64,
    /// `expel_bytes_out_total` and `expel_bytes_in_total`.
    pub bytes_out: f64,
    /// Bytes received by the server.
    pub bytes_in: f64,
}

impl Scrape {
    /// Parses the Prometheus text exposition (only the series the report needs).
    pub fn parse(text: &str, at: f64) -> Scrape {
        let mut s = Scrape {
            at,
            ..Scrape::default()
        };
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            if let Some(le) = name
                .strip_prefix("expel_tick_duration_seconds_bucket{le=\"")
                .and_then(|r| r.strip_suffix("\"}"))
            {
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                s.buckets.push((le, v));
                continue;
            }
            match name {
                "expel_tick_duration_max_seconds" => s.tick_max = v,
                "process_cpu_seconds_total" => s.cpu = Some(v),
                "expel_players" => s.players = v,
                "expel_bytes_out_total" => s.bytes_out = v,
                "expel_bytes_in_total" => s.bytes_in = v,
                _ => {}
            }
        }
        s.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        s
    }
}

/// The `q` quantile of the ticks between two readings, as Prometheus's
/// `histogram_quantile` reads it: linear within the bucket the rank falls in.
pub fn tick_quantile(from: &Scrape, to: &Scrape, q: f64) -> Option<f64> {
    let count = |s: &Scrape, le: f64| {
        s.buckets
            .iter()
            .find(|(b, _)| *b == le)
            .map_or(0.0, |(_, c)| *c)
    };
    let deltas: Vec<(f64, f64)> = to
        .buckets
        .iter()
        .map(|(le, c)| (*le, c - count(from, *le)))
        .collect();
    let total = deltas.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for (le, c) in deltas {
        if c >= rank {
            if le.is_infinite() {
                return Some(lower.0); // beyond the last bound: the bound is all we know
            }
            let within = if c > lower.1 {
                (rank - lower.1) / (c - lower.1)
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * within);
        }
        lower = (le, c);
    }
    None
}
