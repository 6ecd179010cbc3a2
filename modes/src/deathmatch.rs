//! Deathmatch, a game mode shipped with the server (`expel serve --mode deathmatch`):
//! every player for itself, with a hitscan gun ([`actions::FIRE`]) and a rocket launcher
//! ([`actions::ROCKET`]). A gun shot is a point swept along the view ray by the core
//! ([`Sim::shot`](expel_core::Sim::shot)): the map stops it, so nobody is hit through a wall. A
//! rocket is a projectile the simulation moves and sweeps each tick, so it never tunnels;
//! where it meets something it explodes: a direct hit takes [`ROCKET_DAMAGE`], and every
//! player within [`SPLASH_RADIUS`] whom the map's own trace from the blast reaches takes
//! less with distance (a wall between shields). A player at 0 health is fragged (the
//! shooter scores a frag, a player who kills itself loses one) and respawns at full
//! health.
//!
//! Each player's health and frags are the game's state of that player
//! ([`FighterState`], replicated in the snapshots to its own client alone,
//! `Session::player_state`: in a crowd shooting at each other every health in view
//! changes every snapshot, which cost each client 7 KB/s more at 200 bots). Every player is told (reliable) the table
//! of frags when it changed, at most every [`SCORE_EVERY`] seconds
//! ([`DeathmatchNews::Score`], the [`SCOREBOARD_ROWS`] with the most: a crowd's table is
//! large, and a frag a second in a crowd would send it to everyone every second), and each
//! frag ([`DeathmatchNews::Frag`]; in a game of more than [`KILL_FEED_PLAYERS`], only the
//! killer and the victim). Rockets reach clients as the game's entities of kind
//! [`ROCKET_KIND`].
//!
//! The rules check the game's buttons: bits other than the two defined, a `weapon` field
//! other than 0, and a press of a weapon still reloading are refused and counted
//! ([`Game::refuse`](expel_protocol::server::Game::refuse)); holding a trigger fires at
//! the weapon's rate.

use expel_core::sim::{EntityState, Motion, PlayerId, Sim};
use expel_core::{MoveCommand, MoveMode, PlayerState};
use expel_protocol::client::Launcher;
use expel_protocol::game::state::{Replicated, StateTypes};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// The game's buttons of deathmatch ([`MoveCommand::actions`](expel_core::MoveCommand)).
pub mod actions {
    /// The hitscan gun.
    pub const FIRE: u16 = 1;
    /// The rocket launcher.
    pub const ROCKET: u16 = 2;
    /// Every button deathmatch defines.
    pub const ALL: u16 = FIRE | ROCKET;
}

/// Health a player starts (and respawns) with.
pub const HEALTH: i32 = 100;
/// Damage of one gun shot.
pub const GUN_DAMAGE: i32 = 10;
/// How far a gun shot reaches, units.
pub const GUN_RANGE: f64 = 8192.0;
/// Seconds between gun shots.
pub const GUN_RELOAD: f64 = 0.1;
/// A rocket's speed, units a second.
pub const ROCKET_SPEED: f64 = 900.0;
/// A direct hit's damage, and the most a blast does.
pub const ROCKET_DAMAGE: i32 = 100;
/// How far a blast reaches, units (its damage falls off linearly to none there).
pub const SPLASH_RADIUS: f64 = 120.0;
/// Seconds between rockets.
pub const ROCKET_RELOAD: f64 = 0.8;
/// Seconds between two sendings of the frags' table at the most.
pub const SCORE_EVERY: f64 = 2.0;
/// Players up to which every frag is told to everyone (a kill feed); in a larger game,
/// to the two it concerns.
pub const KILL_FEED_PLAYERS: usize = 32;
/// Rows of the table of frags players are sent: those with the most (the operator's
/// `/game.json` has every player's).
pub const SCOREBOARD_ROWS: usize = 16;
/// A rocket's entity kind.
pub const ROCKET_KIND: u16 = 1;
/// Height of the eyes above a player's origin (shots leave from there).
pub const EYE_HEIGHT: f64 = 26.0;

