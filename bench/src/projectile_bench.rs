//! Projectiles' cost: CPU per projectile-tick of `Sim::entity_tick` on one core, for
//! rockets (points) in open air, rockets skimming the floor (geometry in every sweep's
//! reach), bouncing box grenades, and rockets among 64 players' boxes.
//!
//! `cargo run --release -p expel-bench --bin projectile-bench [MAP]` (default: the embedded
//! arena and, when present, ../shared/maps/oa_q3dm6ish.bsp). Each case runs 1,000
//! projectiles for 600 ticks; a projectile that stops is launched again from where it
//! started, so every tick measured is a flying one.

mod bench_maps;

use anyhow::Result;
use expel_core::sim::entity::{EntityState, Motion};
use expel_core::EntityId;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, Contents, Hull, MapData, Movement, PlayerBox, Sim, SimScratch, TraceScratch,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Instant;

const COUNT: usize = 1000;
const TICKS: usize = 600;

/// Where a case launches from and how: (start, direction, speed, motion).
type Launch = (DVec3, DVec3, f64, Motion);

/// A free point of the map `above` units over the floor under a random spot, if any.
fn spot(
    model: &CollisionModel,
    rng: &mut ChaCha8Rng,
    above: f64,
    s: &mut TraceScratch,
) -> Option<DVec3> {
    let b = model.bounds();
    let p = DVec3::new(
        rng.gen_range(b.min.x..b.max.x),
        rng.gen_range(b.min.y..b.max.y),
        rng.gen_range(b.min.z..b.max.z),
    );
    let box_hull = Hull::aabb(DVec3::splat(-16.0), DVec3::splat(16.0)).ok()?;
    if model.position_solid(&box_hull, p, Contents::SOLID, s) {
        return None;
    }
    let t = model.sweep(&Hull::point(), p, p - DVec3::Z * 4096.0, Contents::SOLID, s);
    t.hit?;
    let at = t.end + DVec3::Z * above;
    // Room above: a ceiling lower than the launch height's band is no open air.
    let up = model.sweep(&Hull::point(), at, at + DVec3::Z * 64.0, Contents::SOLID, s);
    (up.fraction == 1.0).then_some(at)
}

fn launches(model: &CollisionModel, case: &str, seed: u64) -> Vec<Launch> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = TraceScratch::new();
    let mut out = Vec::with_capacity(COUNT);
    let rocket = Motion::POINT;
    let grenade = Motion::new(DVec3::splat(-3.0), DVec3::splat(3.0), 800.0, 0.65).unwrap();
    while out.len() < COUNT {
        let yaw = rng.gen_range(0.0..std::f64::consts::TAU);
        let level = DVec3::new(libm::cos(yaw), libm::sin(yaw), 0.0);
        let l = match case {
            "open" => spot(model, &mut rng, 40.0, &mut s).map(|p| (p, level, 1000.0, rocket)),
            "skimming" => spot(model, &mut rng, 1.0, &mut s).map(|p| (p, level, 1000.0, rocket)),
            "grenades" => spot(model, &mut rng, 20.0, &mut s)
                .map(|p| (p, level + DVec3::Z * 0.5, 700.0, grenade)),
            _ => spot(model, &mut rng, 30.0, &mut s).map(|p| (p, level, 1000.0, rocket)),
        };
        out.extend(l);
    }
    out
}

/// Player boxes scattered near the launches (the "players" case).
fn boxes(launches: &[Launch], rng: &mut ChaCha8Rng) -> Vec<PlayerBox> {
    (0..64)
        .map(|id| {
            let (p, ..) = launches[rng.gen_range(0..launches.len())];
            let c = p + DVec3::new(
                rng.gen_range(-200.0..200.0),
                rng.gen_range(-200.0..200.0),
                0.0,
            );
            PlayerBox {
                id: PlayerId(id),
                bounds: expel_core::Aabb {
                    min: c + DVec3::new(-16.0, -16.0, -24.0),
                    max: c + DVec3::new(16.0, 16.0, 32.0),
                },
            }
        })
        .collect()
}

fn main() -> Result<()> {
    let maps = bench_maps::from_args();
    println!(
        "{:<22} {:<10} {:>14} {:>12} {:>10}",
        "map", "case", "proj-ticks", "us/proj-tick", "impacts"
    );
    for path in maps {
        let map = MapData::parse_any(&std::fs::read(&path)?)?;
        let model = Arc::new(CollisionModel::build(&map));
        let (sim, _) = Sim::from_map(model.clone(), &map, Movement::default());
        let poses: Vec<_> = {
            let mut v = Vec::new();
            sim.poses(&sim.new_state().movers, &mut v);
            v
        };
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        for case in ["open", "skimming", "grenades", "players"] {
            let starts = launches(&model, case, 11);
            let mut rng = ChaCha8Rng::seed_from_u64(12);
            let players = if case == "players" {
                boxes(&starts, &mut rng)
            } else {
                Vec::new()
            };
            let launch = |l: &Launch| EntityState::launched(l.0, l.1, l.2, l.3, None).unwrap();
            let mut es: Vec<EntityState> = starts.iter().map(launch).collect();
            let mut s = SimScratch::new();
            let (mut ticks, mut impacts) = (0u64, 0u64);
            let t0 = Instant::now();
            for _ in 0..TICKS {
                for (i, e) in es.iter_mut().enumerate() {
                    let t = sim.entity_tick(EntityId(i as u32), e, &poses, &players, &mut s);
                    ticks += 1;
                    impacts += t.impacts.len() as u64;
                    *e = if t.lost || t.entity.at_rest {
                        launch(&starts[i])
                    } else {
                        t.entity
                    };
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / ticks as f64;
            println!("{name:<22} {case:<10} {ticks:>14} {us:>12.3} {impacts:>10}");
        }
    }
    Ok(())
}
