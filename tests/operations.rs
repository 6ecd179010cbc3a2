//! Operations: the server under an orchestrator. A small stand-in of the Agones SDK's
//! local REST interface records every call the server makes (method, path, body, when):
//! their order, their timing, and that health stops while the tick stalls.

mod common;

use common::*;
use expel_server::AgonesConfig;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One call the stand-in received.
#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    method: String,
    path: String,
    body: String,
}

/// The SDK sidecar's REST gateway, as far as a game server sees it: it answers every call
/// with 200 and JSON, and keeps what it was sent.
struct StandIn {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl StandIn {
    async fn start() -> StandIn {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let c = calls.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = l.accept().await {
                tokio::spawn(connection(sock, c.clone()));
            }
        });
        StandIn { addr, calls }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.path).collect()
    }

    async fn wait_for(&self, path: &str, secs: u64) -> Call {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(c) = self.calls().into_iter().find(|c| c.path == path) {
                return c;
            }
            assert!(
                Instant::now() < until,
                "no {path} in {secs} s: {:?}",
                self.paths()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// HTTP/1.1 with keep-alive: requests one after another, each with its body.
async fn connection(mut sock: tokio::net::TcpStream, calls: Arc<Mutex<Vec<Call>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let path = words.next().unwrap_or_default().to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
        buf.drain(..head_end + length);
        let reply = if path.starts_with("/alpha/player/connect")
            || path.starts_with("/alpha/player/disconnect")
        {
            "{\"bool\":true}"
        } else {
            "{}"
        };
        calls.lock().unwrap().push(Call {
            at: Instant::now(),
            method,
            path,
            body,
        });
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if sock.write_all(resp.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// `expel serve ARGS` with `env` added, logs quiet; its ready line.
fn expel_serve<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    env: &[(&str, &std::ffi::OsStr)],
) -> (std::process::Child, serde_json::Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_expel"));
    cmd.arg("serve")
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let line = ready_line(&mut child);
    (child, line)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agones_hears_capacity_ready_health_players_and_shutdown_and_no_health_while_the_tick_stalls(
) {
    let sdk = StandIn::start().await;
    let every = Duration::from_millis(200);
    let (r, _, _) = server_with(8, |c| {
        c.agones = Some(AgonesConfig {
            sdk: sdk.addr,
            health_every: every,
        });
    })
    .await;
    let ready = sdk.wait_for("/ready", 5).await;
    // Two players come and go.
    for id in [41u32, 42] {
        let joined = expel_client::connect(r.addr, &options(&r, id))
            .await
            .unwrap();
        let opts = expel_bots::RunOptions {
            seconds: 0.5,
            ..Default::default()
        };
        expel_bots::run(joined, wander(id), opts).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The tick stalls for 2.5 s.
    let stall_at = Instant::now();
    let stall = Duration::from_millis(2500);
    r.stall_tick(stall).await;
    let stall_end = stall_at + stall;
    tokio::time::sleep(stall + Duration::from_millis(1500)).await;
    r.shutdown("match over").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = sdk.calls();
    let paths = sdk.paths();

    // Order: capacity, then ready, then the rest; shutdown last and once.
    assert_eq!(paths[0], "/alpha/player/capacity", "{paths:?}");
    assert_eq!(calls[0].method, "PUT");
    assert_eq!(
        json(&calls[0].body)["count"],
        "8",
        "capacity is max players"
    );
    assert_eq!(paths[1], "/ready", "{paths:?}");
    assert_eq!(
        paths.last().map(String::as_str),
        Some("/shutdown"),
        "{paths:?}"
    );
    // The capacity follows the load: the stall (ticks run late) holds it at the players
    // in, and it is told again once the load is gone; the last word on it is the maximum.
    let capacities: Vec<String> = calls
        .iter()
        .filter(|c| c.path.ends_with("capacity"))
        .map(|c| json(&c.body)["count"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        capacities.last().map(String::as_str),
        Some("8"),
        "{capacities:?}"
    );
    for once in ["/ready", "/shutdown"] {
        assert_eq!(
            paths.iter().filter(|p| *p == once).count(),
            1,
            "{once}: {paths:?}"
        );
    }
    assert!(calls
        .iter()
        .all(|c| c.method == "POST" || c.path.ends_with("capacity")));

    // Each player connected, then disconnected, by id.
    for id in ["41", "42"] {
        let at = |path: &str| {
            calls
                .iter()
                .position(|c| c.path == path && json(&c.body)["playerID"] == id)
                .unwrap_or_else(|| panic!("no {path} for {id}: {paths:?}"))
        };
        assert!(at("/alpha/player/connect") < at("/alpha/player/disconnect"));
    }
    assert_eq!(
        paths.iter().filter(|p| p.ends_with("/connect")).count(),
        2,
        "{paths:?}"
    );

    // Health: from ready on, about every `every` while the tick runs; none from one stall
    // threshold (1 s) into the stall until it ends; again soon after.
    let health: Vec<Instant> = calls
        .iter()
        .filter(|c| c.path == "/health")
        .map(|c| c.at)
        .collect();
    assert!(health[0] >= ready.at);
    let quiet_from = stall_at + Duration::from_millis(1100);
    let during: Vec<_> = health
        .iter()
        .filter(|t| **t > quiet_from && **t < stall_end)
        .collect();
    assert!(during.is_empty(), "{} pings while stalled", during.len());
    let resumed = health
        .iter()
        .find(|t| **t >= stall_end)
        .expect("health resumes after the stall");
    assert!(
        *resumed - stall_end < Duration::from_millis(800),
        "health resumed {:?} after the stall",
        *resumed - stall_end
    );
    let before_stall: Vec<Instant> = health.iter().copied().filter(|t| *t < stall_at).collect();
    assert!(
        before_stall.len() >= 4,
        "{} pings before the stall",
        before_stall.len()
    );
    for w in before_stall.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= every - Duration::from_millis(20) && gap < every * 3,
            "health gap {gap:?} (every {every:?})"
        );
    }
    let shutdown = calls.last().unwrap().at;
    assert!(health.iter().all(|t| *t <= shutdown));
}

#[test]
fn expel_serve_under_agones_reports_ready_and_on_sigterm_shutdown_then_exits_zero() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sdk = rt.block_on(StandIn::start());
    let cache = std::env::temp_dir().join(format!("expel-ops-{}", std::process::id()));
    let port = sdk.addr.port().to_string();
    let (child, _) = expel_serve(
        &["--addr", "127.0.0.1:0", "--secret", "ops"],
        &[
            ("AGONES_SDK_HTTP_PORT", port.as_ref()),
            ("EXPEL_CACHE_DIR", cache.as_os_str()),
        ],
    );
    rt.block_on(sdk.wait_for("/health", 10));
    let paths = sdk.paths();
    assert_eq!(&paths[..3], ["/alpha/player/capacity", "/ready", "/health"]);
    assert_eq!(json(&sdk.calls()[0].body)["count"], "64");
    let term = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let mut child = child;
    let status = child.wait().unwrap();
    let took = term.elapsed();
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(10), "drained in {took:?}");
    let paths = sdk.paths();
    assert_eq!(
        paths.last().map(String::as_str),
        Some("/shutdown"),
        "{paths:?}"
    );
}

/// The value after `key:` on the first line that has it, in a deploy file.
fn yaml_value(text: &str, key: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key}"))
        .trim()
        .trim_matches('"')
        .to_string()
}

#[test]
fn the_deploy_files_match_the_server() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |f: &str| std::fs::read_to_string(format!("{root}/deploy/{f}")).unwrap();
    let fleet = read("fleet.yaml");
    let docker = read("Dockerfile");
    // Players reach QUIC (UDP) only: the HTTP endpoint, which shows every player, is not
    // published; it asks for the operator token off loopback.
    let port = yaml_value(&fleet, "containerPort");
    assert_eq!(port, "27960", "the default port of expel serve");
    assert_eq!(yaml_value(&fleet, "protocol"), "UDP");
    assert!(!fleet.contains("TCPUDP") && !fleet.contains("hostPort"));
    assert!(
        fleet.contains(&format!("0.0.0.0:{port}")),
        "listens on the port"
    );
    assert!(fleet.contains("EXPEL_OPERATOR_TOKEN") && fleet.contains("EXPEL_SERVER_ID"));
    assert!(docker.contains(&format!("EXPOSE {port}/udp\n")));
    // Agones marks a server unhealthy after `failureThreshold` periods without a ping; the
    // server pings every 2 s while the tick runs, so a healthy one never misses a period
    // and a stalled one is caught.
    let period: u64 = yaml_value(&fleet, "periodSeconds").parse().unwrap();
    let misses: u64 = yaml_value(&fleet, "failureThreshold").parse().unwrap();
    let ping = AgonesConfig {
        sdk: "127.0.0.1:1".parse().unwrap(),
        health_every: Duration::from_secs(2),
    };
    assert!(period >= 2 * ping.health_every.as_secs() && misses >= 2);
    // The container's arguments, one per `- ` line under `args:`.
    let args: Vec<String> = fleet
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim()[2..].trim_matches('"').to_string())
        .collect();
    assert_eq!(args[0], "serve");
    // Player capacity equals the server's player limit.
    let capacity = yaml_value(&fleet, "initialCapacity");
    let at = args.iter().position(|a| a == "--max-players").unwrap();
    assert_eq!(args[at + 1], capacity);
    // The runtime image runs as a user, not root, and carries the maps it names.
    assert!(docker.contains("USER 65532:65532"));
    assert!(docker.contains("COPY maps/ /opt/expel/maps/"));
    assert_eq!(yaml_value(&fleet, "runAsNonRoot"), "true");
    assert_eq!(yaml_value(&fleet, "readOnlyRootFilesystem"), "true");
    // The image's cache directory is the Fleet's writable emptyDir.
    assert!(docker.contains("EXPEL_CACHE_DIR=/tmp/expel"));
    assert_eq!(yaml_value(&fleet, "mountPath"), "/etc/expel");
    assert!(fleet.contains("mountPath: /tmp") && fleet.contains("emptyDir"));
    // The arguments are ones expel serve takes: run them here, on loopback, with the
    // repository's maps and a certificate of its own.
    let mut serve: Vec<String> = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cert" | "--key" => {
                it.next();
            }
            "--addr" => {
                it.next();
                serve.extend(["--addr".into(), "127.0.0.1:0".into()]);
            }
            // Off loopback as in the pod (which the operator token allows), on a free port.
            "--metrics" => {
                assert_eq!(it.next().map(String::as_str), Some("0.0.0.0:9090"));
                serve.extend(["--metrics".into(), "0.0.0.0:0".into()]);
            }
            m => match m.strip_prefix("/opt/expel/maps/") {
                Some(map) => serve.push(format!("{root}/maps/{map}")),
                None => serve.push(a.clone()),
            },
        }
    }
    let cache = std::env::temp_dir().join(format!("expel-deploy-{}", std::process::id()));
    serve.extend(["--secret".into(), "deploy".into()]);
    // The Fleet's environment, as the pod would have it.
    let env = [
        ("EXPEL_CACHE_DIR", cache.as_os_str()),
        ("EXPEL_OPERATOR_TOKEN", "deploy-operator".as_ref()),
        ("EXPEL_SERVER_ID", "expel-abcde-12345".as_ref()),
    ];
    let (mut child, line) = expel_serve(&serve, &env);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(line["map"], "arena", "{serve:?}");
}

