//! The sans-IO protocol driven with bytes and ticks: snapshots decoded through loss,
//! reordering and stale acknowledgements equal the server's world; datagrams fit their
//! limit; malformed bytes are errors, never panics.

use expel_core::mover::MoverState;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, MapData, MoveCommand, MoveConfig, PlayerState, Sim, SimScratch, WorldState,
};
use expel_protocol::frame::{encode_frame, FrameDecoder, MAX_FRAME};
use expel_protocol::snapshot::held_tolerance;
use expel_protocol::snapshot::{
    Crowd, Feedback, Room, Snapshot, SnapshotDecoder, SnapshotEncoder, EXACT_NEAR, EXACT_REACH,
    FACING_DRIFT, MAX_VIEW, VIEW_DRIFT, VIEW_REFRESH,
};
use expel_protocol::{decode, ClientControl, ClientDatagram, ServerControl};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

fn fb(last_command: u64) -> Feedback {
    Feedback {
        last_command,
        input_lead: Some(3),
        corrected: last_command / 3,
        contact: last_command / 2,
        missed: last_command / 5,
        missed_total: last_command / 7,
        behind: (last_command % 300) as u32,
        moved: last_command / 11,
    }
}

/// `n` players scattered over the arena's floor, and the generator that placed them.
fn scattered(sim: &Sim, n: u32, seed: u64) -> (WorldState, ChaCha8Rng) {
    let mut w = sim.new_state();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in 0..n {
        let p = DVec3::new(
            rng.gen_range(-900.0..900.0),
            rng.gen_range(-900.0..900.0),
            120.0,
        );
        sim.add_player(&mut w, PlayerId(i), PlayerState::at(p))
            .unwrap();
    }
    (w, rng)
}

/// Another player as a snapshot shows it to `me`: without velocity (see the snapshot
/// module), exactly where `me` could meet it at any lead, and farther off (sent now and
/// then, held between) within the held tolerance, flags and mode exact.
fn assert_shown(shown: &PlayerState, truth: &PlayerState, me: &PlayerState, what: &str) {
    let want = PlayerState {
        velocity: [0; 3],
        ..*truth
    };
    let d = truth.origin().distance(me.origin());
    if d <= EXACT_NEAR {
        assert_eq!(*shown, want, "{what}");
    } else {
        let off = (0..3)
            .map(|k| (shown.origin[k] - want.origin[k]).abs())
            .max();
        assert!(
            f64::from(off.unwrap_or(0)) <= held_tolerance(d) * 256.0,
            "{what}: {shown:?}, truth {want:?}"
        );
        assert_eq!((shown.flags, shown.mode), (want.flags, want.mode), "{what}");
    }
}

/// A shown player's facing: as its newest command (to a 256th of a turn, rounded), or,
/// held from afar, within [`FACING_DRIFT`] of it.
fn assert_facing(shown: [u16; 2], newest: [u16; 2], exact: bool, what: &str) {
    let sent = newest.map(|a| a.wrapping_add(128) & 0xff00);
    if exact {
        assert_eq!(shown, sent, "{what}");
    }
    for (a, b) in shown.iter().zip(sent) {
        let steps = i64::from(a.wrapping_sub(b) >> 8);
        assert!(
            steps.min(256 - steps) <= FACING_DRIFT,
            "{what}: {shown:?}, sent {sent:?}"
        );
    }
}

fn arena_sim() -> Sim {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let map = MapData::parse_map(&text).unwrap();
    let movement = MoveConfig::default().validate().unwrap();
    Sim::from_map(Arc::new(CollisionModel::build(&map)), &map, movement).0
}