/// The frags: as every player is told them, the [`SCOREBOARD_ROWS`] players with the
/// most; as the operator reads them, everyone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeathmatchScore {
    /// The tick it was made at.
    pub tick: u64,
    /// Frags and deaths per player, in id order.
    pub frags: Vec<(PlayerId, i32, u32)>,
}

/// A player's state in the game, as the snapshots carry it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FighterState {
    /// Health, 1 to [`HEALTH`].
    pub health: i32,
    /// Frags made (less those it made of itself).
    pub frags: i32,
}

impl Replicated for FighterState {
    const NAME: &'static str = "expel.deathmatch.fighter/1";
}

/// Deathmatch's state types, as its rules register them and its clients read them
/// (`ConnectOptions::with_states`).
pub fn states() -> StateTypes {
    StateTypes::new().player::<FighterState>()
}

/// Which weapon made a frag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Weapon {
    /// The hitscan gun.
    Gun,
    /// A rocket (a direct hit or its blast).
    Rocket,
}

/// What deathmatch sends its players (reliable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeathmatchNews {
    /// The frags, changed.
    Score(DeathmatchScore),
    /// A gun shot of the receiver's hit: the tick of its command, and whom (a hit
    /// marker).
    Hit {
        /// The tick of the command that fired it.
        tick: u64,
        /// Who was hit.
        victim: PlayerId,
    },
    /// A frag.
    Frag {
        /// Who made it (none: the world).
        killer: Option<PlayerId>,
        /// Who was fragged.
        victim: PlayerId,
        /// With what.
        weapon: Weapon,
    },
}

/// A player's triggers: its weapons' reloads and its buttons as last held. The rules
/// keep one per player, and a shooter's client one of its own ([`RocketLauncher`]), so
/// both fire on the same ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Triggers {
    /// The first tick each weapon fires again.
    gun_at: u64,
    rocket_at: u64,
    /// The game's buttons of the last command (a press is a rising edge).
    held: u16,
}

/// What one command's buttons did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pulled {
    /// The gun fires.
    pub gun: bool,
    /// A rocket leaves.
    pub rocket: bool,
    /// Buttons deathmatch does not define, or a press of a weapon still reloading: the
    /// rules refuse and count it.
    pub refused: bool,
}

impl Triggers {
    /// The command `cmd` for `tick` (at `tick_rate` ticks a second) pulls the triggers:
    /// holding one fires at its weapon's rate.
    pub fn pull(&mut self, tick: u64, tick_rate: f64, cmd: &MoveCommand) -> Pulled {
        let mut actions = cmd.actions;
        let mut refused = false;
        if actions & !actions::ALL != 0 || cmd.weapon != 0 {
            // Not deathmatch's: the command's buttons count for nothing.
            refused = true;
            actions = 0;
        }
        let pressed = actions & !self.held;
        self.held = actions;
        let reload = |s: f64| (s * tick_rate).round().max(1.0) as u64;
        let gun = actions & actions::FIRE != 0 && tick >= self.gun_at;
        if gun {
            self.gun_at = tick + reload(GUN_RELOAD);
        } else {
            refused |= pressed & actions::FIRE != 0;
        }
        let rocket = actions & actions::ROCKET != 0 && tick >= self.rocket_at;
        if rocket {
            self.rocket_at = tick + reload(ROCKET_RELOAD);
        } else {
            refused |= pressed & actions::ROCKET != 0;
        }
        Pulled {
            gun,
            rocket,
            refused,
        }
    }
}

/// Where `state`'s eyes are (shots leave from there).
pub fn eye(state: &PlayerState) -> DVec3 {
    state.origin() + DVec3::new(0.0, 0.0, EYE_HEIGHT)
}

// ANCHOR: rocket
/// The rocket `owner` launches standing at `state` with `cmd`'s view.
pub fn rocket(state: &PlayerState, cmd: &MoveCommand, owner: PlayerId) -> Option<EntityState> {
    EntityState::launched(
        eye(state),
        cmd.view().0,
        ROCKET_SPEED,
        Motion::POINT,
        Some(owner),
    )
    .map(|e| e.with_kind(ROCKET_KIND))
    .ok()
}
// ANCHOR_END: rocket

