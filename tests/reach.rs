//! What a player can reach: the operator's HTTP endpoint off loopback, tokens bound to one
//! server, token expiry on the wall clock. Real `expel serve` processes on loopback.

mod common;

use common::Code;
use serde_json::Value;
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `expel serve` with `args` and `env`: the child and its ready line (or, when it exits
/// before one, its exit status and stderr).
fn serve(args: &[&str], env: &[(&str, &str)]) -> Result<(Child, Value), String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_expel"));
    cmd.arg("serve")
        .args(args)
        .env_remove("EXPEL_OPERATOR_TOKEN")
        .env_remove("EXPEL_SERVER_ID")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run expel serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim().is_empty() {
        let status = child.wait().unwrap();
        return Err(format!("{status}: {}", stderr_of(&mut child)));
    }
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    Ok((child, v))
}

/// Everything the ended child wrote to its standard error.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    let mut pipe = child.stderr.take().unwrap();
    pipe.read_to_string(&mut err).unwrap();
    err
}

/// One GET with `headers`: (status code, the response head, body). A stream (`/live`)
/// is read for up to three seconds.
fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String, String) {
    common::http(addr, path, headers, Duration::from_secs(3))
}

/// The ready line's HTTP endpoint (on every address) as reached on loopback.
fn loopback_port(ready: &Value) -> SocketAddr {
    let at: SocketAddr = ready["metrics"].as_str().unwrap().parse().unwrap();
    SocketAddr::from(([127, 0, 0, 1], at.port()))
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// QUIC on loopback, the HTTP endpoint on every address.
const PUBLIC_ENDPOINT: [&str; 6] = [
    "--addr",
    "127.0.0.1:0",
    "--metrics",
    "0.0.0.0:0",
    "--secret",
    "reach",
];

const OPERATOR_PATHS: [&str; 6] = ["/live", "/players.json", "/map.json", "/metrics", "/", "/x"];

#[test]
fn the_operators_endpoint_off_loopback_answers_only_the_operator() {
    // Listening on every address, as a Fleet's pod would.
    let args = [&PUBLIC_ENDPOINT[..], &["--operator-token", "op-token-1"]].concat();
    let (child, v) = serve(&args, &[]).unwrap();
    let http = loopback_port(&v);
    for path in OPERATOR_PATHS {
        for headers in [
            "",
            "Authorization: Bearer wrong\r\n",
            "Authorization: Bearer op-token-10\r\n",
            "Authorization: Basic b3A6b3AtdG9rZW4tMg==\r\n", // op:op-token-2
            "Authorization: op-token-1\r\n",
        ] {
            let (code, head, body) = get(http, path, headers);
            assert_eq!(code, 401, "{path} with {headers:?}: {head}");
            assert!(
                head.to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
                "{head}"
            );
            assert!(
                !body.contains("players") && !body.contains("data:"),
                "{body}"
            );
        }
    }
    // Health carries no data and asks for nothing.
    for path in ["/healthz", "/readyz"] {
        let (code, _, body) = get(http, path, "");
        assert_eq!(code, 200, "{path}");
        assert!(body.len() < 16, "{path}: {body}");
    }
    // With the token, everything works: Bearer, or Basic with the token as the password
    // (what a browser sends once asked).
    let bearer = "Authorization: Bearer op-token-1\r\n";
    let basic = "Authorization: Basic b3BlcmF0b3I6b3AtdG9rZW4tMQ==\r\n"; // operator:op-token-1
    for auth in [bearer, basic] {
        let (code, _, body) = get(http, "/players.json", auth);
        assert_eq!(code, 200);
        assert!(body.contains("players"), "{body}");
        let (code, _, body) = get(http, "/map.json", auth);
        assert_eq!(code, 200);
        assert!(body.contains("walls"), "{}", &body[..body.len().min(200)]);
        let (code, _, body) = get(http, "/", auth);
        assert_eq!(code, 200);
        assert!(body.contains("<html") || body.contains("<!DOCTYPE"));
        let (code, head, _) = get(http, "/live", auth);
        assert_eq!(code, 200, "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
    }
    let (code, _, metrics) = get(http, "/metrics", bearer);
    assert_eq!(code, 200);
    let refused = expel_bots::metrics::sample(&metrics, "expel_http_unauthorized_total");
    let want = (OPERATOR_PATHS.len() * 5) as f64;
    assert_eq!(refused, Some(want), "every refusal counted");
    stop(child);
}

#[test]
fn a_public_endpoint_without_a_token_is_refused_at_start_and_the_default_is_loopback() {
    let err = serve(&PUBLIC_ENDPOINT, &[])
        .map(|(c, v)| {
            stop(c);
            v
        })
        .expect_err("a public endpoint without a token must not start");
    assert!(
        err.contains("--operator-token") && err.contains("EXPEL_OPERATOR_TOKEN"),
        "the refusal says how to set one: {err}"
    );
    // The token from the environment will do.
    let (child, v) = serve(&PUBLIC_ENDPOINT, &[("EXPEL_OPERATOR_TOKEN", "from-env")]).unwrap();
    let http = loopback_port(&v);
    assert_eq!(get(http, "/metrics", "").0, 401);
    assert_eq!(
        get(http, "/metrics", "Authorization: Bearer from-env\r\n").0,
        200
    );
    stop(child);
    // QUIC on every address: the HTTP endpoint stays on loopback, where it needs no token.
    let (child, v) = serve(&["--addr", "0.0.0.0:0", "--secret", "reach"], &[]).unwrap();
    let metrics = v["metrics"].as_str().unwrap();
    assert!(metrics.starts_with("127.0.0.1:"), "{v}");
    assert_eq!(get(metrics.parse().unwrap(), "/players.json", "").0, 200);
    stop(child);
}

fn bound_token(id: u32, server: Option<&str>, expires: u64, n: u8) -> String {
    use expel_core::PlayerId;
    use expel_protocol::token::{mint, Grant, ServerId};
    mint(
        common::SECRET,
        &Grant {
            player: PlayerId(id),
            expires,
            nonce: [n; 16],
            server: server.map(|s| ServerId::new(s).unwrap()),
        },
    )
}

/// Two servers of one fleet (one secret): a token minted for one joins it, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_joins_only_the_server_it_was_minted_for() {
    use expel_protocol::token::ServerId;
    let named = |id: &'static str| {
        move |c: &mut expel_server::ServerConfig| {
            c.settings.server_id = Some(ServerId::new(id).unwrap());
        }
    };
    let (a, _, _) = common::server_with(4, named("match-a")).await;
    let (b, _, _) = common::server_with(4, named("match-b")).await;
    let (none, _, _) = common::server(4).await;
    let mut o = common::options(&a, 7);
    o.token = bound_token(7, Some("match-a"), common::now() + 60, 1);
    o.trust = expel_client::Trust::Fingerprint(b.fingerprint.clone());
    let (code, why) = common::refusal(expel_client::connect(b.addr, &o).await);
    assert_eq!(code, Code::TokenWrongServer, "{why}");
    assert!(why.contains("another server"), "{why}");
    o.trust = expel_client::Trust::Fingerprint(none.fingerprint.clone());
    let (code, why) = common::refusal(expel_client::connect(none.addr, &o).await);
    assert_eq!(code, Code::TokenWrongServer, "{why}");
    // Refused elsewhere, the token was not burned: it still joins its own server.
    o.trust = expel_client::Trust::Fingerprint(a.fingerprint.clone());
    let joined = expel_client::connect(a.addr, &o)
        .await
        .expect("joins match-a");
    drop(joined);
    // A token for no server opens no server with an id.
    o.token = bound_token(8, None, common::now() + 60, 2);
    let (code, why) = common::refusal(expel_client::connect(a.addr, &o).await);
    assert_eq!(code, Code::TokenWrongServer, "{why}");
    let counted = |r: &expel_server::Server| {
        let i = expel_server::REFUSALS
            .iter()
            .position(|l| *l == Code::TokenWrongServer)
            .unwrap();
        r.metrics.machine().refusals[i]
    };
    // (The counters are copied from the machine as it runs.)
    for _ in 0..50 {
        if counted(&a) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((counted(&a), counted(&b), counted(&none)), (1, 1, 1));
    for r in [a, b, none] {
        r.shutdown("done").await;
    }
}

/// Token expiry follows the wall clock: ticks the server skipped while stalled do not make
/// an expired token good again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_stays_expired_after_the_server_skipped_ticks() {
    let (r, _, _) = common::server(4).await;
    // Expires at the end of the next second.
    let expires = common::now() + 1;
    // The tick stalls for 6 s: past the 5 s it catches up on, the server skips about 1 s
    // of ticks.
    r.stall_tick(Duration::from_secs(6)).await;
    tokio::time::sleep(Duration::from_millis(6500)).await;
    assert!(common::now() > expires + 1);
    let skipped = r.metrics.machine().ticks_skipped;
    assert!(skipped > 30, "ticks skipped: {skipped}");
    let mut o = common::options(&r, 9);
    o.token = bound_token(9, None, expires, 3);
    let (code, why) = common::refusal(expel_client::connect(r.addr, &o).await);
    assert_eq!(code, Code::TokenExpired, "{why}");
    assert!(why.contains("expired"), "{why}");
    r.shutdown("done").await;
}