/// 40 wandering players; client 0 receives snapshots through 30% loss, reordering and
/// acknowledgements that arrive late or never. Every snapshot it decodes shows exactly the
/// server's state of the players and movers it was sent. A decoder told to leave the
/// others out (a light client's) decodes the same snapshots, players left out.
#[test]
fn snapshots_decode_to_the_servers_world_through_loss_and_reordering() {
    let sim = arena_sim();
    let (mut w, mut rng) = scattered(&sim, 40, 1);
    let mut s = SimScratch::new();
    let mut enc = SnapshotEncoder::new();
    let mut dec = SnapshotDecoder::new();
    let mut light = SnapshotDecoder::new();
    light.set_others(false);
    type Facing = BTreeMap<PlayerId, [u16; 2]>;
    type Sent = (
        u64,
        u64,
        Vec<u8>,
        BTreeMap<PlayerId, PlayerState>,
        Facing,
        Vec<MoverState>,
    );
    let mut in_flight: Vec<Sent> = Vec::new();
    let mut cmds = BTreeMap::new();
    let (mut decoded, mut max_len, mut total) = (0, 0, 0);
    for tick in 0..1500u64 {
        for i in 0..40u32 {
            if rng.gen_bool(0.05) || tick == 0 {
                cmds.insert(
                    PlayerId(i),
                    MoveCommand::new(1.0, 0.0, 0.0, rng.gen_range(0.0..360.0), 0.0),
                );
            }
        }
        sim.step(&mut w, &cmds, &mut s);
        if tick % 2 == 0 {
            // The baseline the snapshot is written against.
            let base = enc.acked();
            let bytes = enc
                .encode(&sim, &w, PlayerId(0), fb(tick), 16, 1200)
                .unwrap();
            max_len = max_len.max(bytes.len());
            total += bytes.len();
            let truth: BTreeMap<PlayerId, PlayerState> =
                w.players.iter().map(|(k, v)| (*k, v.state)).collect();
            let facing: BTreeMap<PlayerId, [u16; 2]> = (w.players.iter())
                .map(|(k, v)| (*k, [v.last_command.yaw, v.last_command.pitch]))
                .collect();
            in_flight.push((w.tick, base, bytes, truth, facing, w.movers.clone()));
        }
        // Deliver a random in-flight snapshot now and then (loss: some never arrive).
        while !in_flight.is_empty() && rng.gen_bool(0.5) {
            let k = rng.gen_range(0..in_flight.len());
            let (t, base, bytes, truth, facing, movers) = in_flight.swap_remove(k);
            if rng.gen_bool(0.3) {
                continue; // lost
            }
            let without = light.decode(&bytes).unwrap();
            let snap = dec.decode(&bytes).unwrap();
            assert_eq!(
                without,
                snap.clone().map(|s| Snapshot {
                    players: BTreeMap::new(),
                    facing: BTreeMap::new(),
                    leaps: BTreeMap::new(),
                    ..s
                })
            );
            if let Some(snap) = snap {
                decoded += 1;
                assert_eq!(snap.tick, t);
                // News the baseline told reads 0: not newer than the baseline.
                let sent = fb(t - 1);
                let news = |n: u64| if base > 0 && n <= base { 0 } else { n };
                let told = Feedback {
                    corrected: news(sent.corrected),
                    contact: news(sent.contact),
                    missed: news(sent.missed),
                    moved: news(sent.moved),
                    ..sent
                };
                assert_eq!(snap.feedback, told);
                assert_eq!(snap.own, truth[&PlayerId(0)]);
                assert_eq!(snap.players.len(), 16.min(truth.len() - 1));
                for (id, p) in &snap.players {
                    assert_shown(
                        p,
                        &truth[id],
                        &truth[&PlayerId(0)],
                        &format!("tick {t}: player {id}"),
                    );
                    let what = format!("tick {t}: player {id}");
                    let near =
                        truth[id].origin().distance(truth[&PlayerId(0)].origin()) <= EXACT_NEAR;
                    assert_facing(snap.facing[id], facing[id], near, &what);
                }
                assert_eq!(
                    snap.facing.keys().collect::<Vec<_>>(),
                    snap.players.keys().collect::<Vec<_>>()
                );
                assert!(!snap.movers.is_empty(), "the arena's movers are near");
                for (i, m) in &snap.movers {
                    assert_eq!(*m, movers[*i as usize], "tick {t}: mover {i}");
                }
                // The acknowledgement reaches the server, sometimes.
                if rng.gen_bool(0.7) {
                    enc.ack(dec.newest());
                }
            }
        }
    }
    assert!(decoded > 200, "{decoded} snapshots decoded");
    assert!(max_len <= 1200);
    eprintln!(
        "{decoded} decoded, mean {} bytes, max {max_len}; {} full sends, {} stale, {} without baseline",
        total / 750,
        enc.full_sends,
        dec.stale,
        dec.missing_baseline
    );
}

