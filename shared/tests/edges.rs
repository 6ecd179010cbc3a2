//! What the player sees holds at the edges, on the simulated network at 0, 150 and 300 ms
//! round trips with 5% loss: rockets that live a single tick reach the shooter and a
//! bystander, start and end; the shooter's own rockets are never drawn stepping back
//! along their path; a respawn is drawn with no place between; a message released with
//! the drawn view comes with what it tells of; and bad word from a server (a message's
//! tick far off, an end of nothing, a teleport every snapshot) is counted, not obeyed.

use expel_core::movement::PlayerState;
use expel_core::sim::{EntityId, EntityState, Motion, PlayerId, Sim};
use expel_core::{Contents, Hull, MoveCommand, TraceScratch};
use expel_protocol::client::{ClientEvent, ClientMachine, Launcher, Release};
use expel_protocol::conditioner::Impairment;
use expel_protocol::frame::encode_frame;
use expel_protocol::messages::Channel;
use expel_protocol::server::{Game, GameRules};
use expel_protocol::simnet::SimNet;
use expel_protocol::snapshot::Scope;
use expel_protocol::ServerControl;
use expel_testkit::network::network_with;
use glam::DVec3;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ROCKET: u16 = 7;
/// The round trips each test plays at (each way half of it), with 5% loss.
const ROUND_TRIPS_MS: [f64; 3] = [0.0, 150.0, 300.0];

fn link(rtt_ms: f64) -> Impairment {
    Impairment {
        loss: 0.05,
        delay_ms: rtt_ms / 2.0,
        jitter_ms: 0.0,
        duplicate: 0.0,
    }
}

/// Two clients (players 1 and 2) on a link of `rtt_ms`, playing `rules`.
fn two(rtt_ms: f64, seed: u64, rules: impl GameRules + 'static) -> SimNet {
    let mut net = network_with(2, link(rtt_ms), seed, |_| {});
    net.server_mut().set_rules(Box::new(rules));
    net
}

fn player_of(c: &ClientMachine) -> PlayerId {
    c.welcome().map_or(PlayerId(0), |w| w.player)
}

