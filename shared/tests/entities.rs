//! The game's entities over the wire: rules that launch bouncing grenades and rockets and
//! keep a flag for everyone, played on the simulated network under loss, reordering and
//! duplication. Every client ends holding exactly the server's entities, heard of each
//! one's spawn and despawn, and the impacts the rules saw never put one inside solid.

use expel_core::sim::{EntityId, EntityState, Motion, Struck};
use expel_core::MoveCommand;
use expel_core::PlayerId;
use expel_core::{Contents, Hull, TraceScratch};
use expel_protocol::client::ClientEvent;
use expel_protocol::conditioner::Impairment;
use expel_protocol::game::state::{Replicated, StateTypes};
use expel_protocol::server::{Game, GameRules};
use expel_protocol::snapshot::Scope;
use expel_protocol::MovementAuthority;
use expel_testkit::network::network;
use glam::DVec3;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Kinds, in the game's numbering.
const FLAG: u16 = 1;
const GRENADE: u16 = 2;
const ROCKET: u16 = 3;

/// A grenade's state: its bounces.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Bounces(u32);
impl Replicated for Bounces {
    const NAME: &'static str = "test.bounces/1";
}
/// A player's state: its launches.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Launches(u32);
impl Replicated for Launches {
    const NAME: &'static str = "test.launches/1";
}

/// The game's state the rules set: each grenade's bounces, each player's launches.
type SetState = Arc<Mutex<(BTreeMap<EntityId, u32>, BTreeMap<PlayerId, u32>)>>;

/// Launches from every player now and then while `firing`; a rocket goes at its first
/// impact, a grenade at its fourth; the flag (for everyone) changes kind every second
/// while they fire.
#[derive(Default)]
struct Launcher {
    firing: bool,
    flag: Option<EntityId>,
    hits: BTreeMap<EntityId, u32>,
    /// Impacts seen, and those whose point the map's own test finds solid.
    counts: Arc<[AtomicU64; 2]>,
    /// The game's state the rules set: each grenade's bounces, each player's launches.
    set: SetState,
}

impl GameRules for Launcher {
    fn states(&self) -> StateTypes {
        StateTypes::new().player::<Launches>().entity::<Bounces>()
    }

    fn tick(&mut self, game: &mut Game<'_>) {
        let tick = game.tick();
        if self.flag.is_none() {
            let at = game.sim().spawns()[0] + DVec3::new(0.0, 0.0, 40.0);
            self.flag = game
                .spawn(EntityState::fixed(at).with_kind(FLAG), Scope::Everyone)
                .ok();
        }
        if let Some(f) = self.flag.filter(|_| self.firing && tick.is_multiple_of(60)) {
            let mut e = *game.entity(f).unwrap();
            e.kind ^= 8;
            game.set_entity(f, e).unwrap();
        }
        let impacts: Vec<_> = game.impacts().to_vec();
        for i in impacts {
            let Some(e) = game.entity(i.entity).copied() else {
                continue;
            };
            self.counts[0].fetch_add(1, Ordering::Relaxed);
            let hull = e.motion.map(|m| m.hull()).unwrap_or_else(Hull::point);
            let mut s = TraceScratch::new();
            if i.struck == Struck::World
                && game
                    .sim()
                    .map()
                    .position_solid(&hull, i.point, Contents::SOLID, &mut s)
            {
                self.counts[1].fetch_add(1, Ordering::Relaxed);
            }
            let n = self.hits.entry(i.entity).or_default();
            *n += 1;
            let n = *n;
            let mut set = self.set.lock().unwrap();
            if e.kind == ROCKET || n >= 4 {
                game.despawn(i.entity);
                self.hits.remove(&i.entity);
                set.0.remove(&i.entity);
            } else {
                game.set_entity_state(i.entity, &Bounces(n)).unwrap();
                set.0.insert(i.entity, n);
            }
        }
        if !self.firing {
            return;
        }
        let players: Vec<PlayerId> = game.players().collect();
        for id in players {
            let p = id.0;
            if !(tick + u64::from(p) * 7).is_multiple_of(20) {
                continue;
            }
            let Some(me) = game.world().player(id).map(|s| s.origin()) else {
                continue;
            };
            let yaw = (tick as f64 * 0.37 + f64::from(p)).sin() * std::f64::consts::PI;
            let dir = DVec3::new(yaw.cos(), yaw.sin(), 0.3);
            let (kind, motion, speed) = if p % 2 == 0 {
                (ROCKET, Motion::POINT, 1500.0)
            } else {
                let m = Motion::new(DVec3::splat(-3.0), DVec3::splat(3.0), 800.0, 0.6).unwrap();
                (GRENADE, m, 600.0)
            };
            let e = EntityState::launched(
                me + DVec3::new(0.0, 0.0, 20.0),
                dir,
                speed,
                motion,
                Some(id),
            )
            .unwrap()
            .with_kind(kind);
            game.spawn(e, Scope::Near).unwrap();
            let mut set = self.set.lock().unwrap();
            let launched = set.1.entry(id).or_default();
            *launched += 1;
            game.set_player_state(id, &Launches(*launched), Scope::Everyone)
                .unwrap();
        }
    }
}

