//! What a player costs the server through each door: N light clients over WebTransport
//! (the browser's door; wtransport's client, the protocol's client machine in light mode,
//! as a page runs it but without prediction) against N light bots over QUIC (`expel bots
//! --light`), one after the other against the same `expel serve --web`. Prints the
//! server's CPU per player-second by thread: the door's thread (`expel-web`), the I/O
//! threads (`expel-io`), the machine's and the workers'.
//!
//! `cargo build --release && cargo run --release -p expel-bench --bin web-bench [COUNTS]`
//! (default 50 players, 20 s each door; `SECONDS` overrides). Needs an `expel` built
//! with the browser client (`web/build.sh` first).

mod served;

use anyhow::{bail, Context, Result};
use expel_core::MoveCommand;
use expel_protocol::client::{ClientMachine, ClientOutput, ClientSettings};
use served::Served;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret";
/// The longest the players may take to join, before the measured seconds.
const JOIN_SECONDS: f64 = 15.0;
/// Joins in flight at once (as `expel bots` does): the door's admission holds an
/// address to 64 not-yet-joined connections.
const JOINING_AT_ONCE: usize = 16;

fn main() -> Result<()> {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let counts = if counts.is_empty() { vec![50] } else { counts };
    let seconds: f64 = std::env::var("SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    println!("| door | players | door thread | I/O threads | machine | the rest | whole |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for n in counts {
        let most = (n + 8).to_string();
        let served = Served::start(&[
            "--secret",
            SECRET,
            "--max-players",
            &most,
            "--web",
            "127.0.0.1:0",
        ])?;
        let Some(web) = served.web.clone() else {
            bail!("this expel has no browser client: run web/build.sh, then cargo build --release");
        };
        let port: u16 = web
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("the page's port")?;
        let hash = door_hash(&web)?;
        let web_cost = measure(&served, n, seconds, || {
            let hash = hash.clone();
            std::thread::spawn(move || web_players(port, &hash, n, seconds + JOIN_SECONDS + 2.0))
        })?;
        print_row("WebTransport", n, &web_cost);
        let quic_cost = measure(&served, n, seconds, || {
            let (addr, fp) = (served.addr.to_string(), served.fingerprint.clone());
            std::thread::spawn(move || quic_players(&addr, &fp, n, seconds + JOIN_SECONDS + 2.0))
        })?;
        print_row("QUIC", n, &quic_cost);
    }
    Ok(())
}

/// The door's certificate hash, from its `door.json`.
fn door_hash(web: &str) -> Result<String> {
    use std::io::{Read, Write};
    let host = web.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(host)?;
    write!(
        s,
        "GET /door.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text.split("\r\n\r\n").nth(1).context("door.json's body")?;
    let v: serde_json::Value = serde_json::from_str(body)?;
    Ok(v["cert_hash"]
        .as_str()
        .context("no certificate hash")?
        .to_string())
}

/// The server's CPU seconds per player-second by thread, over `seconds` once the `n`
/// players that `start` sets going have all joined.
fn measure(
    served: &Served,
    n: usize,
    seconds: f64,
    start: impl FnOnce() -> std::thread::JoinHandle<Result<usize>>,
) -> Result<BTreeMap<String, f64>> {
    let players = start();
    let deadline = Instant::now() + Duration::from_secs_f64(JOIN_SECONDS);
    let mut joined = 0.0;
    while Instant::now() < deadline {
        joined = served.metric("expel_players")?;
        if joined as usize >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A second for the last joins' maps and welcomes to settle.
    std::thread::sleep(Duration::from_secs(1));
    let before = served.cpu_by_thread()?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let after = served.cpu_by_thread()?;
    let played = players
        .join()
        .map_err(|_| anyhow::anyhow!("the players panicked"))??;
    if (joined as usize) < n || played < n {
        bail!("only {joined} of {n} joined ({played} played to the end)");
    }
    let per = n as f64 * seconds;
    Ok(after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).unwrap_or(&0.0)) / per * 1000.0,
            )
        })
        .collect())
}