/// A client's players, kept from one snapshot to the next: every snapshot shows its
/// players' state of its own tick, and exactly the nearest of a tick at most
/// `VIEW_REFRESH - 1` snapshots before, less those who have left since (a leaver goes at
/// once); at once the nearest of its own tick after the client moves far; a player who
/// joins beside it within `VIEW_REFRESH` snapshots.
#[test]
fn a_clients_players_are_chosen_again_often_at_once_when_it_moves_far_and_leavers_go_at_once() {
    const K: usize = 16;
    let sim = arena_sim();
    let (mut w, mut rng) = scattered(&sim, 120, 4);
    let mut s = SimScratch::new();
    let mut enc = SnapshotEncoder::new();
    let mut dec = SnapshotDecoder::new();
    let mut crowd = Crowd::new(&sim, &w, K);
    let mut cmds = BTreeMap::new();
    // The nearest ids at each snapshot's tick, newest last.
    let mut nearest: Vec<Vec<PlayerId>> = Vec::new();
    let (mut stale, mut teleports, mut joins_shown) = (0, 0, 0);
    // A player who joined near the client, and the snapshots since.
    let mut joined: Option<(PlayerId, usize)> = None;
    let mut out = Vec::new();
    for tick in 0..1200u64 {
        for i in w.players.keys().copied().collect::<Vec<_>>() {
            if rng.gen_bool(0.05) || tick == 0 {
                let cmd = MoveCommand::new(1.0, 0.0, 0.0, rng.gen_range(0.0..360.0), 0.0);
                cmds.insert(i, cmd);
            }
        }
        sim.step(&mut w, &cmds, &mut s);
        if tick % 2 != 0 {
            continue;
        }
        // Now and then the crowd or the client's place changes at once.
        let teleport = match tick % 100 {
            30 => {
                let gone = *w
                    .players
                    .keys()
                    .nth(1 + rng.gen_range(0..w.players.len() - 1))
                    .unwrap();
                w.remove_player(gone);
                cmds.remove(&gone);
                false
            }
            60 => {
                let id = 1000 + tick as u32;
                let p = w.player(PlayerId(0)).unwrap().origin() + DVec3::new(20.0, 0.0, 0.0);
                sim.add_player(&mut w, PlayerId(id), PlayerState::at(p))
                    .unwrap();
                joined = Some((PlayerId(id), 0));
                false
            }
            90 => {
                let slot = w.players.get_mut(&PlayerId(0)).unwrap();
                let o = slot.state.origin();
                let to = DVec3::new(-o.x, -o.y, o.z);
                slot.state = PlayerState::at(to);
                (to - o).length() > 128.0
            }
            _ => false,
        };
        crowd.renew(&sim, &w, K);
        // The nearest K, and any more within the exact reach (up to MAX_VIEW).
        crowd.nearest(
            PlayerId(0),
            w.player(PlayerId(0)).unwrap().origin(),
            MAX_VIEW.max(K),
            &mut out,
        );
        let within = out
            .iter()
            .filter(|(d2, _)| d2.sqrt() <= EXACT_REACH)
            .count();
        out.truncate(within.max(K));
        let mut ids: Vec<PlayerId> = out.iter().map(|(_, id)| *id).collect();
        ids.sort_unstable();
        nearest.push(ids);
        let bytes = enc
            .encode_in(&w, &crowd, PlayerId(0), fb(tick), K, Room::datagram(1200))
            .unwrap();
        let snap = dec.decode(&bytes).unwrap().unwrap();
        enc.ack(dec.newest());
        // Nobody who left is shown (the world lookup fails for them).
        let me = *w.player(PlayerId(0)).unwrap();
        for (id, p) in &snap.players {
            let truth = w.player(*id).unwrap();
            assert_shown(p, truth, &me, &format!("tick {tick}: player {id}"));
        }
        let shown: Vec<PlayerId> = snap.players.keys().copied().collect();
        let now = nearest.len() - 1;
        if teleport {
            assert_eq!(
                shown, nearest[now],
                "tick {tick}: chosen at once after a move of over {VIEW_DRIFT} units"
            );
            teleports += 1;
        }
        // One of the last choices, less those who have left since.
        let back = now.saturating_sub(VIEW_REFRESH as usize - 1);
        let here = |ids: &Vec<PlayerId>| -> Vec<PlayerId> {
            ids.iter()
                .copied()
                .filter(|id| w.players.contains_key(id))
                .collect()
        };
        assert!(
            nearest[back..].iter().any(|n| here(n) == shown),
            "tick {tick}: {shown:?} is none of the last {VIEW_REFRESH} choices"
        );
        // Someone who joins beside the client is shown within a refresh.
        if let Some((id, since)) = &mut joined {
            if shown.contains(id) {
                joins_shown += 1;
                joined = None;
            } else {
                *since += 1;
                assert!(
                    *since < VIEW_REFRESH as usize,
                    "tick {tick}: player {id}, who joined 20 units away, not shown after {since} snapshots"
                );
            }
        }
        stale += usize::from(shown != nearest[now]);
    }
    // The choice carried over (and so was stale now and then), and the changes came.
    assert!(stale > 0, "never kept a choice");
    assert!(
        teleports >= 6 && joins_shown >= 10,
        "{teleports} moves, {joins_shown} joins"
    );
}

