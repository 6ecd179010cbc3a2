//! The holes an outside attacker found, each attacked again on loopback: memory for the
//! asking (unread streams, half-open handshakes), writes that waited forever, one
//! datagram that switched cheat detection off, honest players kicked for sharing a
//! spawn point, the HTTP endpoint at the descriptor limit, and a token burned by a
//! refusal. Memory and CPU are read from a real `expel serve` process; the rest runs the
//! server in this process with short timeouts. Every attack is bounded in count and time.

mod common;

use common::*;
use expel_bots::RunOptions;
use expel_client::Trust;
use expel_core::validate::ViolationKind;
use expel_core::{MoveCommand, PlayerState};
use expel_protocol::frame::{encode_frame, FrameDecoder};
use expel_protocol::{
    encode, ClientControl, ClientDatagram, InputMsg, MovementAuthority, ServerControl, ALPN,
    VERSION,
};
use expel_server::Limits;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The resident memory no single attack may take the server past.
const MEMORY_BOUND_MB: f64 = 64.0;

/// One attack at a time: they measure a process's memory and CPU, and the machines have
/// two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A TCP connection to `to` from loopback address `from`, with a receive buffer of
/// `rcvbuf` bytes if given.
fn tcp_from(from: [u8; 4], to: SocketAddr, rcvbuf: Option<usize>) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    if let Some(n) = rcvbuf {
        sock.set_recv_buffer_size(n)?;
    }
    sock.bind(&SocketAddr::from((from, 0)).into())?;
    sock.connect(&to.into())?;
    Ok(sock.into())
}

/// A quinn client connection to `addr` trusting `fingerprint`, with `transport` (the
/// attacker's own flow-control windows).
async fn attacker(
    addr: SocketAddr,
    fingerprint: &str,
    transport: Option<quinn::TransportConfig>,
) -> (quinn::Endpoint, quinn::Connection) {
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut cfg =
        expel_client::client_config(&Trust::Fingerprint(fingerprint.into()), ALPN).unwrap();
    if let Some(t) = transport {
        cfg.transport_config(Arc::new(t));
    }
    ep.set_default_client_config(cfg);
    let c = ep.connect(addr, "localhost").unwrap().await.unwrap();
    (ep, c)
}

