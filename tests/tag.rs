//! Tag, the game mode shipped with the server: played on the simulated network (the same
//! run twice ends in the same world and the same score) and by clients against a real
//! `expel serve --mode tag` (every client's score is the server's).

mod common;

use common::{http_get, network, Served};
use expel_core::PlayerId;

use expel_client::{Channel, ConnectOptions, Trust};
use expel_core::{MoveCommand, MoveMode, PlayerState};
use expel_modes::tag::{Say, Tag, TagNews, TagScore};
use expel_protocol::client::{ClientEvent, ClientMachine};
use expel_protocol::conditioner::Impairment;
use expel_protocol::MovementAuthority;
use glam::DVec3;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Walks towards `goal`, with a little strafe of its own (so players meeting there slide
/// past each other rather than stand nose to nose).
fn towards(goal: DVec3, me: Option<&PlayerState>, id: u64, tick: u64) -> MoveCommand {
    let Some(me) = me else {
        return MoveCommand::default();
    };
    let d = goal - me.origin();
    let yaw = d.y.atan2(d.x).to_degrees();
    let side = if (tick / 40 + id).is_multiple_of(2) {
        0.4
    } else {
        -0.4
    };
    MoveCommand::new(1.0, side, 0.0, yaw, 0.0)
}

/// Where the players meet: the first spawn point.
fn meeting(c: &ClientMachine) -> DVec3 {
    c.sim()
        .and_then(|s| s.spawns().first().copied())
        .unwrap_or_default()
}

/// Plays tag for `secs` on the simulated network: the rules' last score, each client's
/// last score, the world's hash, and how many of the tenths of a second sampled found
/// "it" frozen (it is, for a second after each pass; nobody else ever is).
fn play(n: u32, secs: u64, seed: u64) -> (TagScore, Vec<Option<TagScore>>, u64, u64) {
    let link = Impairment {
        loss: 0.05,
        delay_ms: 40.0,
        jitter_ms: 10.0,
        duplicate: 0.02,
    };
    let mut net = network(n, MovementAuthority::Server, link, seed);
    net.server_mut().set_rules(Box::new(Tag::new()));
    let mut last = vec![None; n as usize];
    let mut summary: Option<String> = None;
    let mut frozen = 0;
    for _ in 0..secs * 10 {
        net.run(Duration::from_millis(100), &mut |i, c| {
            towards(
                meeting(c),
                c.local_player().as_ref(),
                i as u64,
                c.predicted_tick(),
            )
        });
        for (i, seen) in last.iter_mut().enumerate() {
            // An event for each message (the score goes reliable), then the messages.
            let told = std::iter::from_fn(|| net.client_mut(i).poll_event())
                .filter(|e| {
                    matches!(e, ClientEvent::Message { channel } if *channel == Channel::Reliable)
                })
                .count();
            let mut taken = 0;
            while let Some(m) = net.client_mut(i).poll_message() {
                let (ch, bytes) = (m.channel, m.bytes);
                taken += 1;
                assert_eq!(ch, Channel::Reliable);
                match postcard::from_bytes::<TagNews>(&bytes).unwrap() {
                    TagNews::Score(s) => *seen = Some(s),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(told, taken, "client {i}");
        }
        if let Some(s) = net.server_mut().game_summary() {
            summary = Some(s);
        }
        let it = summary
            .as_deref()
            .and_then(|s| serde_json::from_str::<TagScore>(s).ok())
            .and_then(|s| s.it);
        for (id, p) in &net.server().world().players {
            if p.state.mode == MoveMode::Frozen {
                assert_eq!(Some(*id), it, "only \"it\" is ever frozen");
                frozen += 1;
            }
        }
    }
    let rules: TagScore = serde_json::from_str(&summary.expect("a score")).unwrap();
    (rules, last, net.server().world().hash(), frozen)
}

#[test]
fn tag_on_the_simulated_network_passes_it_on_and_every_client_holds_the_servers_score() {
    let (rules, clients, hash, frozen) = play(6, 20, 11);
    assert!(rules.passes >= 3, "{rules:?}");
    // Frozen for the second after each pass (and after the first player joined).
    assert!(frozen >= 5 * rules.passes, "{frozen} tenths frozen");
    let points: u32 = rules.scores.iter().map(|(_, s)| s).sum();
    assert_eq!(u64::from(points), rules.passes);
    assert_eq!(rules.scores.len(), 6);
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(c.as_ref(), Some(&rules), "client {i}");
    }
    // The same inputs: the same world, the same score.
    let (again, _, hash_again, _) = play(6, 20, 11);
    assert_eq!((again, hash_again), (rules, hash));
    eprintln!(
        "{} passes; world hash {hash:016x}",
        clients[0].as_ref().unwrap().passes
    );
}

/// Takes what the tag server sent client `i`.
fn take_news(
    i: usize,
    s: &mut expel_client::Session,
    last: &mut BTreeMap<usize, TagScore>,
    said: &mut Vec<(usize, PlayerId, String)>,
) {
    // ANCHOR: take
    while let Some(expel_client::Delivered { message: news, .. }) = s.poll_message::<TagNews>() {
        match news {
            TagNews::Score(score) => {
                last.insert(i, score);
            }
            TagNews::Said { from, line } => said.push((i, from, line)),
        }
    }
    // ANCHOR_END: take
}

/// Clients play tag against the real server (`expel serve --mode tag`) for fifteen
/// seconds: it is passed on, and every client's last score is the server's (its
/// `/game.json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_over_expel_serve_gives_every_client_the_servers_score() {
    let served = Served::start_args("", 16, "--mode tag");
    let mut sessions = Vec::new();
    for id in 1..=4u32 {
        let o = ConnectOptions::new(
            served.token(id, 1),
            Trust::Fingerprint(served.fingerprint.clone()),
        );
        sessions.push(expel_client::connect(served.addr, &o).await.unwrap());
    }
    let goal = sessions[0].sim.spawns()[0];
    let mut last: BTreeMap<usize, TagScore> = BTreeMap::new();
    // One chat line, with a bell in it and far too long: everyone hears it, cleaned.
    let mut said = Vec::new();
    let line = format!("hello\u{7} {}", "a".repeat(300));
    // ANCHOR: send
    sessions[0]
        .send(Channel::Reliable, &Say(line.clone()), Instant::now())
        .unwrap();
    // ANCHOR_END: send
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        let now = Instant::now();
        for (i, s) in sessions.iter_mut().enumerate() {
            let id = i as u64;
            s.update_with(now, &mut |tick, me| Some(towards(goal, me, id, tick)));
            take_news(i, s, &mut last, &mut said);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Then apart (each away from the meeting point) and still: nobody touches any more,
    // and the last score reaches everyone.
    let apart = Instant::now() + Duration::from_secs(2);
    let still = apart + Duration::from_millis(1500);
    while Instant::now() < still {
        let now = Instant::now();
        for (i, s) in sessions.iter_mut().enumerate() {
            let id = i as u64;
            s.update_with(now, &mut |tick, me| {
                let away = me.map(|m| 2.0 * m.origin() - goal);
                Some(match away {
                    Some(a) if now < apart => towards(a, me, id, tick),
                    _ => MoveCommand::default(),
                })
            });
            take_news(i, s, &mut last, &mut said);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, body) = http_get(served.http, "/game.json");
    assert!(status.contains("200"), "{status}");
    let server: TagScore = serde_json::from_str(&body).unwrap();
    assert_eq!(server.scores.len(), 4, "{server:?}");
    assert!(server.it.is_some());
    assert!(server.passes >= 1, "never passed on: {server:?}");
    let speaker = sessions[0].welcome.player;
    let cleaned: String = line.chars().filter(|c| *c != '\u{7}').take(200).collect();
    let heard: Vec<_> = (0..4).map(|i| (i, speaker, cleaned.clone())).collect();
    // Each client hears it once; which of them reads it first is the network's.
    said.sort();
    assert_eq!(said, heard);
    for i in 0..4 {
        assert_eq!(last.get(&i), Some(&server), "client {i}");
    }
    eprintln!("{} passes: {:?}", server.passes, server.scores);
    for s in sessions {
        s.close("done").await;
    }
}

/// Two players with the lowest ids chat at their full allowance (240 lines at once, then
/// as fast as their clients let them), over real QUIC against `expel serve --mode tag`:
/// an honest player's 20 lines still reach every player, itself included (at least 19 of
/// 20 each), and so does the score. Each recipient's allowance goes round its senders
/// and the game's own messages; the floods' excess is dropped and counted as over their
/// share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_floods_with_the_lowest_ids_leave_an_honest_players_chat_and_the_score_through() {
    let served = Served::start_args("", 16, "--mode tag");
    let connect = |id: u32| {
        ConnectOptions::new(
            served.token(id, 1),
            Trust::Fingerprint(served.fingerprint.clone()),
        )
    };
    // The abusers first, with the lowest ids.
    let mut abusers = Vec::new();
    for id in 1..=2u32 {
        abusers.push(
            expel_client::connect(served.addr, &connect(id))
                .await
                .unwrap(),
        );
    }
    let mut flood = 0u64;
    let mut spam = |abusers: &mut Vec<expel_client::Session>| {
        for a in abusers.iter_mut() {
            while a
                .send(
                    Channel::Reliable,
                    &Say(format!("spam {flood}")),
                    Instant::now(),
                )
                .is_ok()
            {
                flood += 1;
            }
        }
    };
    spam(&mut abusers);
    let mut others = Vec::new();
    for id in 3..=6u32 {
        others.push(
            expel_client::connect(served.addr, &connect(id))
                .await
                .unwrap(),
        );
    }
    let honest = others[0].welcome.player;
    let mut last: BTreeMap<usize, TagScore> = BTreeMap::new();
    let mut said = Vec::new();
    let start = Instant::now();
    let mut sent = 0;
    while Instant::now() < start + Duration::from_secs(8) {
        let now = Instant::now();
        spam(&mut abusers);
        // The honest player: a line every quarter second, twenty in all.
        if sent < 20 && now >= start + Duration::from_millis(250 * sent) {
            others[0]
                .send(Channel::Reliable, &Say(format!("honest line {sent}")), now)
                .unwrap();
            sent += 1;
        }
        for s in abusers.iter_mut() {
            s.update_with(now, &mut |_, _| Some(MoveCommand::default()));
            while s.poll_message::<TagNews>().is_some() {}
        }
        for (i, s) in others.iter_mut().enumerate() {
            s.update_with(now, &mut |_, _| Some(MoveCommand::default()));
            take_news(i, s, &mut last, &mut said);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(sent, 20);
    assert!(flood >= 1500, "the floods sent only {flood} lines");
    for i in 0..others.len() {
        let heard = said
            .iter()
            .filter(|(to, from, line)| {
                *to == i && *from == honest && line.starts_with("honest line")
            })
            .count();
        assert!(
            heard >= 19,
            "player {i} heard {heard} of the honest player's 20 lines"
        );
    }
    let (status, body) = http_get(served.http, "/game.json");
    assert!(status.contains("200"), "{status}");
    let server: TagScore = serde_json::from_str(&body).unwrap();
    assert_eq!(server.scores.len(), 6, "{server:?}");
    for i in 0..others.len() {
        assert_eq!(last.get(&i), Some(&server), "player {i}'s score");
    }
    let (_, metrics) = http_get(served.http, "/metrics");
    let over_share: f64 = metrics
        .lines()
        .find(|l| l.starts_with("expel_message_drops_total{reason=\"over_share\"}"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0);
    assert!(
        over_share > 0.0,
        "the floods' excess is counted: {over_share}"
    );
    eprintln!("floods: {flood} lines; over their share: {over_share}");
    for s in abusers.into_iter().chain(others) {
        s.close("done").await;
    }
}