/// `expel serve` on a fixed address with a certificate and secret that survive it, so a
/// server started again is the same server to its clients.
fn serve_at(addr: SocketAddr, dir: &std::path::Path) -> (std::process::Child, serde_json::Value) {
    let (cert, key, addr) = (dir.join("cert.pem"), dir.join("key.pem"), addr.to_string());
    let args: [&std::ffi::OsStr; 8] = [
        "--addr".as_ref(),
        addr.as_ref(),
        "--secret".as_ref(),
        "restart".as_ref(),
        "--cert".as_ref(),
        cert.as_os_str(),
        "--key".as_ref(),
        key.as_os_str(),
    ];
    expel_serve(&args, &[("EXPEL_CACHE_DIR", dir.as_os_str())])
}

fn sigterm(child: &std::process::Child) {
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
}

/// Players in the world, from the server's /metrics.
async fn players(http: SocketAddr) -> f64 {
    expel_bots::http_get(&expel_bots::Operator::at(http), "/metrics")
        .await
        .ok()
        .and_then(|t| expel_bots::metrics::sample(&t, "expel_players"))
        .unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_reconnect_after_a_kill_and_after_a_drain_and_play_on() {
    let dir = std::env::temp_dir().join(format!("expel-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
    let addr = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (first, line) = serve_at(addr, &dir);
    let fingerprint = line["fingerprint"].as_str().unwrap().to_string();
    let bots = 10u32;
    let opts = expel_bots::SwarmOptions {
        server: addr,
        trust: expel_client::Trust::Fingerprint(fingerprint.clone()),
        tokens: (0..bots)
            .map(|i| token_with(b"restart", 500 + i, now() + 600, 1))
            .collect(),
        seconds: 22.0,
        behavior: expel_bots::Behavior::Wander,
        cheats: Vec::new(),
        cheaters: 0,
        link: Default::default(),
        concurrent_connects: 16,
        cheat_after: 0.0,
        reconnect: true,
        buffer_ticks: 2.0,
        light: false,
        fire: false,
    };
    let swarm = tokio::spawn(expel_bots::swarm(opts, Arc::default()));
    let all_in = |what: &str, since: Instant| {
        let what = what.to_string();
        async move {
            loop {
                let n = players(addr).await;
                if n == f64::from(bots) {
                    break;
                }
                assert!(
                    since.elapsed() < Duration::from_secs(20),
                    "{what}: {n} players after {:?}",
                    since.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            since.elapsed()
        }
    };
    all_in("first start", Instant::now()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // SIGKILL mid-game: no goodbye, no close frame. It comes back a second later.
    let mut first = first;
    let killed = Instant::now();
    first.kill().unwrap();
    first.wait().unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (second, line) = serve_at(addr, &dir);
    assert_eq!(line["fingerprint"], fingerprint.as_str());
    let after_kill = all_in("after the kill", killed).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // SIGTERM: a drain. Clients are told, the process exits 0 in bounded time.
    let mut second = second;
    let drained = Instant::now();
    sigterm(&second);
    let status = second.wait().unwrap();
    let drain = drained.elapsed();
    assert!(status.success(), "{status}");
    assert!(drain < Duration::from_secs(8), "drained in {drain:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut third, _) = serve_at(addr, &dir);
    let after_drain = all_in("after the drain", drained).await;
    eprintln!(
        "restart: {bots} bots all back {:.2} s after SIGKILL (1 s down), {:.2} s after SIGTERM (drain took {:.2} s, 0.5 s down)",
        after_kill.as_secs_f64(),
        after_drain.as_secs_f64(),
        drain.as_secs_f64()
    );

    let outcomes = swarm.await.unwrap();
    sigterm(&third);
    assert!(third.wait().unwrap().success());
    for o in &outcomes {
        assert!(o.error.is_none(), "bot {}: {:?}", o.n, o.error);
        assert_eq!(o.reconnects.len(), 2, "bot {}: {:?}", o.n, o.reconnects);
        let last = o.report.as_ref().unwrap();
        assert!(!last.kicked && !last.lost, "bot {}: {last:?}", o.n);
        assert!(
            last.stats.predict.snapshots > 60,
            "bot {} played on: {last:?}",
            o.n
        );
        // Jittered backoff: no reconnect is instant, none waits long.
        for t in &o.reconnects {
            assert!(
                *t > 0.05 && *t < 10.0,
                "bot {}: reconnected after {t} s",
                o.n
            );
        }
    }
    let mut delays: Vec<f64> = outcomes.iter().flat_map(|o| o.reconnects.clone()).collect();
    delays.sort_by(f64::total_cmp);
    assert!(delays.first() != delays.last(), "jittered: {delays:?}");
    eprintln!(
        "restart: reconnect delays (loss to playing) {:.2}..{:.2} s",
        delays[0],
        delays[delays.len() - 1]
    );
}

/// A server starved for longer than a client may run ahead (its tick stalled 4 s: it
/// catches up on the ticks it owes, on movement alone) flags no honest player for the
/// commands that kept time meanwhile, and keeps them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_tick_flags_no_honest_player() {
    let (r, _, _) = server_with(8, |_| {}).await;
    let mut clients = Vec::new();
    for id in [51u32, 52, 53] {
        let joined = expel_client::connect(r.addr, &options(&r, id))
            .await
            .unwrap();
        let opts = expel_bots::RunOptions {
            seconds: 11.0,
            ..Default::default()
        };
        clients.push(tokio::spawn(expel_bots::run(joined, wander(id), opts)));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.stall_tick(Duration::from_secs(4)).await;
    for c in clients {
        let report = c.await.unwrap().unwrap();
        assert!(!report.lost, "{report:?}");
    }
    assert!(
        r.metrics.flagged().is_empty(),
        "honest players flagged: {:?}",
        r.metrics.flagged()
    );
    let late = r.metrics.machine().ticks_late;
    assert!(late > 200, "the stall ran {late} ticks late");
}
