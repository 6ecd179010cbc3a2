//! Recordings of matches played again: a deathmatch on the simulated network (loss,
//! jitter, a backtrack cheater and a rapidfire one, both kicked) is recorded as it is
//! played and replayed from its bytes alone, every tick's hash equal and every violation
//! counted again in order; a recording made by a release build (tests/data) replays in
//! this build with equal hashes; damaged files give their byte offset, never a panic.

mod chrome;
mod common;

use common::network_with;
use expel_core::{MoveCommand, PlayerId, Sim};
use expel_modes::deathmatch::{actions, eye, Deathmatch};
use expel_protocol::client::{ClientMachine, Tamper};
use expel_protocol::conditioner::Impairment;
use expel_protocol::predict::Predictor;
use expel_protocol::record::{Replay, ReplayError, Replayed};
use expel_protocol::server::Event;
use expel_protocol::simnet::SimNet;
use expel_protocol::InputMsg;
use glam::DVec3;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A recording made by a release build (`EXPEL_WRITE_RECORDING=tests/data/deathmatch.rec
/// cargo test --release --test replay`), replayed by whatever build runs the suite.
const RELEASE_RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/deathmatch.rec");

/// Claims views older than it drew.
struct Backtrack;

impl Tamper for Backtrack {
    fn input(&mut self, _: &Sim, _: &Predictor, _: u64, msg: &mut InputMsg) {
        for v in &mut msg.views {
            if v.back > 0 {
                v.back = v.back.saturating_add(16);
            }
        }
    }
}

/// Aims at the nearest other it draws, holding the trigger (every other tick only:
/// `rapid`).
fn shoot(c: &ClientMachine, tick: u64, rapid: bool) -> MoveCommand {
    let (Some(me), others) = (c.local_player(), c.others_drawn(f64::MAX)) else {
        return MoveCommand::default();
    };
    let from = eye(&me);
    let Some(to) = (others.values())
        .map(|o| o.origin + DVec3::new(0.0, 0.0, 10.0))
        .min_by(|a, b| a.distance(from).total_cmp(&b.distance(from)))
    else {
        return MoveCommand::default();
    };
    let d = to - from;
    let yaw = d.y.atan2(d.x).to_degrees();
    let pitch = -(d.z.atan2(d.truncate().length())).to_degrees();
    let fire = if rapid && tick.is_multiple_of(2) {
        0
    } else {
        actions::FIRE
    };
    MoveCommand::new(0.3, 0.0, 0.0, yaw, pitch).with_actions(fire, 0)
}

/// An honest player's walk: forward, strafing in turns, turning slowly.
fn wander(tick: u64, i: usize) -> MoveCommand {
    let side = if (tick / 40).is_multiple_of(2) {
        1.0
    } else {
        -1.0
    };
    let yaw = 45.0 * i as f64 + tick as f64 * 0.5;
    MoveCommand::new(1.0, side, 0.0, yaw, 0.0)
}

/// Plays a recorded deathmatch of `n` clients for `secs`: the recording's bytes, the
/// violations the server counted (player, kind, evidence) and its last world hash.
fn play(n: u32, secs: u64, seed: u64) -> (Vec<u8>, Vec<(PlayerId, String, String)>, u64) {
    let link = Impairment {
        loss: 0.05,
        delay_ms: 40.0,
        jitter_ms: 15.0,
        duplicate: 0.01,
    };
    let mut net: SimNet = network_with(n, link, seed, |_| {});
    let server = net.server_mut();
    server.set_rules(Box::new(Deathmatch::new()));
    server.start_recording("deathmatch", common::UNIX).unwrap();
    net.client_mut(0).set_tamper(Box::new(Backtrack));
    let mut bytes = Vec::new();
    let mut violations = Vec::new();
    let take = |net: &mut SimNet, bytes: &mut Vec<u8>| {
        while let Some(b) = net.server_mut().poll_record() {
            bytes.extend_from_slice(&b);
        }
    };
    for _ in 0..secs * 4 {
        net.run(Duration::from_millis(250), &mut |i, c| {
            let tick = c.predicted_tick();
            match i {
                0 | 1 => shoot(c, tick, i == 1),
                _ if i % 3 == 0 => shoot(c, tick, false),
                _ => wander(tick, i),
            }
        });
        take(&mut net, &mut bytes);
    }
    net.server_mut().shutdown("the test is over");
    take(&mut net, &mut bytes);
    for e in net.events() {
        if let Event::Violation {
            player,
            kind,
            evidence,
        } = e
        {
            violations.push((*player, kind.name().to_string(), evidence.clone()));
        }
    }
    let hash = net.server().world().hash();
    (bytes, violations, hash)
}

