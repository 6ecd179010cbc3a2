//! `expel shots`: projectiles swept by the server's own simulation, one JSON line of
//! impacts per shot, for anyone to check against the map.

use crate::lines::{answer_each, vec3};
use crate::load::Loaded;
use anyhow::Result;
use expel_core::sim::entity::{EntityState, Motion, Struck};
use expel_core::EntityId;
use expel_core::{MoveConfig, Sim, SimScratch};
use glam::DVec3;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

/// Longest input line: a shot is well under 300 bytes.
const MAX_LINE: usize = 4096;
/// Most ticks one shot may ask for (about half an hour at 60 Hz): bounded work per line.
pub(crate) const MAX_TICKS: u64 = 100_000;
/// Ticks a shot runs without `ticks`, in seconds of game time.
const DEFAULT_SECONDS: u64 = 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShotLine {
    start: [f64; 3],
    dir: [f64; 3],
    /// Units a second.
    speed: f64,
    mins: Option<[f64; 3]>,
    maxs: Option<[f64; 3]>,
    /// Units a second squared, pulling down (-z).
    #[serde(default)]
    gravity: f64,
    /// 0 (stop at the first impact) to 1.
    #[serde(default)]
    bounce: f64,
    ticks: Option<u64>,
}

/// The entity a line launches, and how many ticks it runs.
fn parse(line: &str, tick_rate: u32) -> Result<(EntityState, u64), String> {
    let req: ShotLine = serde_json::from_str(line).map_err(|e| format!("bad shot: {e}"))?;
    let start = vec3(req.start, "start")?;
    let dir = vec3(req.dir, "dir")?;
    if dir == DVec3::ZERO {
        return Err("dir must not be zero".into());
    }
    let (mins, maxs) = match (req.mins, req.maxs) {
        (None, None) => (DVec3::ZERO, DVec3::ZERO),
        (Some(a), Some(b)) => (DVec3::from_array(a), DVec3::from_array(b)),
        _ => return Err("give both mins and maxs, or neither for a point".into()),
    };
    let motion = Motion::new(mins, maxs, req.gravity, req.bounce).map_err(|e| e.to_string())?;
    let ticks = req.ticks.unwrap_or(DEFAULT_SECONDS * u64::from(tick_rate));
    if ticks > MAX_TICKS {
        return Err(format!("ticks {ticks} is over the limit of {MAX_TICKS}"));
    }
    let e =
        EntityState::launched(start, dir, req.speed, motion, None).map_err(|e| e.to_string())?;
    Ok((e, ticks))
}

fn hit_json(s: Struck) -> serde_json::Value {
    match s {
        Struck::World => json!("world"),
        Struck::Mover(i) => json!({ "mover": i }),
        Struck::Player(p) => json!({ "player": p }),
    }
}

/// Runs one shot from a fresh world (movers at rest at tick 0, as `expel sim` starts).
fn fly(sim: &Sim, e: EntityState, ticks: u64, s: &mut SimScratch) -> serde_json::Value {
    let mut world = sim.new_state();
    world.entities.insert(EntityId(0), e);
    let none = BTreeMap::new();
    let mut impacts = Vec::new();
    let mut state = "flying";
    let mut ran = 0;
    while ran < ticks {
        let report = sim.step_world(&mut world, &none, s);
        ran += 1;
        impacts.extend(report.impacts.iter().map(|i| {
            json!({
                "tick": world.tick,
                "point": i.point.to_array(),
                "normal": i.normal.to_array(),
                "hit": hit_json(i.struck),
                "fraction": i.fraction,
                "contact": i.contact.to_array(),
            })
        }));
        match world.entities.get(&EntityId(0)) {
            None => {
                state = "lost";
                break;
            }
            // Stuck where it hit: nothing moves it again.
            Some(e)
                if e.at_rest
                    && e.motion
                        .is_some_and(|m| m.bounce == 0.0 || m.gravity <= 0.0) =>
            {
                state = "stopped";
                break;
            }
            Some(_) => {}
        }
    }
    let e = world.entities.get(&EntityId(0)).copied().unwrap_or(e);
    if state == "flying" && e.at_rest {
        state = "resting";
    }
    json!({
        "impacts": impacts,
        "end": e.origin().to_array(),
        "velocity": e.velocity().to_array(),
        "state": state,
        "ticks": ran,
    })
}

/// Answers every shot line; a bad line gets `{"error": "line N: ..."}` and is skipped.
pub(crate) fn run(
    loaded: Loaded,
    tick_rate: u32,
    input: impl BufRead,
    mut out: impl Write,
) -> Result<()> {
    let config = MoveConfig {
        tick_rate,
        ..MoveConfig::default()
    };
    let sim = loaded.into_sim(config)?;
    let mut scratch = SimScratch::new();
    let errors = answer_each(
        input,
        &mut out,
        MAX_LINE,
        tracing::Level::WARN,
        |line| parse(line, tick_rate).map(|(e, ticks)| fly(&sim, e, ticks, &mut scratch)),
        || {},
    )?;
    if errors > 0 {
        tracing::warn!(errors, "some shot lines were skipped");
    }
    Ok(())
}
