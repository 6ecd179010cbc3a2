//! Shots judged as the shooter saw them, on the simulated network: honest shooters fire
//! the deathmatch gun at strafing targets through links of 50, 150 and 300 ms round trip
//! with loss and jitter, and the server confirms the hits they saw on their own screens
//! (and none they saw miss); cheaters that claim an older view (backtrack), aim at
//! players they were never shown (wallshot) or pull the trigger faster than the gun
//! fires (rapidfire) are flagged and kicked.

mod common;

use common::network_with;
use expel_bots::ShotRecord;
use expel_core::sim::Struck;
use expel_core::validate::ViolationKind;
use expel_core::PlayerId;
use expel_core::{Contents, Hull, MoveCommand, Sim, TraceScratch};
use expel_modes::deathmatch::{actions, eye, Deathmatch, GUN_RANGE};
use expel_protocol::client::{ClientMachine, End, Status, Tamper};
use expel_protocol::conditioner::Impairment;
use expel_protocol::predict::Predictor;
use expel_protocol::server::{Game, GameRules, MAX_SHOTS_PER_TICK};
use expel_protocol::simnet::SimNet;
use expel_protocol::{Code, InputMsg, ViewClaim};
use glam::DVec3;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clients: shooters first, then targets.
const SHOOTERS: usize = 2;
const TARGETS: usize = 2;

/// The yaw and pitch (degrees) that look from `from` at `to`.
fn aim(from: DVec3, to: DVec3) -> (f64, f64) {
    let d = to - from;
    let yaw = d.y.atan2(d.x).to_degrees();
    let pitch = -(d.z.atan2(d.truncate().length())).to_degrees();
    (yaw, pitch)
}

/// A link of round trip `rtt_ms` with 5% loss and 20 ms of jitter each way.
fn link(rtt_ms: f64) -> Impairment {
    Impairment {
        loss: 0.05,
        delay_ms: rtt_ms / 2.0,
        jitter_ms: 20.0,
        duplicate: 0.0,
    }
}

/// The deathmatch on the arena for `n` clients, each seeing only its `interest` nearest.
fn deathmatch(n: u32, rtt_ms: f64, interest: usize, seed: u64) -> SimNet {
    let mut net = network_with(n, link(rtt_ms), seed, |s| s.interest = interest);
    net.server_mut().set_rules(Box::new(Deathmatch::new()));
    // Everyone welcomed and playing.
    net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
    assert!((0..n as usize).all(|i| net.client(i).welcome().is_some()));
    net
}

/// What a shooter does at `tick`: aims at target `t`'s drawn place, off by up to
/// `spread` units across, and holds the gun's trigger.
fn shoot(c: &ClientMachine, target: u32, spread: f64, tick: u64) -> MoveCommand {
    let Some(me) = c.local_player() else {
        return MoveCommand::default();
    };
    let others = c.others_drawn(f64::MAX);
    let Some(t) = others.get(&PlayerId(target)) else {
        return MoveCommand::default();
    };
    let from = eye(&me);
    let to = t.origin + DVec3::new(0.0, 0.0, 10.0);
    let across = DVec3::new(-(to - from).y, (to - from).x, 0.0).normalize_or_zero();
    // A slow sweep across the target, so some shots hit and some miss.
    let off = spread * ((tick as f64) * 0.37).sin();
    let (yaw, pitch) = aim(from, to + across * off);
    MoveCommand::new(0.0, 0.0, 0.0, yaw, pitch).with_actions(actions::FIRE, 0)
}

/// A target's strafe: left and right in turns of half a second.
fn strafe(tick: u64, i: usize) -> MoveCommand {
    let side = if (tick / 30 + i as u64).is_multiple_of(2) {
        1.0
    } else {
        -1.0
    };
    MoveCommand::new(0.0, side, 0.0, 90.0 * i as f64, 0.0)
}

/// The player id of client `i`.
fn id(net: &SimNet, i: usize) -> PlayerId {
    net.client(i)
        .welcome()
        .map_or(PlayerId(u32::MAX), |w| w.player)
}

