//! The game's rules acting on players through the simulation (placing, respawning,
//! freezing, removing them), on the simulated network in both validation modes: every
//! client follows exactly, nobody honest is flagged, and the rules hear of every player
//! who leaves, also one they removed themselves.

use expel_testkit::network::network;

use expel_core::sim::PlayerId;
use expel_core::{MoveCommand, MoveMode};
use expel_protocol::client::{End, Status};
use expel_protocol::conditioner::Impairment;
use expel_protocol::server::{Event, Game, GameRules, RuleError};
use expel_protocol::{Code, MovementAuthority};
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Ticks between the rules' actions.
const EVERY: u64 = 90;
/// Ticks a player stays frozen.
const FROZEN_FOR: u64 = 60;

/// What the rules did and saw, for the test to read.
#[derive(Default, Debug)]
struct Log {
    placed: u64,
    respawned: u64,
    frozen: u64,
    /// Ticks a frozen player was seen where it was frozen, and seen elsewhere.
    held: u64,
    moved_while_frozen: Vec<(PlayerId, u64)>,
    /// A placed player seen the next tick farther than a tick's move from its place.
    strayed: Vec<(PlayerId, f64)>,
    refused: Vec<RuleError>,
    joined: Vec<PlayerId>,
    left: Vec<(PlayerId, String)>,
}

/// Rules that move players about: every `EVERY` ticks one player is placed at a spawn
/// point, respawned, or frozen for `FROZEN_FOR` ticks (in turn); with `remove`, that
/// player is removed at that tick.
struct Shuffler {
    log: Arc<Mutex<Log>>,
    frozen: BTreeMap<PlayerId, ([i32; 3], u64)>,
    placed: Option<(PlayerId, DVec3)>,
    remove: Option<(PlayerId, u64)>,
    /// The tick from which it does nothing new (the players stand still then).
    until: u64,
}

impl GameRules for Shuffler {
    fn joined(&mut self, _: &mut Game<'_>, player: PlayerId) {
        self.log.lock().unwrap().joined.push(player);
    }

    fn left(&mut self, _: &mut Game<'_>, player: PlayerId, reason: &str) {
        self.frozen.remove(&player);
        self.log.lock().unwrap().left.push((player, reason.into()));
    }

    fn tick(&mut self, game: &mut Game<'_>) {
        let tick = game.tick();
        let mut log = self.log.lock().unwrap();
        if let Some((p, at)) = self.placed.take() {
            if let Some(s) = game.world().player(p) {
                let d = (s.origin() - at).length();
                if d > 16.0 {
                    log.strayed.push((p, d));
                }
            }
        }
        for (p, (at, until)) in std::mem::take(&mut self.frozen) {
            let Some(s) = game.world().player(p) else {
                continue;
            };
            if s.origin == at && s.velocity == [0; 3] && s.mode == MoveMode::Frozen {
                log.held += 1;
            } else {
                log.moved_while_frozen.push((p, tick));
            }
            if tick >= until {
                game.set_mode(p, MoveMode::Walk).unwrap();
            } else {
                self.frozen.insert(p, (at, until));
            }
        }
        if let Some((p, at)) = self.remove {
            if tick == at {
                game.remove(p, "caught by the rules").unwrap();
            }
        }
        if !tick.is_multiple_of(EVERY) || tick >= self.until {
            return;
        }
        let players: Vec<PlayerId> = game.players().collect();
        let k = tick / EVERY;
        let Some(&p) = players.get(k as usize % players.len().max(1)) else {
            return;
        };
        if self.frozen.contains_key(&p) {
            return;
        }
        match k % 3 {
            0 => {
                let spawns = game.sim().spawns();
                let at = spawns[k as usize % spawns.len()];
                match game.place(p, at) {
                    Ok(()) => {
                        log.placed += 1;
                        self.placed = Some((p, at));
                    }
                    Err(e) => log.refused.push(e),
                }
            }
            1 => {
                game.respawn(p).unwrap();
                log.respawned += 1;
            }
            _ => {
                game.set_mode(p, MoveMode::Frozen).unwrap();
                let at = game.world().player(p).unwrap().origin;
                self.frozen.insert(p, (at, tick + FROZEN_FOR));
                log.frozen += 1;
            }
        }
    }
}

