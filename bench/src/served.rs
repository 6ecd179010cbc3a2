//! What the network benches share: `expel serve` in its own process on loopback (so its
//! CPU time is its own), its metrics, and its CPU time.
#![allow(dead_code)] // each bench uses its own part

use anyhow::{bail, Context, Result};
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running `expel serve`, stopped (SIGTERM) when dropped.
pub(crate) struct Served {
    child: Child,
    /// The QUIC address.
    pub(crate) addr: SocketAddr,
    /// The HTTP endpoint.
    pub(crate) metrics: String,
    /// The certificate's fingerprint.
    pub(crate) fingerprint: String,
    /// The browser's page, when it was asked for (`--web`).
    pub(crate) web: Option<String>,
}

impl Served {
    /// Starts the release build (or `$EXPEL_BIN`) with `args` after
    /// `serve --addr 127.0.0.1:0 --metrics 127.0.0.1:0`.
    pub(crate) fn start(args: &[&str]) -> Result<Served> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let bin = std::env::var("EXPEL_BIN")
            .map(PathBuf::from)
            .unwrap_or(root.join("target/release/expel"));
        if !bin.exists() {
            bail!(
                "{} not found: run cargo build --release first",
                bin.display()
            );
        }
        let mut child = Command::new(&bin)
            .args(["serve", "--addr", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        Ok(Served {
            addr: v["listening"].as_str().context("addr")?.parse()?,
            metrics: v["metrics"].as_str().context("metrics")?.to_string(),
            fingerprint: v["fingerprint"]
                .as_str()
                .context("fingerprint")?
                .to_string(),
            web: v["web"].as_str().map(String::from),
            child,
        })
    }

    /// Seconds the server's threads have spent on a CPU (each thread's
    /// `/proc/PID/task/TID/schedstat`, first field, ns: no clock-tick rate assumed; the
    /// server's threads live as long as it does).
    pub(crate) fn cpu_seconds(&self) -> Result<f64> {
        let mut ns = 0.0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id()))? {
            let s = std::fs::read_to_string(task?.path().join("schedstat"))?;
            let first: f64 = s
                .split_whitespace()
                .next()
                .context("schedstat format")?
                .parse()?;
            ns += first;
        }
        Ok(ns / 1e9)
    }

    /// Seconds each of the server's threads has spent on a CPU, summed by the thread's
    /// name less any trailing index (`expel-io-0` and `expel-io-1` are `expel-io`).
    pub(crate) fn cpu_by_thread(&self) -> Result<std::collections::BTreeMap<String, f64>> {
        let mut by = std::collections::BTreeMap::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id()))? {
            let dir = task?.path();
            let (Ok(stat), Ok(comm)) = (
                std::fs::read_to_string(dir.join("schedstat")),
                std::fs::read_to_string(dir.join("comm")),
            ) else {
                continue; // the thread ended meanwhile
            };
            let ns: f64 = stat
                .split_whitespace()
                .next()
                .context("schedstat format")?
                .parse()?;
            let name = comm.trim().trim_end_matches(|c: char| c.is_ascii_digit());
            let name = name.trim_end_matches('-').to_string();
            *by.entry(name).or_insert(0.0) += ns / 1e9;
        }
        Ok(by)
    }

    /// A sample's value from its `/metrics`.
    pub(crate) fn metric(&self, name: &str) -> Result<f64> {
        let mut s = std::net::TcpStream::connect(&self.metrics)?;
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        expel_bots::metrics::sample(&body, name).with_context(|| format!("{name} not in metrics"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A connect token for `player` signed with `secret`, good for an hour on a server
/// without an id; `n` makes its nonce (tokens are good once).
pub(crate) fn token(secret: &str, player: u32, n: u32) -> Result<String> {
    use expel_protocol::token::{mint, Grant};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let mut nonce = [9u8; 16];
    nonce[..4].copy_from_slice(&n.to_le_bytes());
    Ok(mint(
        secret.as_bytes(),
        &Grant {
            player: expel_core::PlayerId(player),
            expires: now + 3600,
            nonce,
            server: None,
        },
    ))
}
