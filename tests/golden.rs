//! Golden state hashes (`tests/golden/hashes.txt`): the simulation computes the same bits
//! on every machine and in every build, not only in debug and release on this one.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs one golden scenario with the `expel` binary and returns its final state hash.
fn run(kind: &str, map: &str, bots: &str, seconds: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_expel"));
    cmd.current_dir(ROOT).env(
        "EXPEL_CACHE_DIR",
        std::env::temp_dir().join("expel-golden-cache"),
    );
    match kind {
        "sim" => cmd.args(["sim", map, "--inputs", "tests/data/replay.jsonl"]),
        "walk" => cmd.args(["walk", map, "--bots", bots, "--seconds", seconds]),
        "shots" => cmd
            .args(["shots", map])
            .stdin(std::fs::File::open(Path::new(ROOT).join("tests/data/shots.jsonl")).unwrap()),
        other => panic!("unknown golden kind {other}"),
    };
    let out = cmd.output().expect("run expel");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{kind} {map} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = match kind {
        // Every impact of every shot, as printed: the first 16 hex digits of its SHA-256.
        "shots" => {
            use sha2::Digest;
            Some(hex::encode(sha2::Sha256::digest(&out.stdout))[..16].to_string())
        }
        "sim" => stdout
            .lines()
            .last()
            .and_then(|l| l.split('"').nth(3))
            .map(str::to_string),
        _ => stdout
            .split("state hash ")
            .nth(1)
            .map(|h| h.chars().take(16).collect()),
    };
    hash.unwrap_or_else(|| panic!("{kind} {map}: no hash in {stdout}"))
}

#[test]
fn simulation_results_match_the_golden_hashes() {
    let table = std::fs::read_to_string(Path::new(ROOT).join("tests/golden/hashes.txt")).unwrap();
    let mut checked = 0;
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [kind, map, bots, seconds, want] = f[..] else {
            panic!("malformed golden line: {line}");
        };
        if !Path::new(ROOT).join(map).exists() {
            eprintln!("{map} is absent: skipping its golden hash");
            continue;
        }
        let got = run(kind, map, bots, seconds);
        assert_eq!(got, want, "{kind} {map}: state hash changed");
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} golden scenarios ran");
}
