//! A brawl: forty players packed within 300 units of each other, running and turning
//! every tick, on the default byte budget. Each client's snapshots must show every one of
//! the other 39 all along: a budget too small for the crowd holds the far ones where the
//! client's baseline carries them, and only a datagram too small for them all may leave
//! one out (never here).

use expel_core::collision::TraceScratch;
use expel_core::movement::PlayerState;
use expel_core::{Contents, Hull, MoveCommand, PlayerId};
use expel_protocol::client::ClientEvent;
use expel_protocol::conditioner::Impairment;
use expel_protocol::server::{Game, GameRules, ServerSettings};
use expel_testkit::network::network_with;
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const PLAYERS: u32 = 40;
/// Each player has a place within this of the brawl's centre.
const RADIUS: f64 = 130.0;
/// Past this from the centre a player is put back on its place (all stay within twice
/// it of each other, under 300 units).
const STRAY: f64 = 145.0;
/// Places are this far apart (a hull is 32 units across).
const SPACING: f64 = 34.0;

/// Rules that put every player on a place of its own around the most open spot of the
/// map once all have joined, and put back any that strays past [`STRAY`] units.
#[derive(Default)]
struct Brawl {
    /// The centre and each player's place, in join order.
    places: Option<(DVec3, Vec<DVec3>)>,
}

/// The places within [`RADIUS`] of `centre` (on the grid of [`SPACING`]) where a standing
/// player fits and sees the centre.
fn places_around(game: &Game<'_>, centre: DVec3) -> Vec<DVec3> {
    let sim = game.sim();
    let mut scratch = TraceScratch::new();
    let steps = (RADIUS / SPACING) as i32;
    let mut out = Vec::new();
    for i in -steps..=steps {
        for j in -steps..=steps {
            let at = centre + DVec3::new(f64::from(i), f64::from(j), 0.0) * SPACING;
            if at.distance(centre) > RADIUS || !sim.in_arena(at) {
                continue;
            }
            let hull = sim.movement().hull(&PlayerState::at(at));
            if sim
                .map()
                .position_solid(hull, at, Contents::PLAYER, &mut scratch)
            {
                continue;
            }
            let eye = DVec3::new(0.0, 0.0, 20.0);
            let sight = (sim.map()).trace(
                &Hull::point(),
                centre + eye,
                at + eye,
                Contents::SOLID,
                &mut scratch,
            );
            if sight.sweep.fraction >= 1.0 {
                out.push(at);
            }
        }
    }
    out
}

impl GameRules for Brawl {
    fn tick(&mut self, game: &mut Game<'_>) {
        if game.players().count() < PLAYERS as usize {
            return;
        }
        if self.places.is_none() {
            // The spot with the most places, on a 128-unit grid at the floor's height.
            let z = game
                .world()
                .player(PlayerId(1))
                .map_or(24.0, |p| p.origin().z);
            let mut best: Option<(DVec3, Vec<DVec3>)> = None;
            for i in -12..=12 {
                for j in -12..=12 {
                    let centre = DVec3::new(f64::from(i) * 128.0, f64::from(j) * 128.0, z);
                    let places = places_around(game, centre);
                    if best.as_ref().is_none_or(|(_, b)| places.len() > b.len()) {
                        best = Some((centre, places));
                    }
                }
            }
            self.places = best;
        }
        let Some((centre, places)) = self.places.as_ref() else {
            return;
        };
        assert!(places.len() >= PLAYERS as usize, "{} places", places.len());
        let players: Vec<PlayerId> = game.players().collect();
        for (p, place) in players.into_iter().zip(places) {
            let strayed = game
                .world()
                .player(p)
                .is_none_or(|s| s.origin().distance(*centre) > STRAY);
            if strayed {
                // Its own place, or (another standing on it) any free one.
                let _ = game.place(p, *place).is_ok()
                    || places.iter().any(|q| game.place(p, *q).is_ok());
            }
        }
    }
}

#[test]
fn forty_players_within_300_units_all_stay_in_every_view_on_the_default_budget() {
    let link = Impairment {
        delay_ms: 30.0,
        ..Impairment::default()
    };
    // The budget `expel serve` gives, not the simulated network's generous one.
    let defaults = ServerSettings::new("arena", Arc::default(), b"s".to_vec());
    let mut net = network_with(PLAYERS, link, 5, |s| {
        s.client_budget = defaults.client_budget;
        s.interest = defaults.interest;
    });
    net.server_mut().set_rules(Box::<Brawl>::default());
    // Everyone runs in small circles, turning every tick: every field changes.
    let mut drive = |i: usize, c: &expel_protocol::client::ClientMachine| {
        let yaw = (c.predicted_tick() as f64 * 11.0 + i as f64 * 37.0) % 360.0;
        MoveCommand::new(0.6, 0.0, 0.0, yaw, (i % 7) as f64 - 3.0)
    };
    // Joining and gathering: 4 s, then each client's view is watched for 10 s.
    net.run(Duration::from_secs(4), &mut drive);
    let mut left: BTreeMap<usize, Vec<PlayerId>> = BTreeMap::new();
    for i in 0..net.len() {
        while net.client_mut(i).poll_event().is_some() {}
    }
    let before = net.server().stats().clone();
    let mut most_apart = 0.0f64;
    for _ in 0..100 {
        net.run(Duration::from_millis(100), &mut drive);
        for i in 0..net.len() {
            while let Some(e) = net.client_mut(i).poll_event() {
                if let ClientEvent::LeftView { player } = e {
                    left.entry(i).or_default().push(player);
                }
            }
        }
        let w = net.server().world();
        let places: Vec<DVec3> = w.players.values().map(|p| p.state.origin()).collect();
        for a in &places {
            for b in &places {
                most_apart = most_apart.max(a.distance(*b));
            }
        }
    }
    let after = net.server().stats();
    eprintln!(
        "most apart {most_apart:.0} units; snapshots squeezed {}, players held {}",
        after.snapshots_squeezed - before.snapshots_squeezed,
        after.players_held - before.players_held
    );
    assert!(
        most_apart <= 300.0,
        "{most_apart:.0} units apart: not a brawl"
    );
    // The budget did have to choose (or the test shows nothing).
    assert!(after.snapshots_squeezed > before.snapshots_squeezed);
    assert_eq!(
        after.snapshot_drops, before.snapshot_drops,
        "snapshots dropped"
    );
    let lost: usize = left.values().map(Vec::len).sum();
    assert!(
        left.is_empty(),
        "{lost} times a player left a view, in {} clients' (client 0's: {:?})",
        left.len(),
        left.values().next().map(|v| &v[..v.len().min(8)])
    );
    for i in 0..net.len() {
        let c = net.client(i);
        let at = c.render_tick(net.now());
        assert_eq!(
            c.others(at).len(),
            PLAYERS as usize - 1,
            "client {i} draws {} others",
            c.others(at).len()
        );
    }
}