/// A shooter's client's prediction of its own rockets
/// ([`ClientMachine::set_launcher`](expel_protocol::client::ClientMachine::set_launcher)): the
/// rules' own triggers and launch, run on its own commands.
#[derive(Clone, Copy, Debug, Default)]
pub struct RocketLauncher {
    triggers: Triggers,
}

impl Launcher for RocketLauncher {
    fn launch(
        &mut self,
        sim: &Sim,
        tick: u64,
        player: PlayerId,
        before: &PlayerState,
        cmd: &MoveCommand,
        out: &mut Vec<EntityState>,
    ) {
        if before.mode != MoveMode::Walk {
            return;
        }
        let rate = f64::from(sim.movement().tick_rate());
        if self.triggers.pull(tick, rate, cmd).rocket {
            out.extend(rocket(before, cmd, player));
        }
    }
}

#[cfg(feature = "server")]
pub use rules::Deathmatch;

#[cfg(feature = "server")]
mod rules {
    use super::*;
    use expel_core::collision::hull::Hull;
    use expel_core::collision::Contents;
    use expel_core::sim::{Impact, PlayerBox, Struck};
    use expel_core::SimScratch;
    use expel_protocol::messages::Channel;
    use expel_protocol::server::{Game, GameRules, ShotError};
    use expel_protocol::snapshot::Scope;
    use std::collections::BTreeMap;

    /// One player's side of the game.
    #[derive(Clone, Copy, Debug)]
    struct Fighter {
        health: i32,
        frags: i32,
        deaths: u32,
        triggers: Triggers,
        /// Its state as last set.
        told: Option<FighterState>,
    }

    impl Default for Fighter {
        fn default() -> Fighter {
            Fighter {
                health: HEALTH,
                frags: 0,
                deaths: 0,
                triggers: Triggers::default(),
                told: None,
            }
        }
    }

    /// Deathmatch's rules (see the module docs).
    #[derive(Debug, Default)]
    pub struct Deathmatch {
        fighters: BTreeMap<PlayerId, Fighter>,
        /// The frags changed since they were last sent.
        changed: bool,
        /// The first tick the table may be sent again.
        score_at: u64,
        /// The score as last sent, for the operator's summary (taken once).
        summary: Option<String>,
        scratch: SimScratch,
        trace: expel_core::TraceScratch,
        /// The movers' poses and the players' boxes as the world stands, made once and
        /// kept until a player is moved (a respawn): every shot of a tick reads them.
        obstacles: Option<Obstacles>,
    }

    /// The movers' poses and the players' boxes.
    type Obstacles = (Vec<expel_core::mover::Pose>, Vec<PlayerBox>);

    /// The world's movers' poses and players' boxes as they stand.
    fn obstacles(game: &Game<'_>) -> Obstacles {
        let (sim, world) = (game.sim(), game.world());
        let mut poses = Vec::new();
        sim.poses(&world.movers, &mut poses);
        let boxes = world
            .players
            .iter()
            .filter_map(|(id, p)| sim.player_box(*id, &p.state))
            .collect();
        (poses, boxes)
    }

    impl Deathmatch {
        /// A game with nobody in it.
        pub fn new() -> Deathmatch {
            Deathmatch::default()
        }

        /// The whole table (the operator's), and the rows players are sent: the
        /// [`SCOREBOARD_ROWS`] with the most frags, in id order.
        fn score(&self, tick: u64) -> (DeathmatchScore, DeathmatchScore) {
            let all = DeathmatchScore {
                tick,
                frags: self
                    .fighters
                    .iter()
                    .map(|(p, f)| (*p, f.frags, f.deaths))
                    .collect(),
            };
            let mut top = all.frags.clone();
            if top.len() > SCOREBOARD_ROWS {
                top.sort_by_key(|(p, frags, _)| (std::cmp::Reverse(*frags), *p));
                top.truncate(SCOREBOARD_ROWS);
                top.sort_by_key(|(p, ..)| *p);
            }
            (all, DeathmatchScore { tick, frags: top })
        }

