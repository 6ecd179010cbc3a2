//! The window example, drawn by Bevy's renderer, under Xvfb against the real server on
//! loopback QUIC, with a second client that walks up to it: its window opens, it walks,
//! it draws the map in 3D, itself and the other player, and it leaves cleanly. Built with
//! the `render` feature (`cargo test -p expel-bevy --features render`: Bevy's renderer
//! is minutes more of build); without a GPU it draws on Mesa's software Vulkan
//! (lavapipe, Debian's `mesa-vulkan-drivers`). Skips without Xvfb unless
//! `EXPEL_REQUIRE_XVFB` is set (CI installs it).
#![cfg(feature = "render")]

use expel_client::prelude::*;
use expel_server::{Map, Server};
use expel_testkit::desktop::{example_binary, read_png, window_within, xvfb};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mesa's software Vulkan for the example, where no ICD is chosen and lavapipe's is
/// installed (a machine with a GPU and its driver uses that).
fn software_vulkan() -> Vec<(&'static str, String)> {
    let lavapipe = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
    let chosen = std::env::var_os("VK_ICD_FILENAMES").is_some();
    if chosen || !Path::new(lavapipe).exists() {
        return Vec::new();
    }
    vec![("VK_ICD_FILENAMES", lavapipe.to_string())]
}

#[test]
fn the_window_example_draws_the_map_itself_and_another_player() {
    let Some(x) = xvfb(600) else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = example_binary(
        &root,
        "expel-bevy",
        "window",
        &std::env::current_exe().unwrap(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(Server::builder(Map::arena().unwrap()).start())
        .unwrap();
    let options = |id: u32| {
        let trust = Trust::Fingerprint(server.fingerprint.clone());
        ConnectOptions::new(server.token(PlayerId(id), Duration::from_secs(60)), trust)
    };
    // Player 2 keeps walking to player 1 (at full speed, twice the example's) and stops
    // near it, facing it: in the view.
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (stop, opts) = (stop.clone(), options(2));
        let addr = server.addr;
        std::thread::spawn(move || {
            let mut s = connect_blocking(addr, &opts).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                let me = s.display_origin().unwrap_or_default();
                let cmd = match s.others(now).get(&PlayerId(1)) {
                    Some(them) => {
                        let to = *them - me;
                        let yaw = to.y.atan2(to.x).to_degrees();
                        let go = if to.truncate().length() > 120.0 {
                            1.0
                        } else {
                            0.0
                        };
                        MoveCommand::new(go, 0.0, 0.0, yaw, 0.0)
                    }
                    None => MoveCommand::default(),
                };
                s.input(cmd);
                s.update(now);
                std::thread::sleep(Duration::from_millis(8));
            }
            s.close_blocking("done");
        })
    };
    let shot = std::env::temp_dir().join(format!("expel-bevy-window-{}.png", std::process::id()));
    let began = Instant::now();
    let child = Command::new(exe)
        .arg(server.addr.to_string())
        .args([
            "--token",
            &server.token(PlayerId(1), Duration::from_secs(60)),
        ])
        .args(["--fingerprint", &server.fingerprint])
        .args(["--seconds", "8", "--size", "400", "--screenshot"])
        .arg(&shot)
        .env("DISPLAY", &x.name)
        .envs(software_vulkan())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = window_within(&x.name, "expel: bevy", began, Duration::from_secs(30));
    let out = child.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    follower.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(seen, "no window named \"expel: bevy\" on {}", x.name);
    let line: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    println!("{line}");
    // Frames drawn while playing: on lavapipe with two cores shared with the server and
    // the other client, 44 to 60 in the 8 s here (its shaders compile in the first
    // seconds); a renderer that stalled would show a handful.
    assert!(line["frames"].as_u64().unwrap() >= 20, "{line}");
    assert!(line["walked"].as_f64().unwrap() > 300.0, "{line}");
    assert!(line["most_seen"].as_u64().unwrap() >= 1, "{line}");
    assert!(
        line["ended"].as_str().unwrap().contains("Left"),
        "it said goodbye: {line}"
    );
    // The frame: the map in many shades, us in yellow, the other in red with its nose
    // (drawn unlit and untonemapped: their colours within a step or two of rounding).
    let (w, h, pixels) = read_png(&shot);
    assert_eq!((w, h), (400, 400));
    let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 3);
    let count = |rgb: [u8; 3]| pixels.iter().filter(|p| near(**p, rgb)).count();
    let (me, other, nose) = (
        count([0xff, 0xff, 0x40]),
        count([0xff, 0x40, 0x40]),
        count([0xff, 0xa0, 0xa0]),
    );
    println!("pixels: me {me}, the other {other}, its nose {nose}");
    assert!(me >= 100, "we are drawn ({me} pixels)");
    assert!(
        other >= 30 && nose >= 4,
        "the other and its facing ({other}, {nose})"
    );
    let shades: std::collections::BTreeSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        shades.len() >= 16,
        "the map is drawn ({} colours)",
        shades.len()
    );
    // The server counts both gone once they said goodbye.
    let until = Instant::now() + Duration::from_secs(5);
    while server.metrics.machine().clients != 0 {
        assert!(Instant::now() < until, "the server still holds a player");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&shot);
    rt.block_on(server.shutdown("done"));
}
