//! Networked play end to end: the real server and real clients over QUIC on loopback.

mod common;

use common::*;
use expel_bots::{run_cheating, Cheats};
use expel_bots::{RunOptions, RunReport};
use expel_client::{ClientError, Impairment, Trust};
use expel_core::validate::ViolationKind;
use expel_core::{MoveCommand, PlayerState};
use expel_protocol::frame::encode_frame;
use expel_protocol::{ClientControl, ServerControl, ALPN};
use expel_server::{Identity, Server};
use std::time::Duration;

/// One networked test at a time: they measure timing-sensitive behaviour (commands
/// arriving before their tick) and the machines have two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The recorded inputs, as `expel sim` reads them.
fn replay() -> Vec<MoveCommand> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/replay.jsonl"
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
            let mut b = 0;
            if v["jump"].as_bool() == Some(true) {
                b |= expel_core::movement::buttons::JUMP;
            }
            if v["crouch"].as_bool() == Some(true) {
                b |= expel_core::movement::buttons::CROUCH;
            }
            MoveCommand::new(f("forward"), f("side"), f("up"), f("yaw"), f("pitch")).with_buttons(b)
        })
        .collect()
}

fn player(list: Vec<MoveCommand>) -> impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand> {
    let mut i = 0;
    move |_, _| {
        i += 1;
        list.get(i - 1).copied()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_through_the_server_is_predicted_bit_for_bit() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(8).await;
    let joined = expel_client::connect(r.addr, &options(&r, 1))
        .await
        .unwrap();
    assert!(joined.welcome.sending_map, "the client had no map");
    let report = expel_bots::run(
        joined,
        player(replay()),
        RunOptions {
            seconds: 60.0,
            // A generous lead: a busy machine's stall must not make a command late.
            buffer_ticks: 6.0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.stats.predict.corrections, 0, "{report:?}");
    assert!(report.stats.final_match);
    assert!(report.stats.predict.snapshots > 400, "{report:?}");
    assert!(report.stats.ticks >= 900);
    assert_eq!(r.metrics.machine().corrections, 0);
    assert_eq!(r.metrics.machine().inputs.late, 0);
    r.shutdown("test over").await;
}

/// A server that asks for inputs at half its tick rate gets one datagram every other
/// tick, each with the commands since the last: every command is applied on its tick,
/// none is late or missing after the start, and the replay is still predicted bit for
/// bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_half_the_input_rate_every_command_arrives_in_half_the_datagrams() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server_with(8, |c| c.settings.input_rate = Some(30)).await;
    let joined = expel_client::connect(r.addr, &options(&r, 1))
        .await
        .unwrap();
    assert_eq!(joined.welcome.input_rate, 30);
    let report = expel_bots::run(
        joined,
        player(replay()),
        RunOptions {
            seconds: 20.0,
            buffer_ticks: 6.0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let st = &report.stats;
    assert_eq!(st.predict.corrections, 0, "{report:?}");
    assert!(st.final_match);
    assert!(st.ticks >= 900, "{report:?}");
    // One datagram every other tick (rounding at the ends).
    assert!(
        st.datagrams_out.abs_diff(st.ticks / 2) <= 2,
        "{} datagrams for {} ticks",
        st.datagrams_out,
        st.ticks
    );
    let applied = r.metrics.machine().inputs.applied;
    assert!(
        applied + 4 >= st.ticks - 8,
        "{applied} applied of {} ticks",
        st.ticks
    );
    assert_eq!(r.metrics.machine().inputs.late, 0);
    assert!(violations(&r).is_empty(), "{:?}", violations(&r));
    // QUIC's own bytes of each datagram down: a short header with no connection id (the
    // client's is empty), its packet number, the tag, the datagram frame's head and an
    // acknowledgement without ECN counts (the server reads no marks).
    let quic =
        (report.down_bytes_per_s - report.down_payload_bytes_per_s) / report.down_datagrams_per_s;
    eprintln!(
        "down: {:.0} B/s in {:.1} datagrams a second, of it QUIC's own {quic:.1} bytes a datagram",
        report.down_bytes_per_s, report.down_datagrams_per_s
    );
    assert!(quic <= 32.0, "{quic:.1} bytes a datagram: {report:?}");
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_loss_delay_jitter_and_duplication_predictions_converge() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(8).await;
    let joined = expel_client::connect(r.addr, &options(&r, 2))
        .await
        .unwrap();
    let inputs = replay();
    let sent = inputs.len() as u64;
    let report = expel_bots::run(
        joined,
        player(inputs),
        RunOptions {
            seconds: 20.0,
            link: bad_link(),
            buffer_ticks: 4.0,
            seed: 7,
            light: false,
            fire: false,
            ..RunOptions::default()
        },
    )
    .await
    .unwrap();
    let m = &r.metrics;
    let applied = m.machine().inputs.applied;
    let missing = m.machine().inputs.missing;
    let late = m.machine().inputs.late;
    eprintln!(
        "ticks {} snapshots {} corrections {} (max {:.3}); server applied {applied} missing {missing} late {late} duplicate {}",
        report.stats.ticks,
        report.stats.predict.snapshots,
        report.stats.predict.corrections,
        report.stats.predict.max_correction,
        m.machine().inputs.duplicate
    );
    // No command applied twice: never more applied than the client made.
    assert!(
        applied <= report.stats.ticks,
        "{applied} applied of {} ticks",
        report.stats.ticks
    );
    // None skipped silently: every tick the server stepped for the client is accounted.
    assert!(
        applied + missing >= sent - 40,
        "{applied} + {missing} of {sent}"
    );
    assert!(m.machine().inputs.duplicate > 0, "redundant copies arrive");
    // Honest play through a bad link is never flagged.
    assert_eq!(violations(&r), vec![], "an honest client was flagged");
    // Whatever corrections happened, the prediction ends equal to the server.
    assert!(report.stats.final_match, "{report:?}");
    assert!(report.stats.predict.snapshots > 300);
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_keep_their_snapshots_for_twenty_seconds() {
    let _serial = SERIAL.lock().await;
    // Sixty-four handshakes at once starve a loaded two-core machine for seconds; the
    // production input timeout (10 s) applies, not the short one other tests use.
    let (r, sim, bytes) =
        server_with(64, |c| c.settings.input_timeout = Duration::from_secs(10)).await;
    let mut tasks = Vec::new();
    for id in 0..64u32 {
        let mut o = options(&r, 100 + id);
        o.have_map = Some(bytes.clone());
        o.sim = Some(sim.clone());
        let addr = r.addr;
        tasks.push(tokio::spawn(async move {
            let j = expel_client::connect(addr, &o).await?;
            let opts = RunOptions {
                seconds: 20.0,
                seed: id as u64,
                ..Default::default()
            };
            expel_bots::run(j, wander(id), opts).await
        }));
    }
    let mut reports: Vec<RunReport> = Vec::new();
    for t in tasks {
        reports.push(t.await.unwrap().unwrap());
    }
    for (i, rep) in reports.iter().enumerate() {
        assert!(
            rep.ended_by_server.is_none(),
            "client {i}: {:?}",
            rep.ended_by_server
        );
        // 30 snapshots a second for 20 s; on two cores shared by the server and 64
        // clients some are late or lost, but none of the clients goes without for long.
        assert!(
            rep.stats.predict.snapshots > 300,
            "client {i}: {} snapshots",
            rep.stats.predict.snapshots
        );
        assert!(
            rep.stats.max_snapshot_gap <= 60,
            "client {i}: {} ticks without a snapshot",
            rep.stats.max_snapshot_gap
        );
    }
    let m = &r.metrics;
    let flagged: Vec<(&str, u64)> = violations(&r)
        .into_iter()
        .filter(|(k, _)| *k != "divergence")
        .collect();
    assert!(flagged.is_empty(), "honest clients flagged: {flagged:?}");
    // Divergence is reported, not acted on, in a crowd (see `Validator::record`).
    eprintln!(
        "divergence reports: {}",
        count(&r, ViolationKind::Divergence)
    );
    assert_eq!(m.machine().kicks, 0);
    assert_eq!(m.machine().malformed_control, 0, "a goodbye was miscounted");
    let down: f64 = reports.iter().map(|r| r.down_bytes_per_s).sum::<f64>() / 64.0;
    let fewest = reports
        .iter()
        .map(|r| r.stats.predict.snapshots)
        .min()
        .unwrap_or(0);
    let gap = reports
        .iter()
        .map(|r| r.stats.max_snapshot_gap)
        .max()
        .unwrap_or(0);
    // The machine's thread, metered apart from the workers: it ran, and no more than
    // the whole of the window.
    let busy = m.machine_busy.get();
    assert!(busy > 0.0 && busy <= 1.0, "machine busy {busy}");
    eprintln!(
        "64 clients: fewest snapshots {fewest}, longest gap {gap} ticks, mean down {down:.0} B/s, snapshot drops {}, tick overruns {}, machine busy {busy:.3}",
        m.machine().snapshot_drops,
        m.overruns.get()
    );
    r.shutdown("test over").await;
}

/// A client that connects as player `id` and wanders with `opts`, in the background.
fn spawn_wanderer(r: &Server, id: u32, opts: RunOptions) -> tokio::task::JoinHandle<RunReport> {
    let o = options(r, id);
    let addr = r.addr;
    tokio::spawn(async move {
        let j = expel_client::connect(addr, &o).await.unwrap();
        expel_bots::run(j, wander(id), opts).await.unwrap()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_are_refused_and_counted_while_others_keep_their_snapshots() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(16).await;
    // An honest client plays throughout.
    let honest = spawn_wanderer(
        &r,
        1,
        RunOptions {
            seconds: 8.0,
            ..Default::default()
        },
    );
    let m = r.metrics.clone();
    // Wrong ALPN: the handshake fails.
    assert!(raw(&r, b"other/9").await.is_err());
    // Unknown protocol version.
    let (_ep, c) = raw(&r, ALPN).await.unwrap();
    let (_s, reply) = hello(&c, 99, token_with(SECRET, 50, now() + 60, 2)).await;
    assert!(
        matches!(&reply, ServerControl::Ended { code: Code::Version, detail } if detail.contains("version 99")),
        "{reply:?}"
    );
    // Forged, expired and replayed tokens.
    let mut o = options(&r, 51);
    o.token = token_with(b"not-the-secret", 51, now() + 60, 3);
    let (code, why) = refusal(expel_client::connect(r.addr, &o).await);
    assert_eq!(code, Code::TokenForged, "{why}");
    assert!(why.contains("forged"), "{why}");
    let mut garbage = o.clone();
    garbage.token = "not a token".into();
    let (code, why) = refusal(expel_client::connect(r.addr, &garbage).await);
    assert_eq!(code, Code::TokenMalformed, "{why}");
    o.token = token_with(SECRET, 51, now() - 10, 4);
    let (code, why) = refusal(expel_client::connect(r.addr, &o).await);
    assert_eq!(code, Code::TokenExpired, "{why}");
    o.token = token_with(SECRET, 52, now() + 60, 5);
    let first = expel_client::connect(r.addr, &o).await.unwrap();
    drop(first);
    let (code, why) = refusal(expel_client::connect(r.addr, &o).await);
    assert_eq!(code, Code::TokenReplayed, "{why}");
    assert!(why.contains("already used"), "{why}");
    // A token of a format version this server does not read: refused by name.
    let t = token_with(SECRET, 54, now() + 60, 7);
    o.token = format!("03{}", &t[2..]);
    let (code, why) = refusal(expel_client::connect(r.addr, &o).await);
    assert_eq!(code, Code::TokenVersion, "{why}");
    assert!(why.contains("format v3"), "{why}");
    // A first message that is not a hello.
    let (_ep4, c4) = raw(&r, ALPN).await.unwrap();
    let (mut s4, _r4) = c4.open_bi().await.unwrap();
    let bye = ClientControl::Bye {
        reason: "before hello".into(),
    };
    s4.write_all(&encode_frame(&bye)).await.unwrap();
    let (code, why) = closed_with(&c4, 5).await;
    assert_eq!(code, Some(Code::BadHello), "{why}");
    assert!(why.contains("must be a hello"), "{why}");
    // A client that never says hello is timed out with a reason and its code.
    let (_ep2, silent) = raw(&r, ALPN).await.unwrap();
    let (code, why) = closed_with(&silent, 5).await;
    assert_eq!(code, Some(Code::HelloTimeout), "{why}");
    assert!(why.contains("no hello"), "{why}");
    // Garbage datagrams and a garbage control frame from a joined client.
    let (_ep3, c3, mut s3) = joined_raw(&r, 53, 6).await;
    for i in 0..50u8 {
        // Variant 7 does not exist: none of these decodes.
        c3.send_datagram(vec![7, i, 0xff, 0x13].into()).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(m.machine().malformed_datagrams >= 40);
    s3.write_all(&[5, 0, 0, 0, 9, 9, 9, 9, 9]).await.unwrap();
    let (code, why) = closed_with(&c3, 5).await;
    assert_eq!(code, Some(Code::Malformed), "{why}");
    assert!(why.contains("malformed control"), "{why}");
    // A joined client that never sends input is dropped with a reason.
    let (_ep4, c4, _s4) = joined_raw(&r, 54, 7).await;
    let (code, why) = closed_with(&c4, 8).await;
    assert_eq!(code, Some(Code::InputTimeout), "{why}");
    assert!(why.contains("no input"), "{why}");
    // Commands with values outside the protocol's range are refused and, repeated, kicked.
    let (_ep5, c5, _s5) = joined_raw(&r, 55, 8).await;
    let mut bad = MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0);
    bad.pitch = 30_000; // 165°: beyond straight down
    for k in 0..5u64 {
        let msg = expel_protocol::ClientDatagram::Input(expel_protocol::InputMsg {
            ack: 0,
            first_tick: 1_000 + k,
            commands: vec![bad],
            predicted: None,
            claims: Vec::new(),
            views: Vec::new(),
        });
        // After the third the server has closed the connection.
        let _ = c5.send_datagram(expel_protocol::encode(&msg).into());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let why = close_reason(&c5, 5).await;
    assert!(why.contains("invalid") && why.contains("pitch"), "{why}");
    let report = honest.await.unwrap();
    assert!(report.ended_by_server.is_none());
    assert!(
        report.stats.predict.snapshots > 160 && report.stats.max_snapshot_gap <= 30,
        "the honest client got {} snapshots, longest gap {} ticks",
        report.stats.predict.snapshots,
        report.stats.max_snapshot_gap
    );
    let refusals = |reason: &str| {
        let i = expel_server::REFUSALS
            .iter()
            .position(|r| r.label() == reason)
            .unwrap();
        m.machine().refusals[i]
    };
    for reason in [
        "version",
        "token_forged",
        "token_expired",
        "token_replayed",
        "hello_timeout",
    ] {
        assert_eq!(refusals(reason), 1, "{reason}");
    }
    assert!(m.handshake_failures.get() >= 1);
    assert!(m.machine().malformed_control >= 1);
    // The garbage frame, the silent player, the invalid commands (and the replayed
    // token's first client, if its connection outlived the input timeout).
    assert!(m.machine().kicks >= 3);
    assert_eq!(count(&r, ViolationKind::Invalid), 3);
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shutdown_clients_are_told_why() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(4).await;
    let j = expel_client::connect(r.addr, &options(&r, 9))
        .await
        .unwrap();
    let client = tokio::spawn(expel_bots::run(
        j,
        wander(3),
        RunOptions {
            seconds: 30.0,
            ..Default::default()
        },
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.shutdown("maintenance at noon").await;
    let report = client.await.unwrap().unwrap();
    assert_eq!(
        report.ended_by_server.as_deref(),
        Some("maintenance at noon")
    );
}

/// A server with a certificate from an authority, and a client that trusts the authority
/// (no fingerprint); a client trusting another authority is refused by TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_can_trust_a_certificate_authority() {
    let _serial = SERIAL.lock().await;
    let authority = |name: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        let cert = p.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca, ca_key) = authority("Expel test CA");
    let key = rcgen::KeyPair::generate().unwrap();
    // A certificate for a name of its own, as a deployment's is (not localhost).
    let leaf = rcgen::CertificateParams::new(vec!["game.example.net".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let pem = leaf.pem() + &ca.pem();
    let (sim, bytes) = arena();
    let mut cfg = config(bytes, 4);
    cfg.metrics = None;
    cfg.identity = Identity::from_pem(pem.as_bytes(), key.serialize_pem().as_bytes()).unwrap();
    let r = expel_server::start(sim, cfg).await.unwrap();
    let mut o = options(&r, 1);
    o.trust = Trust::Authority(ca.pem().into_bytes());
    // Without the name, the client checks for localhost: refused by TLS.
    assert!(matches!(
        expel_client::connect(r.addr, &o).await,
        Err(ClientError::Connect { .. })
    ));
    o.server_name = Some("game.example.net".into());
    let j = expel_client::connect(r.addr, &o).await.unwrap();
    let report = expel_bots::run(
        j,
        wander(2),
        RunOptions {
            seconds: 1.0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(report.stats.predict.snapshots > 10);
    let (other, _) = authority("Someone else");
    let mut o = options(&r, 2);
    o.trust = Trust::Authority(other.pem().into_bytes());
    assert!(matches!(
        expel_client::connect(r.addr, &o).await,
        Err(ClientError::Connect { .. })
    ));
    r.shutdown("test over").await;
}

/// A client whose clock runs 10% fast (more commands than ticks) is flagged within five
/// seconds and kicked with the reason; an honest client beside it, through 10% loss and
/// 100 ± 30 ms, is never flagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speedhack_is_flagged_and_kicked_while_honest_play_is_not() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(8).await;
    let honest = spawn_wanderer(
        &r,
        1,
        RunOptions {
            seconds: 14.0,
            link: Impairment {
                loss: 0.1,
                delay_ms: 100.0,
                jitter_ms: 30.0,
                duplicate: 0.0,
            },
            buffer_ticks: 4.0,
            ..Default::default()
        },
    );
    let j = expel_client::connect(r.addr, &options(&r, 2))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let cheat = tokio::spawn(run_cheating(
        j,
        wander(6),
        RunOptions {
            seconds: 20.0,
            ..Default::default()
        },
        Cheats {
            clock_factor: 1.10,
            ..Default::default()
        },
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        count(&r, ViolationKind::Timing) >= 1,
        "not flagged within {:?}",
        started.elapsed()
    );
    let (report, _) = cheat.await.unwrap().unwrap();
    let why = report.ended_by_server.unwrap_or_default();
    assert!(why.contains("timing"), "{why}");
    let honest = honest.await.unwrap();
    assert!(honest.ended_by_server.is_none());
    let other: u64 = violations(&r)
        .iter()
        .filter(|(k, _)| *k != "timing")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(other, 0, "honest play flagged");
    r.shutdown("test over").await;
}

/// The bad link of the issue: 10% loss, 100 ± 30 ms each way, some duplicates.
fn bad_link() -> Impairment {
    Impairment {
        loss: 0.1,
        delay_ms: 100.0,
        jitter_ms: 30.0,
        duplicate: 0.05,
    }
}

/// How many violations of `kind` the server counted.
fn count(r: &Server, kind: ViolationKind) -> u64 {
    ViolationKind::ALL
        .iter()
        .zip(r.metrics.machine().violations)
        .find(|(k, _)| **k == kind)
        .map_or(0, |(_, v)| v)
}

/// The kinds of violation the server counted, with their counts.
fn violations(r: &Server) -> Vec<(&'static str, u64)> {
    ViolationKind::ALL
        .iter()
        .zip(r.metrics.machine().violations)
        .map(|(k, v)| (k.name(), v))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The terrain map's simulation and bytes: four spawn points far apart, no movers.
fn terrain() -> (std::sync::Arc<expel_core::Sim>, std::sync::Arc<Vec<u8>>) {
    use expel_core::{CollisionModel, MapData, MoveConfig, Sim};
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/maps/terrain.map")).unwrap();
    let map = MapData::parse_any(&bytes).unwrap();
    let movement = MoveConfig::default().validate().unwrap();
    let (sim, _) = Sim::from_map(
        std::sync::Arc::new(CollisionModel::build(&map)),
        &map,
        movement,
    );
    (std::sync::Arc::new(sim), std::sync::Arc::new(bytes))
}

/// A crowd's players end in the same bits whether one I/O thread carried their
/// connections and one thread ran the ticks, or four I/O threads and eight workers: the
/// machine sees the same commands on the same ticks, whichever socket and thread each
/// came through, and judges them the same on any workers. Four players join one after another (each takes
/// the next spawn point) and stand still; from a common server tick two seconds after the
/// last joined, all play the same three seconds of the replay (side by side, never
/// meeting), then stand still until every one is at rest. The script is read by tick, so
/// a client clock that jumps or runs a backlog of ticks at once still sends the same
/// command for each tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_ends_in_the_same_bits_over_one_io_thread_and_four_with_eight_workers() {
    let _serial = SERIAL.lock().await;
    let idle = MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0);
    let replay: std::sync::Arc<[MoveCommand]> = replay().into_iter().take(180).collect();
    let mut ends = Vec::new();
    for (io, workers) in [(1, 1), (4, 8)] {
        let (sim, bytes) = terrain();
        let mut cfg = config(bytes.clone(), 8);
        cfg.io_threads = io;
        cfg.settings.threads = workers;
        cfg.settings.input_timeout = Duration::from_secs(10);
        let r = expel_server::start(sim.clone(), cfg).await.unwrap();
        let mut joined = Vec::new();
        for id in 0..4u32 {
            let mut o = options(&r, 300 + id);
            o.have_map = Some(bytes.clone());
            o.sim = Some(sim.clone());
            joined.push(expel_client::connect(r.addr, &o).await.unwrap());
        }
        let start = joined.iter().map(|j| j.welcome.server_tick).max().unwrap() + 120;
        let runs: Vec<_> = joined
            .into_iter()
            .map(|j| {
                let replay = replay.clone();
                let play = move |tick: u64, _: Option<&PlayerState>| {
                    let i = tick
                        .checked_sub(start)
                        .and_then(|i| usize::try_from(i).ok());
                    Some(i.and_then(|i| replay.get(i).copied()).unwrap_or(idle))
                };
                let opts = RunOptions {
                    seconds: 7.5,
                    buffer_ticks: 6.0,
                    ..Default::default()
                };
                tokio::spawn(expel_bots::run(j, play, opts))
            })
            .collect();
        let mut states = Vec::new();
        for (i, run) in runs.into_iter().enumerate() {
            let rep = run.await.unwrap().unwrap();
            let st = &rep.stats;
            assert!(st.final_match, "io {io}, client {i}: {rep:?}");
            assert_eq!(st.predict.corrections, 0, "io {io}, client {i}: {rep:?}");
            let end = st.final_state.expect("a final state");
            assert_eq!(end.velocity, [0; 3], "io {io}, client {i} still moving");
            states.push(end);
        }
        let m = &r.metrics;
        assert_eq!(m.machine().inputs.late, 0, "io {io}");
        assert_eq!(m.io_threads.get(), io as u64);
        assert_eq!(m.tick_threads.get(), workers as u64);
        assert!(violations(&r).is_empty(), "io {io}: {:?}", violations(&r));
        // Each player went somewhere of its own.
        assert!(
            states.windows(2).all(|w| w[0].origin != w[1].origin),
            "{states:?}"
        );
        r.shutdown("test over").await;
        ends.push(states);
    }
    assert_eq!(
        ends[0], ends[1],
        "one I/O thread and one worker, then four and eight"
    );
}

/// A client that moves to a new address (its socket rebound, as a phone changing networks
/// does) keeps its connection over four I/O threads: its datagrams now reach whichever
/// socket the kernel hashes the new address to, and that thread hands them to the one
/// that owns the connection (named in the connection id), which answers from the same
/// port. Eight moves: the chance that every one lands on the owner's socket is 4^-8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_moves_address_keeps_its_connection_over_four_io_threads() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server_with(8, |c| {
        c.io_threads = 4;
        c.settings.input_timeout = Duration::from_secs(10);
    })
    .await;
    let (ep, c) = raw(&r, ALPN).await.unwrap();
    let (mut send, mut recv) = c.open_bi().await.unwrap();
    let hello = expel_protocol::ClientControl::Hello {
        version: expel_protocol::VERSION,
        token: token_with(SECRET, 7, now() + 60, 1),
        have_map: None,
    };
    send.write_all(&expel_protocol::frame::encode_frame(&hello))
        .await
        .unwrap();
    // The welcome and the map arrive on the stream; the test reads it as it comes.
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0usize;
        while let Ok(Some(n)) = recv.read(&mut buf).await {
            got += n;
        }
        got
    });
    for hop in 0..8 {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        ep.rebind(socket).unwrap();
        // The old socket is gone: whatever arrives now came to the new address (the
        // map's frames, then snapshots, and acknowledgements of the client's packets).
        let before = c.stats().udp_rx.datagrams;
        let moved = tokio::time::timeout(Duration::from_secs(5), async {
            while c.stats().udp_rx.datagrams < before + 5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            moved.is_ok(),
            "hop {hop}: the server stopped answering at the new address: {:?}",
            c.close_reason()
        );
    }
    assert!(c.close_reason().is_none(), "{:?}", c.close_reason());
    let forwarded = r.metrics.udp_forwarded.get();
    assert!(forwarded > 0, "no datagram was handed to its owner thread");
    drop(send);
    c.close(0u32.into(), b"done");
    let _ = reader.await;
    r.shutdown("test over").await;
}
