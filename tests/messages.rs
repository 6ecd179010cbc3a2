//! What a game sees of the other players and says to them: the game's own messages both
//! ways, on the simulated network under loss, reordering and duplication (the reliable
//! channel delivers every message once, in order; the unreliable one never twice, never
//! after a newer one) and over real QUIC against clients that abuse them; the others
//! entering and leaving the view; the others drawn facing their way and crouching.

mod common;

use common::{network, network_with, server_with};

use expel_client::{Channel, MessageError};
use expel_core::MoveCommand;
use expel_core::PlayerId;
use expel_protocol::conditioner::Impairment;
use expel_protocol::server::{Game, GameRules};
use expel_protocol::simnet::SimNet;
use expel_protocol::{encode, ClientControl, ClientDatagram, MovementAuthority};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The game's message in these tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Count(u64),
    Chat(String),
}

/// What went each way, per player and channel, in order.
#[derive(Debug, Default, PartialEq)]
struct Log {
    /// The rules stop sending once this is set (the run drains).
    done: bool,
    /// What the rules sent to each player.
    sent: BTreeMap<(u32, Channel), Vec<u64>>,
    /// What the rules received from each player.
    got: BTreeMap<(u32, Channel), Vec<u64>>,
}

/// Takes every message, and sends every player a count each tick: reliable on even
/// ticks, unreliable on every one.
struct Counter(Arc<Mutex<Log>>);

impl GameRules for Counter {
    fn tick(&mut self, game: &mut Game<'_>) {
        let mut log = self.0.lock().unwrap();
        while let Some((p, ch, m)) = game.poll::<Msg>() {
            if let Msg::Count(k) = m {
                log.got.entry((p.0, ch)).or_default().push(k);
            }
        }
        if log.done {
            return;
        }
        let t = game.tick();
        let players: Vec<PlayerId> = game.players().collect();
        for p in players {
            let mut channels = vec![Channel::Unreliable];
            if t.is_multiple_of(2) {
                channels.push(Channel::Reliable);
            }
            for ch in channels {
                game.send(p, ch, &Msg::Count(t)).unwrap();
                log.sent.entry((p.0, ch)).or_default().push(t);
            }
        }
    }
}

/// Runs `n` clients for `secs` on a bad link, each sending a count each tick both ways
/// as the rules do; returns the rules' log and what each client sent and received.
#[allow(clippy::type_complexity)]
fn counting(n: u32, secs: u64, seed: u64) -> (Log, Log, SimNet) {
    let link = Impairment {
        loss: 0.1,
        delay_ms: 60.0,
        jitter_ms: 30.0,
        duplicate: 0.1,
    };
    let mut net = network(n, MovementAuthority::Server, link, seed);
    let log = Arc::new(Mutex::new(Log::default()));
    net.server_mut().set_rules(Box::new(Counter(log.clone())));
    let mut clients = Log::default();
    let tick = Duration::from_secs_f64(1.0 / 60.0);
    let steps = secs * 60;
    for k in 0..steps {
        net.run(tick, &mut |_, _| MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0));
        let now = net.now();
        for i in 0..net.len() {
            let c = net.client_mut(i);
            let Some(me) = c.welcome().map(|w| w.player) else {
                continue;
            };
            while let Some(expel_protocol::messages::Letter {
                channel: ch, bytes, ..
            }) = c.poll_message()
            {
                let Ok(Msg::Count(t)) = postcard::from_bytes::<Msg>(&bytes) else {
                    panic!("not a count");
                };
                clients.got.entry((me.0, ch)).or_default().push(t);
            }
            if *c.status() != expel_protocol::client::Status::Playing {
                continue;
            }
            let mut channels = vec![Channel::Unreliable];
            if k.is_multiple_of(2) {
                channels.push(Channel::Reliable);
            }
            for ch in channels {
                let bytes = postcard::to_allocvec(&Msg::Count(k)).unwrap();
                c.send_message(ch, &bytes, now).unwrap();
                clients.sent.entry((me.0, ch)).or_default().push(k);
            }
        }
    }
    // A second more for what is still on its way, nothing more sent.
    log.lock().unwrap().done = true;
    net.run(Duration::from_secs(1), &mut |_, _| MoveCommand::default());
    for i in 0..net.len() {
        let c = net.client_mut(i);
        let me = c.welcome().map(|w| w.player).unwrap_or(PlayerId(0));
        while let Some(expel_protocol::messages::Letter {
            channel: ch, bytes, ..
        }) = c.poll_message()
        {
            if let Ok(Msg::Count(t)) = postcard::from_bytes::<Msg>(&bytes) {
                clients.got.entry((me.0, ch)).or_default().push(t);
            }
        }
    }
    // The rules take the last ones on the next tick they run.
    net.run(tick * 2, &mut |_, _| MoveCommand::default());
    let rules = std::mem::take(&mut *log.lock().unwrap());
    (rules, clients, net)
}