#[test]
fn every_client_converges_to_the_servers_entities_under_loss_and_reordering() {
    let link = Impairment {
        loss: 0.1,
        delay_ms: 50.0,
        jitter_ms: 25.0,
        duplicate: 0.05,
    };
    let n = 6;
    let mut net = network(n, MovementAuthority::Server, link, 57);
    let counts: Arc<[AtomicU64; 2]> = Arc::default();
    let set: SetState = Arc::default();
    net.server_mut().set_rules(Box::new(Launcher {
        firing: true,
        counts: counts.clone(),
        set: set.clone(),
        ..Default::default()
    }));
    let mut walk = |i: usize, c: &expel_protocol::client::ClientMachine| {
        let yaw = (c.predicted_tick() / 90 + i as u64) as f64 * 77.0;
        MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
    };
    let mut spawned: Vec<BTreeSet<EntityId>> = vec![BTreeSet::new(); n as usize];
    let mut despawned: Vec<BTreeSet<EntityId>> = vec![BTreeSet::new(); n as usize];
    let mut changed = vec![0u32; n as usize];
    let mut most = 0;
    let mut take_events = |net: &mut expel_protocol::simnet::SimNet| {
        for i in 0..n as usize {
            while let Some(e) = net.client_mut(i).poll_event() {
                match e {
                    ClientEvent::EntitySpawned { id, .. } => {
                        spawned[i].insert(id);
                    }
                    // Gone: left the view, or ended where it was seen.
                    ClientEvent::EntityDespawned { id } => {
                        despawned[i].insert(id);
                    }
                    ClientEvent::EntityEnded { end } => {
                        despawned[i].insert(end.id);
                    }
                    ClientEvent::EntityChanged { .. } => changed[i] += 1,
                    _ => {}
                }
            }
        }
    };
    for _ in 0..80 {
        net.run(Duration::from_millis(100), &mut walk);
        take_events(&mut net);
        most = most.max(net.server().world().entities.len());
    }
    // The launchers stop; what flies comes down and goes; the flag stays.
    let mut stopped = Launcher {
        counts: counts.clone(),
        set: set.clone(),
        ..Default::default()
    };
    stopped.flag = net
        .server()
        .world()
        .entities
        .iter()
        .find(|(_, e)| e.kind & !8 == FLAG)
        .map(|(id, _)| *id);
    net.server_mut().set_rules(Box::new(stopped));
    for _ in 0..60 {
        net.run(Duration::from_millis(100), &mut walk);
        take_events(&mut net);
    }
    assert!(
        most >= 20,
        "too few entities at once to mean anything: {most}"
    );
    let server: BTreeMap<EntityId, (u16, [i32; 3])> = net
        .server()
        .world()
        .entities
        .iter()
        .map(|(id, e)| (*id, (e.kind, e.origin)))
        .collect();
    assert!(!server.is_empty());
    for i in 0..n as usize {
        let held: BTreeMap<EntityId, (u16, [i32; 3])> = net
            .client(i)
            .snapshot_entities()
            .iter()
            .map(|(id, e)| (*id, (e.kind, e.origin)))
            .collect();
        assert_eq!(held, server, "client {i} holds the server's entities");
        // And the game's state of them, and of every player (for everyone).
        let (bounces, launches) = &*set.lock().unwrap();
        let resting = bounces.keys().filter(|id| server.contains_key(id)).count();
        assert!(resting >= 1, "no grenade with a state left to compare");
        for (id, want) in bounces.iter().filter(|(id, _)| server.contains_key(id)) {
            let got = net.client(i).entity_state::<Bounces>(*id).unwrap();
            assert_eq!(got, Some(Bounces(*want)), "client {i}: entity {id}'s state");
        }
        assert!(!launches.is_empty());
        for (p, want) in launches {
            let got = net.client(i).player_state::<Launches>(*p).unwrap();
            assert_eq!(got, Some(Launches(*want)), "client {i}: player {p}'s state");
        }
        // It heard of many come and go.
        assert!(
            spawned[i].len() >= 10,
            "client {i}: {} spawns",
            spawned[i].len()
        );
        assert!(
            despawned[i].len() >= 5,
            "client {i}: {} gone (ended or despawned)",
            despawned[i].len()
        );
        // The flag changed kind every second it was toggled (a change lost with its
        // snapshot is carried by the next).
        assert!(changed[i] >= 4, "client {i}: {} changes", changed[i]);
    }
    let (impacts, in_solid) = (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
    );
    assert!(impacts >= 50, "{impacts} impacts");
    assert_eq!(in_solid, 0, "impacts in solid, of {impacts}");
}