/// A prefix of test addresses made local on loopback (an "AnyIP" route), so sockets bound
/// to any address in it reach the server; removed again when dropped. `None` where the
/// route cannot be added (not root, no `ip`).
struct LocalPrefix {
    added: bool,
}

const PREFIX: &str = "fd65:7870:656c:6e1::/64";

impl LocalPrefix {
    fn add() -> Option<LocalPrefix> {
        let out = Command::new("ip")
            .args(["-6", "route", "add", "local", PREFIX, "dev", "lo"])
            .output()
            .ok()?;
        let exists = String::from_utf8_lossy(&out.stderr).contains("File exists");
        (out.status.success() || exists).then_some(LocalPrefix {
            added: out.status.success(),
        })
    }
}

impl Drop for LocalPrefix {
    fn drop(&mut self) {
        if self.added {
            let _ = Command::new("ip")
                .args(["-6", "route", "del", "local", PREFIX, "dev", "lo"])
                .status();
        }
    }
}

/// A TCP connection to `to` from `from` (an address of the local prefix).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
    s.set_freebind_v6(true).unwrap();
    let from: std::net::Ipv6Addr = from.parse().unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// One IPv6 host has a /64 of addresses: the HTTP endpoint's per-address limit counts
/// them as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_host_is_one_address_to_the_per_address_limits() {
    let Some(_prefix) = LocalPrefix::add() else {
        eprintln!("skipped: no local IPv6 prefix could be routed on loopback (needs root and ip)");
        return;
    };
    let (r, _, _) = common::server_with(4, |c| {
        c.metrics = Some("[::]:0".parse().unwrap());
        c.operator_token = Some("t".into());
    })
    .await;
    let port = r.metrics_addr.unwrap().port();
    let to = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    // 32 connections (the limit per address), each from its own address of the /64,
    // each holding its seat (no request sent yet).
    let held: Vec<TcpStream> = (1..=32)
        .map(|i| connect_from(&format!("fd65:7870:656c:6e1::{i:x}"), to))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The next from yet another address of the same /64 is closed at once.
    let mut extra = connect_from("fd65:7870:656c:6e1:ffff::1", to);
    extra
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 64];
    let read = extra.read(&mut buf);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the 33rd connection of the /64 is closed at once: {read:?}"
    );
    let refused = r.metrics.http_refused.get();
    assert_eq!(refused, 1);
    // Another host (::1) is served.
    let (code, _, _) = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(to).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        write!(s, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        (text.starts_with("HTTP/1.1 200"), (), ())
    })
    .await
    .unwrap();
    drop(held);
    assert!(code, "another host is served");
    r.shutdown("done").await;
}

