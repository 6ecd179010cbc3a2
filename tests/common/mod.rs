//! What the networked tests share: the arena server on loopback, tokens, raw QUIC
//! connections that speak the protocol by hand.
#![allow(dead_code)] // each test binary uses its own part

use expel_bots::RunOptions;
use expel_client::{ConnectOptions, Trust};
use expel_core::{MoveCommand, PlayerState, Sim};
use expel_protocol::frame::{encode_frame, FrameDecoder};
pub(crate) use expel_protocol::Code;
use expel_protocol::{decode, ClientControl, ServerControl, ALPN};
use expel_server::{Identity, Server, ServerConfig, ServerSettings};
#[allow(unused_imports)] // each test binary uses its own part
pub(crate) use expel_testkit::network::{
    arena, network, network_with, token, token_with, ARENA, SECRET, UNIX,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The test servers' configuration: the arena on a loopback port, short timeouts.
pub(crate) fn config(bytes: Arc<Vec<u8>>, max_players: usize) -> ServerConfig {
    ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        operator_token: None,
        identity: Identity::self_signed().unwrap(),
        limits: Default::default(),
        settings: ServerSettings {
            max_players,
            hello_timeout: Duration::from_secs(1),
            input_timeout: Duration::from_secs(3),
            ..ServerSettings::new("arena", bytes, SECRET.to_vec())
        },
        agones: None,
        // Two, so every test runs the connections over more than one socket and thread.
        io_threads: if cfg!(target_os = "linux") { 2 } else { 1 },
        rules: None,
        web: None,
        record: None,
    }
}

pub(crate) async fn server(max_players: usize) -> (Server, Arc<Sim>, Arc<Vec<u8>>) {
    server_with(max_players, |_| {}).await
}

pub(crate) async fn server_with(
    max_players: usize,
    change: impl FnOnce(&mut ServerConfig),
) -> (Server, Arc<Sim>, Arc<Vec<u8>>) {
    let (sim, bytes) = arena();
    let mut cfg = config(bytes.clone(), max_players);
    change(&mut cfg);
    let running = expel_server::start(sim.clone(), cfg).await.unwrap();
    (running, sim, bytes)
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub(crate) fn options(r: &Server, id: u32) -> ConnectOptions {
    ConnectOptions::new(
        token_with(SECRET, id, now() + 600, 1),
        Trust::Fingerprint(r.fingerprint.clone()),
    )
}

pub(crate) fn wander(seed: u32) -> impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand> {
    let mut k = seed.wrapping_mul(2_654_435_761);
    move |t, _| {
        if t % 90 == 0 {
            k = k.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        }
        Some(MoveCommand::new(1.0, 0.0, 0.0, (k % 360) as f64, 0.0))
    }
}

/// A raw QUIC connection with ALPN `alpn`, trusting the server's fingerprint.
pub(crate) async fn raw(
    r: &Server,
    alpn: &[u8],
) -> Result<(quinn::Endpoint, quinn::Connection), String> {
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let cfg = expel_client::client_config(&Trust::Fingerprint(r.fingerprint.clone()), alpn)
        .map_err(|e| e.to_string())?;
    ep.set_default_client_config(cfg);
    let c = ep
        .connect(r.addr, "localhost")
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok((ep, c))
}

pub(crate) async fn hello(
    c: &quinn::Connection,
    version: u16,
    token: String,
) -> (quinn::SendStream, ServerControl) {
    let (mut send, mut recv) = c.open_bi().await.unwrap();
    let h = ClientControl::Hello {
        version,
        token,
        have_map: None,
    };
    send.write_all(&encode_frame(&h)).await.unwrap();
    let mut dec = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(f) = dec.next_frame().unwrap() {
            // The rest of the stream is read and dropped, as a client reads its control
            // stream (a stream left unread would stop the server's later writes).
            tokio::spawn(async move { while let Ok(Some(_)) = recv.read(&mut buf).await {} });
            return (send, decode("control", &f).unwrap());
        }
        let n = recv.read(&mut buf).await.unwrap().unwrap();
        dec.push(&buf[..n]);
    }
}