#[test]
fn hits_the_shooter_saw_are_confirmed_at_every_round_trip() {
    for (k, rtt) in [50.0, 150.0, 300.0].into_iter().enumerate() {
        let n = (SHOOTERS + TARGETS) as u32;
        let mut net = deathmatch(n, rtt, 32, 11 + k as u64);
        let targets: Vec<PlayerId> = (0..TARGETS).map(|t| id(&net, SHOOTERS + t)).collect();
        let mut records: Vec<ShotRecord> = (0..SHOOTERS).map(|_| ShotRecord::default()).collect();
        for _ in 0..25 * 60 / 4 {
            net.run(Duration::from_millis(66), &mut |i, c| {
                let tick = c.predicted_tick();
                if i < SHOOTERS {
                    shoot(c, targets[i % TARGETS].0, 24.0, tick)
                } else {
                    strafe(tick, i)
                }
            });
            for (i, r) in records.iter_mut().enumerate() {
                r.look(net.client_mut(i), true);
            }
        }
        // The last confirmations come home.
        for _ in 0..20 {
            net.run(Duration::from_millis(50), &mut |_, _| {
                MoveCommand::default()
            });
            for (i, r) in records.iter_mut().enumerate() {
                r.look(net.client_mut(i), true);
            }
        }
        let shots: u64 = records.iter().map(|r| r.shots()).sum();
        let seen: u64 = records.iter().map(|r| r.hits_seen()).sum();
        let both: u64 = records.iter().map(|r| r.hits_confirmed()).sum();
        let unseen: u64 = records.iter().map(|r| r.hits_confirmed_unseen()).sum();
        let stats = net.server().stats().clone();
        println!(
            "rtt {rtt} ms: {shots} shots, {seen} hits seen, {both} confirmed, {unseen} \
             confirmed unseen; {} judged, {} clamped",
            stats.shots_judged, stats.shot_views_clamped
        );
        assert!(shots >= 300, "{shots} shots");
        assert!(seen >= 50 && seen < shots, "{seen} of {shots}");
        assert!(
            both * 100 >= seen * 99,
            "{both} of {seen} hits seen confirmed"
        );
        assert!(
            unseen * 200 <= shots,
            "{unseen} hits confirmed the shooters saw miss, of {shots}"
        );
        assert_eq!(
            stats.violations.iter().sum::<u64>(),
            0,
            "{:?}",
            stats.violations
        );
    }
}

/// Claims views `back` ticks older than it drew (on the snapshots it was sent).
struct Backtrack {
    back: u16,
}

impl Tamper for Backtrack {
    fn input(&mut self, _: &Sim, _: &Predictor, _: u64, msg: &mut InputMsg) {
        // 10 to 24 ticks (167 to 400 ms), even: still snapshots it was sent.
        self.back = if self.back >= 24 { 10 } else { self.back + 2 };
        for v in &mut msg.views {
            if v.back > 0 {
                v.back = v.back.saturating_add(self.back);
            }
        }
    }
}

/// A cheater's command at a tick, given where the others are (by id) as the server has
/// them.
type Cheat<'a> = dyn FnMut(&ClientMachine, u64, &[(PlayerId, DVec3)]) -> MoveCommand + 'a;

/// Runs the clients for up to `secs` with cheater 0 doing `cheat`: why it was kicked,
/// if it was, and the violations of each kind.
fn cheater(net: &mut SimNet, secs: u64, cheat: &mut Cheat<'_>) -> (Option<String>, Vec<u64>) {
    // Where the others are, as the server has them (what a leak would give a cheat).
    let others = |net: &SimNet| -> Vec<(PlayerId, DVec3)> {
        let w = net.server().world();
        (1..net.len())
            .filter_map(|i| w.player(id(net, i)).map(|p| (id(net, i), p.origin())))
            .collect()
    };
    for step in 0..secs * 10 {
        let places = others(net);
        net.run(Duration::from_millis(100), &mut |i, c| {
            let tick = c.predicted_tick();
            if i == 0 {
                cheat(c, tick, &places)
            } else {
                strafe(tick, i)
            }
        });
        if let Status::Ended(End::Kicked { detail: why, .. }) = net.client(0).status() {
            println!("kicked after {:.1} s: {why}", (step + 1) as f64 / 10.0);
            let v = net.server().stats().violations.to_vec();
            return (Some(why.clone()), v);
        }
    }
    (None, net.server().stats().violations.to_vec())
}

fn count(v: &[u64], kind: ViolationKind) -> u64 {
    v[ViolationKind::ALL.iter().position(|k| *k == kind).unwrap()]
}