/// `expel demo` under a server id (from the environment) mints its bots' tokens for it.
#[test]
fn the_demo_with_a_server_id_admits_its_own_bots() {
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["demo", "--addr", "127.0.0.1:0", "--bots", "4"])
        .args(["--cheaters", "0", "--duration", "6", "--round", "5"])
        .env("EXPEL_SERVER_ID", "match-7")
        .env_remove("EXPEL_OPERATOR_TOKEN")
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("round 1: 4 bots connected"), "{text}");
}

/// Logs that go to a file or a collector carry no colour codes: plain text, or with
/// `--log-format json` one JSON object a line, its level and fields named.
#[test]
fn logs_off_a_terminal_are_plain_text_or_json_lines() {
    for json in [false, true] {
        let mut args = vec!["--addr", "127.0.0.1:0", "--secret", "log-test"];
        if json {
            args.extend(["--log-format", "json"]);
        }
        let (mut child, _) = serve(&args, &[("RUST_LOG", "info")]).unwrap();
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        assert!(child.wait().unwrap().success());
        let err = stderr_of(&mut child);
        assert!(!err.contains('\u{1b}'), "colour codes in a file: {err:?}");
        assert!(
            err.contains("listening") && err.contains("shutting down"),
            "{err}"
        );
        if json {
            for line in err.lines() {
                let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                assert!(
                    v["level"].is_string() && v["fields"]["message"].is_string(),
                    "{line}"
                );
            }
        } else {
            assert!(err.lines().any(|l| l.contains(" INFO ")), "{err}");
        }
    }
}