/// What a replay gave: the violations it counted, its last world hash, the ticks it
/// stepped, and whether it reached the recording's end.
type Outcome = (Vec<(PlayerId, String, String)>, u64, u64, bool);

/// Replays `bytes` as far as they go.
fn replay(bytes: &[u8]) -> Result<Outcome, ReplayError> {
    let (sim, map) = common::arena();
    let opened = Replay::open(bytes)?;
    #[allow(clippy::disallowed_methods)] // the replay's time base
    let now = std::time::Instant::now();
    let rules = Box::new(Deathmatch::new());
    let mut r = Replay::new(opened, sim, map, Some(rules), now)?;
    let mut ticks = 0;
    let ended = loop {
        match r.step()? {
            Replayed::Tick(_) => ticks += 1,
            Replayed::Part => break false,
            Replayed::End(_) => break true,
        }
    };
    assert_eq!(r.hashes().0, ticks, "a hash after every tick");
    let v = (r.violations().iter())
        .map(|c| (c.player, c.kind.name().to_string(), c.evidence.clone()))
        .collect();
    Ok((v, r.machine().world().hash(), ticks, ended))
}

#[test]
fn a_recorded_deathmatch_replays_bit_for_bit_with_its_violations() {
    let (bytes, violations, hash) = play(8, 20, 5);
    let kinds: Vec<&str> = violations.iter().map(|v| v.1.as_str()).collect();
    assert!(kinds.contains(&"backtrack"), "{kinds:?}");
    assert!(kinds.contains(&"rules"), "{kinds:?}");
    let (again, replayed_hash, ticks, ended) = replay(&bytes).unwrap();
    assert!(ended);
    println!(
        "{} bytes for 8 players over {ticks} ticks ({:.0} B per player-minute), {} violations",
        bytes.len(),
        bytes.len() as f64 / 8.0 / (ticks as f64 / 60.0 / 60.0),
        again.len()
    );
    println!("bytes by entry: {:?}", by_entry(&bytes));
    assert_eq!(again, violations);
    assert_eq!(replayed_hash, hash);
    if let Some(path) = std::env::var_os("EXPEL_WRITE_RECORDING") {
        std::fs::write(path, &bytes).unwrap();
    }
}

#[test]
fn a_release_build_s_recording_replays_with_equal_hashes() {
    let bytes = std::fs::read(RELEASE_RECORDING).expect("the repository's recording");
    let (violations, _, ticks, ended) = replay(&bytes).unwrap();
    assert!(ended);
    assert!(ticks > 600, "{ticks} ticks");
    assert!(!violations.is_empty());
}

#[test]
fn damaged_recordings_say_where_and_never_panic() {
    let (bytes, _, _) = play(4, 4, 9);
    // Foreign bytes.
    let e = replay(b"GIF89a this is not a recording").unwrap_err();
    assert!(e.to_string().contains("byte 0"), "{e}");
    // Cut short anywhere: an error with an offset, or the replay stops at a part's end.
    for cut in [5, 12, 40, bytes.len() / 3, bytes.len() - 3] {
        let e = std::panic::catch_unwind(|| replay(&bytes[..cut]));
        match e {
            Ok(Err(e)) => assert!(e.to_string().contains("byte"), "{e}"),
            Ok(Ok((_, _, _, ended))) => assert!(!ended, "a recording cut at {cut} replayed whole"),
            Err(_) => panic!("cut at {cut}: a panic"),
        }
    }
    // A flipped byte in a block: its check says so, at the block's offset.
    let mut bad = bytes.clone();
    let i = bytes.len() / 2;
    bad[i] ^= 0x40;
    let e = replay(&bad).unwrap_err();
    assert!(matches!(e, ReplayError::File(_)), "{e}");
}

