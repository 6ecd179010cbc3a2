//! Windowed examples in tests: a headless X display (Xvfb) and the example's binary. This
//! part does I/O (processes, files); the rest of the kit does none.

use crate::process::{on_path, Kill};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An X server without a screen, and its display name (`:N`).
pub struct Display {
    /// What `DISPLAY` is set to for a client of it.
    pub name: String,
    _server: Kill,
}

/// Starts Xvfb with one `size`×`size` screen on a display of its own. `None` without
/// Xvfb on `PATH`, unless `EXPEL_REQUIRE_XVFB` is set (CI installs it): then a panic, so a
/// missing install fails instead of skipping.
pub fn xvfb(size: u32) -> Option<Display> {
    if !on_path("Xvfb") {
        assert!(
            std::env::var_os("EXPEL_REQUIRE_XVFB").is_none(),
            "Xvfb is required here (EXPEL_REQUIRE_XVFB is set)"
        );
        eprintln!("skipped: no Xvfb");
        return None;
    }
    // Xvfb picks a free display and writes its number once it accepts clients: tests of
    // one run start several at once, and a display a killed server left behind (its
    // socket still there) is not taken for a live one.
    let screen = format!("{size}x{size}x24");
    let mut server = Command::new("Xvfb")
        .args([
            "-displayfd",
            "1",
            "-screen",
            "0",
            &screen,
            "-nolisten",
            "tcp",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting Xvfb");
    let mut number = String::new();
    let stdout = server.stdout.take().expect("Xvfb's stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut number)
        .expect("reading Xvfb's display number");
    let number: u32 = number
        .trim()
        .parse()
        .expect("Xvfb wrote its display number");
    Some(Display {
        name: format!(":{number}"),
        _server: Kill(server),
    })
}

/// Whether a window whose title contains `title` shows on `display` within `wait` of
/// `since` (see [`window_shown`]).
pub fn window_within(display: &str, title: &str, since: Instant, wait: Duration) -> bool {
    loop {
        if window_shown(display, title) {
            return true;
        }
        if since.elapsed() >= wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Whether a window whose title contains `title` is on `display` (with xdotool; `true`
/// without it, which only CI's install check catches).
pub fn window_shown(display: &str, title: &str) -> bool {
    if !on_path("xdotool") {
        return true;
    }
    Command::new("xdotool")
        .args(["search", "--name", title])
        .env("DISPLAY", display)
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}

/// The binary of example `name` of workspace package `package`: the one `cargo test` built
/// with the suite (it builds every example) if it is newer than the sources' test binary
/// `test_exe`, else built now. `root` is the workspace's root.
pub fn example_binary(root: &Path, package: &str, name: &str, test_exe: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let examples = target.join("debug/examples");
    let prefix = format!("{}-", name.replace('-', "_"));
    let newest = std::fs::read_dir(&examples).ok().and_then(|d| {
        d.filter_map(|e| e.ok())
            .filter(|e| {
                let file = e.file_name().to_string_lossy().into_owned();
                file.starts_with(&prefix) && !file.contains('.')
            })
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .max()
    });
    // Only one built with the suite will do (within ten minutes of the test binary).
    let built_at = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let fresh = newest
        .filter(|(t, _)| built_at(test_exe).is_some_and(|me| *t + Duration::from_secs(600) >= me));
    if let Some((_, p)) = fresh {
        return p;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "-q", "-p", package, "--example", name])
        .current_dir(root)
        .status()
        .expect("cargo build the example");
    assert!(ok.success(), "building example {name} of {package}");
    examples.join(name)
}

/// A screenshot's size and pixels (RGB, row by row) from an 8-bit RGB PNG.
pub fn read_png(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    assert_eq!(info.color_type, png::ColorType::Rgb, "{}", path.display());
    let pixels = buf[..info.buffer_size()]
        .chunks(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (info.width, info.height, pixels)
}
