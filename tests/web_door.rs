//! The browser's door from outside, with a WebTransport client that is not a browser
//! (wtransport's, on loopback): it plays through the door as a page does, with the same
//! client machine, and the door bounds what an abuser does with it: a wrong path, a
//! session that never opens its control stream, a datagram flood, a crowd of half-open
//! sessions from one address.

mod common;

use common::{now, server_with, SECRET};
use expel_core::MoveCommand;
use expel_protocol::client::{ClientMachine, ClientOutput, ClientSettings, Status};
use expel_server::{Server, WebCertificate, WebConfig, WebPage};
use expel_testkit::network::token_with;
use sha2::Digest as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use wtransport::tls::Sha256Digest;
use wtransport::{ClientConfig, Connection, Endpoint};

/// The test server with its browser's door on loopback, and the door's certificate hash.
async fn server(change: impl FnOnce(&mut expel_server::ServerConfig)) -> (Server, String) {
    let (r, _, _) = server_with(8, |cfg| {
        cfg.web = Some(WebConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            certificate: WebCertificate::Development,
            page: WebPage::new(),
        });
        change(cfg);
    })
    .await;
    let web = r.web_addr.expect("the door's address");
    let door = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(web).unwrap();
        use std::io::{Read, Write};
        write!(
            s,
            "GET /door.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    })
    .await
    .unwrap();
    let body = door.split("\r\n\r\n").nth(1).unwrap();
    let door: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(door["port"].as_u64(), Some(u64::from(web.port())));
    (r, door["cert_hash"].as_str().unwrap().to_string())
}

/// A WebTransport session to the door at `path`, pinning the certificate by `hash`.
async fn session(web: SocketAddr, hash: &str, path: &str) -> Result<Connection, String> {
    let bytes: [u8; 32] = hex::decode(hash).unwrap().try_into().unwrap();
    let cfg = ClientConfig::builder()
        .with_bind_default()
        .with_server_certificate_hashes([Sha256Digest::new(bytes)])
        .build();
    let ep = Endpoint::client(cfg).map_err(|e| e.to_string())?;
    ep.connect(format!("https://127.0.0.1:{}{path}", web.port()))
        .await
        .map_err(|e| e.to_string())
}

