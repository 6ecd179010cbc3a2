//! `expel validate`: trusted-client validation offline. Reads one player's claimed
//! states, one JSON line per tick in the format `expel sim` prints, and writes a verdict
//! line for each.

use crate::lines::{Line, Lines};
use crate::load::Loaded;
use anyhow::{bail, Result};
use expel_core::validate::{claim_from_values, ClaimValidator, ViolationKind};
use expel_core::PlayerState;
use glam::DVec3;
use serde::Deserialize;
use serde_json::json;
use std::io::{BufRead, Write};

/// Longest claim line: a claim is well under 300 bytes.
const MAX_LINE: usize = 4096;

/// A claim as `expel sim` prints it.
#[derive(Deserialize)]
struct ClaimLine {
    tick: u64,
    origin: [f64; 3],
    velocity: [f64; 3],
    on_ground: bool,
    crouched: bool,
}

/// What one input line holds.
enum Parsed {
    Claim(u64, Result<PlayerState, String>),
    /// A line without a tick (sim's `hull` and `hash` lines): skipped.
    Other,
    /// Not a claim we can read: refused as invalid for the next tick.
    Malformed(String),
}

fn parse(text: &str) -> Parsed {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Parsed::Malformed(format!("not JSON: {e}")),
    };
    match &value {
        serde_json::Value::Object(o) if !o.contains_key("tick") => return Parsed::Other,
        serde_json::Value::Object(_) => {}
        _ => return Parsed::Malformed("not a JSON object".into()),
    }
    match serde_json::from_value::<ClaimLine>(value) {
        Ok(c) => Parsed::Claim(
            c.tick,
            claim_from_values(c.origin, c.velocity, c.on_ground, c.crouched),
        ),
        Err(e) => Parsed::Malformed(format!("not a claim: {e}")),
    }
}

pub(crate) fn run(
    loaded: Loaded,
    tick_rate: u32,
    spawn: Option<DVec3>,
    input: impl BufRead,
    mut out: impl Write,
) -> Result<()> {
    let (sim, spawn) = crate::sim::setup(loaded, tick_rate, spawn)?;
    let mut validator = ClaimValidator::new(&sim, PlayerState::at(spawn))?;
    let mut lines = Lines::new(input, MAX_LINE);
    let mut tick = 0u64;
    let mut refused = 0u64;
    while let Some(line) = lines.next_line()? {
        let parsed = match line {
            Line::Text(t) if t.trim().is_empty() => continue,
            Line::Text(t) => parse(&t),
            Line::TooLong => Parsed::Malformed(format!("longer than {MAX_LINE} bytes")),
            Line::NotUtf8 => Parsed::Malformed("not UTF-8".into()),
        };
        let (claimed_tick, claim) = match parsed {
            Parsed::Other => continue,
            Parsed::Claim(t, c) => (t, c),
            Parsed::Malformed(why) => (tick + 1, Err(why)),
        };
        tick = claimed_tick;
        let verdict = match claim {
            Ok(c) => validator.check(&sim, &c),
            Err(why) => {
                refused += 1;
                tracing::warn!(line = lines.number, "refused: {why}");
                eprintln!("expel validate: line {}: refused: {why}", lines.number);
                validator.refuse(&sim, ViolationKind::Invalid, why)
            }
        };
        if let Some(v) = &verdict.violation {
            tracing::info!(tick, kind = v.kind.name(), evidence = %v.evidence, "violation");
        }
        writeln!(
            out,
            "{}",
            json!({
                "tick": tick,
                "accepted": verdict.accepted,
                "origin": verdict.state.origin().to_array(),
                "violation": verdict.violation.as_ref().map(|v| v.kind.name()),
            })
        )?;
    }
    out.flush()?;
    if refused > 0 {
        bail!("{refused} line(s) were not readable claims (each judged invalid)");
    }
    Ok(())
}
