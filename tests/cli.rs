//! End-to-end tests of the `expel` command line contracts.

mod common;

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn expel(args: &[&str], stdin: &str, cache: &std::path::Path) -> (String, String, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(args)
        .env("EXPEL_CACHE_DIR", cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run expel");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.success(),
    )
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("expel-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const ARENA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/maps/arena.map");
const CURVES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/maps/curves.map");

#[test]
fn map_info_prints_one_json_object_and_caches_the_model() {
    let cache = temp_dir("info");
    let (out, err, ok) = expel(&["map", "info", ARENA], "", &cache);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    for key in [
        "entities",
        "brushes",
        "solid_brushes",
        "polygons",
        "edges",
        "internal_edges",
        "vertices",
        "broad_phase_nodes",
        "patches",
        "patch_polygons",
        "patches_skipped",
        "patch_deviation",
        "model_bytes",
        "build_ms",
    ] {
        assert!(v[key].is_number(), "{key} missing in {out}");
    }
    // Curved patches: collided ones counted apart from the non-solid ones skipped.
    let (out, err, ok) = expel(&["map", "info", CURVES], "", &cache);
    assert!(ok, "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (c["patches"].as_u64(), c["patches_skipped"].as_u64()),
        (Some(4), Some(2))
    );
    assert!(c["patch_polygons"].as_u64().unwrap() > 100);
    let tolerance = expel_core::collision::patch::PATCH_TOLERANCE;
    assert!(c["patch_deviation"].as_f64().unwrap() <= tolerance);
    assert!(v["bounds"]["mins"].is_array() && v["bounds"]["maxs"].is_array());
    assert_eq!(v["cached"], false);
    assert!(v["solid_brushes"].as_u64().unwrap() <= v["brushes"].as_u64().unwrap());
    assert!(v["internal_edges"].as_u64().unwrap() < v["edges"].as_u64().unwrap());
    // The second load reads the compiled model back and reports the same model.
    let (out2, _, ok2) = expel(&["map", "info", ARENA], "", &cache);
    assert!(ok2);
    let v2: Value = serde_json::from_str(&out2).unwrap();
    assert_eq!(v2["cached"], true);
    for key in [
        "polygons",
        "edges",
        "internal_edges",
        "vertices",
        "broad_phase_nodes",
        "model_bytes",
    ] {
        assert_eq!(v[key], v2[key], "{key}");
    }
    // A map with no solid geometry has no bounds: null, not a box of infinities.
    let empty = cache.join("empty.map");
    std::fs::write(
        &empty,
        "{\n\"classname\" \"worldspawn\"\n}\n{\n\"classname\" \"info_player_start\"\n\"origin\" \"0 0 24\"\n}\n",
    )
    .unwrap();
    let (out, err, ok) = expel(&["map", "info", empty.to_str().unwrap()], "", &cache);
    assert!(ok, "{err}");
    let e: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (e["bounds"].clone(), e["solid_brushes"].as_u64()),
        (Value::Null, Some(0))
    );
}

