//! Joining as a game does it, against the real server on loopback QUIC: from a frame loop
//! with the map's progress to show, from a loop that is not async, and again after a
//! refusal for now (the library's reconnect).

mod common;

use common::{options, server};

use common::Code;
use expel_client::{connect, connect_blocking, reconnect, ClientError, Joining, Status};
use expel_core::PlayerId;
use expel_protocol::frame::encode_frame;
use expel_protocol::ServerControl;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A frame loop joins without awaiting anything: it sees the map arrive (its progress
/// only grows, and ends whole) and then plays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_loop_joins_showing_the_maps_progress() {
    let (r, _, map) = server(4).await;
    // ANCHOR: frame_loop
    let mut j = Joining::start(r.addr, &options(&r, 1)).unwrap();
    let mut seen = Vec::new();
    let mut statuses = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while !j.update(Instant::now()).unwrap() {
        assert!(Instant::now() < until, "not joined in 20 s");
        if let Some(p) = j.map_progress() {
            if seen.last() != Some(&p) {
                seen.push(p);
            }
        }
        if statuses.last() != Some(j.status()) {
            statuses.push(j.status().clone());
        }
        // A frame's sleep (the game draws its loading screen meanwhile).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let size = map.len() as u64;
    assert_eq!(statuses, vec![Status::Connecting, Status::ReceivingMap]);
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    assert!(seen.iter().all(|(_, of)| *of == size));
    assert_eq!(j.map_progress(), Some((size, size)));
    let mut s = j.joined().unwrap();
    // ANCHOR_END: frame_loop
    assert_eq!(s.map.len() as u64, size);
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        s.update(Instant::now());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(s.status(), &Status::Playing);
    assert!(
        s.diagnostics().stats.predict.snapshots > 10,
        "{:?}",
        s.diagnostics().stats.predict
    );
    s.close("done").await;
}

/// A blocking connect inside a Tokio runtime is refused with a reason (a runtime cannot
/// start inside another), never a panic; outside one it joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_connect_is_refused_inside_a_runtime_and_joins_outside_one() {
    let (r, _, _) = server(4).await;
    let inside = connect_blocking(r.addr, &options(&r, 1));
    let Err(ClientError::Connect { detail, .. }) = inside else {
        panic!("{:?}", inside.map(|_| ()));
    };
    assert!(detail.contains("inside a Tokio runtime"), "{detail}");
    let o = options(&r, 2);
    let addr = r.addr;
    // A thread of the game's own, outside the runtime.
    let game = std::thread::spawn(move || {
        let mut s = connect_blocking(addr, &o)?;
        let end = Instant::now() + Duration::from_millis(500);
        while Instant::now() < end {
            s.update(Instant::now());
            std::thread::sleep(Duration::from_millis(5));
        }
        let playing = s.status() == &Status::Playing;
        s.close_blocking("done");
        Ok::<_, ClientError>(playing)
    });
    while !game.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(game.join().unwrap().unwrap());
}

/// `reconnect` waits out a full server: refused for now while another player holds the
/// only slot, it joins once that player leaves; a refusal that will not pass (a token
/// for another server) ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_waits_out_a_full_server_and_stops_at_a_lasting_refusal() {
    let (r, _, _) = server(1).await;
    let first = connect(r.addr, &options(&r, 1)).await.unwrap();
    let full = connect(r.addr, &options(&r, 2)).await;
    assert!(
        matches!(&full, Err(e) if e.is_transient() && e.code() == Some(Code::Full)),
        "{:?}",
        full.map(|_| ())
    );
    let leaves = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        first.close("making room").await;
    });
    let t = Instant::now();
    let second = reconnect(r.addr, &options(&r, 2), Duration::from_secs(10), 7)
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1400),
        "joined a full server in {took:?}"
    );
    assert_eq!(second.status(), &Status::Playing);
    leaves.await.unwrap();
    // A forged token is refused for good: no retries for ten seconds.
    let mut forged = options(&r, 3);
    forged.token = common::token_with(b"another secret", 3, common::now() + 600, 1);
    let t = Instant::now();
    let refused = reconnect(r.addr, &forged, Duration::from_secs(10), 8).await;
    assert!(
        matches!(
            &refused,
            Err(ClientError::Refused {
                code: Code::TokenForged,
                ..
            })
        ),
        "{:?}",
        refused.map(|_| ())
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    second.close("done").await;
}