/// A recording's entries by kind: how many, and their bytes before deflating.
fn by_entry(bytes: &[u8]) -> std::collections::BTreeMap<String, (usize, usize)> {
    let (_, mut blocks) = Replay::open(bytes).unwrap();
    let mut out = std::collections::BTreeMap::new();
    while let Some((at, payload)) = blocks.next_block().unwrap() {
        for (_, e) in expel_protocol::record::entries(&payload, at).unwrap() {
            let name = match &e {
                expel_protocol::record::Entry::Call { call, .. } => format!("{call:?}"),
                _ => format!("{e:?}"),
            };
            let name = name.split([' ', '(', '{']).next().unwrap_or("").to_string();
            let slot = out.entry(name).or_insert((0, 0));
            slot.0 += 1;
            slot.1 += postcard::to_allocvec(&e).unwrap().len();
        }
    }
    out
}

/// What the replay's page shows: the timeline's place, frames shown, the violation
/// selected and whether its evidence was drawn, how many players are ringed.
const PROBE: &str = r#"(() => {
  const v = window.expelView, r = v && v.recording;
  if (!r) return null;
  return {frame: r.frame, shown: r.shown, playing: r.playing, evidence: r.evidenceDrawn,
          flagged: v.flagged, players: Object.keys(v.players).length, error: v.error,
          polygons: v.drawnPolygons, text: document.getElementById("evidence").textContent};
})()"#;

