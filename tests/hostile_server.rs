//! A hostile server against the client library, over real QUIC on loopback: a welcome
//! whose tick would overflow the client's clock, and a flood of datagrams while the game
//! does not call `update`. The client refuses the one and holds a bounded queue of the
//! other.

mod common;

use expel_client::{ClientError, ConnectOptions, Trust};
use expel_core::MoveConfig;
use expel_core::PlayerId;
use expel_protocol::frame::{encode_frame, FrameDecoder};
use expel_protocol::{decode, ClientControl, ServerControl, Welcome};
use expel_server::Identity;
use std::time::{Duration, Instant};

/// A server endpoint on loopback that runs `script` on the first connection's control
/// stream once the client's hello has come; its address and certificate fingerprint.
async fn hostile<F, Fut>(script: F) -> (std::net::SocketAddr, String)
where
    F: FnOnce(quinn::Connection, quinn::SendStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let id = Identity::self_signed().unwrap();
    let fingerprint = id.fingerprint.clone();
    let ep =
        quinn::Endpoint::server(id.quic_config().unwrap(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = ep.local_addr().unwrap();
    tokio::spawn(async move {
        let c = ep.accept().await.unwrap().await.unwrap();
        let (send, mut recv) = c.accept_bi().await.unwrap();
        let mut dec = FrameDecoder::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(f) = dec.next_frame().unwrap() {
                let hello: ClientControl = decode("control", &f).unwrap();
                assert!(matches!(hello, ClientControl::Hello { .. }));
                break;
            }
            let n = recv.read(&mut buf).await.unwrap().unwrap();
            dec.push(&buf[..n]);
        }
        script(c, send).await;
        // Held open until the test is done with it.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(ep);
    });
    (addr, fingerprint)
}

fn welcome(server_tick: u64, map: &[u8]) -> Vec<u8> {
    encode_frame(&ServerControl::Welcome(Box::new(Welcome {
        player: PlayerId(1),
        snapshot_rate: 30,
        input_rate: 60,
        config: MoveConfig::default(),
        map_name: "arena".into(),
        map_hash: *blake3::hash(map).as_bytes(),
        map_size: map.len() as u64,
        sending_map: false,
        server_tick,
        movement: Default::default(),
        states: Default::default(),
    })))
}

fn options(fingerprint: String) -> ConnectOptions {
    let (sim, bytes) = common::arena();
    ConnectOptions {
        have_map: Some(bytes),
        sim: Some(sim),
        ..ConnectOptions::new("00".into(), Trust::Fingerprint(fingerprint))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_welcome_whose_tick_would_overflow_the_clock_is_refused() {
    let (_, bytes) = common::arena();
    for tick in [u64::MAX, u64::MAX - 3, 1 << 63] {
        let w = welcome(tick, &bytes);
        let (addr, fp) = hostile(move |_, mut send| async move {
            send.write_all(&w).await.unwrap();
        })
        .await;
        match expel_client::connect(addr, &options(fp)).await {
            Err(ClientError::Protocol(why)) => assert!(why.contains("server tick"), "{why}"),
            Err(e) => panic!("tick {tick}: {e}"),
            Ok(_) => panic!("tick {tick}: joined"),
        }
    }
}

/// The resident memory of this process, MB.
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_while_the_game_does_not_update_holds_a_bounded_queue() {
    let (_, bytes) = common::arena();
    let w = welcome(100, &bytes);
    const FLOOD: usize = 60_000;
    let (addr, fp) = hostile(move |c, mut send| async move {
        send.write_all(&w).await.unwrap();
        // 60,000 datagrams of 1,000 bytes, paced so QUIC carries them all.
        let junk = vec![0xee; 1000];
        let started = Instant::now();
        let mut sent = 0;
        while sent < FLOOD {
            let due = (started.elapsed().as_secs_f64() * 30_000.0) as usize;
            while sent < due.min(FLOOD) {
                if c.send_datagram(junk.clone().into()).is_err() {
                    return;
                }
                sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let before = rss_mb();
    let mut session = expel_client::connect(addr, &options(fp)).await.unwrap();
    // The game is busy: no update for three seconds while the flood arrives. It waits in
    // the kernel's socket buffer, and past that is dropped, as the network may drop it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = rss_mb() - before;
    assert!(grown < 24.0, "{grown:.1} MB more for a 60 MB flood");
    // Updating again reads a bounded number of datagrams, however many wait.
    let most = expel_client::MOST_DATAGRAMS_PER_UPDATE;
    session.update(Instant::now());
    let first = session.diagnostics().datagrams_read;
    assert!(first >= 1 && first <= most, "{first} read in one update");
    let mut read = first;
    for _ in 0..50 {
        session.update(Instant::now());
        assert!(session.diagnostics().datagrams_read <= most);
        read += session.diagnostics().datagrams_read;
    }
    // Most of the flood never reached the game: the buffer held a small part of it.
    assert!(read < FLOOD / 2, "{read} of {FLOOD} read");
    assert!(rss_mb() - before < 24.0);
}