        /// `victim` takes `damage` from `by`; at 0 it is fragged and respawns.
        fn hurt(
            &mut self,
            game: &mut Game<'_>,
            victim: PlayerId,
            by: PlayerId,
            damage: i32,
            weapon: Weapon,
        ) {
            let Some(v) = self.fighters.get_mut(&victim) else {
                return;
            };
            v.health -= damage;
            if v.health > 0 {
                return;
            }
            v.health = HEALTH;
            v.deaths += 1;
            let _ = game.respawn(victim);
            self.obstacles = None;
            if by == victim {
                v.frags -= 1;
            } else if let Some(k) = self.fighters.get_mut(&by) {
                k.frags += 1;
            }
            self.changed = true;
            let frag = DeathmatchNews::Frag {
                killer: Some(by),
                victim,
                weapon,
            };
            if self.fighters.len() <= KILL_FEED_PLAYERS {
                let _ = game.broadcast(Channel::Reliable, &frag);
            } else {
                // A crowd's frags, each to everyone, were hundreds of messages a second
                // per client, crowding out its own hit markers: the two it concerns.
                let _ = game.send(victim, Channel::Reliable, &frag);
                if by != victim {
                    let _ = game.send(by, Channel::Reliable, &frag);
                }
            }
        }

        // ANCHOR: gun
        /// A gun shot of `p`'s along its view, judged as `p` saw the others when it
        /// fired (one that has drawn nothing yet is judged in the present).
        fn gun(&mut self, game: &mut Game<'_>, p: PlayerId, eye: DVec3, dir: DVec3) {
            let end = eye + dir * GUN_RANGE;
            let hit = match game.shot_as_seen(p, &Hull::point(), eye, end) {
                Ok(shot) => shot.hit,
                Err(ShotError::Budget(_)) => return,
                Err(_) => {
                    let (poses, boxes) = self.obstacles.take().unwrap_or_else(|| obstacles(game));
                    let (_, hit) = game.sim().shot(
                        &Hull::point(),
                        eye,
                        end,
                        &poses,
                        &boxes,
                        Some(p),
                        &mut self.scratch,
                    );
                    self.obstacles = Some((poses, boxes));
                    hit
                }
            };
            if let Some((Struck::Player(victim), _)) = hit {
                let tick = game.tick();
                let _ = game.send(p, Channel::Reliable, &DeathmatchNews::Hit { tick, victim });
                self.hurt(game, victim, p, GUN_DAMAGE, Weapon::Gun);
            }
        }
        // ANCHOR_END: gun

        /// A rocket met something: its blast.
        fn explode(&mut self, game: &mut Game<'_>, owner: PlayerId, i: &Impact) {
            let (poses, boxes) = self.obstacles.take().unwrap_or_else(|| obstacles(game));
            let mut hurt = Vec::new();
            for b in &boxes {
                let damage = if i.struck == Struck::Player(b.id) {
                    ROCKET_DAMAGE
                } else {
                    // The nearest point of its box, and the blast reaching it unbroken.
                    let near = i.point.clamp(b.bounds.min, b.bounds.max);
                    let d = near.distance(i.point);
                    if d >= SPLASH_RADIUS {
                        continue;
                    }
                    let t = game.sim().map().trace(
                        &Hull::point(),
                        i.point,
                        b.bounds.center(),
                        Contents::SOLID,
                        &mut self.trace,
                    );
                    if t.sweep.fraction < 1.0 {
                        continue;
                    }
                    (f64::from(ROCKET_DAMAGE) * (1.0 - d / SPLASH_RADIUS)).ceil() as i32
                };
                hurt.push((b.id, damage));
            }
            self.obstacles = Some((poses, boxes));
            for (victim, damage) in hurt {
                self.hurt(game, victim, owner, damage, Weapon::Rocket);
            }
        }
    }

    impl GameRules for Deathmatch {
        fn states(&self) -> StateTypes {
            super::states()
        }