/// Plays `seconds` as player `id` through the door, the way the page does: the client
/// machine over the session's control stream and datagrams. Returns the machine.
async fn play(web: SocketAddr, hash: &str, id: u32, seconds: f64) -> ClientMachine {
    let conn = session(web, hash, "/expel").await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap().await.unwrap();
    let token = token_with(SECRET, id, now() + 60, 1);
    let mut m = ClientMachine::new(ClientSettings::new(token), Instant::now());
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; 4096];
    while Instant::now() < end {
        m.input(MoveCommand::new(1.0, 0.0, 0.0, 45.0, 0.0));
        while let Some(out) = m.poll_output() {
            match out {
                ClientOutput::Control(b) => send.write_all(&b).await.unwrap(),
                ClientOutput::Datagram(b) => {
                    let _ = conn.send_datagram(b);
                }
            }
        }
        let wake = m
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(5));
        tokio::select! {
            r = recv.read(&mut buf) => match r {
                Ok(Some(n)) => m.handle_control(&buf[..n], Instant::now()),
                _ => break,
            },
            d = conn.receive_datagram() => match d {
                Ok(d) => m.handle_datagram(&d, Instant::now()),
                Err(_) => break,
            },
            () = tokio::time::sleep_until(wake.into()) => m.handle_timeout(Instant::now()),
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webtransport_client_that_is_not_a_browser_plays_through_the_door() {
    let (r, hash) = server(|_| {}).await;
    let web = r.web_addr.unwrap();
    let m = play(web, &hash, 41, 3.0).await;
    assert_eq!(*m.status(), Status::Playing, "{:?}", m.status());
    let s = m.stats();
    assert!(s.predict.snapshots >= 60, "{s:?}");
    assert_eq!(s.unexplained_corrections, 0, "{s:?}");
    assert_eq!(r.metrics.web_sessions.get(), 1);
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_bounds_a_wrong_path_a_silent_session_and_a_datagram_flood() {
    let (r, hash) = server(|cfg| {
        cfg.limits.handshake_timeout = Duration::from_secs(1);
    })
    .await;
    let web = r.web_addr.unwrap();
    let m = &r.metrics;

    // A path that is not the game's: not found, counted.
    assert!(session(web, &hash, "/other").await.is_err());

    // A session that never opens its control stream: closed at the handshake's limit.
    let silent = session(web, &hash, "/expel").await.unwrap();
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), silent.closed())
        .await
        .expect("the silent session was never closed");
    assert!(t0.elapsed() >= Duration::from_millis(500));
    assert!(m.handshake_timeouts.get() >= 1);
    assert!(m.web_refused.get() >= 2, "{}", m.web_refused.get());

    // A flood of garbage datagrams from a session that said hello: dropped past its
    // rate before the machine; a player beside it plays on.
    let flooder = session(web, &hash, "/expel").await.unwrap();
    let (mut send, _recv) = flooder.open_bi().await.unwrap().await.unwrap();
    let hello = expel_protocol::frame::encode_frame(&expel_protocol::ClientControl::Hello {
        version: expel_protocol::VERSION,
        token: token_with(SECRET, 77, now() + 60, 2),
        have_map: None,
    });
    send.write_all(&hello).await.unwrap();
    let flood = tokio::spawn(async move {
        for i in 0..20_000u32 {
            let _ = flooder.send_datagram(i.to_le_bytes().repeat(20));
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        flooder
    });
    let honest = play(web, &hash, 42, 3.0).await;
    let _flooder = flood.await.unwrap();
    assert_eq!(*honest.status(), Status::Playing, "{:?}", honest.status());
    assert!(honest.stats().predict.snapshots >= 60);
    assert!(m.web_over_rate.get() > 0, "no datagram was over the rate");
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_sessions_from_one_address_are_bounded_by_admission() {
    let (r, hash) = server(|cfg| {
        cfg.limits.pending_per_address = 3;
        cfg.limits.handshake_timeout = Duration::from_secs(3);
    })
    .await;
    let web = r.web_addr.unwrap();
    // Sessions that never say hello hold their admission slots until their limit.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        match session(web, &hash, "/expel").await {
            Ok(c) => held.push(c),
            Err(_) => refused += 1,
        }
    }
    assert_eq!(held.len(), 3, "{refused} refused");
    assert_eq!(refused, 3);
    assert!(r.metrics.pending.get() <= 3);
    r.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_operators_certificate_the_page_is_https_and_sessions_carry_it() {
    // The operator's certificate, as PEM files (short-lived, so this test's client may
    // pin it by hash; browsers would check it against their roots).
    let id = wtransport::Identity::self_signed_builder()
        .subject_alt_names(["localhost"])
        .from_now_utc()
        .validity_days(10)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("expel-web-cert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (chain, key) = (dir.join("chain.pem"), dir.join("key.pem"));
    id.certificate_chain().store_pemfile(&chain).await.unwrap();
    id.private_key().store_secret_pemfile(&key).await.unwrap();
    let leaf = id.certificate_chain().as_slice()[0].der().to_vec();
    let (r, _, _) = server_with(8, |cfg| {
        cfg.web = Some(WebConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            certificate: WebCertificate::Files { chain, key },
            page: WebPage::new().with_file("/", "text/html", "<p>the page</p>"),
        });
    })
    .await;
    let web = r.web_addr.unwrap();
    assert_eq!(r.web_url, Some(format!("https://{web}/")));

    // The page over HTTPS with that certificate; door.json names no hash to pin.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(leaf.clone().into()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(web).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, tcp)
        .await
        .expect("the page's TLS with the operator's certificate");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tls.write_all(b"GET /door.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    let _ = tls.read_to_string(&mut text).await;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    let door: serde_json::Value = serde_json::from_str(body).unwrap();
    assert!(door["cert_hash"].is_null(), "{door}");

    // Sessions carry the same certificate.
    let hash = hex::encode(sha2::Sha256::digest(&leaf));
    let m = play(web, &hash, 43, 2.0).await;
    assert_eq!(*m.status(), Status::Playing, "{:?}", m.status());
    r.shutdown("test over").await;
    let _ = std::fs::remove_dir_all(&dir);
}