/// A raw connection that said hello as player `id` and was welcomed.
pub(crate) async fn joined_raw(
    r: &Server,
    id: u32,
    n: u8,
) -> (quinn::Endpoint, quinn::Connection, quinn::SendStream) {
    let (ep, c) = raw(r, ALPN).await.unwrap();
    let (s, reply) = hello(
        &c,
        expel_protocol::VERSION,
        token_with(SECRET, id, now() + 60, n),
    )
    .await;
    assert!(matches!(reply, ServerControl::Welcome(_)), "{reply:?}");
    (ep, c, s)
}

/// The reason the server closed `c` with, waiting at most `secs`.
pub(crate) async fn close_reason(c: &quinn::Connection, secs: u64) -> String {
    let why = tokio::time::timeout(Duration::from_secs(secs), c.closed())
        .await
        .unwrap();
    format!("{why}")
}

/// The code and reason of the close frame the server closed `c` with, waiting at most
/// `secs` (`None`: closed some other way).
pub(crate) async fn closed_with(c: &quinn::Connection, secs: u64) -> (Option<Code>, String) {
    let why = tokio::time::timeout(Duration::from_secs(secs), c.closed())
        .await
        .unwrap();
    match &why {
        quinn::ConnectionError::ApplicationClosed(a) => (
            Some(Code::from_close(a.error_code.into_inner())),
            String::from_utf8_lossy(&a.reason).into_owned(),
        ),
        other => (None, other.to_string()),
    }
}

/// A refusal's code and words (panics on anything else).
pub(crate) fn refusal(
    e: Result<expel_client::Session, expel_client::ClientError>,
) -> (Code, String) {
    match e {
        Err(expel_client::ClientError::Refused { code, detail }) => (code, detail),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, got a welcome"),
    }
}

