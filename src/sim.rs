//! `expel sim`: one player driven by a file of per-tick inputs, printed tick by tick.

use crate::load::Loaded;
use anyhow::{bail, Context, Result};
use expel_shared::movement::buttons;
use expel_shared::mover::Mover;
use expel_shared::world::World;
use expel_shared::{MoveCommand, MoveConfig, MoveMode, PlayerState};
use glam::DVec3;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    #[serde(default)]
    forward: f64,
    #[serde(default)]
    side: f64,
    #[serde(default)]
    up: f64,
    #[serde(default)]
    yaw: f64,
    #[serde(default)]
    pitch: f64,
    #[serde(default)]
    jump: bool,
    #[serde(default)]
    crouch: bool,
}

pub fn parse_vec3(s: &str) -> Result<DVec3> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("'{s}' is not x,y,z"))?;
    if v.len() != 3 || v.iter().any(|x| !x.is_finite()) {
        bail!("'{s}' is not x,y,z");
    }
    Ok(DVec3::new(v[0], v[1], v[2]))
}

pub struct SimArgs {
    pub spawn: Option<DVec3>,
    pub inputs: std::path::PathBuf,
    pub tick_rate: u32,
    pub mode: MoveMode,
}

pub fn run(loaded: Loaded, args: SimArgs, mut out: impl Write) -> Result<()> {
    if !(10..=240).contains(&args.tick_rate) {
        bail!("--tick-rate {} is outside 10..=240", args.tick_rate);
    }
    let spawn = match args.spawn {
        Some(s) => s,
        None => *loaded.map.spawn_points().first().with_context(|| {
            format!(
                "{} has no info_player_* spawn point; give --spawn",
                loaded.name
            )
        })?,
    };
    let config = MoveConfig {
        tick_rate: args.tick_rate,
        ..MoveConfig::default()
    };
    let (stand, crouch) = (config.stand_hull().bounds(), config.crouch_hull().bounds());
    writeln!(
        out,
        "{}",
        json!({"hull": {
            "stand": {"mins": stand.min.to_array(), "maxs": stand.max.to_array()},
            "crouch": {"mins": crouch.min.to_array(), "maxs": crouch.max.to_array()},
        }})
    )?;
    let movers = Mover::from_map(&loaded.map, config.tick_rate);
    let mut world = World::new(Arc::new(loaded.model), config);
    world.add_movers(movers);
    let mut start = PlayerState::at(spawn);
    start.mode = args.mode;
    world.add_player(0, start);
    let file = std::fs::File::open(&args.inputs)
        .with_context(|| format!("opening inputs {}", args.inputs.display()))?;
    let mut commands = BTreeMap::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading inputs line {}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let input: InputLine = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}", args.inputs.display(), i + 1))?;
        let mut b = 0;
        if input.jump {
            b |= buttons::JUMP;
        }
        if input.crouch {
            b |= buttons::CROUCH;
        }
        let cmd = MoveCommand::new(input.forward, input.side, input.up, input.yaw, input.pitch)
            .with_buttons(b);
        commands.insert(0, cmd);
        world.step(&commands);
        let p = world.player(0).expect("player 0 exists");
        writeln!(
            out,
            "{}",
            json!({
                "tick": world.tick,
                "origin": p.origin().to_array(),
                "velocity": p.velocity().to_array(),
                "on_ground": p.on_ground(),
                "crouched": p.crouched(),
            })
        )?;
    }
    writeln!(
        out,
        "{}",
        json!({"hash": format!("{:016x}", world.state_hash())})
    )?;
    out.flush()?;
    Ok(())
}