#[test]
fn backtrack_wallshot_and_rapidfire_cheaters_are_flagged_and_kicked() {
    for (k, rtt) in [50.0, 150.0, 300.0].into_iter().enumerate() {
        let seed = 40 + k as u64;
        // Backtrack: aims true at a target, claims a view 150 to 400 ms older.
        let mut net = deathmatch(3, rtt, 32, seed);
        net.client_mut(0)
            .set_tamper(Box::new(Backtrack { back: 10 }));
        let target = id(&net, 1);
        let (why, v) = cheater(&mut net, 10, &mut |c, tick, _| {
            shoot(c, target.0, 0.0, tick)
        });
        let why = why.unwrap_or_else(|| panic!("rtt {rtt}: backtrack not kicked: {v:?}"));
        assert!(why.contains("backtrack"), "{why}");
        assert_eq!(
            count(&v, ViolationKind::Backtrack),
            v.iter().sum::<u64>(),
            "{v:?}"
        );
        // Wallshot: each client sees only its nearest other; the cheater aims at the one
        // it is not shown (its place leaked to it), through whatever is between.
        let mut net = deathmatch(3, rtt, 1, seed);
        let (why, v) = cheater(&mut net, 10, &mut |c, _, places| {
            let (Some(me), shown) = (c.local_player(), c.others(f64::MAX)) else {
                return MoveCommand::default();
            };
            let Some((_, hidden)) = places.iter().find(|(p, _)| !shown.contains_key(p)) else {
                return MoveCommand::default();
            };
            let (yaw, pitch) = aim(eye(&me), *hidden + DVec3::new(0.0, 0.0, 10.0));
            MoveCommand::new(0.0, 0.0, 0.0, yaw, pitch).with_actions(actions::FIRE, 0)
        });
        let why = why.unwrap_or_else(|| panic!("rtt {rtt}: wallshot not kicked: {v:?}"));
        assert!(why.contains("unseen_target"), "{why}");
        // Rapidfire: the trigger pressed every other tick, faster than the gun fires.
        let mut net = deathmatch(3, rtt, 32, seed);
        let target = id(&net, 1);
        let (why, _) = cheater(&mut net, 10, &mut |c, tick, _| {
            let cmd = shoot(c, target.0, 0.0, tick);
            if tick.is_multiple_of(2) {
                cmd
            } else {
                cmd.with_actions(0, 0)
            }
        });
        let why = why.unwrap_or_else(|| panic!("rtt {rtt}: rapidfire not kicked"));
        assert!(why.contains("rules"), "{why}");
    }
}

/// A wallhack with everyone shown (interest 32): the cheater aims at the nearest player
/// it was shown who stands behind a wall from its eyes, and fires through it. The shots
/// meet the wall; the server, which drew the boxes as the shooter's screen had them, sees
/// them aimed at someone hidden behind it, kept up: flagged and kicked at every round
/// trip. The strafing honest players are never flagged.
#[test]
fn a_wallhack_aiming_at_shown_players_behind_walls_is_flagged_and_kicked() {
    for (k, rtt) in [80.0, 150.0, 300.0].into_iter().enumerate() {
        let mut net = deathmatch(8, rtt, 32, 70 + k as u64);
        let sim = net.server().sim().clone();
        let (why, v) = cheater(&mut net, 20, &mut |c, _, _| {
            let (Some(me), shown) = (c.local_player(), c.others_drawn(f64::MAX)) else {
                return MoveCommand::default();
            };
            let from = eye(&me);
            let mut s = TraceScratch::new();
            let hidden = (shown.values())
                .map(|o| o.origin + DVec3::new(0.0, 0.0, 4.0))
                .filter(|o| {
                    let t = sim
                        .map()
                        .trace(&Hull::point(), from, *o, Contents::SOLID, &mut s);
                    t.sweep.fraction < 1.0
                })
                .min_by(|a, b| a.distance(from).total_cmp(&b.distance(from)));
            let Some(to) = hidden else {
                return MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0);
            };
            let (yaw, pitch) = aim(from, to);
            MoveCommand::new(0.0, 0.0, 0.0, yaw, pitch).with_actions(actions::FIRE, 0)
        });
        let why = why.unwrap_or_else(|| panic!("rtt {rtt}: wallhack not kicked: {v:?}"));
        assert!(why.contains("behind the wall"), "{why}");
        assert_eq!(
            count(&v, ViolationKind::UnseenTarget),
            v.iter().sum::<u64>(),
            "only the cheater, only for this: {v:?}"
        );
    }
}