/// The nearest wall from `from` over eight ways level: its way and distance.
fn nearest_wall(sim: &Sim, from: DVec3) -> (DVec3, f64) {
    let mut scratch = TraceScratch::new();
    (0..8)
        .map(|k| {
            let a = f64::from(k) * std::f64::consts::FRAC_PI_4;
            let way = DVec3::new(a.cos(), a.sin(), 0.0);
            let t = sim.map().trace(
                &Hull::point(),
                from,
                from + way * 4000.0,
                Contents::SOLID,
                &mut scratch,
            );
            (way, t.sweep.fraction * 4000.0)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("eight ways")
}

/// Puts every other player within `reach` of player 1, in plain sight of it (the first
/// place free of those tried); whether all found one.
fn gather(game: &mut Game<'_>, reach: f64) -> bool {
    let Some(one) = game.world().player(PlayerId(1)).map(PlayerState::origin) else {
        return false;
    };
    let others: Vec<PlayerId> = game.players().filter(|p| *p != PlayerId(1)).collect();
    let mut scratch = TraceScratch::new();
    for (taken, p) in (0u32..).zip(others) {
        let placed = (0..16).any(|k| {
            let a = f64::from(k + taken * 5) * std::f64::consts::PI / 8.0;
            let to = one + DVec3::new(a.cos(), a.sin(), 0.0) * reach;
            let eye = DVec3::new(0.0, 0.0, 20.0);
            let sight = game.sim().map().trace(
                &Hull::point(),
                one + eye,
                to + eye,
                Contents::SOLID,
                &mut scratch,
            );
            sight.sweep.fraction >= 1.0 && game.place(p, to).is_ok()
        });
        if !placed {
            return false;
        }
    }
    true
}

/// Rules that fire a rocket of player 1's at the nearest wall from so close that it
/// hits within its first tick, at uneven spacings: launched and ended in one tick.
struct PointBlank {
    speed: f64,
    next: u64,
    gathered: bool,
    fired: Arc<Mutex<Vec<EntityId>>>,
    most: usize,
}

impl GameRules for PointBlank {
    fn tick(&mut self, game: &mut Game<'_>) {
        for i in game.impacts().to_vec() {
            game.despawn(i.entity);
        }
        let tick = game.tick();
        if game.players().count() < 2 || tick < 120 {
            return;
        }
        if !self.gathered {
            self.gathered = gather(game, 80.0);
            self.next = tick + 60;
            return;
        }
        if tick < self.next || self.fired.lock().unwrap().len() >= self.most {
            return;
        }
        let fired = self.fired.lock().unwrap().len() as u64;
        // Uneven spacings: a client sent every other tick meets every parity.
        self.next = tick + 7 + fired % 5;
        let eye = game.world().player(PlayerId(1)).unwrap().origin() + DVec3::new(0.0, 0.0, 20.0);
        let (way, d) = nearest_wall(game.sim(), eye);
        let tick_len = self.speed / f64::from(game.sim().movement().tick_rate());
        let from = eye + way * (d - tick_len * 0.5).max(0.0);
        let e = EntityState::launched(from, way, self.speed, Motion::POINT, Some(PlayerId(1)))
            .unwrap()
            .with_kind(ROCKET);
        let id = game.spawn(e, Scope::Near).unwrap();
        self.fired.lock().unwrap().push(id);
    }
}

#[test]
fn rockets_fired_point_blank_reach_the_shooter_and_a_bystander_start_and_end() {
    for (n, rtt) in ROUND_TRIPS_MS.into_iter().enumerate() {
        for speed in [900.0, 20_000.0] {
            let fired = Arc::new(Mutex::new(Vec::new()));
            let rules = PointBlank {
                speed,
                next: 0,
                gathered: false,
                fired: fired.clone(),
                most: 30,
            };
            let mut net = two(rtt, 11 + n as u64, rules);
            let mut seen: Vec<(BTreeSet<EntityId>, BTreeSet<EntityId>)> =
                vec![Default::default(); 2];
            let mut still = |_: usize, _: &ClientMachine| MoveCommand::default();
            for _ in 0..150 {
                net.run(Duration::from_millis(100), &mut still);
                for (i, (starts, ends)) in seen.iter_mut().enumerate() {
                    while let Some(e) = net.client_mut(i).poll_event() {
                        match e {
                            ClientEvent::EntitySpawned { id, .. } => {
                                starts.insert(id);
                            }
                            ClientEvent::EntityEnded { end } => {
                                ends.insert(end.id);
                            }
                            _ => {}
                        }
                    }
                }
            }
            let fired = fired.lock().unwrap().clone();
            assert!(
                fired.len() >= 24,
                "{rtt} ms, {speed}/s: {} fired",
                fired.len()
            );
            for (i, (starts, ends)) in seen.iter().enumerate() {
                let missed: Vec<_> = (fired.iter())
                    .filter(|id| !starts.contains(id) || !ends.contains(id))
                    .collect();
                assert!(
                    missed.is_empty(),
                    "{rtt} ms, {speed}/s: client {i} missed {missed:?} of {fired:?}"
                );
                let c = net.client(i);
                assert_eq!(c.launch_stats().missed, 0);
                let ends = c.stats().ends;
                assert!(ends.taken >= fired.len() as u64, "{ends:?}");
                // Nearly all lived too briefly for any snapshot of this client.
                assert!(ends.brief >= fired.len() as u64 / 2, "client {i}: {ends:?}");
            }
        }
    }
}

/// The test's rocket: from the eye, the way the command looks, at `speed`.
fn rocket(
    before: &PlayerState,
    cmd: &MoveCommand,
    owner: PlayerId,
    speed: f64,
) -> Option<EntityState> {
    let eye = before.origin() + DVec3::new(0.0, 0.0, 20.0);
    EntityState::launched(eye, cmd.view().0, speed, Motion::POINT, Some(owner))
        .ok()
        .map(|e| e.with_kind(ROCKET))
}

/// Fires a rocket on each tick whose command holds button 1, one in `RELOAD` ticks.
const RELOAD: u64 = 6;

#[derive(Default)]
struct Trigger {
    next: u64,
}

impl Trigger {
    fn pull(&mut self, tick: u64, cmd: &MoveCommand) -> bool {
        let fire = cmd.actions & 1 != 0 && tick >= self.next;
        if fire {
            self.next = tick + RELOAD;
        }
        fire
    }
}

/// The client's side of [`Rockets`]: the same trigger and rocket.
struct ClientRockets {
    trigger: Trigger,
    speed: f64,
}

impl Launcher for ClientRockets {
    fn launch(
        &mut self,
        _: &Sim,
        tick: u64,
        player: PlayerId,
        before: &PlayerState,
        cmd: &MoveCommand,
        out: &mut Vec<EntityState>,
    ) {
        if self.trigger.pull(tick, cmd) {
            out.extend(rocket(before, cmd, player, self.speed));
        }
    }
}

/// Rules: each player's commands fire rockets ([`Trigger`]); a rocket ends at its impact,
/// and a hit on a player is told to everyone (reliably).
struct Rockets {
    speed: f64,
    triggers: BTreeMap<PlayerId, Trigger>,
    fired: Arc<Mutex<u64>>,
    /// Hits as the rules saw them: the rocket's id, the tick it stood at the victim.
    hits: Arc<Mutex<Vec<(EntityId, u64)>>>,
    /// Gathers the others around player 1 at this distance, once.
    gather: Option<f64>,
}

impl Rockets {
    /// Rockets of `speed`, the players gathered `gather` units around player 1.
    fn new(speed: f64, gather: f64) -> Rockets {
        Rockets {
            speed,
            triggers: BTreeMap::new(),
            fired: Arc::default(),
            hits: Arc::default(),
            gather: Some(gather),
        }
    }
}

impl GameRules for Rockets {
    fn tick(&mut self, game: &mut Game<'_>) {
        for i in game.impacts().to_vec() {
            let standing = game.world().tick;
            game.despawn(i.entity);
            if let expel_core::sim::Struck::Player(victim) = i.struck {
                self.hits.lock().unwrap().push((i.entity, standing));
                let _ = game.broadcast(Channel::Reliable, &(i.entity, victim));
            }
        }
        let tick = game.tick();
        if let Some(reach) = self
            .gather
            .filter(|_| tick >= 120 && game.players().count() >= 3)
        {
            if gather(game, reach) {
                self.gather = None;
            }
        }
        let players: Vec<PlayerId> = game.players().collect();
        for p in players {
            let (Some(cmd), Some(state)) = (game.command(p), game.world().player(p).copied())
            else {
                continue;
            };
            if !game.command_arrived(p) {
                continue;
            }
            if self.triggers.entry(p).or_default().pull(tick, &cmd) {
                if let Some(e) = rocket(&state, &cmd, p, self.speed) {
                    game.spawn(e, Scope::Near).unwrap();
                    *self.fired.lock().unwrap() += 1;
                }
            }
        }
    }
}

/// How each drawn rocket went along its path: the most it stepped back.
#[derive(Default)]
struct Steps {
    /// Per rocket: its first drawn place, its way, its farthest progress along it.
    along: BTreeMap<(usize, u32), (DVec3, DVec3, f64)>,
    worst: f64,
    samples: u64,
}

impl Steps {
    /// Rocket `key` drawn `at`, flying `way` (zero: the way from where it was first
    /// drawn, once it moved).
    fn see(&mut self, key: (usize, u32), at: DVec3, way: DVec3) {
        self.samples += 1;
        let (o, w, best) = self.along.entry(key).or_insert((at, way, 0.0));
        if *w == DVec3::ZERO {
            *w = (at - *o).normalize_or_zero();
        }
        let progress = (at - *o).dot(*w);
        if std::env::var("EDGES_DEBUG").is_ok() && *best - progress > 1.0 {
            eprintln!(
                "step back {:.2} at {key:?}: {at} from {o} way {w}",
                *best - progress
            );
        }
        self.worst = self.worst.max(*best - progress);
        *best = best.max(progress);
    }
}

#[test]
fn the_shooters_own_rockets_are_never_drawn_stepping_back() {
    let mut rockets = 0;
    for (n, rtt) in ROUND_TRIPS_MS.into_iter().enumerate() {
        for speed in [900.0, 20_000.0] {
            // Gathered, so the turning shooters' rockets meet the strafers as well as the
            // walls.
            let rules = Rockets::new(speed, 200.0);
            let (fired, hits) = (rules.fired.clone(), rules.hits.clone());
            let mut net = network_with(4, link(rtt), 30 + n as u64, |_| {});
            net.server_mut().set_rules(Box::new(rules));
            for i in 0..4 {
                let launcher = ClientRockets {
                    trigger: Trigger::default(),
                    speed,
                };
                net.client_mut(i).set_launcher(Box::new(launcher));
            }
            // Clients 0 and 1 fire, turning, at the walls and at clients 2 and 3, which
            // strafe left and right.
            // They hold fire until a second after their clocks settle (before, commands
            // reach the server too late for their ticks, and a trigger pulled on the
            // client alone would put the two reloads out of step for good).
            let mut settled: BTreeMap<usize, u64> = BTreeMap::new();
            let mut play = |i: usize, c: &ClientMachine| {
                let t = c.predicted_tick();
                if c.settled() {
                    settled.entry(i).or_insert(t);
                }
                if i < 2 {
                    let yaw = (t as f64 * 1.7 + i as f64 * 90.0) % 360.0;
                    let mut cmd = MoveCommand::new(0.0, 0.0, 0.0, yaw, 0.0);
                    cmd.actions = u16::from(settled.get(&i).is_some_and(|s| t > s + 60));
                    cmd
                } else {
                    let side = if (t / 40).is_multiple_of(2) {
                        1.0
                    } else {
                        -1.0
                    };
                    MoveCommand::new(0.0, side, 0.0, 0.0, 0.0)
                }
            };
            let (mut steps, mut others) = (Steps::default(), Steps::default());
            for _ in 0..(12_000 / 4) {
                net.run(Duration::from_millis(4), &mut play);
                let now = net.now();
                for i in 0..2 {
                    let c = net.client(i);
                    for l in c.launched() {
                        steps.see(
                            (i, l.local),
                            l.origin,
                            l.entity.velocity().normalize_or_zero(),
                        );
                    }
                    // The twins as drawn: at the flight while it lives, then not at all.
                    let at = c.render_tick(now);
                    let twins: BTreeMap<EntityId, u32> = (c.launched().into_iter())
                        .filter_map(|l| Some((l.twin?, l.local)))
                        .collect();
                    for (id, d) in c.entities_drawn(at) {
                        if d.view.owner == Some(player_of(c)) && !twins.contains_key(&id) {
                            panic!("{rtt} ms: client {i} draws its ended rocket {id}'s copy");
                        }
                    }
                }
                // Everyone's rockets as the others draw them, interpolated.
                for i in 0..4 {
                    let c = net.client(i);
                    for (id, d) in c.entities_drawn(c.render_tick(now)) {
                        if d.view.owner != Some(player_of(c)) {
                            others.see((i, id.0), d.origin, DVec3::ZERO);
                        }
                    }
                }
                while net.client_mut(0).poll_event().is_some() {}
            }
            let fired = *fired.lock().unwrap();
            rockets += fired;
            assert!(fired >= 150, "{rtt} ms, {speed}/s: {fired} fired");
            let hit = hits.lock().unwrap().len();
            assert!(
                hit >= 5,
                "{rtt} ms, {speed}/s: {hit} of {fired} met a player"
            );
            assert!(
                steps.worst <= 1.0,
                "{rtt} ms, {speed}/s: a drawn rocket stepped back {:.2} units",
                steps.worst
            );
            assert!(
                others.worst <= 1.0 && others.samples > 1000,
                "{rtt} ms, {speed}/s: another's rocket drawn stepped back {:.2} units ({} samples)",
                others.worst,
                others.samples
            );
            for i in 0..2 {
                let s = net.client(i).launch_stats();
                assert!(s.ended >= s.matched / 2, "{rtt} ms: {s:?}");
                if std::env::var("EDGES_DEBUG").is_ok() {
                    eprintln!(
                        "{rtt} ms, {speed}/s, shooter {i}: {fired} fired by both, {hit} hit a \
                         player, worst step back {:.3} ({} samples), others' {:.3} ({}); {s:?}",
                        steps.worst, steps.samples, others.worst, others.samples
                    );
                }
            }
        }
    }
    assert!(rockets >= 1000, "{rockets} rockets in all");
}

#[test]
fn a_respawn_is_drawn_at_once_for_the_player_and_for_others() {
    /// Moves player 1 across the map on tick 300 (after a gathering).
    struct Jump {
        to: Option<DVec3>,
        gathered: bool,
    }
    impl GameRules for Jump {
        fn tick(&mut self, game: &mut Game<'_>) {
            let tick = game.tick();
            if game.players().count() < 2 || tick < 120 {
                return;
            }
            if !self.gathered {
                self.gathered = gather(game, 80.0);
                return;
            }
            if tick == 300 {
                let here = game.world().player(PlayerId(1)).unwrap().origin();
                let far = (game.sim().spawns().iter())
                    .copied()
                    .max_by(|a, b| a.distance(here).total_cmp(&b.distance(here)))
                    .unwrap();
                assert!(far.distance(here) > 300.0, "the spawns are too near");
                game.place(PlayerId(1), far).unwrap();
                self.to = Some(far);
            }
        }
    }
    for (n, rtt) in ROUND_TRIPS_MS.into_iter().enumerate() {
        let mut net = two(
            rtt,
            50 + n as u64,
            Jump {
                to: None,
                gathered: false,
            },
        );
        let mut still = |_: usize, _: &ClientMachine| MoveCommand::default();
        net.run(Duration::from_secs(4), &mut still);
        let (me, other) = if player_of(net.client(0)) == PlayerId(1) {
            (0, 1)
        } else {
            (1, 0)
        };
        let from = net.client(me).display_origin().unwrap();
        let seen_from = net
            .client(other)
            .others_drawn(net.client(other).render_tick(net.now()))[&PlayerId(1)]
            .origin;
        let mut own = vec![from];
        let mut drawn = vec![seen_from];
        for _ in 0..3000 {
            net.run(Duration::from_millis(1), &mut still);
            own.push(net.client(me).display_origin().unwrap());
            let o = net.client(other);
            if let Some(d) = o.others_drawn(o.render_tick(net.now())).get(&PlayerId(1)) {
                drawn.push(d.origin);
            }
        }
        let to = *own.last().unwrap();
        assert!(
            to.distance(from) > 300.0,
            "{rtt} ms: it did not move: {from} {to}"
        );
        let between = |list: &[DVec3], a: DVec3, b: DVec3| {
            list.iter()
                .filter(|p| p.distance(a) > 2.0 && p.distance(b) > 2.0)
                .count()
        };
        assert_eq!(between(&own, from, to), 0, "{rtt} ms: its own drawing slid");
        let seen_to = *drawn.last().unwrap();
        assert!(
            seen_to.distance(to) < 2.0,
            "{rtt} ms: others draw it at {seen_to}, not {to}"
        );
        assert_eq!(
            between(&drawn, seen_from, seen_to),
            0,
            "{rtt} ms: others' drawing slid"
        );
        assert!(net.client(me).stats().teleports >= 1);
    }
}

#[test]
fn a_hit_told_with_the_drawn_view_comes_within_a_frame_of_the_rocket_reaching_it() {
    for (n, rtt) in ROUND_TRIPS_MS.into_iter().enumerate() {
        let rules = Rockets::new(900.0, 250.0);
        let hits = rules.hits.clone();
        let mut net = network_with(3, link(rtt), 70 + n as u64, |_| {});
        net.server_mut().set_rules(Box::new(rules));
        for i in 0..3 {
            net.client_mut(i)
                .set_release(Channel::Reliable, Release::Drawn);
        }
        // Player 1 fires at the others, gathered around it: at the nearest as the
        // snapshots show it.
        let mut play = |_: usize, c: &ClientMachine| {
            if player_of(c) != PlayerId(1) {
                return MoveCommand::default();
            }
            let Some(me) = c.local_player() else {
                return MoveCommand::default();
            };
            let target = c
                .others(f64::MAX)
                .into_values()
                .min_by(|a, b| a.distance(me.origin()).total_cmp(&b.distance(me.origin())));
            let Some(t) = target else {
                return MoveCommand::default();
            };
            let d = t - (me.origin() + DVec3::new(0.0, 0.0, 20.0));
            let yaw = d.y.atan2(d.x).to_degrees();
            let pitch = -(d.z.atan2(d.truncate().length())).to_degrees();
            let mut cmd = MoveCommand::new(0.0, 0.0, 0.0, yaw, pitch);
            cmd.actions = 1;
            cmd
        };
        // The drawn moment (the view's tick) at which each client took each hit's
        // message, and the last one at which it drew the rocket (it drew it until it
        // reached its end). Measured in the view's time, not the wall's: a view waiting
        // for a late snapshot stands still at one moment while the wall runs on.
        let mut told: BTreeMap<(usize, EntityId), f64> = BTreeMap::new();
        let mut last_drawn: BTreeMap<(usize, EntityId), f64> = BTreeMap::new();
        // The most the view moved in one of this test's steps (it runs a little fast
        // while it catches up).
        let mut step = 0.0f64;
        let mut was = [0.0f64; 3];
        for _ in 0..12_000 {
            net.run(Duration::from_millis(1), &mut play);
            let now = net.now();
            for (i, was) in was.iter_mut().enumerate() {
                let c = net.client_mut(i);
                if player_of(c) == PlayerId(1) {
                    continue;
                }
                let at = c.render_tick(now);
                if *was > 0.0 {
                    step = step.max(at - *was);
                }
                *was = at;
                for id in c.entities_drawn(at).keys() {
                    last_drawn.insert((i, *id), at);
                }
                while let Some(m) = c.poll_message() {
                    let (id, _victim): (EntityId, PlayerId) =
                        postcard::from_bytes(&m.bytes).unwrap();
                    told.entry((i, id)).or_insert(at);
                }
            }
        }
        let hits = hits.lock().unwrap().clone();
        assert!(hits.len() >= 5, "{rtt} ms: {} hits", hits.len());
        let mut compared = 0;
        for (id, _) in &hits {
            for i in (0..3).filter(|i| player_of(net.client(*i)) != PlayerId(1)) {
                let (Some(t), Some(d)) = (told.get(&(i, *id)), last_drawn.get(&(i, *id))) else {
                    continue;
                };
                compared += 1;
                // A frame of the view (a tick at 60 Hz: the message bears the tick the
                // rules ran before, the rocket's end the tick stepped last), and the
                // step this test looks at them apart.
                let gap = (t - d).abs();
                assert!(
                    gap <= 1.0 + step,
                    "{rtt} ms: client {i} was told of hit {id} at {t}, last drew it at {d}"
                );
            }
        }
        assert!(
            compared >= hits.len(),
            "{rtt} ms: {compared} compared of {} hits",
            hits.len()
        );
    }
}

/// A game that tells each player something every tick (at 60 Hz, half of them between
/// its snapshots) costs it no packet of its own: each message leaves with the player's
/// next snapshot, in the same packet, and every one arrives, in order, stamped with the
/// tick it was sent on.
#[test]
fn messages_sent_between_snapshots_leave_with_the_next_one() {
    struct News;
    impl GameRules for News {
        fn tick(&mut self, game: &mut Game<'_>) {
            let tick = game.world().tick;
            let _ = game.broadcast(Channel::Reliable, &tick);
        }
    }
    let mut net = network_with(1, Impairment::default(), 92, |_| {});
    net.server_mut().set_rules(Box::new(News));
    let mut still = |_: usize, _: &ClientMachine| MoveCommand::default();
    net.run(Duration::from_secs(2), &mut still);
    let (packets, snapshots) = (net.packets_down(0), net.client(0).stats().datagrams_in);
    let mut got = Vec::new();
    let take = |net: &mut SimNet, got: &mut Vec<(u64, u64)>| {
        while let Some(m) = net.client_mut(0).poll_message() {
            got.push((m.tick, postcard::from_bytes::<u64>(&m.bytes).unwrap()));
        }
    };
    for _ in 0..2000 {
        net.run(Duration::from_millis(1), &mut still);
        take(&mut net, &mut got);
    }
    let packets = net.packets_down(0) - packets;
    let snapshots = net.client(0).stats().datagrams_in - snapshots;
    println!(
        "2 s: {packets} packets down, {snapshots} snapshots, {} messages",
        got.len()
    );
    assert!((58..=62).contains(&snapshots), "{snapshots} snapshots");
    assert!(
        packets <= snapshots + 2,
        "{packets} packets for {snapshots} snapshots"
    );
    // Every tick's message since the start, in order, each stamped with the world its
    // rules saw.
    assert!(got.len() >= 238, "{} messages", got.len());
    for w in got.windows(2) {
        assert_eq!(w[1].1, w[0].1 + 1, "in order, none lost: {w:?}");
    }
    assert!(got.iter().all(|(stamp, sent)| stamp == sent), "{got:?}");
}

#[test]
fn a_message_tick_far_off_is_counted_and_released_at_once() {
    let mut net = network_with(1, link(0.0), 90, |_| {});
    let mut still = |_: usize, _: &ClientMachine| MoveCommand::default();
    net.run(Duration::from_secs(4), &mut still);
    let now = net.now();
    let c = net.client_mut(0);
    c.set_release(Channel::Reliable, Release::Drawn);
    for tick in [u64::MAX, 1] {
        let frame = encode_frame(&ServerControl::Message {
            tick,
            bytes: postcard::to_allocvec(&7u32).unwrap(),
        });
        c.handle_control(&frame, now);
        let m = c.poll_message().expect("released at once");
        assert_ne!(m.tick, u64::MAX);
    }
    assert_eq!(c.stats().releases.future, 1);
    assert_eq!(c.stats().releases.past, 1);
}

#[test]
fn a_teleport_every_snapshot_is_drawn_at_once_and_counted() {
    /// Places player 1 where it stands, every tick: a teleport each tick.
    struct Every;
    impl GameRules for Every {
        fn tick(&mut self, game: &mut Game<'_>) {
            if let Some(o) = game.world().player(PlayerId(1)).map(PlayerState::origin) {
                let _ = game.place(PlayerId(1), o);
            }
        }
    }
    let mut net = two(150.0, 91, Every);
    let mut walk = |_: usize, _: &ClientMachine| MoveCommand::new(1.0, 0.0, 0.0, 45.0, 0.0);
    net.run(Duration::from_secs(6), &mut walk);
    for i in 0..2 {
        let c = net.client(i);
        assert!(c.display_origin().unwrap().is_finite());
        if player_of(c) == PlayerId(1) {
            assert!(c.stats().teleports >= 60, "{}", c.stats().teleports);
        }
    }
}