/// Opens as many streams as the server lets it (up to 100 of each kind) and writes
/// 1.25 MB into each, never reading: what quinn's defaults let every peer make the server
/// hold. Each stream gives up after `secs`.
async fn fill_streams(c: quinn::Connection, secs: u64) {
    let mut tasks = tokio::task::JoinSet::new();
    let chunk = vec![0x55u8; 64 * 1024];
    for i in 0..200 {
        let c = c.clone();
        let chunk = chunk.clone();
        tasks.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(secs), async {
                let mut s = if i % 2 == 0 {
                    c.open_uni().await.ok()?
                } else {
                    c.open_bi().await.ok()?.0
                };
                for _ in 0..20 {
                    s.write_all(&chunk).await.ok()?;
                }
                Some(())
            })
            .await;
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_streams_cost_the_server_a_small_fixed_amount() {
    let _serial = SERIAL.lock().await;
    let s = Served::start("");
    let before = s.memory_mb("VmRSS");
    // Four connections that never say hello, and a joined player, fill every stream
    // they can open, all at once.
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(attacker(s.addr, &s.fingerprint, None).await);
    }
    let (ep, joined) = attacker(s.addr, &s.fingerprint, None).await;
    let (_control, reply) = hello(&joined, VERSION, s.token(7, 1)).await;
    assert!(matches!(reply, ServerControl::Welcome(_)), "{reply:?}");
    conns.push((ep, joined));
    let fills: Vec<_> = conns
        .iter()
        .map(|(_, c)| tokio::spawn(fill_streams(c.clone(), 3)))
        .collect();
    for f in fills {
        f.await.unwrap();
    }
    let peak = s.memory_mb("VmHWM");
    eprintln!("server memory: {before:.1} MB before, peak {peak:.1} MB under five stream fillers");
    assert!(
        peak < MEMORY_BOUND_MB,
        "unread streams took the server to {peak:.1} MB"
    );
    drop(conns);
    // It still serves.
    assert!(s.honest_snapshots(20, 2.0).await > 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_half_open_handshakes_cost_little_and_honest_players_still_join() {
    let _serial = SERIAL.lock().await;
    let s = Served::start("");
    let before = s.memory_mb("VmRSS");
    // 5,000 Initials from 100 loopback addresses, none ever answered.
    let started = Instant::now();
    let _held = half_open(s.addr, &s.fingerprint, 5000, 1, 100, None).await;
    eprintln!(
        "5000 Initials sent in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    // An honest player joins while they are outstanding.
    assert!(s.honest_snapshots(21, 2.0).await > 30);
    let peak = s.memory_mb("VmHWM");
    eprintln!(
        "server memory: {before:.1} MB before, peak {peak:.1} MB under 5000 half-open handshakes"
    );
    assert!(
        peak < MEMORY_BOUND_MB,
        "half-open handshakes took it to {peak:.1} MB"
    );
    let retried = s.metric("expel_incoming_total{outcome=\"retried\"}");
    let accepted = s.metric("expel_incoming_total{outcome=\"accepted\"}");
    eprintln!("attempts accepted {accepted}, retried {retried}");
    assert!(
        retried >= 4000.0,
        "only {retried} attempts were sent a retry"
    );
    assert!(accepted < 300.0, "{accepted} handshakes started");
    // None of them is counted as a failed handshake (they are retries, or timeouts).
    assert_eq!(s.metric("expel_handshake_failures_total"), 0.0);
}

/// The in-process test server's limits: short deadlines, so stalls show quickly.
fn short(c: &mut expel_server::ServerConfig) {
    c.limits = Limits {
        write_timeout: Duration::from_secs(1),
        pending_per_address: 200,
        pending_total: 400,
        ..Limits::default()
    };
    c.settings.input_timeout = Duration::from_secs(2);
}

/// An attacker's transport that grants the server `window` bytes of stream credit and,
/// never reading, no more.
fn stingy(window: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(window.into());
    t.receive_window(window.into());
    t
}

/// Says hello on a new control stream and reads nothing back; the stream stays open while
/// the returned halves live.
async fn hello_unread(
    c: &quinn::Connection,
    token: String,
    have_map: Option<[u8; 32]>,
) -> (quinn::SendStream, quinn::RecvStream) {
    let (mut send, recv) = c.open_bi().await.unwrap();
    let h = ClientControl::Hello {
        version: VERSION,
        token,
        have_map,
    };
    send.write_all(&encode_frame(&h)).await.unwrap();
    (send, recv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_that_grant_no_credit_are_dropped_and_free_their_slots() {
    let _serial = SERIAL.lock().await;
    let (r, _, bytes) = server_with(2, short).await;
    let m = r.metrics.clone();
    // 50 connections with forged tokens whose streams take one byte: the refusal cannot
    // be written, and each is closed within the write timeout all the same.
    let mut refused = Vec::new();
    for i in 0..50u32 {
        let (ep, c) = attacker(r.addr, &r.fingerprint, Some(stingy(1))).await;
        let streams = hello_unread(&c, token_with(b"forged", 100 + i, now() + 60, 9), None).await;
        refused.push((ep, c, streams));
    }
    for (_, c, _) in &refused {
        let why = close_reason(c, 6).await;
        assert!(why.contains("forged"), "{why}");
    }
    assert!(m.stalls.get() >= 50, "{} stalls", m.stalls.get());
    // Two players that stall the map transfer hold both slots of a two-player server,
    // and show as clients, until the write timeout ends them; then an honest player joins.
    let mut stallers = Vec::new();
    for id in [30, 31] {
        let (ep, c) = attacker(r.addr, &r.fingerprint, Some(stingy(1024))).await;
        let streams = hello_unread(&c, token_with(SECRET, id, now() + 60, 1), None).await;
        stallers.push((ep, c, streams));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.machine().clients, 2, "the stallers hold both slots");
    let full = expel_client::connect(r.addr, &options(&r, 32)).await;
    assert!(
        matches!(&full, Err(e) if e.code() == Some(expel_client::Code::Full)),
        "{:?}",
        full.err()
    );
    for (_, c, _) in &stallers {
        let (code, why) = closed_with(c, 5).await;
        assert_eq!(code, Some(expel_client::Code::Stalled), "{why}");
        assert!(why.contains("stalled"), "{why}");
    }
    let mut o = options(&r, 33);
    o.token = token_with(SECRET, 33, now() + 60, 2);
    let joined = expel_client::connect(r.addr, &o).await;
    assert!(joined.is_ok(), "{:?}", joined.err());
    drop(joined);
    // A joined player that accepts exactly the welcome's bytes and falls silent: its
    // input timeout fires, the kick cannot be written, and it is closed all the same.
    while m.machine().clients > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let have = Some(*blake3::hash(&bytes).as_bytes());
    let (_ep, probe) = raw(&r, ALPN).await.unwrap();
    let welcome_len = {
        let (mut send, mut recv) = probe.open_bi().await.unwrap();
        let h = ClientControl::Hello {
            version: VERSION,
            token: token_with(SECRET, 34, now() + 60, 3),
            have_map: have,
        };
        send.write_all(&encode_frame(&h)).await.unwrap();
        let mut dec = FrameDecoder::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(f) = dec.next_frame().unwrap() {
                break 4 + f.len();
            }
            let n = recv.read(&mut buf).await.unwrap().unwrap();
            dec.push(&buf[..n]);
        }
    };
    probe.close(0u32.into(), b"probe done");
    while m.machine().clients > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kicks = m.machine().kicks;
    // A little over the probe's welcome: the server's tick in it may have grown a byte since,
    // and a kick (over 20 bytes) still does not fit.
    let credit = welcome_len as u32 + 4;
    let (_ep, silent) = attacker(r.addr, &r.fingerprint, Some(stingy(credit))).await;
    let _streams = hello_unread(&silent, token_with(SECRET, 35, now() + 60, 4), have).await;
    let why = close_reason(&silent, 6).await;
    assert!(why.contains("no input"), "{why}");
    assert_eq!(m.machine().kicks, kicks + 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(m.machine().clients, 0);
    assert_eq!(m.players.get(), 0, "the silent player left the world");
    r.shutdown("test over").await;
}

/// An input datagram: `n` idle commands from `first`.
fn input(first: u64, n: usize, ack: u64) -> Vec<u8> {
    encode(&ClientDatagram::Input(InputMsg {
        ack,
        first_tick: first,
        commands: vec![MoveCommand::default(); n],
        predicted: None,
        claims: Vec::new(),
        views: Vec::new(),
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_future_ticks_are_refused_and_a_speedhack_after_them_is_still_kicked() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(4).await;
    let m = r.metrics.clone();
    let (_ep, c, _s) = joined_raw(&r, 40, 1).await;
    let start = m.ticks.get() + 5;
    // One datagram at 2^63 (which overflowed the lead arithmetic: a panic in the tick
    // task), one near 2^64 (which froze the timing check). A third invalid one would
    // earn the kick by itself; acknowledgements from the future are the validator's
    // unit test's.
    c.send_datagram(input(1 << 63, 4, 0).into()).unwrap();
    c.send_datagram(input(u64::MAX - 40, 4, 0).into()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ticks = m.ticks.get();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(m.ticks.get() > ticks + 5, "the tick task stopped");
    assert_eq!(m.machine().violations[6], 2, "two invalid datagrams");
    // Then a clock running 50% fast: still caught, and the player kicked.
    let began = Instant::now();
    let kicked = loop {
        let elapsed = began.elapsed().as_secs_f64();
        let t = start + (elapsed * 60.0 * 1.5) as u64;
        if c.send_datagram(input(t, 4, 0).into()).is_err() || elapsed > 20.0 {
            break c.close_reason();
        }
        tokio::time::sleep(Duration::from_millis(16)).await;
    };
    let why = format!("{kicked:?}");
    assert!(
        why.contains("timing"),
        "{why} after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "kicked after {:?}",
        began.elapsed()
    );
    assert!(m.machine().violations[4] >= 1, "no timing violation");
    r.shutdown("test over").await;
}

/// Clients `ids` stand idle for `secs` in a server of `movement`: none may be flagged,
/// corrected or kicked.
async fn idle_together(movement: MovementAuthority, ids: [u32; 2], secs: f64) {
    let (r, _, _) = server_with(8, |c| c.settings.movement = movement).await;
    let mut tasks = Vec::new();
    for id in ids {
        let o = options(&r, id);
        let addr = r.addr;
        tasks.push(tokio::spawn(async move {
            let j = expel_client::connect(addr, &o).await.unwrap();
            let idle = |_: u64, _: Option<&PlayerState>| Some(MoveCommand::default());
            let opts = RunOptions {
                seconds: secs,
                ..Default::default()
            };
            expel_bots::run(j, idle, opts).await.unwrap()
        }));
    }
    for t in tasks {
        let report = t.await.unwrap();
        assert!(report.ended_by_server.is_none(), "{movement:?}: {report:?}");
    }
    let flagged: Vec<_> = ViolationKind::ALL
        .iter()
        .zip(r.metrics.machine().violations)
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| (k.name(), v))
        .collect();
    assert_eq!(flagged, vec![], "{movement:?}");
    assert_eq!(r.metrics.machine().corrections, 0, "{movement:?}");
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_whose_ids_share_a_spawn_point_are_neither_pushed_nor_flagged() {
    let _serial = SERIAL.lock().await;
    let n = arena().0.spawns().len() as u32;
    for movement in [MovementAuthority::Client, MovementAuthority::Server] {
        idle_together(movement, [10, 10 + n], 3.0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_refused_because_its_player_is_connected_stays_good() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(4).await;
    let first = expel_client::connect(r.addr, &options(&r, 50))
        .await
        .unwrap();
    let mut second = options(&r, 50);
    second.token = token_with(SECRET, 50, now() + 60, 77);
    let why = match expel_client::connect(r.addr, &second).await {
        Err(expel_client::ClientError::Refused { code, detail }) => {
            assert_eq!(code, expel_client::Code::PlayerInUse);
            detail
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    };
    assert!(why.contains("already connected"), "{why}");
    drop(first);
    while r.metrics.machine().clients > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = expel_client::connect(r.addr, &second).await;
    assert!(again.is_ok(), "the same token again: {:?}", again.err());
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_endpoint_backs_off_at_the_descriptor_limit_and_bounds_viewers() {
    let _serial = SERIAL.lock().await;
    let mut s = Served::start("ulimit -n 256 &&");
    // 300 idle connections from 30 addresses: past the server's descriptor limit. A
    // refusal says which connection and what the server was doing.
    let mut idle: Vec<TcpStream> = Vec::new();
    for i in 0..300 {
        match tcp_from([127, 0, 2, 1 + (i % 30) as u8], s.http, None) {
            Ok(t) => idle.push(t),
            Err(e) => panic!("idle connection {i} of 300: {e}; {}", s.state()),
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu = s.cpu_seconds();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy = (s.cpu_seconds() - cpu) / 3.0;
    eprintln!(
        "server CPU with 300 idle HTTP connections at a 256 descriptor limit: {:.0}%",
        busy * 100.0
    );
    assert!(
        busy < 0.3,
        "the server spun at {:.0}% of a core",
        busy * 100.0
    );
    drop(idle);
    // The head timeout frees what the idle ones held; the endpoint answers again.
    let (status, _) = http_get(s.http, "/healthz");
    assert!(status.contains("200"), "{status}");
    assert!(s.metric("expel_http_accept_errors_total") >= 1.0);
    // Viewers that never read: only a few seats per address, and they lose them.
    let viewer = |from: [u8; 4]| {
        let mut t = tcp_from(from, s.http, Some(4096)).expect("a viewer's connection");
        write!(t, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = [0u8; 12];
        t.read_exact(&mut head).unwrap();
        (String::from_utf8_lossy(&head).into_owned(), t)
    };
    let crowd: Vec<(String, TcpStream)> = (0..10).map(|_| viewer([127, 0, 0, 1])).collect();
    let seated = crowd.iter().filter(|(h, _)| h.contains("200")).count();
    assert_eq!(seated, 4, "viewers seated from one address");
    let (other, _keep) = viewer([127, 0, 0, 2]);
    assert!(other.contains("200"), "{other}");
    // The four never read: each is dropped once its small buffers fill.
    let began = Instant::now();
    while s.metric("expel_live_viewers_dropped_total") < 4.0 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "non-reading viewers kept their seats"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "non-reading viewers dropped after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let (again, _t) = viewer([127, 0, 0, 1]);
    assert!(again.contains("200"), "{again}");
    drop(crowd);
}

/// One joined client floods input datagrams at 20,000 a second (one per packet) beside two
/// honest players: the excess is dropped before it is decoded and counted, the flooder
/// flagged and kicked, the honest play on untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_flood_is_dropped_undecoded_flagged_and_kicked_and_the_honest_play_on() {
    let _serial = SERIAL.lock().await;
    let (r, _, bytes) = server(8).await;
    let m = r.metrics.clone();
    let honest: Vec<_> = [60u32, 61]
        .into_iter()
        .map(|id| {
            let (o, addr) = (options(&r, id), r.addr);
            tokio::spawn(async move {
                let j = expel_client::connect(addr, &o).await.unwrap();
                let opts = RunOptions {
                    seconds: 9.0,
                    ..Default::default()
                };
                expel_bots::run(j, wander(id), opts).await.unwrap()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let flooder = 62;
    let out = expel_bots::flood::flood(
        r.addr,
        &Trust::Fingerprint(r.fingerprint.clone()),
        token_with(SECRET, flooder, now() + 60, 1),
        *blake3::hash(&bytes).as_bytes(),
        20_000.0,
        10.0,
    )
    .await
    .unwrap();
    assert!(out.datagram_bytes > 700, "one datagram a packet: {out:?}");
    let why = out.closed.clone().unwrap_or_default();
    assert!(
        why.contains("flood"),
        "the flooder is kicked for it: {out:?}"
    );
    assert!(out.seconds < 5.0, "kicked within the third second: {out:?}");
    // Dropped undecrypted (past 1,000 packets a second) or undecoded (past four input
    // rates): all but the allowance.
    let (packets, datagrams) = (m.packets_over_rate.get(), m.machine().datagrams_over_rate);
    assert!(
        (packets + datagrams) as f64 >= out.sent as f64 * 0.7,
        "{packets} packets and {datagrams} datagrams dropped; {out:?}"
    );
    // Decoded: the honest two's inputs (60 a second each) and the flooder's allowance
    // (240 a second, 120 at once).
    let decoded = m.machine().datagrams_in - datagrams;
    let allowed = (out.seconds * 240.0 + 120.0) as u64 + 2 * 60 * 10;
    assert!(decoded <= allowed, "{decoded} decoded, {allowed} allowed");
    let flood = ViolationKind::ALL
        .iter()
        .position(|k| *k == ViolationKind::Flood)
        .unwrap();
    assert!(m.machine().violations[flood] >= 3);
    assert!(m.flagged().get(&flooder).is_some_and(|f| f[flood] >= 3));
    for t in honest {
        let report = t.await.unwrap();
        assert!(report.ended_by_server.is_none(), "{report:?}");
        // (A correction where the two met is theirs, not the flood's.)
        assert_eq!(report.stats.unexplained_corrections, 0, "{report:?}");
        assert!(report.snapshots_per_s > 25.0, "{report:?}");
    }
    // Nobody honest was flagged.
    assert_eq!(
        m.flagged().keys().copied().collect::<Vec<_>>(),
        vec![flooder]
    );
    r.shutdown("test over").await;
}

/// A joined client sends 64 datagrams of 1,100 bytes in one burst (a congestion window
/// opened wide): past the connection's 16 KiB receive buffer QUIC drops the oldest before
/// the server takes them, and each one it dropped is counted, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_lost_in_a_burst_past_the_receive_buffer_are_counted() {
    let _serial = SERIAL.lock().await;
    let (r, _, _) = server(8).await;
    let m = r.metrics.clone();
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut cfg =
        expel_client::client_config(&Trust::Fingerprint(r.fingerprint.clone()), ALPN).unwrap();
    let mut t = quinn::TransportConfig::default();
    let mut reno = quinn::congestion::NewRenoConfig::default();
    reno.initial_window(4 << 20);
    t.congestion_controller_factory(Arc::new(reno));
    cfg.transport_config(Arc::new(t));
    ep.set_default_client_config(cfg);
    let c = ep.connect(r.addr, "localhost").unwrap().await.unwrap();
    let (_s, reply) = hello(&c, VERSION, token_with(SECRET, 70, now() + 60, 1)).await;
    assert!(matches!(reply, ServerControl::Welcome(_)), "{reply:?}");
    let before = m.datagrams_overflowed.get();
    let mut sent = 0;
    for round in 0..5 {
        for _ in 0..64 {
            sent += c.send_datagram(vec![round as u8; 1100].into()).is_ok() as u64;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let lost = m.datagrams_overflowed.get() - before;
    let taken = m.machine().datagrams_in;
    assert!(
        lost > 0,
        "no datagram counted lost of {sent} sent in bursts"
    );
    assert!(
        lost + taken <= sent + 60,
        "{lost} lost and {taken} taken of {sent}"
    );
    eprintln!("{sent} sent in bursts of 64: {lost} dropped by QUIC, counted");
    c.close(0u32.into(), b"done");
    r.shutdown("test over").await;
}