/// Where `p`'s eyes are and where it looks, if its command for this tick arrived and
/// presses a button.
fn pressed(game: &Game<'_>, p: u32) -> Option<(DVec3, DVec3)> {
    let (cmd, me) = (
        game.command(PlayerId(p))?,
        game.world().player(PlayerId(p))?,
    );
    (cmd.actions != 0 && game.command_arrived(PlayerId(p))).then(|| (eye(me), cmd.view().0))
}

/// Rules that judge a thousand shots a tick for every player pressing a button.
struct Barrage;

impl GameRules for Barrage {
    fn tick(&mut self, game: &mut Game<'_>) {
        let players: Vec<PlayerId> = game.players().collect();
        for p in players {
            let Some((from, dir)) = pressed(game, p.0) else {
                continue;
            };
            let end = from + dir * GUN_RANGE;
            for _ in 0..1000 {
                let _ = game.shot_as_seen(p, &Hull::point(), from, end);
            }
        }
    }
}

/// Views of every wrong shape: in the future, from before the connection began, absurdly
/// old, spans past the command.
struct Absurd {
    n: u32,
}

impl Tamper for Absurd {
    fn input(&mut self, _: &Sim, _: &Predictor, _: u64, msg: &mut InputMsg) {
        self.n += 1;
        let n = self.n;
        for v in &mut msg.views {
            *v = match n % 4 {
                0 => ViewClaim {
                    back: 1,
                    span: 200,
                    k: 255,
                },
                1 => ViewClaim {
                    back: u16::MAX,
                    span: 0,
                    k: 0,
                },
                2 => ViewClaim {
                    back: 600,
                    span: 255,
                    k: 128,
                },
                _ => ViewClaim {
                    back: 3,
                    span: 0,
                    k: 7,
                },
            };
        }
    }
}