/// Players running in circles (each its own way round).
fn circling(i: usize, tick: u64) -> MoveCommand {
    let yaw = (tick as f64 * 3.0 + i as f64 * 60.0) % 360.0;
    MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
}

/// Four players run about for `secs` under the shuffling rules (removing `remove`, if
/// given), then stand still: the rules' log and the network.
fn shuffled(
    movement: MovementAuthority,
    secs: u64,
    remove: Option<(PlayerId, u64)>,
) -> (Log, expel_protocol::simnet::SimNet) {
    let link = Impairment {
        loss: 0.05,
        delay_ms: 40.0,
        jitter_ms: 10.0,
        duplicate: 0.02,
    };
    let mut net = network(4, movement, link, 5);
    let log = Arc::new(Mutex::new(Log::default()));
    net.server_mut().set_rules(Box::new(Shuffler {
        log: log.clone(),
        frozen: BTreeMap::new(),
        placed: None,
        remove,
        until: secs * 60,
    }));
    net.run(Duration::from_secs(secs), &mut |i, c| {
        circling(i, c.predicted_tick())
    });
    net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
    let log = std::mem::take(&mut *log.lock().unwrap());
    (log, net)
}

fn rules_move_players_and_every_client_follows(movement: MovementAuthority) {
    let (log, net) = shuffled(movement, 24, None);
    eprintln!("{movement:?}: {log:?}");
    assert!(
        log.placed >= 1 && log.respawned >= 2 && log.frozen >= 2,
        "{log:?}"
    );
    assert!(log.held >= 2 * (FROZEN_FOR - 1), "{log:?}");
    assert_eq!(log.moved_while_frozen, vec![], "a frozen player moved");
    assert_eq!(log.strayed, vec![], "a placed player was not where placed");
    let violations: Vec<&Event> = net
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Violation { .. }))
        .collect();
    assert!(
        violations.is_empty(),
        "honest players flagged: {violations:?}"
    );
    assert_eq!(net.server().stats().kicks, 0);
    // Standing still at the end, every client's own player is the server's, bit for bit.
    for i in 0..net.len() {
        let c = net.client(i);
        assert_eq!(c.status(), &Status::Playing, "client {i}");
        let id = c.welcome().unwrap().player;
        assert_eq!(
            c.local_player().as_ref(),
            net.server().world().player(id),
            "client {i}"
        );
    }
}

#[test]
fn rules_that_place_respawn_and_freeze_players_flag_nobody_in_authoritative_mode() {
    rules_move_players_and_every_client_follows(MovementAuthority::Server);
}

#[test]
fn rules_that_place_respawn_and_freeze_players_flag_nobody_in_trusted_mode() {
    rules_move_players_and_every_client_follows(MovementAuthority::Client);
}

/// A player the rules remove while they run is kicked with their reason, and the rules
/// still hear that it left (once), the others playing on.
#[test]
fn the_rules_hear_of_a_player_they_removed_themselves() {
    let (log, net) = shuffled(MovementAuthority::Server, 6, Some((PlayerId(3), 200)));
    let gone: Vec<_> = log.left.iter().filter(|(p, _)| *p == PlayerId(3)).collect();
    assert_eq!(gone.len(), 1, "{log:?}");
    assert!(gone[0].1.contains("caught by the rules"), "{gone:?}");
    assert_eq!(log.left.len(), 1, "{log:?}");
    let mut joined = log.joined.clone();
    joined.sort();
    assert_eq!(joined, [1, 2, 3, 4].map(PlayerId));
    assert_eq!(
        net.client(2).status(),
        &Status::Ended(End::Kicked {
            code: Code::Removed,
            detail: "caught by the rules".into()
        })
    );
    for i in [0, 1, 3] {
        assert_eq!(net.client(i).status(), &Status::Playing, "client {i}");
    }
}