/// Checks one direction: every reliable message once and in order; unreliable ones
/// never twice, never after a newer one, most of them through. Returns how many
/// unreliable messages were sent and delivered.
fn check(sent: &Log, got: &Log, what: &str) -> (usize, usize) {
    let (mut u_sent, mut u_got) = (0, 0);
    for ((p, ch), s) in &sent.sent {
        let g = got.got.get(&(*p, *ch)).cloned().unwrap_or_default();
        match ch {
            Channel::Reliable => assert_eq!(&g, s, "{what}: player {p}'s reliable messages"),
            Channel::Unreliable => {
                assert!(
                    g.windows(2).all(|w| w[0] < w[1]),
                    "{what}: player {p}'s unreliable messages repeat or go back: {g:?}"
                );
                assert!(
                    g.iter().all(|t| s.binary_search(t).is_ok()),
                    "{what}: unsent"
                );
                u_sent += s.len();
                u_got += g.len();
            }
        }
    }
    assert!(sent.sent.len() >= 8, "{what}: {:?}", sent.sent.keys());
    (u_sent, u_got)
}

#[test]
fn messages_keep_their_channels_rules_through_loss_reordering_and_duplication() {
    let (rules, clients, net) = counting(8, 20, 7);
    // Server to clients, and clients to server.
    let down = check(&rules, &clients, "server to client");
    let up = check(&clients, &rules, "client to server");
    for (what, (sent, got)) in [("down", down), ("up", up)] {
        // 10% lost, and (with 30 ms of jitter against 17 ms between them) many overtaken
        // by newer ones and dropped as stale.
        assert!(got * 2 > sent, "{what}: {got} of {sent} unreliable through");
        assert!(got < sent, "{what}: nothing lost on a lossy link?");
    }
    let reliable: usize = rules
        .sent
        .iter()
        .filter(|((_, c), _)| *c == Channel::Reliable)
        .map(|(_, v)| v.len())
        .sum();
    assert!(reliable > 4000, "{reliable} reliable messages");
    // Duplicated and overtaken datagrams were counted as dropped, not delivered.
    let st = net.server().stats().messages[Channel::Unreliable.index()];
    assert!(st.dropped > 0 && st.refused == 0, "{st:?}");
    eprintln!(
        "down: {} of {} unreliable delivered; up: {} of {}; {reliable} reliable down; server's unreliable counts {st:?}",
        down.1, down.0, up.1, up.0
    );
}

#[test]
fn the_same_run_sends_and_delivers_the_same_messages() {
    let (a, ca, _) = counting(4, 5, 3);
    let (b, cb, _) = counting(4, 5, 3);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
}

/// Echoes each message to its sender on its channel, and counts chat lines per player.
struct Echo;

impl GameRules for Echo {
    fn tick(&mut self, game: &mut Game<'_>) {
        while let Some((p, ch, m)) = game.poll::<Msg>() {
            let _ = game.send(p, ch, &m);
        }
    }
}