#[test]
fn map_trace_answers_every_line_and_reports_bad_ones() {
    let cache = temp_dir("trace");
    let input = [
        // A player box dropped onto the arena floor (top at z = 0).
        r#"{"start":[-300,-300,100],"end":[-300,-300,-100],"mins":[-16,-16,-24],"maxs":[16,16,32]}"#,
        // A point falling through open air to the floor.
        r#"{"start":[-300,-300,100],"end":[-300,-300,-100]}"#,
        "not json",
        r#"{"start":[0,0,0],"end":[1,1,1],"mins":[1,1,1],"maxs":[0,0,0]}"#,
        r#"{"start":[0,0],"end":[1,1,1]}"#,
        r#"{"start":[0,0,1e300],"end":[1,1,1]}"#,
        r#"{"start":[0,0,50],"end":[0,0,50],"mins":[-1,-1,-1]}"#,
        // Inside the floor slab: starts solid.
        r#"{"start":[-300,-300,-8],"end":[-300,-300,100],"mins":[-4,-4,-4],"maxs":[4,4,4]}"#,
        // Touching the floor exactly is not solid.
        r#"{"start":[-300,-300,24],"end":[-290,-300,24],"mins":[-16,-16,-24],"maxs":[16,16,32]}"#,
        // Inside the 16-unit floor slab, nearer its top, going down (deeper): it does not
        // start.
        r#"{"start":[-300,-300,-5],"end":[-300,-300,-1000],"mins":[-4,-4,-4],"maxs":[4,4,4]}"#,
    ]
    .join("\n");
    let (out, err, ok) = expel(&["map", "trace", ARENA], &input, &cache);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 10, "{out}");
    let drop = &lines[0];
    let z = drop["endpos"][2].as_f64().unwrap();
    assert!(z > 24.0 && z < 24.2, "box rests on the floor: {z}");
    assert_eq!(drop["normal"], serde_json::json!([0.0, 0.0, 1.0]));
    assert_eq!(drop["startsolid"], false);
    let f = drop["fraction"].as_f64().unwrap();
    assert!((f - (100.0 - z) / 200.0).abs() < 1e-9);
    let pz = lines[1]["endpos"][2].as_f64().unwrap();
    assert!(pz > 0.0 && pz < 0.1, "point rests on the floor: {pz}");
    for (i, l) in lines.iter().enumerate().take(7).skip(2) {
        assert!(
            l["error"].is_string(),
            "line {} should be an error: {l}",
            i + 1
        );
        assert!(l["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("line {}", i + 1)));
    }
    // Out of the slab upwards: it starts in solid and leaves it.
    assert_eq!(lines[7]["startsolid"], true);
    assert_eq!(lines[7]["allsolid"], false);
    assert!(
        lines[7]["endpos"][2].as_f64().unwrap() > 4.0,
        "{}",
        lines[7]
    );
    assert_eq!(lines[8]["startsolid"], false);
    assert_eq!(lines[8]["allsolid"], false);
    // Deeper into the slab: stopped at once, all in solid, the normal the way out.
    assert_eq!(lines[9]["startsolid"], true);
    assert_eq!(lines[9]["allsolid"], true);
    assert_eq!(lines[9]["fraction"], 0.0);
    assert_eq!(lines[9]["normal"], serde_json::json!([0.0, 0.0, 1.0]));
    assert_eq!(lines[8]["fraction"], 1.0);
    assert!(
        err.is_empty() || !err.contains('\r'),
        "no progress bar when piped"
    );
}

#[test]
fn malformed_maps_fail_with_the_line_and_no_panic() {
    let cache = temp_dir("bad");
    let bad = cache.join("bad.map");
    std::fs::write(
        &bad,
        "{\n\"classname\" \"worldspawn\"\n{\n( 0 0 0 ) ( 1 0 0 ) oops\n}\n}\n",
    )
    .unwrap();
    let (out, err, ok) = expel(&["map", "info", bad.to_str().unwrap()], "", &cache);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("line 4"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let missing = cache.join("missing.map");
    let (_, err, ok) = expel(&["map", "info", missing.to_str().unwrap()], "", &cache);
    assert!(!ok && err.contains("missing.map"), "{err}");
}

#[test]
fn walk_demo_never_ends_in_solid() {
    let cache = temp_dir("walk");
    let (out, err, ok) = expel(&["walk", "--bots", "8", "--seconds", "5"], "", &cache);
    assert!(ok, "{err}");
    assert!(out.contains("player ticks ending in solid: 0"), "{out}");
}

const REPLAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/replay.jsonl");

#[test]
fn sim_prints_hulls_ticks_and_a_repeatable_hash() {
    let cache = temp_dir("sim");
    let args = [
        "sim",
        ARENA,
        "--spawn",
        "-300,-300,24.03125",
        "--inputs",
        REPLAY,
    ];
    let (out, err, ok) = expel(&args, "", &cache);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let inputs = std::fs::read_to_string(REPLAY).unwrap().lines().count();
    assert_eq!(lines.len(), inputs + 2);
    let hull = &lines[0]["hull"];
    assert_eq!(
        hull["stand"]["mins"],
        serde_json::json!([-15.0, -15.0, -24.0])
    );
    assert_eq!(hull["stand"]["maxs"], serde_json::json!([15.0, 15.0, 32.0]));
    assert_eq!(
        hull["crouch"]["maxs"],
        serde_json::json!([15.0, 15.0, 16.0])
    );
    for (i, l) in lines[1..=inputs].iter().enumerate() {
        assert_eq!(l["tick"], (i + 1) as u64);
        assert!(l["origin"].as_array().unwrap().len() == 3);
        assert!(l["on_ground"].is_boolean() && l["crouched"].is_boolean());
    }
    // The recorded inputs walk, jump and crouch: all of it shows up.
    assert!(lines[1..=inputs].iter().any(|l| l["on_ground"] == false));
    assert!(lines[1..=inputs].iter().any(|l| l["crouched"] == true));
    let hash = lines.last().unwrap()["hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 16);
    let (again, _, _) = expel(&args, "", &cache);
    assert_eq!(out, again, "a replay differs from the first run");
    // A different start gives a different hash.
    let moved = [
        "sim",
        ARENA,
        "--spawn",
        "-200,-300,24.03125",
        "--inputs",
        REPLAY,
    ];
    let (other, _, _) = expel(&moved, "", &cache);
    assert_ne!(other.lines().last(), out.lines().last());
}

#[test]
fn sim_defaults_to_the_first_spawn_and_rejects_bad_inputs() {
    let cache = temp_dir("sim-bad");
    let bad = cache.join("bad.jsonl");
    std::fs::write(&bad, "{\"forward\":1}\n{\"forward\":\"fast\"}\n").unwrap();
    let (out, err, ok) = expel(
        &["sim", ARENA, "--inputs", bad.to_str().unwrap()],
        "",
        &cache,
    );
    assert!(!ok);
    assert!(err.contains("line 2"), "{err}");
    // The first tick ran from the map's first spawn point (-512, 0, 24) before the error.
    let first: Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    let x = first["origin"][0].as_f64().unwrap();
    assert!(
        (x + 512.0).abs() < 2.0 && first["origin"][1] == 0.0,
        "{first}"
    );
    let (_, err, ok) = expel(
        &[
            "sim",
            ARENA,
            "--spawn",
            "1,2",
            "--inputs",
            bad.to_str().unwrap(),
        ],
        "",
        &cache,
    );
    assert!(!ok && err.contains("x,y,z"), "{err}");
}

#[test]
fn map_rotate_answers_every_line() {
    let cache = temp_dir("rotate");
    let input = [
        // A player box resting on the floor, tipped about its bottom edge: into the floor
        // stops at once, away from it turns freely.
        r#"{"mins":[-16,-16,-24],"maxs":[16,16,32],"position":[-300,-300,24.015625],"origin":[-300,-316,0.015625],"axis":[-1,0,0],"angle":60}"#,
        r#"{"mins":[-16,-16,-24],"maxs":[16,16,32],"position":[-300,-300,24.015625],"origin":[-300,-316,0.015625],"axis":[1,0,0],"angle":60}"#,
        // A 400-unit bar spun about the vertical hits the arena's wall.
        r#"{"mins":[-1,0,-1],"maxs":[1,400,1],"position":[-700,-700,100],"origin":[-700,-700,100],"axis":[0,0,1],"angle":720}"#,
        r#"{"mins":[-1,0,-1],"maxs":[1,400,1],"position":[-700,-700,100],"origin":[-700,-700,100],"axis":[0,0,0],"angle":10}"#,
        "{}",
    ]
    .join("\n");
    let (out, err, ok) = expel(&["map", "rotate", ARENA], &input, &cache);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["fraction"], 0.0);
    assert_eq!(lines[0]["normal"], serde_json::json!([0.0, 0.0, 1.0]));
    assert_eq!(lines[1]["fraction"], 1.0);
    assert!(lines[1]["normal"].is_null());
    let f = lines[2]["fraction"].as_f64().unwrap();
    assert!(f > 0.0 && f < 0.25, "{f}");
    assert_eq!(lines[2]["startsolid"], false);
    assert!(lines[3]["error"].as_str().unwrap().contains("axis"));
    assert!(lines[4]["error"].is_string());
}

/// Every input line gets exactly one output line, blank ones included, so a caller can
/// pair requests with replies.
#[test]
fn map_trace_answers_blank_and_overlong_lines_too() {
    let cache = temp_dir("trace-blank");
    let ok_line = r#"{"start":[-300,-300,100],"end":[-300,-300,-100]}"#;
    let long = format!(
        "{{\"start\":[{}0,0,0],\"end\":[1,1,1]}}",
        "0".repeat(70_000)
    );
    let input = format!("{ok_line}\n\n   \n{long}\n{ok_line}\n");
    let (out, err, ok) = expel(&["map", "trace", ARENA], &input, &cache);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0]["fraction"].is_number() && lines[4]["fraction"].is_number());
    for (i, l) in lines.iter().enumerate().take(4).skip(1) {
        let e = l["error"].as_str().unwrap();
        assert!(e.starts_with(&format!("line {}", i + 1)), "{e}");
    }
    assert!(lines[3]["error"].as_str().unwrap().contains("longer than"));
}