#[test]
fn absurd_views_are_clamped_and_a_thousand_shots_a_tick_meet_the_budget() {
    let mut net = network_with(2, link(50.0), 7, |_| {});
    net.server_mut().set_rules(Box::new(Barrage));
    net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
    let fire = MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0).with_actions(1, 0);
    let mut drive = |i: usize, _: &ClientMachine| {
        if i == 0 {
            fire
        } else {
            MoveCommand::default()
        }
    };
    // Honest views, a thousand shots a tick: the budget's eight judged, the rest refused.
    net.run(Duration::from_secs(2), &mut drive);
    let stats = net.server().stats().clone();
    let per_tick = u64::from(MAX_SHOTS_PER_TICK);
    let ticks = stats.shots_judged / per_tick;
    println!(
        "honest: {} judged, {} clamped, {} over the budget",
        stats.shots_judged, stats.shot_views_clamped, stats.shots_over_budget
    );
    assert!(ticks >= 100, "{stats:?}");
    assert_eq!(stats.shots_judged % per_tick, 0);
    assert_eq!(stats.shots_over_budget, ticks * (1000 - per_tick));
    assert_eq!(stats.shot_views_clamped, 0);
    assert_eq!(stats.violations.iter().sum::<u64>(), 0);
    // Views of every wrong shape: each clamped, kept up a backtrack; kicked, and the
    // honest one plays on.
    net.client_mut(0).set_tamper(Box::new(Absurd { n: 0 }));
    net.run(Duration::from_secs(3), &mut drive);
    let after = net.server().stats().clone();
    println!(
        "absurd: {} judged, {} clamped",
        after.shots_judged - stats.shots_judged,
        after.shot_views_clamped
    );
    assert!(after.shot_views_clamped >= 15, "{after:?}");
    match net.client(0).status() {
        Status::Ended(End::Kicked { code, detail }) => {
            assert_eq!(*code, Code::Violation(ViolationKind::Backtrack), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(*net.client(1).status(), Status::Playing);
}

/// Every shot the rules judge, as the server judged it: (player, tick, what it met).
type Judged = Arc<Mutex<Vec<(u32, u64, Option<Struck>)>>>;

/// Rules that stand every player by the fan and judge each press of a button as the
/// shooter saw it, writing down what it met.
struct ByTheFan {
    judged: Judged,
}

/// The arena's fan: a blade turning about this hub at 60 degrees a second.
const FAN: DVec3 = DVec3::new(750.0, -850.0, 24.0);

impl GameRules for ByTheFan {
    fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
        // The first place about the fan from which the eyes see its hub.
        let mut s = TraceScratch::new();
        let sim = game.sim();
        let stand = (0..36)
            .map(|i| {
                let (r, a) = (
                    150.0 + 100.0 * f64::from(i / 12),
                    f64::from(i % 12) * std::f64::consts::FRAC_PI_6,
                );
                FAN + DVec3::new(a.cos(), a.sin(), 0.0) * r
            })
            .find(|at| {
                let hull = sim.movement().stand();
                let eye = *at + DVec3::Z * 26.0;
                !sim.map().position_solid(hull, *at, Contents::SOLID, &mut s)
                    && (sim
                        .map()
                        .trace(&Hull::point(), eye, FAN, Contents::SOLID, &mut s))
                    .sweep
                    .fraction
                        >= 1.0
            })
            .expect("a place that sees the fan");
        game.place(player, stand).unwrap();
    }

    fn tick(&mut self, game: &mut Game<'_>) {
        let tick = game.tick();
        let players: Vec<PlayerId> = game.players().collect();
        for p in players {
            let Some((from, dir)) = pressed(game, p.0) else {
                continue;
            };
            let end = from + dir * 2048.0;
            if let Ok(shot) = game.shot_as_seen(p, &Hull::point(), from, end) {
                let met = shot.hit.map(|h| h.0);
                self.judged.lock().unwrap().push((p.0, tick, met));
            }
        }
    }
}

/// Shots across the turning fan: the server meets the blade (or misses it) exactly where
/// the shooter's client saw it at each shot's tick, at every round trip.
#[test]
fn a_shot_across_a_mover_meets_it_where_the_shooter_saw_it() {
    for (k, rtt) in [50.0, 300.0].into_iter().enumerate() {
        let judged = Judged::default();
        let mut net = network_with(1, link(rtt), 60 + k as u64, |_| {});
        net.server_mut().set_rules(Box::new(ByTheFan {
            judged: judged.clone(),
        }));
        net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
        // Aim at points about the fan's hub, sweeping round, pressing every other tick.
        let mut traced: Vec<(u64, Option<Struck>)> = Vec::new();
        for step in 0..150u64 {
            net.run(Duration::from_millis(20), &mut |_, c| {
                let Some(me) = c.local_player() else {
                    return MoveCommand::default();
                };
                let a = (step as f64) * 0.7;
                let at = FAN + DVec3::new(a.cos(), a.sin(), 0.0) * 60.0;
                let (yaw, pitch) = aim(eye(&me), at);
                MoveCommand::new(0.0, 0.0, 0.0, yaw, pitch).with_actions(1, 0)
            });
            let c = net.client_mut(0);
            let now = c.predicted_tick();
            let done: Vec<u64> = traced.iter().map(|t| t.0).collect();
            for t in now.saturating_sub(8)..=now {
                let (Some(from), Some(cmd)) = (
                    c.made_from(t),
                    c.predictor().map(|p| p.commands_between(t, t)[0]),
                ) else {
                    continue;
                };
                if cmd.actions == 0 || done.contains(&t) {
                    continue;
                }
                let from = eye(&from);
                let end = from + cmd.view().0 * 2048.0;
                traced.push((t, c.trace_seen(t, &Hull::point(), from, end).map(|h| h.0)));
            }
        }
        let judged = judged.lock().unwrap().clone();
        let mut same = 0;
        let mut movers = 0;
        for (_, t, met) in &judged {
            let Some((_, seen)) = traced.iter().find(|s| s.0 == *t) else {
                continue;
            };
            assert_eq!(seen, met, "rtt {rtt}: the shot of tick {t}");
            same += 1;
            movers += matches!(met, Some(Struck::Mover(_))) as usize;
        }
        println!("rtt {rtt} ms: {same} shots compared, {movers} met the fan");
        assert!(same >= 100, "{same} shots compared");
        assert!(
            movers >= 10 && movers < same,
            "{movers} of {same} met the fan"
        );
    }
}

/// A client that leaves every other tick's command out of its datagrams (to be judged by
/// the looser rules a missing command gets) is kicked for it; an honest one on the same
/// link losing 35% of its datagrams is not flagged.
#[test]
fn commands_left_out_on_purpose_are_flagged_and_loss_is_not() {
    let lossy = Impairment {
        loss: 0.35,
        delay_ms: 50.0,
        jitter_ms: 20.0,
        duplicate: 0.0,
    };
    let mut net = network_with(2, lossy, 21, |_| {});
    net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
    let gaps = expel_bots::Cheats {
        gaps: true,
        ..Default::default()
    };
    let began = Arc::new(std::sync::atomic::AtomicU64::new(0));
    net.client_mut(0)
        .set_tamper(Box::new(expel_bots::CheatTamper::new(gaps, began)));
    let mut kicked_after = None;
    for step in 0..100 {
        net.run(Duration::from_millis(100), &mut |i, c| {
            MoveCommand::new(
                1.0,
                0.0,
                0.0,
                (c.predicted_tick() / 60) as f64 * 90.0 + 45.0 * i as f64,
                0.0,
            )
        });
        if kicked_after.is_none() {
            if let Status::Ended(End::Kicked { code, detail }) = net.client(0).status() {
                assert_eq!(*code, Code::Violation(ViolationKind::Gaps), "{detail}");
                kicked_after = Some(f64::from(step + 1) / 10.0);
            }
        }
    }
    let stats = net.server().stats().clone();
    println!(
        "gaps cheater kicked after {kicked_after:?} s; {} ticks skipped in all, violations {:?}",
        stats.inputs.skipped, stats.violations
    );
    assert!(kicked_after.is_some_and(|s| s <= 10.0), "{kicked_after:?}");
    assert_eq!(*net.client(1).status(), Status::Playing);
    let gaps = ViolationKind::ALL
        .iter()
        .position(|k| *k == ViolationKind::Gaps)
        .unwrap();
    assert_eq!(
        stats.violations.iter().sum::<u64>(),
        stats.violations[gaps],
        "{stats:?}"
    );
}

/// Reports its player 48 units (past `SHOOTER_SLACK`, within `SHOOTER_REACH`) from
/// where its prediction had it: a place to shoot from of its own choosing.
struct Misplaced;

impl Tamper for Misplaced {
    fn input(&mut self, _: &Sim, _: &Predictor, _: u64, msg: &mut InputMsg) {
        // Every place it reports: the newest, and those sent with a shot.
        for p in msg.predicted.iter_mut().chain(msg.claims.iter_mut()) {
            p.origin[0] += (48.0 * expel_core::movement::POSITION_SCALE) as i32;
        }
    }
}

/// A shot leaves from where the shooter's client had itself, past the slack, only when a
/// re-run of its own prediction makes that place: never from a place the client chose,
/// and from the place an honest client saw itself in after a brush with a player it drew
/// where that player no longer was.
#[test]
fn a_shooter_s_own_place_past_the_slack_counts_only_when_its_prediction_bears_it_out() {
    // Standing and honest; standing and reporting itself 48 units off; running into its
    // strafing target through a 300 ms round trip.
    for (case, rtt) in [
        ("standing", 150.0),
        ("misplaced", 150.0),
        ("charging", 300.0),
    ] {
        let mut net = deathmatch(2, rtt, 32, 70);
        if case == "misplaced" {
            net.client_mut(0).set_tamper(Box::new(Misplaced));
        }
        let target = id(&net, 1);
        for _ in 0..40 {
            net.run(Duration::from_millis(100), &mut |i, c| {
                let tick = c.predicted_tick();
                match i {
                    0 if case == "charging" => MoveCommand {
                        forward: 127,
                        ..shoot(c, target.0, 0.0, tick)
                    },
                    0 => shoot(c, target.0, 0.0, tick),
                    _ => strafe(tick, i),
                }
            });
        }
        let stats = net.server().stats();
        let (judged, replayed, refused) = (
            stats.shots_judged,
            stats.shot_places_replayed,
            stats.shot_places_refused,
        );
        println!("{case}: {judged} shots, places replayed {replayed}, refused {refused}");
        assert!(judged >= 20, "{judged}");
        match case {
            "standing" => assert_eq!((replayed, refused), (0, 0)),
            // Every shot after the first report: its place was refused, and it left from
            // where the server had it.
            "misplaced" => {
                assert_eq!(replayed, 0);
                assert!(refused * 10 >= judged * 9, "{refused} of {judged}");
            }
            _ => assert!(replayed >= 1 && refused == 0, "{replayed}, {refused}"),
        }
    }
}
