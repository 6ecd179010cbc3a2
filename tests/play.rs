//! The play example, headless: under Xvfb with `--autopilot`, against a real `expel serve
//! --mode tag`. It must open its window, get snapshots at the snapshot rate, move its
//! player, hear its own chat line back, print its summary line, and draw the map, the
//! player and the score. Skips without
//! Xvfb unless `EXPEL_REQUIRE_XVFB` is set (CI installs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// The example's binary: the one `cargo test` built beside this test (examples are built
/// with the suite), else built now.
fn play_binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let examples = target.join("debug/examples");
    let newest = std::fs::read_dir(&examples).ok().and_then(|d| {
        d.filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("play-") && !name.contains('.')
            })
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .max()
    });
    // Only one built after the sources changed will do: the suite's own build is.
    let built_at = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let fresh = newest.filter(|(t, _)| {
        let this = built_at(Path::new(&std::env::current_exe().unwrap()));
        this.is_some_and(|me| *t + Duration::from_secs(600) >= me)
    });
    if let Some((_, p)) = fresh {
        return p;
    }
    let ok = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "expel-client", "--example", "play"])
        .current_dir(root)
        .status()
        .expect("cargo build the example");
    assert!(ok.success());
    examples.join("play")
}

#[test]
fn the_play_example_plays_itself_under_xvfb_and_draws_the_map_and_the_player() {
    if !on_path("Xvfb") {
        assert!(
            std::env::var_os("EXPEL_REQUIRE_XVFB").is_none(),
            "Xvfb is required here"
        );
        eprintln!("skipped: no Xvfb");
        return;
    }
    let play = play_binary();
    let display = format!(":{}", 100 + std::process::id() % 400);
    let _x = Kill(
        Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                "800x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
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
    std::thread::sleep(Duration::from_millis(300)); // Xvfb up
    let shot = std::env::temp_dir().join(format!("expel-play-{}.png", std::process::id()));
    let began = Instant::now();
    let child = Command::new(play)
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
    if on_path("xdotool") {
        let mut seen = false;
        while !seen && began.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(500));
            let out = Command::new("xdotool")
                .args(["search", "--name", "expel"])
                .env("DISPLAY", &display)
                .output()
                .unwrap();
            seen = !out.stdout.is_empty();
        }
        assert!(seen, "no window named expel on {display}");
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
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (400, 400));
    let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
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