        fn joined(&mut self, _game: &mut Game<'_>, player: PlayerId) {
            self.fighters.insert(player, Fighter::default());
            self.changed = true;
        }

        fn left(&mut self, _game: &mut Game<'_>, player: PlayerId, _reason: &str) {
            self.fighters.remove(&player);
            self.changed = true;
        }

        fn tick(&mut self, game: &mut Game<'_>) {
            // The world stepped since the last look.
            self.obstacles = None;
            let tick = game.tick();
            let rate = f64::from(game.sim().movement().tick_rate());
            // ANCHOR: impacts
            // The rockets the last tick stopped explode.
            let impacts: Vec<Impact> = game.impacts().to_vec();
            for i in &impacts {
                let Some(e) = game.entity(i.entity).copied() else {
                    continue;
                };
                if e.kind != ROCKET_KIND {
                    continue;
                }
                game.despawn(i.entity);
                if let Some(owner) = e.owner {
                    self.explode(game, owner, i);
                }
            }
            // ANCHOR_END: impacts
            // Each player's triggers, in id order, pulled by the commands that came: a
            // repeated one moves its player, but a trigger its client never pressed
            // for this tick (its clock jumped past it) or whose press was lost with the
            // command would fire where the client's own triggers did not, and every
            // shot after it would leave a tick apart from the shooter's.
            let players: Vec<PlayerId> = (self.fighters.keys().copied())
                .filter(|p| game.command_arrived(*p))
                .collect();
            for p in players {
                let (Some(cmd), Some(state)) = (game.command(p), game.world().player(p).copied())
                else {
                    continue;
                };
                if state.mode != expel_core::MoveMode::Walk {
                    continue;
                }
                let Some(f) = self.fighters.get_mut(&p) else {
                    continue;
                };
                let pulled = f.triggers.pull(tick, rate, &cmd);
                if pulled.refused {
                    game.refuse(p);
                }
                if pulled.gun {
                    self.gun(game, p, eye(&state), cmd.view().0);
                }
                // ANCHOR: spawn
                if let Some(e) = rocket(&state, &cmd, p).filter(|_| pulled.rocket) {
                    let _ = game.spawn(e, Scope::Near);
                }
                // ANCHOR_END: spawn
            }
            // Each player's state as it stands, where it changed.
            for (p, f) in self.fighters.iter_mut() {
                let now = FighterState {
                    health: f.health,
                    frags: f.frags,
                };
                if f.told != Some(now) && game.set_player_state(*p, &now, Scope::Owner).is_ok() {
                    f.told = Some(now);
                }
            }
            if self.changed && tick >= self.score_at {
                self.changed = false;
                self.score_at = tick + (SCORE_EVERY * rate) as u64;
                let (all, top) = self.score(tick);
                let _ = game.broadcast(Channel::Reliable, &DeathmatchNews::Score(top));
                self.summary = serde_json::to_string(&all).ok();
            }
        }

        fn summary(&mut self) -> Option<String> {
            self.summary.take()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn players_are_sent_the_rows_with_the_most_frags_and_the_operator_every_row() {
            let mut dm = Deathmatch::new();
            for p in 0..40u32 {
                let f = Fighter {
                    // Frags rise with the id but for a tie among the last ones.
                    frags: (p as i32).min(35),
                    deaths: p,
                    ..Fighter::default()
                };
                dm.fighters.insert(PlayerId(p), f);
            }
            let (all, top) = dm.score(7);
            assert_eq!(all.frags.len(), 40);
            assert_eq!((all.tick, top.tick), (7, 7));
            // The 16 with the most: 35 frags for 35..=39, then 34 down to 24; a tie goes
            // to the lower id. In id order.
            let ids: Vec<PlayerId> = top.frags.iter().map(|r| r.0).collect();
            assert_eq!(ids, (24..40).map(PlayerId).collect::<Vec<_>>());
            assert!(top.frags.iter().all(|r| all.frags.contains(r)));
            // A small game's table is whole.
            dm.fighters.retain(|p, _| *p < PlayerId(10));
            assert_eq!(dm.score(8).1.frags.len(), 10);
        }
    }
}