/// The recording in the operator's live view (`expel replay FILE --view`) in headless
/// Chromium: the timeline moves, a backtrack flag seeks to its shot, the flagged player
/// ringed and the players' boxes rewound to the shot's view drawn; a screenshot kept.
#[test]
fn the_live_view_plays_a_recording_in_a_real_browser() {
    let Some(browser) = chrome::chromium() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("expel-replay-view-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (bytes, violations, _) = play(8, 20, 5);
    let file = dir.join("match.rec");
    std::fs::write(&file, &bytes).unwrap();
    let mut replay = expel_testkit::process::Kill(
        Command::new(env!("CARGO_BIN_EXE_expel"))
            .arg("replay")
            .arg(&file)
            .arg("--view")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run expel replay"),
    );
    let mut lines = BufReader::new(replay.0.stdout.take().unwrap()).lines();
    let summary: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(summary["all_equal"], true, "{summary}");
    let url = summary["view"]
        .as_str()
        .expect("the view's address")
        .to_string();
    let n = 1
        + (violations.iter())
            .position(|v| v.1 == "backtrack")
            .expect("a backtrack flag");
    let mut chrome = chrome::Browser::open(browser, &url, &dir.join("chromium"), &[]);
    let page = &mut chrome.page;
    let wait = |page: &mut chrome::Page, what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = page.eval(PROBE);
            if ok(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: {v}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // It plays: the map drawn, the timeline moving, the players shown.
    let first = wait(page, "the replay never played", &|v| {
        v["shown"].as_u64() >= Some(5)
    });
    assert!(
        first["error"].is_null() && first["polygons"].as_u64() > Some(10),
        "{first}"
    );
    let later = wait(page, "the timeline stood still", &|v| {
        v["frame"].as_u64() > first["frame"].as_u64().map(|f| f + 5)
    });
    assert!(later["players"].as_u64() >= Some(6), "{later}");
    // The backtrack flag: the timeline seeks to it and stops; the cheater ringed, the
    // boxes rewound to its shot's view drawn.
    page.eval(&format!("window.expelView.recording.select({n})"));
    let shown = wait(page, "the flag's evidence was never drawn", &|v| {
        v["evidence"].as_u64() >= Some(1) && v["playing"] == false
    });
    assert!(shown["flagged"].as_u64() >= Some(1), "{shown}");
    assert!(
        shown["text"].as_str().unwrap().contains("view of tick"),
        "{shown}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let still = page.eval(PROBE);
    assert_eq!(still["frame"], shown["frame"], "paused");
    let png = page.screenshot();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    let shots = std::env::var_os("EXPEL_SCREENSHOTS").map_or(dir.clone(), std::path::PathBuf::from);
    std::fs::write(shots.join("replay-view.png"), &png).unwrap();
    drop(chrome);
    drop(replay);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `expel` with `args`: its stdout as JSON if it succeeded, else its stderr.
fn expel(args: &[&str]) -> Result<serde_json::Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(args)
        .output()
        .expect("run expel");
    if out.status.success() {
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}")))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Over real QUIC: `expel serve --record` while bots play deathmatch (a speed cheater
/// among them), stopped by SIGTERM; `expel replay` plays its file again with every hash
/// equal and the flags the server logged counted again; `--to` prints a tick's world and
/// `--violation` a flag; a damaged copy fails with its byte offset.
#[test]
fn expel_serve_records_and_expel_replay_plays_it_again() {
    let dir = std::env::temp_dir().join(format!("expel-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rec = dir.join("rec");
    let mut server = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["serve", "--addr", "127.0.0.1:0", "--mode", "deathmatch"])
        .args(["--secret", "record-secret", "--record"])
        .arg(&rec)
        .env("EXPEL_CACHE_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run expel serve");
    let ready = common::ready_line(&mut server);
    let file = ready["recording"]
        .as_str()
        .expect("the recording's file")
        .to_string();
    assert!(file.starts_with(rec.to_str().unwrap()), "{ready}");
    let bots = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["bots", "--server", ready["listening"].as_str().unwrap()])
        .args(["--secret", "record-secret", "--fingerprint"])
        .arg(ready["fingerprint"].as_str().unwrap())
        .args(["--count", "6", "--duration", "10", "--fire"])
        .args(["--cheat", "speed", "--cheat-after", "0.5"])
        .env("EXPEL_CACHE_DIR", &dir)
        .output()
        .expect("run expel bots");
    assert!(
        bots.status.success(),
        "{}",
        String::from_utf8_lossy(&bots.stderr)
    );
    // What the server flagged, by player and kind, to find again in the replay.
    let host = ready["metrics"].as_str().unwrap();
    let flagged: serde_json::Value =
        serde_json::from_str(&chrome::get(host, "/players.json")).unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(server.wait().unwrap().success());

    let summary = expel(&["replay", &file]).unwrap();
    assert_eq!(summary["all_equal"], true, "{summary}");
    let ticks = summary["ticks"].as_u64().unwrap();
    assert!(ticks > 300, "{summary}");
    assert_eq!(summary["hashes_checked"].as_u64(), Some(ticks), "{summary}");
    assert!(summary["ended"].is_string(), "{summary}");
    assert!(summary["most_players"].as_u64() >= Some(6), "{summary}");
    let flags = summary["violations"].as_array().unwrap();
    assert!(flags.iter().any(|v| v["kind"] == "speed"), "{summary}");
    let mut counted = std::collections::BTreeMap::<(u64, String), u64>::new();
    for v in flags {
        let key = (
            v["player"].as_u64().unwrap(),
            v["kind"].as_str().unwrap().to_string(),
        );
        *counted.entry(key).or_default() += 1;
    }
    let mut logged = std::collections::BTreeMap::new();
    for p in flagged["players"].as_array().unwrap() {
        for (kind, n) in p["violations"].as_object().unwrap() {
            let key = (p["id"].as_u64().unwrap(), kind.clone());
            logged.insert(key, n.as_u64().unwrap());
        }
    }
    assert_eq!(counted, logged, "the replay's flags and the server's");
    let world = expel(&["replay", &file, "--to", "240"]).unwrap();
    assert_eq!(world["tick"], 240, "{world}");
    assert!(!world["players"].as_array().unwrap().is_empty(), "{world}");
    let first = expel(&["replay", &file, "--violation", "1"]).unwrap();
    assert_eq!(first["violation"], flags[0], "{first}");

    let mut bytes = std::fs::read(&file).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x20;
    let bad = dir.join("bad.rec");
    std::fs::write(&bad, &bytes).unwrap();
    let err = expel(&["replay", bad.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("byte") && err.contains("corrupt"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
