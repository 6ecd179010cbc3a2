//! `expel sim`: one player driven by a file of per-tick inputs, printed tick by tick.

use crate::lines::{Line, Lines};
use crate::load::Loaded;
use anyhow::{bail, Context, Result};
use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{MoveCommand, MoveConfig, MoveMode, PlayerState, Sim, SimScratch};
use glam::DVec3;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;

/// Longest input line: a command is well under 200 bytes.
const MAX_LINE: usize = 4096;

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

pub(crate) fn parse_vec3(s: &str) -> Result<DVec3> {
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

pub(crate) struct SimArgs {
    pub spawn: Option<DVec3>,
    pub inputs: std::path::PathBuf,
    pub tick_rate: u32,
    pub mode: MoveMode,
}

/// The simulation `expel sim` and `expel validate` run, and where their player starts:
/// `spawn`, else the map's first spawn point.
pub(crate) fn setup(loaded: Loaded, tick_rate: u32, spawn: Option<DVec3>) -> Result<(Sim, DVec3)> {
    let config = MoveConfig {
        tick_rate,
        ..MoveConfig::default()
    };
    let name = loaded.name.clone();
    let sim = loaded.into_sim(config)?;
    let spawn = match spawn {
        Some(s) => s,
        None => *sim.spawns().first().with_context(|| {
            format!("{name} has no usable info_player_* spawn point; give --spawn")
        })?,
    };
    Ok((sim, spawn))
}

pub(crate) fn run(loaded: Loaded, args: SimArgs, mut out: impl Write) -> Result<()> {
    let (sim, spawn) = setup(loaded, args.tick_rate, args.spawn)?;
    let (stand, crouch) = (
        sim.movement().stand().bounds(),
        sim.movement().crouch().bounds(),
    );
    writeln!(
        out,
        "{}",
        json!({"hull": {
            "stand": {"mins": stand.min.to_array(), "maxs": stand.max.to_array()},
            "crouch": {"mins": crouch.min.to_array(), "maxs": crouch.max.to_array()},
        }})
    )?;
    let mut world = sim.new_state();
    let mut start = PlayerState::at(spawn);
    start.mode = args.mode;
    sim.add_player(&mut world, PlayerId(0), start)
        .context("placing the player")?;
    let file = std::fs::File::open(&args.inputs)
        .with_context(|| format!("opening inputs {}", args.inputs.display()))?;
    let mut lines = Lines::new(std::io::BufReader::new(file), MAX_LINE);
    let mut scratch = SimScratch::new();
    let mut commands = BTreeMap::new();
    let at = |n: u64| format!("{} line {n}", args.inputs.display());
    while let Some(line) = lines
        .next_line()
        .with_context(|| format!("reading {}", args.inputs.display()))?
    {
        let text = match line {
            Line::Text(t) => t,
            Line::TooLong => bail!("{}: longer than {MAX_LINE} bytes", at(lines.number)),
            Line::NotUtf8 => bail!("{}: not UTF-8", at(lines.number)),
        };
        if text.trim().is_empty() {
            continue;
        }
        let cmd = parse_input(&text).with_context(|| at(lines.number))?;
        commands.insert(PlayerId(0), cmd);
        sim.step(&mut world, &commands, &mut scratch);
        let p = world
            .player(PlayerId(0))
            .context("player 0 left the world")?;
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
    writeln!(out, "{}", json!({"hash": format!("{:016x}", world.hash())}))?;
    out.flush()?;
    Ok(())
}

/// One input line (`{"forward","side","up","yaw","pitch","jump","crouch"}`) as a command.
pub(crate) fn parse_input(text: &str) -> Result<MoveCommand> {
    let input: InputLine = serde_json::from_str(text)?;
    input.command()
}

/// Every command of an input file (blank lines skipped); errors name the line.
pub(crate) fn read_inputs(path: &std::path::Path) -> Result<Vec<MoveCommand>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("opening inputs {}", path.display()))?;
    let mut lines = Lines::new(std::io::BufReader::new(file), MAX_LINE);
    let mut out = Vec::new();
    while let Some(line) = lines.next_line()? {
        let at = || format!("{} line {}", path.display(), lines.number);
        match line {
            Line::Text(t) if t.trim().is_empty() => {}
            Line::Text(t) => out.push(parse_input(&t).with_context(at)?),
            Line::TooLong => bail!("{}: longer than {MAX_LINE} bytes", at()),
            Line::NotUtf8 => bail!("{}: not UTF-8", at()),
        }
    }
    Ok(out)
}

impl InputLine {
    /// The quantized command; non-finite values are refused, not read as zero.
    fn command(&self) -> Result<MoveCommand> {
        let values = [
            ("forward", self.forward),
            ("side", self.side),
            ("up", self.up),
            ("yaw", self.yaw),
            ("pitch", self.pitch),
        ];
        for (name, v) in values {
            if !v.is_finite() {
                bail!("\"{name}\" is {v}, not a finite number");
            }
        }
        let mut b = 0;
        if self.jump {
            b |= buttons::JUMP;
        }
        if self.crouch {
            b |= buttons::CROUCH;
        }
        Ok(
            MoveCommand::new(self.forward, self.side, self.up, self.yaw, self.pitch)
                .with_buttons(b),
        )
    }
}
