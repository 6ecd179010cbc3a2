//! The play example, headless: under Xvfb with `--autopilot`, against a real `expel serve
//! --mode tag`. It must open its window, get snapshots at the snapshot rate, move its
//! player, hear its own chat line back, print its summary line, and draw the map, the
//! player and the score. Skips without
//! Xvfb unless `EXPEL_REQUIRE_XVFB` is set (CI installs it).

mod common;

use expel_testkit::desktop::{example_binary, read_png, window_within, xvfb};
use expel_testkit::process::Kill;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_play_example_plays_itself_under_xvfb_and_draws_the_map_and_the_player() {
    let Some(x) = xvfb(800) else { return };
    let display = x.name.clone();
    let play = example_binary(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "expel-client",
        "play",
        &std::env::current_exe().unwrap(),
    );
    let mut serve = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--secret",
            "play-test",
            "--mode",
            "tag",
        ])
        .env_remove("EXPEL_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = common::ready_line(&mut serve);
    let _serve = Kill(serve);
    let shot = std::env::temp_dir().join(format!("expel-play-{}.png", std::process::id()));
    let began = Instant::now();
    let mut child = Command::new(play)
        .args([
            ready["listening"].as_str().unwrap(),
            "--secret",
            "play-test",
            "--fingerprint",
            ready["fingerprint"].as_str().unwrap(),
            "--autopilot",
            "10",
            "--size",
            "400",
            "--say",
            "hello from play",
            "--screenshot",
        ])
        .arg(&shot)
        .env("DISPLAY", &display)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While it plays, its window is on the display.
    let seen = window_within(&display, "expel", began, Duration::from_secs(30));
    if !seen {
        // Say what the example said: whether it never joined, or never opened a window.
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "no window named expel on {display}; the example printed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let rate = line["snapshots_per_s"].as_f64().unwrap();
    assert!(
        (24.0..=36.0).contains(&rate),
        "{rate} snapshots/s at 30: {line}"
    );
    assert!(line["moved"].as_f64().unwrap() > 100.0, "{line}");
    // Alone at tag it is "it", frozen for its first second: the thaw is the rules' move,
    // which no prediction knows of, so one correction; nothing else on loopback.
    assert!(
        line["corrections"].as_u64().unwrap() <= 1,
        "one player on loopback: {line}"
    );
    // Its own chat line came back from the tag server.
    assert!(line["chat_heard"].as_u64().unwrap() >= 1, "{line}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(": hello from play"));
    // The frame: the map's shades, the player's colour.
    let (w, h, pixels) = read_png(&shot);
    assert_eq!((w, h), (400, 400));
    // The score in the corner: our swatch, yellow (we are "it").
    assert_eq!(
        pixels[10 * 400 + 10],
        [0xff, 0xe1, 0x4d],
        "the score is drawn"
    );
    let player = pixels.iter().filter(|p| **p == [0xff, 0xff, 0x40]).count();
    assert!(player >= 50, "the player is drawn ({player} pixels)");
    let shades: std::collections::BTreeSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        shades.len() >= 8,
        "the map is drawn ({} colours)",
        shades.len()
    );
    let _ = std::fs::remove_file(&shot);
}