fn print_row(door: &str, n: usize, ms: &BTreeMap<String, f64>) {
    let get = |k: &str| ms.get(k).copied().unwrap_or(0.0);
    let whole: f64 = ms.values().sum();
    let (web, io, machine) = (get("expel-web"), get("expel-io"), get("expel-machine"));
    // The rest: the tick's workers, the HTTP endpoint's runtime, the main thread.
    let rest = whole - web - io - machine;
    println!("| {door} | {n} | {web:.3} | {io:.3} | {machine:.3} | {rest:.3} | {whole:.3} |");
}

/// `n` light `expel bots` over QUIC for `seconds`; how many there were.
fn quic_players(addr: &str, fingerprint: &str, n: usize, seconds: f64) -> Result<usize> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = std::env::var("EXPEL_BIN").map_or(root.join("target/release/expel"), PathBuf::from);
    let status = Command::new(bin)
        .args(["bots", "--server", addr, "--secret", SECRET, "--light"])
        .args(["--fingerprint", fingerprint, "--first-player", "100000"])
        .args([
            "--count",
            &n.to_string(),
            "--duration",
            &seconds.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("expel bots failed");
    }
    Ok(n)
}

/// `n` light clients over WebTransport for `seconds`, each the protocol's client machine
/// on a session of its own; how many played to the end.
fn web_players(port: u16, hash: &str, n: usize, seconds: f64) -> Result<usize> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let bytes: [u8; 32] = hex::decode(hash)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("a hash of 32 bytes"))?;
    rt.block_on(async move {
        let cfg = wtransport::ClientConfig::builder()
            .with_bind_default()
            .with_server_certificate_hashes([wtransport::tls::Sha256Digest::new(bytes)])
            .build();
        let ep = Arc::new(wtransport::Endpoint::client(cfg)?);
        let joining = Arc::new(tokio::sync::Semaphore::new(JOINING_AT_ONCE));
        let mut players = Vec::new();
        for i in 0..n as u32 {
            let (ep, joining) = (ep.clone(), joining.clone());
            players.push(tokio::spawn(async move {
                web_player(&ep, &joining, port, i, seconds).await
            }));
        }
        let mut done = 0;
        for p in players {
            if matches!(p.await, Ok(Ok(()))) {
                done += 1;
            }
        }
        Ok(done)
    })
}

async fn web_player(
    ep: &wtransport::Endpoint<wtransport::endpoint::endpoint_side::Client>,
    joining: &tokio::sync::Semaphore,
    port: u16,
    i: u32,
    seconds: f64,
) -> Result<()> {
    let mut permit = Some(joining.acquire().await?);
    let conn = ep
        .connect(format!("https://127.0.0.1:{port}/expel"))
        .await?;
    let (mut send, mut recv) = conn.open_bi().await?.await?;
    let mut settings = ClientSettings::new(served::token(SECRET, i, i)?);
    settings.light = true;
    let mut m = ClientMachine::new(settings, Instant::now());
    m.input(MoveCommand::new(
        1.0,
        0.0,
        0.0,
        f64::from(i * 37 % 360),
        0.0,
    ));
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; 4096];
    while Instant::now() < end {
        if m.settled() {
            drop(permit.take());
        }
        while let Some(out) = m.poll_output() {
            match out {
                ClientOutput::Control(b) => send.write_all(&b).await?,
                ClientOutput::Datagram(b) => {
                    let _ = conn.send_datagram(b);
                }
            }
        }
        let wake = m
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(20));
        tokio::select! {
            r = recv.read(&mut buf) => match r? {
                Some(n) => m.handle_control(&buf[..n], Instant::now()),
                None => bail!("control stream closed"),
            },
            d = conn.receive_datagram() => m.handle_datagram(&d?, Instant::now()),
            () = tokio::time::sleep_until(wake.into()) => m.handle_timeout(Instant::now()),
        }
    }
    drop(permit);
    Ok(())
}
