//! `expel bots` against `expel serve`, both the real binaries over loopback QUIC: the
//! report's contract, honest prediction, and every cheater caught.

mod common;

use common::ready_line;
use expel_testkit::process::Kill;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("expel-bots-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `expel serve` on free ports with its log in `dir`: the child and its ready line.
fn serve(dir: &Path, secret: &str) -> (Kill, Value) {
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["serve", "--addr", "127.0.0.1:0", "--max-players", "200"])
        .args(["--secret", secret])
        .env("EXPEL_CACHE_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("run expel serve");
    let v = ready_line(&mut child);
    (Kill(child), v)
}

/// Runs `expel bots` with `extra` flags; returns the report and the printed summary.
fn bots(dir: &Path, ready: &Value, secret: &str, extra: &[&str], name: &str) -> (Value, String) {
    let report = dir.join(format!("{name}.json"));
    let chart = dir.join(format!("{name}.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["bots", "--server", ready["listening"].as_str().unwrap()])
        .args(["--secret", secret])
        .args(["--fingerprint", ready["fingerprint"].as_str().unwrap()])
        .args(["--report", report.to_str().unwrap()])
        .args(["--chart", chart.to_str().unwrap()])
        .args(extra)
        .env("EXPEL_CACHE_DIR", dir)
        .output()
        .expect("run expel bots");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "expel bots failed: {stdout}\n{stderr}"
    );
    // Piped output: the summary, never the progress line's control codes.
    assert!(!stdout.contains('\r') && !stderr.contains('\r'), "{stderr}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("server tick"),
        "chart"
    );
    let text = std::fs::read_to_string(&report).unwrap();
    (serde_json::from_str(&text).unwrap(), stdout)
}

fn num(r: &Value, k: &str) -> f64 {
    r[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing or not a number: {r}"))
}

/// Every contract field is there, with a value that makes sense for `bots` bots.
fn sane(r: &Value, bots: f64) {
    for k in [
        "connected",
        "failed",
        "disconnected",
        "kicked",
        "rtt_ms_p50",
        "rtt_ms_p99",
        "snapshots_per_s",
        "down_bytes_per_s",
        "up_bytes_per_s",
        "corrections_per_min_honest",
        "unexplained_corrections",
        "corrections_per_min_cheaters",
        "cheats_attempted",
        "cheaters_detected",
        "honest_flagged",
        "server_tick_ms_p50",
        "server_tick_ms_p99",
        "server_tick_ms_max",
        "server_cpu_percent",
        "server_cpu_ms_per_player_s",
    ] {
        let v = num(r, k);
        assert!(v.is_finite() && v >= 0.0, "{k} = {v}");
    }
    assert_eq!(num(r, "connected"), bots, "{r}");
    assert_eq!(num(r, "failed"), 0.0, "{r}");
    assert_eq!(num(r, "disconnected"), 0.0, "{r}");
    let rtt = (num(r, "rtt_ms_p50"), num(r, "rtt_ms_p99"));
    assert!(rtt.0 > 0.0 && rtt.0 <= rtt.1 && rtt.1 < 1000.0, "{r}");
    // 30 snapshots a second; a loaded machine loses a few.
    let snaps = num(r, "snapshots_per_s");
    assert!((20.0..=31.0).contains(&snaps), "{r}");
    let (down, up) = (num(r, "down_bytes_per_s"), num(r, "up_bytes_per_s"));
    assert!((1000.0..64_000.0).contains(&down), "{r}");
    assert!((1000.0..64_000.0).contains(&up), "{r}");
    let tick = (
        num(r, "server_tick_ms_p50"),
        num(r, "server_tick_ms_p99"),
        num(r, "server_tick_ms_max"),
    );
    assert!(
        tick.0 > 0.0 && tick.0 <= tick.1 && tick.1 <= tick.2 * 1.3 && tick.2 < 1000.0,
        "{r}"
    );
    let cpu = num(r, "server_cpu_percent");
    assert!(cpu > 0.0 && cpu <= 200.0 * 1.1, "{r}");
    // A share of at most two cores over the players.
    let per = num(r, "server_cpu_ms_per_player_s");
    assert!(per > 0.0 && per <= 2000.0 * 1.1 / bots, "{r}");
}

#[test]
fn fifty_bots_play_honestly_and_every_cheater_is_caught() {
    let dir = temp_dir("swarm");
    let secret = "bots-secret";
    let (server, ready) = serve(&dir, secret);

    // Fifty honest bots, no loss: all stay, and every correction is explained by
    // another player (prediction cannot know where others go) or a command the server
    // lacked.
    let (r, summary) = bots(
        &dir,
        &ready,
        secret,
        &[
            "--count",
            "50",
            "--duration",
            "15",
            "--first-player",
            "1000",
        ],
        "honest",
    );
    eprintln!("honest: {summary}");
    sane(&r, 50.0);
    assert_eq!(num(&r, "kicked"), 0.0, "{r}");
    assert_eq!(num(&r, "unexplained_corrections"), 0.0, "{r}");
    assert_eq!(num(&r, "honest_flagged"), 0.0, "{r}");
    assert_eq!(num(&r, "cheats_attempted"), 0.0, "{r}");
    assert!(summary.contains("50 connected"), "{summary}");

    // Fifty light bots (no prediction, on hand-driven QUIC): the same report, all honest
    // by validation, with no prediction nothing to correct, and an input datagram sent
    // every tick (60 Hz) as a real client sends.
    let (r, summary) = bots(
        &dir,
        &ready,
        secret,
        &[
            "--count",
            "50",
            "--duration",
            "10",
            "--first-player",
            "3000",
            "--light",
        ],
        "light",
    );
    eprintln!("light: {summary}");
    sane(&r, 50.0);
    assert_eq!(num(&r, "kicked"), 0.0, "{r}");
    assert_eq!(num(&r, "honest_flagged"), 0.0, "{r}");
    assert_eq!(num(&r, "corrections_per_min_honest"), 0.0, "{r}");
    // The default input rate, 30 a second at the 60 Hz tick, and the acknowledgements
    // riding in them: no more than 32 packets a second up, and about as many down.
    let (up, down) = (
        num(&r, "up_datagrams_per_s"),
        num(&r, "down_datagrams_per_s"),
    );
    assert!((25.0..=32.0).contains(&up), "{up} up: {r}");
    assert!(down <= 33.0, "{down} down: {r}");

    // Light bots with another server's secret: each is refused and says why.
    let (r, _) = bots(
        &dir,
        &ready,
        "another-servers-secret",
        &["--count", "3", "--duration", "2", "--light"],
        "light-refused",
    );
    assert_eq!(num(&r, "connected"), 0.0, "{r}");
    assert_eq!(num(&r, "failed"), 3.0, "{r}");
    assert!(
        r["errors"].to_string().contains("token signature invalid"),
        "{r}"
    );

    // Fifty honest bots and five cheaters of each kind, for 30 s: a speed cheater's
    // reported path parts from the server's only as far as it gets from where it began
    // cheating, and is flagged once that passes what lag and an unstick excuse (about
    // 320 units). A wanderer can take 12 s or more to get that far, so the run is long
    // enough for every cheater to.
    let (r, summary) = bots(
        &dir,
        &ready,
        secret,
        &[
            "--count",
            "75",
            "--duration",
            "30",
            "--first-player",
            "2000",
            "--cheat",
            "noclip,teleport,speed,fly,timing",
            "--cheaters",
            "5",
        ],
        "cheaters",
    );
    eprintln!("cheaters: {summary}");
    sane(&r, 75.0);
    assert_eq!(num(&r, "cheats_attempted"), 25.0, "{r}");
    assert_eq!(num(&r, "cheaters_detected"), 25.0, "{r}");
    for kind in ["noclip", "teleport", "speed", "fly", "timing"] {
        assert_eq!(
            r["cheaters"][kind],
            serde_json::json!([5, 5]),
            "{kind}: {r}"
        );
    }
    assert_eq!(num(&r, "honest_flagged"), 0.0, "{r}");
    // Only cheaters are kicked.
    assert!(num(&r, "kicked") <= 25.0, "{r}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_expel"))
            .arg("bots")
            .args([
                "--server",
                "127.0.0.1:9",
                "--secret",
                "s",
                "--fingerprint",
                "00",
            ])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["--count", "0", "--duration", "5"]);
    assert!(!ok && err.contains("--count"), "{err}");
    let (ok, err) = run(&["--count", "2", "--duration", "0"]);
    assert!(!ok && err.contains("duration"), "{err}");
    let (ok, err) = run(&["--count", "2", "--duration", "5", "--cheat", "wallhack"]);
    // Refused with the names it may take (from the table that parses them).
    assert!(
        !ok && err.contains("'wallhack'") && err.contains("--cheat"),
        "{err}"
    );
    assert!(err.contains("wallshot") && err.contains("gaps"), "{err}");
    let (ok, err) = run(&[
        "--count",
        "2",
        "--duration",
        "5",
        "--cheat",
        "fly",
        "--cheaters",
        "3",
    ]);
    assert!(!ok && err.contains("do not fit"), "{err}");
    let (ok, err) = run(&["--count", "2", "--duration", "5", "--behavior", "dance"]);
    assert!(
        !ok && err.contains("'dance'") && err.contains("wander"),
        "{err}"
    );
    // Light bots are honest: no cheats among them.
    let (ok, err) = run(&[
        "--count",
        "2",
        "--duration",
        "5",
        "--light",
        "--cheat",
        "fly",
    ]);
    assert!(
        !ok && err.contains("--light") && err.contains("--cheat"),
        "{err}"
    );
}