/// How a stand-in for a newer server ends each connection.
#[derive(Clone, Copy)]
enum Newer {
    /// Last words with this code on the control stream, then the close frame with it.
    Words(u16),
    /// The close frame alone, with this application error code.
    CloseOnly(u32),
}

/// A stand-in for a server newer than this build (quinn, the real ALPN and TLS): it takes
/// each hello and ends the connection as `how` says. Returns its address, fingerprint and
/// a count of the connections it took.
fn newer_server(how: Newer) -> (std::net::SocketAddr, String, Arc<AtomicUsize>) {
    let identity = expel_server::Identity::self_signed().unwrap();
    let ep = quinn::Endpoint::server(
        identity.quic_config().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let addr = ep.local_addr().unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let Ok(c) = incoming.await else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let Ok((mut send, mut recv)) = c.accept_bi().await else {
                continue;
            };
            let mut hello = [0u8; 64];
            let _ = recv.read(&mut hello).await;
            match how {
                Newer::Words(n) => {
                    let last = ServerControl::Ended {
                        code: Code::from_number(n),
                        detail: "a reason from the future".into(),
                    };
                    let _ = send.write_all(&encode_frame(&last)).await;
                    let _ = send.finish();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    c.close(u32::from(n).into(), b"a reason from the future");
                }
                Newer::CloseOnly(n) => c.close(n.into(), b"closed by the future"),
            }
        }
    });
    (addr, identity.fingerprint, taken)
}

/// A newer server's code this build does not know ends the join with the code shown
/// (its number kept, its group's kind) and is never retried, whether it came as last words
/// or in the close frame alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_code_from_a_newer_server_is_shown_and_never_retried() {
    for (how, want, words) in [
        (Newer::Words(37), 37, "a reason from the future"),
        (Newer::CloseOnly(4321), 4321, "closed by the future"),
    ] {
        let (addr, fingerprint, taken) = newer_server(how);
        let o = expel_client::ConnectOptions::new(
            common::token_with(common::SECRET, 5, common::now() + 60, 9),
            expel_client::Trust::Fingerprint(fingerprint),
        );
        let t = Instant::now();
        let e = reconnect(addr, &o, Duration::from_secs(10), 3)
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Some(Code::Unknown(want)), "{e}");
        assert!(!e.is_transient(), "{e}");
        let shown = e.to_string();
        assert!(
            shown.contains(&want.to_string()) && shown.contains(words),
            "{shown}"
        );
        assert_eq!(taken.load(Ordering::SeqCst), 1, "retried: {shown}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
}

/// Rules that take every player out of the game a second after it joined.
struct RemoveAfterASecond {
    joined: std::collections::BTreeMap<u32, u64>,
}

impl expel_protocol::server::GameRules for RemoveAfterASecond {
    fn joined(
        &mut self,
        game: &mut expel_protocol::server::Game<'_>,
        player: expel_core::PlayerId,
    ) {
        self.joined.insert(player.0, game.tick());
    }

    fn tick(&mut self, game: &mut expel_protocol::server::Game<'_>) {
        let due: Vec<u32> = (self.joined.iter())
            .filter(|(_, t)| game.tick() >= **t + 60)
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.joined.remove(&p);
            game.remove(PlayerId(p), "out of the game").unwrap();
        }
    }
}

/// A player the rules take out of the game is told over QUIC with its code, `removed`,
/// and the rules' words as detail; the client does not retry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_the_rules_remove_ends_with_the_removed_code() {
    let (r, _, _) = common::server_with(4, |c| {
        c.rules = Some(Box::new(RemoveAfterASecond {
            joined: Default::default(),
        }));
    })
    .await;
    let mut s = connect(r.addr, &options(&r, 1)).await.unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end && !matches!(s.status(), Status::Ended(_)) {
        s.input(expel_core::MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0));
        s.update(Instant::now());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let Status::Ended(e) = s.status() else {
        panic!("still {:?} after 5 s", s.status());
    };
    assert_eq!(e.code(), Some(Code::Removed), "{e:?}");
    assert!(e.reason().contains("out of the game"), "{e:?}");
    assert!(!e.worth_reconnecting(), "{e:?}");
}