#[test]
fn a_corrupted_or_swapped_cache_is_refused_and_rebuilt() {
    let cache = temp_dir("cache-bad");
    let terrain = concat!(env!("CARGO_MANIFEST_DIR"), "/maps/terrain.map");
    let info = |map: &str| {
        let (out, err, ok) = expel(&["map", "info", map], "", &cache);
        assert!(ok, "{err}");
        (serde_json::from_str::<Value>(&out).unwrap(), err)
    };
    let (fresh, _) = info(ARENA);
    let files = |ext: &str| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        v.sort();
        v
    };
    let arena_file = files("model").pop().unwrap();
    // Flipped bits.
    let mut bytes = std::fs::read(&arena_file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&arena_file, &bytes).unwrap();
    let (again, err) = info(ARENA);
    assert_eq!(again["cached"], false, "corrupt cache used");
    assert!(err.contains("refused"), "{err}");
    assert_eq!(again["polygons"], fresh["polygons"]);
    assert_eq!(info(ARENA).0["cached"], true, "rebuilt cache not written");
    // Another map's model under the arena's key.
    info(terrain);
    let both = files("model");
    let other = both.iter().find(|p| **p != arena_file).unwrap();
    std::fs::copy(other, &arena_file).unwrap();
    let (swapped, err) = info(ARENA);
    assert_eq!(swapped["cached"], false);
    assert!(err.contains("another map"), "{err}");
    assert_eq!(swapped["polygons"], fresh["polygons"]);
}

