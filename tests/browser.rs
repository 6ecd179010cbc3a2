//! The browser client in a real headless Chromium, over real WebTransport on loopback:
//! `expel serve --web` serves the page and its WebAssembly, the page joins beside native
//! bots, walks, and its figures (`window.expelStats`) and drawing are read through the
//! DevTools protocol. Without Chromium, or an `expel` built without the page
//! (`web/build.sh`), the tests say so and pass, unless `EXPEL_REQUIRE_BROWSER` is set
//! (CI sets it, installs Chromium and builds the page).

mod chrome;

use chrome::{chromium, get, Browser};
use expel_protocol::Code;
use expel_testkit::process::Kill;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "browser-test-secret";

/// One browser test at a time: the walk's snapshot rate is a figure, and two Chromiums
/// with their servers on two cores would measure each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A scratch folder of the test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("expel-browser-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `expel serve` with the browser's door, and its ready line; `None` where this `expel`
/// was built without the page and the test may skip.
fn serve(dir: &Path, extra: &[&str]) -> Option<(Kill, Value)> {
    let mut server = Kill(
        Command::new(env!("CARGO_BIN_EXE_expel"))
            .args(["serve", "--addr", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
            .args(["--web", "127.0.0.1:0", "--secret", SECRET])
            .args(extra)
            .env("EXPEL_CACHE_DIR", dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run expel serve"),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim().is_empty() {
        let mut err = String::new();
        let _ = server.0.stderr.take().unwrap().read_to_string(&mut err);
        assert!(
            err.contains("without the browser client")
                && std::env::var_os("EXPEL_REQUIRE_BROWSER").is_none(),
            "expel serve --web failed: {err}"
        );
        eprintln!("this expel has no browser client (web/build.sh): the test is skipped");
        return None;
    }
    Some((server, serde_json::from_str(&line).unwrap()))
}

fn token(player: u32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["token", "--secret", SECRET, "--player", &player.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Native bots on the server for `seconds`.
fn bots(ready: &Value, count: usize, seconds: u32, report: &Path) -> Kill {
    Kill(
        Command::new(env!("CARGO_BIN_EXE_expel"))
            .args(["bots", "--server", ready["listening"].as_str().unwrap()])
            .args(["--secret", SECRET, "--fingerprint"])
            .arg(ready["fingerprint"].as_str().unwrap())
            .args([
                "--count",
                &count.to_string(),
                "--duration",
                &seconds.to_string(),
            ])
            .arg("--report")
            .arg(report)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run expel bots"),
    )
}

fn stats(page: &mut chrome::Page) -> Value {
    page.eval("JSON.parse(JSON.stringify(window.expelStats || null))")
}

/// Waits until the page's stats satisfy `done`, for at most `limit`.
fn wait_for(page: &mut chrome::Page, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = stats(page);
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "the page never got there: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Prometheus sample's value from the operator's endpoint.
fn metric(metrics: &str, name: &str) -> f64 {
    get(metrics, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The shipped maps with a golden `sim` line.
const SHIPPED: [(&str, &[u8]); 3] = [
    ("maps/arena.map", include_bytes!("../maps/arena.map")),
    ("maps/terrain.map", include_bytes!("../maps/terrain.map")),
    ("maps/curves.map", include_bytes!("../maps/curves.map")),
];

/// A map's golden `sim` hash (tests/golden/hashes.txt).
fn golden_sim(map: &str) -> String {
    include_str!("golden/hashes.txt")
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && f[..2] == ["sim", map]).then(|| f[4].to_string())
        })
        .unwrap_or_else(|| panic!("no golden sim line for {map}"))
}

#[test]
fn a_browser_player_joins_beside_native_bots_walks_and_computes_the_golden_hash() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(browser) = chromium() else { return };
    let dir = scratch("play");
    // A heavier run for the figures: EXPEL_BROWSER_BOTS and EXPEL_BROWSER_MODE.
    let crowd: usize = std::env::var("EXPEL_BROWSER_BOTS").map_or(16, |v| v.parse().unwrap());
    let mode = std::env::var("EXPEL_BROWSER_MODE").unwrap_or_else(|_| "tag".into());
    let most = (crowd + 8).to_string();
    let Some((_server, ready)) = serve(&dir, &["--mode", &mode, "--max-players", &most]) else {
        return;
    };
    let web = ready["web"].as_str().expect("the ready line's web address");
    let metrics = ready["metrics"].as_str().unwrap().to_string();
    let report = dir.join("bots.json");
    let _bots = bots(&ready, crowd, 40, &report);

    // The page and what it loads: nothing of the operator's.
    let host = web.trim_start_matches("http://").trim_end_matches('/');
    let door: Value = serde_json::from_str(&get(host, "/door.json")).unwrap();
    assert_eq!(door["path"], "/expel", "{door}");
    assert_eq!(door["cert_hash"].as_str().map(str::len), Some(64), "{door}");
    for operator in ["/metrics", "/players.json", "/live", "/map.json"] {
        assert_eq!(
            get(host, operator),
            "not found\n",
            "{operator} on the public page"
        );
    }

    let url = format!("{web}?token={}&walk=square", token(5000));
    let opened = Instant::now();
    let mut chrome = Browser::open(browser, &url, &dir.join("chromium"), &[]);
    let page = &mut chrome.page;
    let playing = wait_for(page, Duration::from_secs(30), |s| s["state"] == "playing");
    eprintln!(
        "the page played {:.1} s after Chromium started: {playing}",
        opened.elapsed().as_secs_f64()
    );
    assert_eq!(playing["player"], 5000, "{playing}");

    // The core's golden runs, in this browser's WebAssembly: every shipped map's.
    let inputs = include_str!("data/replay.jsonl");
    for (name, map) in SHIPPED {
        let expr = format!(
            "window.expelGolden(Uint8Array.from(atob({:?}), c => c.charCodeAt(0)), {:?})",
            base64_of(map),
            inputs
        );
        assert_eq!(page.eval(&expr), Value::String(golden_sim(name)), "{name}");
    }

    // Ten seconds of walking: the snapshots keep coming, predictions hold.
    let first = stats(page);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(500));
        let s = stats(page);
        assert_eq!(s["state"], "playing", "{s}");
    }
    let last = stats(page);
    let seconds = t0.elapsed().as_secs_f64();
    let per_s =
        (last["snapshots"].as_f64().unwrap() - first["snapshots"].as_f64().unwrap()) / seconds;
    eprintln!("over {seconds:.1} s: {per_s:.1} snapshots/s; {last}");
    assert_eq!(last["state"], "playing", "{last}");
    assert!(per_s >= 27.0, "{per_s:.1} snapshots a second: {last}");
    assert_eq!(last["unexplained_corrections"], 0, "{last}");
    assert!(last["tick"].as_u64() > first["tick"].as_u64(), "{last}");
    let walked = page.eval("window.expelWalked");
    assert!(walked.as_f64().unwrap_or(0.0) > 300.0, "walked {walked}");

    // The drawing: the map and the players on the canvas, and a screenshot of it.
    let inked = page.eval(INKED).as_f64().unwrap_or(0.0);
    assert!(inked > 0.1, "only {inked} of the canvas drawn");
    let png = page.screenshot();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    let shots = std::env::var_os("EXPEL_SCREENSHOTS").map_or(dir.clone(), PathBuf::from);
    std::fs::write(shots.join("browser-client.png"), &png).unwrap();

    // The server has the browser player among the bots, and flags nobody.
    assert!(metric(&metrics, "expel_players") >= (crowd + 1) as f64);
    assert_eq!(metric(&metrics, "expel_web_sessions_total"), 1.0);
    let flagged: Value = serde_json::from_str(&get(&metrics, "/players.json")).unwrap();
    assert_eq!(
        flagged["players"].as_array().map(Vec::len),
        Some(0),
        "{flagged}"
    );
    drop(chrome);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_refused_browser_player_shows_its_code_and_retries_only_a_transient_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(browser) = chromium() else { return };
    let dir = scratch("refused");
    let Some((_server, ready)) = serve(&dir, &["--max-players", "1"]) else {
        return;
    };
    let web = ready["web"].as_str().unwrap().to_string();
    let metrics = ready["metrics"].as_str().unwrap().to_string();

    // A forged token: refused with its code, never tried again.
    let mut chrome = Browser::open(
        browser,
        &format!("{web}?token=not-a-token"),
        &dir.join("chromium-forged"),
        &[],
    );
    let s = wait_for(&mut chrome.page, Duration::from_secs(20), |s| {
        s["state"] == "refused"
    });
    let code = s["code"].as_u64().expect("a code") as u16;
    assert!(!Code::from_number(code).is_transient(), "{s}");
    std::thread::sleep(Duration::from_secs(4));
    let later = stats(&mut chrome.page);
    assert_eq!(later["sessions"], 1, "tried again: {later}");
    assert_eq!(later["state"], "refused");
    let shown = chrome
        .page
        .eval("document.getElementById('status').textContent");
    assert!(
        shown
            .as_str()
            .unwrap_or("")
            .contains(&format!("code {code}")),
        "{shown}"
    );
    drop(chrome);

    // The server full (its one place taken by a bot): refused as full, which is
    // transient, so the page tries again later.
    let _bot = bots(&ready, 1, 30, &dir.join("bot.json"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&metrics, "expel_players") < 1.0 {
        assert!(Instant::now() < deadline, "the bot never joined");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut chrome = Browser::open(
        browser,
        &format!("{web}?token={}", token(7000)),
        &dir.join("chromium-full"),
        &[],
    );
    let s = wait_for(&mut chrome.page, Duration::from_secs(20), |s| {
        s["sessions"].as_u64() >= Some(2)
    });
    assert_eq!(
        s["code"].as_u64(),
        Some(u64::from(Code::Full.number())),
        "{s}"
    );
    drop(chrome);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The share of the page's canvas that is not its background.
const INKED: &str = r#"(() => {
  const c = document.getElementById("view");
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let inked = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - 0x15) + Math.abs(d[i + 1] - 0x17) + Math.abs(d[i + 2] - 0x1c) > 24) inked++;
  }
  return inked / (d.length / 4);
})()"#;

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