/// Over real QUIC: a client that sends messages too large, malformed, or far too many is
/// refused and counted, and kicked with the reason; an honest client beside it gets every
/// reliable echo back, in order, and is never kicked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abusive_messages_are_refused_counted_and_kicked_while_honest_ones_echo() {
    let (r, _, _) = server_with(8, |c| {
        c.rules = Some(Box::new(Echo));
        c.settings.input_timeout = Duration::from_secs(10);
    })
    .await;
    let mut honest = expel_client::connect(r.addr, &common::options(&r, 1))
        .await
        .unwrap();
    // The abuser: a raw QUIC connection that joins and then speaks for itself.
    let (_ep, c, mut s) = common::joined_raw(&r, 2, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let frame = |m: &ClientControl| expel_protocol::frame::encode_frame(m);
    // Too large (reliable), then not the game's type: refused, not fatal at once.
    let big = ClientControl::Message {
        bytes: vec![1; 2000],
    };
    s.write_all(&frame(&big)).await.unwrap();
    for _ in 0..3 {
        let junk = ClientControl::Message {
            bytes: vec![0xff; 9],
        };
        s.write_all(&frame(&junk)).await.unwrap();
    }
    // Honest play meanwhile: 200 chat lines, reliable, each echoed back.
    let mut sent = Vec::new();
    let mut echoed = Vec::new();
    let mut flood_seq = 0u64;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        if sent.len() < 200 {
            let line = format!("line {}", sent.len());
            match honest.send(
                Channel::Reliable,
                &Msg::Chat(line.clone()),
                std::time::Instant::now(),
            ) {
                Ok(()) => sent.push(line),
                Err(MessageError::OverRate) => {}
                Err(e) => panic!("{e}"),
            }
        }
        // The flood: a thousand unreliable messages a second.
        if started.elapsed() > Duration::from_secs(2) {
            for _ in 0..10 {
                flood_seq += 1;
                let d = encode(&ClientDatagram::Message {
                    seq: flood_seq,
                    bytes: postcard::to_allocvec(&Msg::Count(flood_seq)).unwrap(),
                });
                let _ = c.send_datagram(d.into());
            }
        }
        honest.update(std::time::Instant::now());
        while let Some(expel_client::Delivered {
            channel: ch,
            message: m,
            ..
        }) = honest.poll_message::<Msg>()
        {
            assert_eq!(ch, Channel::Reliable);
            if let Msg::Chat(l) = m {
                echoed.push(l);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (code, why) = common::closed_with(&c, 5).await;
    assert_eq!(code, Some(expel_client::Code::MessageAbuse), "{why}");
    assert!(why.contains("abusing messages"), "{why}");
    assert_eq!(echoed, sent, "the honest client's echoes");
    assert_eq!(sent.len(), 200);
    assert!(matches!(honest.status(), expel_client::Status::Playing));
    let text = common::http_get(r.metrics_addr.unwrap(), "/metrics").1;
    let metric = |ch: &str, outcome: &str| -> f64 {
        let series = format!("expel_messages_total{{channel=\"{ch}\",outcome=\"{outcome}\"}}");
        expel_bots::metrics::sample(&text, &series).unwrap_or(-1.0)
    };
    // One too large and three malformed, reliable; the flood's excess, unreliable.
    assert_eq!(metric("reliable", "refused"), 4.0, "{text}");
    assert!(metric("unreliable", "refused") > 10.0, "{text}");
    assert!(metric("reliable", "received") >= 200.0 + 3.0);
    assert!(metric("reliable", "sent") >= 200.0);
    honest.close("done").await;
    r.shutdown("test over").await;
}

/// A client is told when another player comes into its view and when it leaves it: three
/// players join (each sees the other two come), then one says goodbye (the other two see
/// it go, and it never comes back).
#[test]
fn clients_are_told_of_players_entering_and_leaving_their_view() {
    use expel_core::PlayerId;
    use expel_protocol::client::ClientEvent;
    let mut net = network(3, MovementAuthority::Server, Impairment::default(), 5);
    let idle = &mut |_: usize, _: &expel_protocol::client::ClientMachine| MoveCommand::default();
    net.run(Duration::from_secs(3), idle);
    let ids: Vec<PlayerId> = (0..3)
        .map(|i| net.client(i).welcome().unwrap().player)
        .collect();
    let mut seen: Vec<Vec<ClientEvent>> = (0..3)
        .map(|i| {
            std::iter::from_fn(|| net.client_mut(i).poll_event())
                .filter(|e| {
                    matches!(
                        e,
                        ClientEvent::EnteredView { .. } | ClientEvent::LeftView { .. }
                    )
                })
                .collect()
        })
        .collect();
    for (i, events) in seen.iter().enumerate() {
        let mut came: Vec<PlayerId> = events
            .iter()
            .map(|e| match e {
                ClientEvent::EnteredView { player } => *player,
                other => panic!("client {i}: {other:?}"),
            })
            .collect();
        came.sort_unstable();
        let mut others: Vec<PlayerId> = ids.iter().copied().filter(|p| *p != ids[i]).collect();
        others.sort_unstable();
        assert_eq!(came, others, "client {i}");
    }
    net.client_mut(2).leave("bye");
    net.run(Duration::from_secs(2), idle);
    for (i, events) in seen.iter_mut().enumerate().take(2) {
        *events = std::iter::from_fn(|| net.client_mut(i).poll_event())
            .filter(|e| {
                matches!(
                    e,
                    ClientEvent::EnteredView { .. } | ClientEvent::LeftView { .. }
                )
            })
            .collect();
        assert_eq!(
            *events,
            vec![ClientEvent::LeftView {
                player: PlayerId(ids[2].0)
            }],
            "client {i}"
        );
    }
}

/// Joining and leaving the server is told apart from entering and leaving the view: with
/// a view of one player, four players each hear the other three join (and see only one),
/// and when one leaves, the others each hear exactly that it left.
#[test]
fn clients_hear_of_joins_and_leaves_beyond_their_view() {
    use expel_core::PlayerId;
    use expel_protocol::client::{ClientEvent, ClientMachine};
    let mut net = network_with(4, Impairment::default(), 8, |s| s.interest = 1);
    let idle = &mut |_: usize, _: &ClientMachine| MoveCommand::default();
    net.run(Duration::from_secs(3), idle);
    let ids: Vec<PlayerId> = (0..4)
        .map(|i| net.client(i).welcome().unwrap().player)
        .collect();
    // Odd ids were sent the map (and report it whole), even ones held it.
    let size = net.client(0).map().map(|m| m.len() as u64).unwrap();
    assert_eq!(net.client(0).map_progress(), Some((size, size)));
    assert_eq!(net.client(1).map_progress(), None);
    let drain = |net: &mut expel_protocol::simnet::SimNet, i: usize| {
        std::iter::from_fn(|| net.client_mut(i).poll_event()).collect::<Vec<_>>()
    };
    for i in 0..4 {
        let events = drain(&mut net, i);
        let mut joined: Vec<PlayerId> = events
            .iter()
            .filter_map(|e| match e {
                ClientEvent::PlayerJoined { player } => Some(*player),
                _ => None,
            })
            .collect();
        joined.sort_unstable();
        let others: Vec<PlayerId> = ids.iter().copied().filter(|p| *p != ids[i]).collect();
        assert_eq!(joined, others, "client {i}: {events:?}");
        assert_eq!(
            net.client(i).roster().iter().copied().collect::<Vec<_>>(),
            others
        );
        let in_view = |e: &&ClientEvent| matches!(e, ClientEvent::EnteredView { .. });
        let out_of_view = |e: &&ClientEvent| matches!(e, ClientEvent::LeftView { .. });
        let shown =
            events.iter().filter(in_view).count() - events.iter().filter(out_of_view).count();
        assert_eq!(shown, 1, "client {i} sees one other: {events:?}");
    }
    net.client_mut(3).leave("bye");
    net.run(Duration::from_secs(2), idle);
    for i in 0..3 {
        let left: Vec<ClientEvent> = drain(&mut net, i)
            .into_iter()
            .filter(|e| {
                matches!(
                    e,
                    ClientEvent::PlayerJoined { .. } | ClientEvent::PlayerLeft { .. }
                )
            })
            .collect();
        assert_eq!(
            left,
            vec![ClientEvent::PlayerLeft {
                player: PlayerId(ids[3].0)
            }],
            "client {i}"
        );
        assert!(!net.client(i).roster().contains(&PlayerId(ids[3].0)));
    }
}

/// Others arrive as a game draws them: each faces its own way (its commands' yaw and
/// pitch, through the snapshots' deltas and the interpolation) and one crouches.
#[test]
fn others_are_drawn_facing_their_way_and_crouching() {
    use expel_core::movement::buttons;
    use expel_core::PlayerId;
    let mut net = network(3, MovementAuthority::Server, Impairment::default(), 9);
    let yaw = |i: usize| 45.0 + 100.0 * i as f64;
    let face = &mut |i: usize, _: &expel_protocol::client::ClientMachine| {
        let c = MoveCommand::new(0.0, 0.0, 0.0, yaw(i), -20.0);
        if i == 2 {
            c.with_buttons(buttons::CROUCH)
        } else {
            c
        }
    };
    net.run(Duration::from_secs(3), face);
    let ids: Vec<PlayerId> = (0..3)
        .map(|i| net.client(i).welcome().unwrap().player)
        .collect();
    let c = net.client(0);
    let drawn = c.others_drawn(c.render_tick(net.now()));
    assert_eq!(drawn.len(), 2, "{drawn:?}");
    // Others' facing travels to a 256th of a turn: within half a step.
    let step = 360.0 / 256.0;
    for i in 1..3 {
        let d = drawn[&PlayerId(ids[i].0)];
        assert!((d.yaw - yaw(i)).abs() <= step / 2.0, "player {i}: {d:?}");
        assert!((d.pitch + 20.0).abs() <= step / 2.0, "player {i}: {d:?}");
        assert_eq!(d.crouched, i == 2, "player {i}: {d:?}");
    }
}