#[test]
fn a_byte_order_mark_is_read_and_bad_numbers_are_refused() {
    let cache = temp_dir("bom");
    let bom = cache.join("bom.map");
    let text = std::fs::read_to_string(ARENA).unwrap();
    std::fs::write(&bom, format!("\u{feff}{text}")).unwrap();
    let (out, err, ok) = expel(&["map", "info", bom.to_str().unwrap()], "", &cache);
    assert!(ok, "{err}");
    assert!(out.contains("\"solid_brushes\""));
    for (args, needle) in [
        (&["walk", "--seconds", "nan"][..], "--seconds"),
        (&["walk", "--seconds", "1e300"][..], "--seconds"),
        (
            &["sim", ARENA, "--tick-rate", "5", "--inputs", "x"][..],
            "tick_rate",
        ),
    ] {
        let (_, err, ok) = expel(args, "", &cache);
        assert!(!ok && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn sim_inputs_have_a_line_length_limit() {
    let cache = temp_dir("sim-long");
    let inputs = cache.join("long.jsonl");
    let long = format!("{{\"forward\":1{}}}\n", " ".repeat(1 << 20));
    std::fs::write(&inputs, format!("{{\"forward\":1}}\n{long}")).unwrap();
    let (out, err, ok) = expel(
        &["sim", ARENA, "--inputs", inputs.to_str().unwrap()],
        "",
        &cache,
    );
    assert!(!ok);
    assert!(
        err.contains("line 2") && err.contains("longer than"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 2, "hull line and one tick: {out}");
}

/// `expel serve` in the background: its first stdout line, and the child.
fn serve(args: &[&str], env: &[(&str, &std::path::Path)]) -> (std::process::Child, Value) {
    use std::io::BufRead;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_expel"));
    cmd.arg("serve")
        .args(args)
        .env_remove("EXPEL_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run expel serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (child, v)
}

fn terminate(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err)
}

#[test]
fn serve_prints_one_line_plays_a_client_and_exits_cleanly_on_sigterm() {
    let cache = temp_dir("serve");
    let (child, v) = serve(
        &[
            "--addr",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--secret",
            "cli-secret",
        ],
        &[("EXPEL_CACHE_DIR", &cache)],
    );
    let addr = v["listening"].as_str().unwrap().to_string();
    assert!(
        !addr.ends_with(":0") && addr.starts_with("127.0.0.1:"),
        "{v}"
    );
    assert_eq!(v["fingerprint"].as_str().unwrap().len(), 64);
    assert!(v["metrics"].is_string());
    assert_eq!(v["map"], "arena");
    assert_eq!(v["map_hash"].as_str().unwrap().len(), 64);
    assert_eq!(v["tick_rate"], 60);
    assert_eq!(v["movement"], "server", "authoritative by default");
    let (token, _, ok) = expel(
        &[
            "token",
            "--secret",
            "cli-secret",
            "--player",
            "4",
            "--ttl",
            "60",
        ],
        "",
        &cache,
    );
    assert!(ok);
    let inputs = cache.join("in.jsonl");
    std::fs::write(&inputs, "{\"forward\":1,\"yaw\":90}\n".repeat(120)).unwrap();
    let fp = v["fingerprint"].as_str().unwrap();
    let (out, err, ok) = expel(
        &[
            "connect",
            &addr,
            "--token",
            token.trim(),
            "--fingerprint",
            fp,
            "--inputs",
            inputs.to_str().unwrap(),
        ],
        "",
        &cache,
    );
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    for key in [
        "ticks",
        "snapshots",
        "corrections",
        "unexplained_corrections",
        "max_correction",
        "snapshots_lost",
        "inputs_missed",
        "moved",
        "rtt_ms_p50",
        "rtt_ms_p99",
        "down_bytes_per_s",
        "up_bytes_per_s",
    ] {
        assert!(r[key].is_number(), "{key} missing in {out}");
    }
    assert!(
        r["ticks"].as_u64().unwrap() >= 120 && r["snapshots"].as_u64().unwrap() > 30,
        "{out}"
    );
    // A clean link: every command in time from the first tick, nothing to correct.
    assert_eq!(r["corrections"], 0, "{out}");
    assert_eq!(r["inputs_missed"], 0, "{out}");
    assert_eq!(r["snapshots_lost"], 0, "{out}");
    // The HTTP endpoint: Prometheus text with the tick histogram, health and readiness.
    let http: std::net::SocketAddr = v["metrics"].as_str().unwrap().parse().unwrap();
    let get_with = |path: &str, headers: &str| {
        let (_, head, body) = common::http(http, path, headers, std::time::Duration::from_secs(10));
        format!("{head}\r\n\r\n{body}")
    };
    let get = |path: &str| get_with(path, "");
    let metrics = get("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    // The classic text by default; OpenMetrics for a reader that asks for it (Prometheus
    // does). Both well formed, with the same samples.
    let (head, classic) = metrics.split_once("\r\n\r\n").unwrap();
    // Header names are case-insensitive.
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let classic_samples = exposition_samples(classic, false);
    let open = get_with(
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    let (head, open) = open.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    let open_samples = exposition_samples(open, true);
    let names = |s: &[(String, f64)]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&classic_samples), names(&open_samples));
    assert!(classic_samples.len() > 100, "{classic}");
    for needle in [
        "# TYPE expel_tick_duration_seconds histogram",
        "expel_tick_duration_seconds_bucket{le=\"+Inf\"}",
        "expel_tick_duration_seconds_count",
        "expel_datagrams_in_total",
        "expel_bytes_out_total",
        "expel_inputs_missing_total",
        "expel_refusals_total{reason=\"token_forged\"}",
    ] {
        assert!(metrics.contains(needle), "{needle} missing");
    }
    // The I/O threads' account: every snapshot the client took left as a datagram the
    // sockets counted, and their CPU, by work, is real time the process spent (some of
    // it, and per datagram far under a millisecond).
    let sample = |name: &str| {
        expel_bots::metrics::sample(classic, name).unwrap_or_else(|| panic!("{name} missing"))
    };
    let (received, sent) = (
        sample("expel_udp_datagrams_total"),
        sample("expel_udp_sent_total"),
    );
    assert!(
        sent >= r["snapshots"].as_f64().unwrap(),
        "{sent} sent: {out}"
    );
    assert!(
        received > 0.0 && sent < 10.0 * received + 1000.0,
        "{received} {sent}"
    );
    let cpu = |work: &str| sample(&format!("expel_io_cpu_seconds_total{{work=\"{work}\"}}"));
    let (rx, tx, other) = (cpu("receive"), cpu("send"), cpu("other"));
    assert!(rx > 0.0 && tx > 0.0, "{rx} {tx}");
    assert!(rx + tx + other <= sample("process_cpu_seconds_total"));
    assert!(rx / received < 1e-3 && tx / sent < 1e-3, "{rx} {tx}");
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    assert!(get("/readyz").starts_with("HTTP/1.1 200"));
    assert!(get("/nope").starts_with("HTTP/1.1 404"));
    // A wrong fingerprint is refused by the client before any hello.
    let (_, err, ok) = expel(
        &[
            "connect",
            &addr,
            "--secret",
            "cli-secret",
            "--fingerprint",
            &"0".repeat(64),
            "--seconds",
            "1",
        ],
        "",
        &cache,
    );
    assert!(!ok && err.contains("fingerprint"), "{err}");
    let (status, err) = terminate(child);
    assert!(status.success(), "{status}: {err}");
}

#[test]
fn serve_reads_a_toml_config_with_flags_winning_and_generates_a_secret() {
    let cache = temp_dir("serve-config");
    let config = cache.join("server.toml");
    std::fs::write(
        &config,
        "addr = \"127.0.0.1:0\"\ntick_rate = 30\nsnapshot_rate = 10\nmax_players = 4\nmovement = \"client\"\n",
    )
    .unwrap();
    let (child, v) = serve(
        &["--config", config.to_str().unwrap(), "--tick-rate", "20"],
        &[("EXPEL_CACHE_DIR", &cache), ("XDG_STATE_HOME", &cache)],
    );
    assert_eq!(v["tick_rate"], 20, "the flag wins over the file");
    assert_eq!(v["movement"], "client", "from the file");
    // The HTTP endpoint defaults to the QUIC address and port, over TCP.
    assert_eq!(v["metrics"], v["listening"], "{v}");
    let secret = std::fs::read_to_string(cache.join("expel/secret")).unwrap();
    assert_eq!(secret.trim().len(), 64);
    let (status, err) = terminate(child);
    assert!(status.success(), "{status}: {err}");
    assert!(
        err.contains("secret") && err.contains("expel/secret"),
        "{err}"
    );
    std::fs::write(&config, "tick_rate = 30\nbogus = 1\n").unwrap();
    let (_, err, ok) = expel(&["serve", "--config", config.to_str().unwrap()], "", &cache);
    assert!(!ok && err.contains("bogus"), "{err}");
    std::fs::write(&config, "movement = \"both\"\n").unwrap();
    let (_, err, ok) = expel(&["serve", "--config", config.to_str().unwrap()], "", &cache);
    assert!(!ok && err.contains("unknown movement"), "{err}");
    let (_, err, ok) = expel(&["serve", "--movement", "clients"], "", &cache);
    assert!(
        !ok && err.contains("'clients'") && err.contains("server, client"),
        "{err}"
    );
    // A client budget below a few small snapshots a second, from the file or a flag.
    std::fs::write(&config, "client_budget = 100\n").unwrap();
    let (_, err, ok) = expel(&["serve", "--config", config.to_str().unwrap()], "", &cache);
    assert!(!ok && err.contains("client budget 100 B/s"), "{err}");
    let (_, err, ok) = expel(&["serve", "--client-budget", "2047"], "", &cache);
    assert!(!ok && err.contains("at least 2048"), "{err}");
}

/// Parses `expel validate` output: one verdict object per line.
fn verdicts(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn validate_accepts_every_tick_sim_prints_and_flags_a_teleport() {
    let cache = temp_dir("validate");
    for spawn in [None, Some("-300,-300,24.03125")] {
        let mut args = vec!["sim", ARENA, "--inputs", REPLAY];
        let mut vargs = vec!["validate", ARENA];
        if let Some(s) = spawn {
            args.extend(["--spawn", s]);
            vargs.extend(["--spawn", s]);
        }
        let (claims, err, ok) = expel(&args, "", &cache);
        assert!(ok, "{err}");
        let (out, err, ok) = expel(&vargs, &claims, &cache);
        assert!(ok, "{err}");
        let v = verdicts(&out);
        let sim: Vec<Value> = verdicts(&claims)
            .into_iter()
            .filter(|l| l.get("tick").is_some())
            .collect();
        assert_eq!(
            v.len(),
            sim.len(),
            "one verdict per claim, hull and hash skipped"
        );
        for (a, b) in v.iter().zip(&sim) {
            assert_eq!(a["tick"], b["tick"]);
            assert_eq!(a["accepted"], true, "{a}");
            assert_eq!(a["violation"], Value::Null);
            assert_eq!(a["origin"], b["origin"]);
        }
    }
    // The same claims with one moved 200 units: flagged that tick, left where it was.
    let (claims, _, _) = expel(&["sim", ARENA, "--inputs", REPLAY], "", &cache);
    let mut lines: Vec<Value> = verdicts(&claims);
    let x = lines[100]["origin"][0].as_f64().unwrap();
    lines[100]["origin"][0] = serde_json::json!(x + 200.0);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (out, err, ok) = expel(&["validate", ARENA], &text, &cache);
    assert!(ok, "{err}");
    let v = verdicts(&out);
    assert_eq!(v[99]["accepted"], false);
    assert_eq!(v[99]["violation"], "teleport");
    assert_eq!(v[99]["origin"], v[98]["origin"]);
    assert!(v[..99].iter().all(|l| l["accepted"] == true));
}

#[test]
fn validate_refuses_bad_values_and_huge_lines_without_a_panic() {
    let cache = temp_dir("validate-bad");
    let good = r#"{"tick":1,"origin":[-300,-300,24.03125],"velocity":[0,0,0],"on_ground":true,"crouched":false}"#;
    let huge = format!(
        r#"{{"tick":2,"origin":[0,0,0],"velocity":[0,0,0],"on_ground":true,"crouched":false,"pad":"{}"}}"#,
        "x".repeat(10 << 20)
    );
    let bad = [
        r#"{"tick":3,"origin":[NaN,0,0],"velocity":[0,0,0],"on_ground":true,"crouched":false}"#
            .to_string(),
        r#"{"tick":4,"origin":[1e400,0,0],"velocity":[0,0,0],"on_ground":true,"crouched":false}"#
            .to_string(),
        r#"{"tick":5,"origin":[1e12,0,0],"velocity":[0,0,0],"on_ground":true,"crouched":false}"#
            .to_string(),
        r#"{"tick":6,"origin":[0,0],"velocity":[0,0,0],"on_ground":true,"crouched":false}"#
            .to_string(),
        r#"{"tick":7,"origin":"here","velocity":[0,0,0],"on_ground":1,"crouched":false}"#
            .to_string(),
        "not json at all".to_string(),
    ];
    let input = format!("{good}\n{huge}\n{}\n", bad.join("\n"));
    let (out, err, ok) = expel(
        &["validate", ARENA, "--spawn", "-300,-300,24.03125"],
        &input,
        &cache,
    );
    assert!(!ok, "bad lines make the exit status fail");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("line 2") && err.contains("longer than"),
        "{err}"
    );
    assert!(err.contains("line 5"), "{err}");
    let v = verdicts(&out);
    assert_eq!(v.len(), 8, "a verdict for every line: {out}");
    assert_eq!(v[0]["accepted"], true);
    for l in &v[1..] {
        assert_eq!(l["accepted"], false, "{l}");
        assert_eq!(l["violation"], "invalid", "{l}");
        assert_eq!(l["origin"], v[0]["origin"], "the player stays put");
    }
}

/// The model cache stays within `EXPEL_CACHE_MAX_MB`, evicting the least recently used
/// model (a cache hit counts as a use) and never the one just built.
#[test]
fn the_model_cache_is_bounded_and_evicts_the_least_recently_used() {
    let cache = temp_dir("lru");
    let root = env!("CARGO_MANIFEST_DIR");
    let info = |map: &str, max_mb: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_expel"))
            .args(["map", "info", &format!("{root}/maps/{map}")])
            .env("EXPEL_CACHE_DIR", &cache)
            .env("EXPEL_CACHE_MAX_MB", max_mb)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["cached"].as_bool().unwrap()
    };
    let files = || -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert!(!info("arena.map", "512"));
    let arena = files();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!info("terrain.map", "512"));
    let terrain: u64 = files().iter().map(|f| f.1).sum::<u64>() - arena[0].1;
    // A hit on the arena makes the terrain the least recently used...
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(info("arena.map", "512"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    // ...so a bound that holds the arena and the curves but not all three evicts the
    // terrain, not the arena.
    let curves = {
        let out = Command::new(env!("CARGO_BIN_EXE_expel"))
            .args(["map", "info", &format!("{root}/maps/curves.map")])
            .env("EXPEL_CACHE_DIR", cache.join("sizes"))
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::read_dir(cache.join("sizes"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .metadata()
            .unwrap()
            .len()
    };
    std::fs::remove_dir_all(cache.join("sizes")).unwrap();
    assert!(terrain > 1024);
    let mb = (arena[0].1 + curves + 1024) as f64 / (1024.0 * 1024.0);
    assert!(!info("curves.map", &format!("{mb}")));
    let left = files();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&arena[0]), "the arena was evicted: {left:?}");
    assert!(left.iter().map(|f| f.1).sum::<u64>() as f64 <= mb * 1024.0 * 1024.0 + 1e6);
    // A bound of zero keeps only the model just built.
    assert!(!info("terrain.map", "0"));
    assert_eq!(files().len(), 1);
}

/// On every shipped map, a lone client on a clean loopback link walking, turning,
/// jumping and crouching (10 s; `EXPEL_CLEAN_SECONDS`, half a minute in `tests/long.sh`)
/// sends every command in time from its first tick (the server counts none missing or
/// late) and sees no correction its prediction is to blame for.
#[test]
fn a_lone_client_on_a_clean_link_is_never_corrected_on_any_shipped_map() {
    let seconds: u64 = std::env::var("EXPEL_CLEAN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let maps = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("maps");
    let mut files: Vec<_> = std::fs::read_dir(&maps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "map"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let ticks = seconds * 60;
    let inputs: String = (0..ticks)
        .map(|t| {
            let yaw = (t as f64 * 0.7) % 360.0;
            let jump = t % 90 < 2;
            let crouch = (t / 300) % 4 == 3;
            format!("{{\"forward\":1,\"side\":0.3,\"yaw\":{yaw},\"jump\":{jump},\"crouch\":{crouch}}}\n")
        })
        .collect();
    for map in files {
        let name = map.file_stem().unwrap().to_string_lossy().to_string();
        let cache = temp_dir(&format!("clean-{name}"));
        let (child, v) = serve(
            &[
                map.to_str().unwrap(),
                "--addr",
                "127.0.0.1:0",
                "--metrics",
                "127.0.0.1:0",
                "--secret",
                "clean-secret",
            ],
            &[("EXPEL_CACHE_DIR", &cache)],
        );
        let (token, _, ok) = expel(
            &[
                "token",
                "--secret",
                "clean-secret",
                "--player",
                "1",
                "--ttl",
                "600",
            ],
            "",
            &cache,
        );
        assert!(ok);
        let file = cache.join("in.jsonl");
        std::fs::write(&file, &inputs).unwrap();
        let (out, err, ok) = expel(
            &[
                "connect",
                v["listening"].as_str().unwrap(),
                "--token",
                token.trim(),
                "--fingerprint",
                v["fingerprint"].as_str().unwrap(),
                "--inputs",
                file.to_str().unwrap(),
            ],
            "",
            &cache,
        );
        assert!(ok, "{name}: {err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        let http: std::net::SocketAddr = v["metrics"].as_str().unwrap().parse().unwrap();
        let metrics = common::http_get(http, "/metrics").1;
        let counter = |name: &str| -> f64 {
            expel_bots::metrics::sample(&metrics, name).unwrap_or_else(|| panic!("{name} missing"))
        };
        let (missing, late) = (
            counter("expel_inputs_missing_total"),
            counter("expel_inputs_late_total"),
        );
        println!(
            "{name}: {} ticks, {} corrections, {} inputs missed, server missing {missing} late {late}",
            r["ticks"], r["corrections"], r["inputs_missed"]
        );
        assert!(r["ticks"].as_u64().unwrap() >= ticks, "{name}: {out}");
        // Every command in time, and no correction the prediction itself is to blame for.
        // A correction where the server's move met a mover is counted and allowed: one
        // was seen in 60 s on the stress map (a known miss, not yet understood).
        assert_eq!(r["unexplained_corrections"], 0, "{name}: {out}");
        assert!(r["corrections"].as_u64().unwrap() <= 2, "{name}: {out}");
        assert_eq!(r["inputs_missed"], 0, "{name}: {out}");
        assert_eq!((missing, late), (0.0, 0.0), "{name}: {out}");
        let (status, err) = terminate(child);
        assert!(status.success(), "{name}: {status}: {err}");
    }
}

/// The samples of a Prometheus exposition (`name{labels}`, value), checked against the
/// format's rules: in the classic text (version 0.0.4) a counter's or gauge's samples are
/// named as its family, in OpenMetrics a counter's are the family with `_total` and the
/// text ends with `# EOF`; a histogram has `_bucket` (cumulative, ending at `+Inf` with
/// the count), `_sum` and `_count`; every family is typed once, after its help; no
/// sample repeats.
fn exposition_samples(text: &str, openmetrics: bool) -> Vec<(String, f64)> {
    let mut samples = Vec::new();
    let mut typed = std::collections::BTreeSet::new();
    let (mut family, mut kind, mut help) = (String::new(), String::new(), String::new());
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let mut count = None;
    // A histogram's buckets end at +Inf, which holds its count.
    let whole = |kind: &str, buckets: &[(f64, f64)], count: Option<f64>| {
        if kind == "histogram" {
            let last = buckets.last().expect("buckets");
            assert!(
                last.0.is_infinite() && Some(last.1) == count,
                "{buckets:?} {count:?}"
            );
        }
    };
    let body = if openmetrics {
        text.strip_suffix("# EOF\n")
            .expect("OpenMetrics ends with # EOF")
    } else {
        assert!(!text.contains("# EOF"), "no EOF in the classic text");
        text
    };
    let valid_name = |n: &str| {
        n.chars().enumerate().all(|(i, c)| {
            c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
        }) && !n.is_empty()
    };
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').expect("help text").0.to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').expect("a type");
            assert_eq!(name, help, "the help comes first");
            assert!(valid_name(name) && typed.insert(name.to_string()), "{line}");
            assert!(["counter", "gauge", "histogram"].contains(&t), "{line}");
            whole(&kind, &buckets, count);
            (family, kind) = (name.to_string(), t.to_string());
            buckets.clear();
            continue;
        }
        assert!(!line.starts_with('#'), "an unknown comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let name = series.split('{').next().unwrap();
        assert!(valid_name(name), "{line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
        }
        let suffix = name
            .strip_prefix(family.as_str())
            .unwrap_or_else(|| panic!("{name} outside its family {family}"));
        match (kind.as_str(), suffix) {
            ("counter", "_total") if openmetrics => {}
            ("counter", "") if !openmetrics => {}
            ("gauge", "") => {}
            ("histogram", "_bucket") => {
                let le = series
                    .split("le=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                if let Some(&(b, c)) = buckets.last() {
                    assert!(
                        le > b && value >= c,
                        "buckets ascend and accumulate: {line}"
                    );
                }
                buckets.push((le, value));
            }
            ("histogram", "_sum") => {}
            ("histogram", "_count") => count = Some(value),
            _ => panic!("{name} cannot be a sample of {kind} {family}"),
        }
        samples.push((series.to_string(), value));
    }
    whole(&kind, &buckets, count);
    let mut unique: Vec<_> = samples.iter().map(|(s, _)| s).collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), samples.len(), "a sample repeats");
    samples
}

/// `expel shots`: one line per shot line; a straight rocket's impact is where the map's own
/// trace along its line stops; bouncing grenades come to rest above the floor; movers
/// are named; bad lines are errors naming their line, and the rest go on.
#[test]
fn shots_print_each_shots_impacts_and_skip_bad_lines() {
    let cache = temp_dir("shots");
    let shots = [
        // Rockets at the arena's outer wall (x = 1024), head-on, slow and very fast.
        r#"{"start":[0,0,64],"dir":[1,0,0],"speed":1000,"ticks":120}"#,
        r#"{"start":[0,-600,64],"dir":[1,0,0],"speed":20000,"ticks":120}"#,
        // A box grenade falling and bouncing to rest on the floor (top at z = 0).
        r#"{"start":[-300,-300,40],"dir":[0.3,0.1,0.5],"speed":500,"mins":[-3,-3,-3],"maxs":[3,3,3],"gravity":800,"bounce":0.5,"ticks":600}"#,
        "not json",
        r#"{"start":[0,0,64],"dir":[0,0,0],"speed":100}"#,
        r#"{"start":[0,0,64],"dir":[1,0,0],"speed":-5}"#,
        r#"{"start":[0,0,64],"dir":[1,0,0],"speed":5,"bounce":2}"#,
        r#"{"start":[0,0,64],"dir":[1,0,0],"speed":5,"ticks":100000000}"#,
        r#"{"start":[0,0,64],"dir":[1,0,0],"speed":5,"mins":[1,1,1],"maxs":[0,0,0]}"#,
        r#"{"start":[0,0,1e300],"dir":[1,0,0],"speed":5}"#,
        // The fan (mover 2) sweeps through x 750..850 at y -850.
        r#"{"start":[800,-700,24],"dir":[0,-1,0],"speed":2000,"ticks":60}"#,
    ]
    .join("\n");
    let (out, err, ok) = expel(&["shots", ARENA], &shots, &cache);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 11, "{out}");
    for (i, start) in [(0usize, [0.0, 0.0, 64.0]), (1, [0.0, -600.0, 64.0])] {
        let imp = lines[i]["impacts"].as_array().unwrap();
        assert_eq!(imp.len(), 1, "{}", lines[i]);
        assert_eq!(imp[0]["hit"], "world");
        assert_eq!(lines[i]["state"], "stopped");
        // The map's own trace of the same line.
        let req = format!(
            r#"{{"start":{start:?},"end":[{},{},{}]}}"#,
            start[0] + 5000.0,
            start[1],
            start[2]
        );
        let (t, _, ok) = expel(&["map", "trace", ARENA], &req, &cache);
        assert!(ok);
        let t: Value = serde_json::from_str(t.trim()).unwrap();
        for a in 0..3 {
            let (p, q) = (
                imp[0]["point"][a].as_f64().unwrap(),
                t["endpos"][a].as_f64().unwrap(),
            );
            assert!(
                (p - q).abs() < 0.01,
                "shot {i}: {p} against the trace's {q}"
            );
        }
        assert_eq!(imp[0]["normal"], t["normal"]);
    }
    let g = &lines[2];
    assert_eq!(g["state"], "resting", "{g}");
    let bounces = g["impacts"].as_array().unwrap();
    assert!(bounces.len() >= 3, "{g}");
    let z = g["end"][2].as_f64().unwrap();
    assert!(z > 3.0 && z < 3.1, "the grenade rests on the floor: {z}");
    let mut last_tick = 0;
    for b in bounces {
        let t = b["tick"].as_u64().unwrap();
        assert!(t >= last_tick, "impacts in order: {g}");
        last_tick = t;
    }
    for (i, l) in lines.iter().enumerate().take(10).skip(3) {
        let e = l["error"]
            .as_str()
            .unwrap_or_else(|| panic!("line {}: {l}", i + 1));
        assert!(e.starts_with(&format!("line {}: ", i + 1)), "{e}");
    }
    assert!(err.contains("line 4"), "stderr names the bad lines: {err}");
    assert_eq!(
        lines[10]["impacts"][0]["hit"],
        serde_json::json!({"mover": 2})
    );
}
