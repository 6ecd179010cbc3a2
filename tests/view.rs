//! The live view in a real headless browser: `expel demo` serves it, Chromium (from the
//! system packages) loads it, and the test reads what the page drew through the Chrome
//! DevTools protocol. Without Chromium the test says so and passes, unless
//! `EXPEL_REQUIRE_BROWSER` is set (CI sets it, and installs Chromium).

use expel_testkit::process::Kill;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chromium() -> Option<&'static str> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

/// A plain HTTP GET on loopback: the body, read to its Content-Length (Chromium's
/// DevTools server keeps the connection open) or to the end.
fn get(host: &str, path: &str) -> String {
    get_as(host, path, None)
}

/// [`get`] with the operator token as a bearer token, if given.
fn get_as(host: &str, path: &str, token: Option<&str>) -> String {
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return String::new();
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            r.read_exact(&mut body).unwrap();
        }
        None => {
            r.read_to_end(&mut body).unwrap();
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// One Chrome DevTools session on a page: evaluates expressions and returns their values.
struct Page {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Page {
    fn eval(&mut self, expression: &str) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": true},
        });
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["id"] == id {
                return v["result"]["result"]["value"].clone();
            }
        }
    }
}

/// What the page has drawn: its state and how many pixels of the map canvas differ from
/// the background.
const PROBE: &str = r#"(() => {
  const v = window.expelView;
  if (!v) return null;
  const c = document.getElementById("map");
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let inked = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - 0x10) + Math.abs(d[i + 1] - 0x12) + Math.abs(d[i + 2] - 0x17) > 24) inked++;
  }
  return {polygons: v.drawnPolygons, frames: v.frames, players: Object.keys(v.players).length,
          moved: v.moved, error: v.error, inked, positions: v.players,
          status: document.getElementById("status").textContent};
})()"#;

#[test]
fn the_live_view_draws_the_map_and_its_players_move_in_a_real_browser() {
    live_view(None);
}

/// With an operator token the browser asks for it (HTTP Basic, the token as the password,
/// here given in the address) and the page's own requests carry it.
#[test]
fn the_live_view_behind_an_operator_token_works_in_a_real_browser() {
    live_view(Some("view-token-7"));
}

fn live_view(token: Option<&str>) {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("EXPEL_REQUIRE_BROWSER").is_none(),
            "EXPEL_REQUIRE_BROWSER is set but no Chromium is installed"
        );
        eprintln!("no Chromium: the browser test is skipped (apt-get install chromium)");
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "expel-view-{}-{}",
        std::process::id(),
        token.is_some()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The demo: a server and a dozen bots, six of them cheating (one of each cheat tag can
    // show), each kicked once caught.
    let mut demo = Kill(
        Command::new(env!("CARGO_BIN_EXE_expel"))
            .args([
                "demo",
                "--addr",
                "127.0.0.1:0",
                "--bots",
                "12",
                "--cheaters",
                "1",
            ])
            .args(["--duration", "90", "--round", "90"])
            .env("EXPEL_CACHE_DIR", &dir)
            .envs(token.map(|t| ("EXPEL_OPERATOR_TOKEN", t)))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run expel demo"),
    );
    let mut lines = BufReader::new(demo.0.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let view = lines.next().unwrap().unwrap();
    let url = view
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {view:?}"))
        .to_string();
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    assert_eq!(ready["metrics"].as_str(), Some(host.as_str()), "{ready}");
    if token.is_some() {
        assert!(get(&host, "/").contains("operator token required"));
    }
    // The page is self-contained: nothing fetched from anywhere else.
    let page = get_as(&host, "/", token);
    assert!(page.contains("<canvas") && page.contains("EventSource"));
    assert!(
        !page.contains("https://") && !page.contains("src=\"http"),
        "external fetches"
    );

    let opened = match token {
        Some(t) => format!("http://operator:{t}@{host}/"),
        None => url.clone(),
    };
    let profile = dir.join("chromium");
    let mut chrome = Kill(
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=1200,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(&opened)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run chromium"),
    );
    // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
    let (tx, rx) = std::sync::mpsc::channel();
    let err = chrome.0.stderr.take().unwrap();
    // Read Chromium's log to its end (a full pipe would stall it), passing on the address.
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(at) = line.find("ws://") {
                let _ = tx.send(line[at..].trim().to_string());
            }
        }
    });
    let devtools = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("Chromium printed no DevTools address");
    let port_host = devtools
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    // The page's own DevTools socket.
    let deadline = Instant::now() + Duration::from_secs(30);
    let page_ws = loop {
        let list: Value =
            serde_json::from_str(&get(&port_host, "/json/list")).unwrap_or(Value::Null);
        let found = list.as_array().and_then(|l| {
            l.iter()
                .find(|t| {
                    t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(&opened))
                })
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(String::from))
        });
        if let Some(ws) = found {
            break ws;
        }
        assert!(Instant::now() < deadline, "no page target: {list}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (ws, _) = tungstenite::connect(page_ws.as_str()).unwrap();
    let mut page = Page { ws, next: 0 };

    // Wait until the page has drawn the map and streamed a few seconds of play, with at
    // least the six honest bots: the cheaters may all be caught and kicked before a
    // browser slowed by a busy machine gets going (it happened in a full suite's run).
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let v = page.eval(PROBE);
        if v["frames"].as_u64().unwrap_or(0) >= 10 && v["players"].as_u64().unwrap_or(0) >= 6 {
            break v;
        }
        assert!(Instant::now() < deadline, "the page never got going: {v}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(first["error"].is_null(), "{first}");
    assert_eq!(first["status"], "live", "{first}");
    // The map: every floor and wall of the arena, and ink on the canvas.
    let map: Value = serde_json::from_str(&get_as(&host, "/map.json", token)).unwrap();
    let shapes = map["floors"].as_array().unwrap().len() + map["walls"].as_array().unwrap().len();
    assert!(shapes > 10, "{map}");
    assert_eq!(first["polygons"].as_u64(), Some(shapes as u64), "{first}");
    let (w, h) = (1200 - 270, 800);
    assert!(
        first["inked"].as_u64().unwrap() > (w * h / 10) as u64,
        "{first}"
    );

    // Two seconds later the players it shows have moved.
    std::thread::sleep(Duration::from_secs(2));
    let later = page.eval(PROBE);
    assert!(
        later["frames"].as_u64() > first["frames"].as_u64(),
        "{later}"
    );
    let moved = first["positions"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(id, p)| {
            later["positions"].get(id.as_str()).is_some_and(|q| {
                let d: f64 = (0..3)
                    .map(|i| (q[i].as_f64().unwrap() - p[i].as_f64().unwrap()).powi(2))
                    .sum();
                d.sqrt() > 8.0
            })
        })
        .count();
    assert!(
        moved >= 4,
        "only {moved} players moved: {first} then {later}"
    );
    drop(chrome);
    drop(demo);
    let _ = std::fs::remove_dir_all(&dir);
}
