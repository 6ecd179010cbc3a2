//! What a player can reach: the operator's HTTP endpoint off loopback, tokens bound to one
//! server, token expiry on the wall clock. Real `expel serve` processes on loopback.

mod common;

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
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        return Err(format!("{status}: {err}"));
    }
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    Ok((child, v))
}

/// One GET with `headers`: (status code, the response head, body). A stream (`/live`)
/// is read for up to a second.
fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
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

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

const OPERATOR_PATHS: [&str; 6] = ["/live", "/players.json", "/map.json", "/metrics", "/", "/x"];

#[test]
fn the_operators_endpoint_off_loopback_answers_only_the_operator() {
    // Listening on every address, as a Fleet's pod would.
    let (child, v) = serve(
        &[
            "--addr",
            "127.0.0.1:0",
            "--metrics",
            "0.0.0.0:0",
            "--secret",
            "reach",
            "--operator-token",
            "op-token-1",
        ],
        &[],
    )
    .unwrap();
    let port: u16 = v["metrics"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let http = SocketAddr::from(([127, 0, 0, 1], port));
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
            assert!(head.contains("WWW-Authenticate: Bearer"), "{head}");
            assert!(!body.contains("players") && !body.contains("data:"), "{body}");
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
    let err = serve(
        &["--addr", "127.0.0.1:0", "--metrics", "0.0.0.0:0", "--secret", "reach"],
        &[],
    )
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
    let (child, v) = serve(
        &["--addr", "127.0.0.1:0", "--metrics", "0.0.0.0:0", "--secret", "reach"],
        &[("EXPEL_OPERATOR_TOKEN", "from-env")],
    )
    .unwrap();
    let port: u16 = v["metrics"].as_str().unwrap().rsplit(':').next().unwrap().parse().unwrap();
    let http = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(http, "/metrics", "").0, 401);
    assert_eq!(get(http, "/metrics", "Authorization: Bearer from-env\r\n").0, 200);
    stop(child);
    // QUIC on every address: the HTTP endpoint stays on loopback, where it needs no token.
    let (child, v) = serve(&["--addr", "0.0.0.0:0", "--secret", "reach"], &[]).unwrap();
    let metrics = v["metrics"].as_str().unwrap();
    assert!(metrics.starts_with("127.0.0.1:"), "{v}");
    assert_eq!(get(metrics.parse().unwrap(), "/players.json", "").0, 200);
    stop(child);
}