#[test]
fn a_tiny_datagram_limit_drops_the_farthest_players() {
    let sim = arena_sim();
    let mut w = sim.new_state();
    for i in 0..32u32 {
        let p = DVec3::new(-900.0 + 50.0 * i as f64, -600.0, 40.0);
        sim.add_player(&mut w, PlayerId(i), PlayerState::at(p))
            .unwrap();
    }
    let mut enc = SnapshotEncoder::new();
    assert!(
        enc.encode(&sim, &w, PlayerId(0), fb(0), 32, 1200).is_none(),
        "tick 0"
    );
    sim.step(&mut w, &BTreeMap::new(), &mut SimScratch::new());
    let big = enc.encode(&sim, &w, PlayerId(0), fb(0), 32, 1200).unwrap();
    let small = enc.encode(&sim, &w, PlayerId(0), fb(0), 32, 200).unwrap();
    assert!(small.len() <= 200 && small.len() < big.len());
    let mut dec = SnapshotDecoder::new();
    let snap = dec.decode(&small).unwrap().unwrap();
    // The nearest were kept.
    let ids: Vec<PlayerId> = snap.players.keys().copied().collect();
    assert!(
        !ids.is_empty() && ids.iter().all(|i| i.0 <= ids.len() as u32),
        "{ids:?}"
    );
    assert!(enc.encode(&sim, &w, PlayerId(0), fb(0), 32, 10).is_none());
    assert!(enc
        .encode(&sim, &w, PlayerId(99), fb(0), 32, 1200)
        .is_none());
}

#[test]
fn malformed_bytes_are_errors_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let sim = arena_sim();
    let mut w = sim.new_state();
    sim.add_player(
        &mut w,
        PlayerId(0),
        PlayerState::at(DVec3::new(0.0, -600.0, 40.0)),
    )
    .unwrap();
    sim.add_player(
        &mut w,
        PlayerId(1),
        PlayerState::at(DVec3::new(60.0, -600.0, 40.0)),
    )
    .unwrap();
    sim.step(&mut w, &BTreeMap::new(), &mut SimScratch::new());
    let good = SnapshotEncoder::new()
        .encode(&sim, &w, PlayerId(0), fb(0), 32, 1200)
        .unwrap();
    for _ in 0..5000 {
        let mut b: Vec<u8> = if rng.gen_bool(0.5) {
            (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect()
        } else {
            good.clone()
        };
        if !b.is_empty() {
            let i = rng.gen_range(0..b.len());
            b[i] = rng.gen();
        }
        let _ = SnapshotDecoder::new().decode(&b);
        let _ = decode::<ClientDatagram>("input", &b);
        let _ = decode::<ClientControl>("control", &b);
        let _ = decode::<ServerControl>("control", &b);
    }
    // Frames: over-long lengths are refused before any buffering of the body.
    let mut f = FrameDecoder::new();
    f.push(&((MAX_FRAME + 1) as u32).to_le_bytes());
    assert!(f.next_frame().is_err());
    let mut f = FrameDecoder::new();
    let frame = encode_frame(&ClientControl::Bye {
        reason: "done".into(),
    });
    for b in &frame {
        f.push(&[*b]);
    }
    let body = f.next_frame().unwrap().unwrap();
    assert_eq!(
        decode::<ClientControl>("control", &body).unwrap(),
        ClientControl::Bye {
            reason: "done".into()
        }
    );
    assert_eq!(f.pending(), 0);
}
