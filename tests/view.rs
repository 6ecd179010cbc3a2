//! The live view in a real headless browser: `expel demo` serves it, Chromium (from the
//! system packages) loads it, and the test reads what the page drew through the Chrome
//! DevTools protocol. Without Chromium the test says so and passes, unless
//! `EXPEL_REQUIRE_BROWSER` is set (CI sets it, and installs Chromium).

mod chrome;

use chrome::{chromium, get, get_as, Browser};
use expel_testkit::process::Kill;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let mut chrome = Browser::open(browser, &opened, &dir.join("chromium"), &["--disable-quic"]);
    let page = &mut chrome.page;

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