/// The one JSON line `expel serve` prints once it accepts connections, read from the
/// child's piped stdout.
pub(crate) fn ready_line(child: &mut std::process::Child) -> serde_json::Value {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// The secret of the `expel serve` processes tests start.
pub(crate) const PROCESS_SECRET: &str = "attack-secret";

/// Served processes started by this test binary, so each has a log of its own.
static SERVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `expel serve` as its own process (so its memory is its own), killed when dropped.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) fingerprint: String,
    /// Where its log (warnings and worse) goes, for a test that fails to say why.
    log: std::path::PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `expel serve` on free loopback ports; `shell` runs before it (a `ulimit`).
    pub(crate) fn start(shell: &str) -> Served {
        Served::start_with(shell, 64)
    }

    /// [`Served::start`] for `max_players` players.
    pub(crate) fn start_with(shell: &str, max_players: usize) -> Served {
        Served::start_args(shell, max_players, "")
    }

    /// [`Served::start_with`] with `args` added to the command line.
    pub(crate) fn start_args(shell: &str, max_players: usize, args: &str) -> Served {
        let dir = std::env::temp_dir().join(format!("expel-attacks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // EXPEL_ATTACKS_BIN attacks another build of the server (an older one, to compare).
        let bin = std::env::var("EXPEL_ATTACKS_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_expel").to_string());
        let cmd = format!(
            "{shell} exec '{bin}' serve --addr 127.0.0.1:0 --secret {PROCESS_SECRET} --max-players {max_players} {args}"
        );
        let log = dir.join(format!(
            "serve-{}.log",
            SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut child = Command::new("sh")
            .args(["-c", &cmd])
            .env("EXPEL_CACHE_DIR", &dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the server's log file"))
            .spawn()
            .expect("run expel serve");
        let v = ready_line(&mut child);
        Served {
            child,
            addr: v["listening"].as_str().unwrap().parse().unwrap(),
            http: v["metrics"].as_str().unwrap().parse().unwrap(),
            fingerprint: v["fingerprint"].as_str().unwrap().to_string(),
            log,
        }
    }

    /// Whether the process still runs, and the end of its log: what a failed test says.
    pub(crate) fn state(&mut self) -> String {
        let status = match self.child.try_wait() {
            Ok(None) => "still running".to_string(),
            Ok(Some(s)) => format!("exited: {s}"),
            Err(e) => format!("status unknown: {e}"),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("the server is {status}; its log ends:\n{tail}")
    }

    /// A field of /proc/PID/status, in MB (VmRSS now, VmHWM the peak so far).
    pub(crate) fn memory_mb(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field}"));
        let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb / 1024.0
    }

    /// The process's CPU seconds so far: its threads' time on a CPU, from
    /// `/proc/PID/task/TID/schedstat` (nanoseconds: no clock-tick rate assumed). Not from
    /// /metrics, which a test may have made unreachable.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap();
        let ns: u64 = tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        ns as f64 * 1e-9
    }

    /// A sample's value from /metrics (`name` with its labels, as the text has it).
    pub(crate) fn metric(&self, name: &str) -> f64 {
        let text = http_get(self.http, "/metrics").1;
        expel_bots::metrics::sample(&text, name).unwrap_or_else(|| panic!("{name} not in /metrics"))
    }

    pub(crate) fn token(&self, id: u32, n: u8) -> String {
        token_with(PROCESS_SECRET.as_bytes(), id, now() + 600, n)
    }

    /// An honest client plays for `secs`; returns its snapshots.
    pub(crate) async fn honest_snapshots(&self, id: u32, secs: f64) -> u64 {
        let trust = Trust::Fingerprint(self.fingerprint.clone());
        let o = expel_client::ConnectOptions::new(self.token(id, 200), trust);
        let joined = expel_client::connect(self.addr, &o)
            .await
            .unwrap_or_else(|e| panic!("honest client refused: {e}"));
        let opts = RunOptions {
            seconds: secs,
            ..Default::default()
        };
        let report = expel_bots::run(joined, wander(id), opts).await.unwrap();
        assert!(report.ended_by_server.is_none(), "{report:?}");
        report.stats.predict.snapshots
    }
}

/// One HTTP GET with extra `headers` (each line ending in CRLF): the status code, the
/// response head and the body, read until the server closes or `within` has passed (a
/// stream, `/live`, is read for that long).
pub(crate) fn http(
    addr: SocketAddr,
    path: &str,
    headers: &str,
    within: Duration,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(within.min(Duration::from_secs(1))))
        .unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

/// [`http`] without headers, within 10 s: (the status line, the body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let (_, head, body) = http(addr, path, "", Duration::from_secs(10));
    (head.lines().next().unwrap_or("").to_string(), body)
}

/// Half-open QUIC handshakes: `count` Initials (a whole ClientHello each) to `to`, sent
/// in turn from `addresses` loopback addresses 127.0.`net`.1 onwards, none ever answered
/// (a QUIC client state machine driven by hand, its replies never read). After each
/// `pace.0` Initials it pauses `pace.1`. The connections are returned so they stay open.
pub(crate) async fn half_open(
    to: SocketAddr,
    fingerprint: &str,
    count: usize,
    net: u8,
    addresses: u8,
    pace: Option<(usize, Duration)>,
) -> Vec<quinn_proto::Connection> {
    let mut ep = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        false,
        None,
    );
    let cfg = expel_client::client_config(&Trust::Fingerprint(fingerprint.into()), ALPN).unwrap();
    let sockets: Vec<_> = (1..=addresses)
        .map(|n| std::net::UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, net, n), 0)).unwrap())
        .collect();
    let mut held = Vec::with_capacity(count);
    let mut buf = Vec::new();
    for i in 0..count {
        let now = std::time::Instant::now();
        let (_, mut conn) = ep.connect(now, cfg.clone(), to, "localhost").unwrap();
        buf.clear();
        let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
        sockets[i % sockets.len()]
            .send_to(&buf[..t.size], to)
            .unwrap();
        held.push(conn);
        if let Some((every, pause)) = pace {
            if (i + 1) % every == 0 {
                tokio::time::sleep(pause).await;
            }
        }
    }
    held
}
