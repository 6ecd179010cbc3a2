//! `expel map trace` and `expel map rotate`: JSON lines in, JSON lines out.

use crate::lines::{answer_each, vec3};
use anyhow::Result;
use expel_core::collision::rotate::Rotation;
use expel_core::{CollisionModel, Contents, Hull, TraceScratch};
use glam::DVec3;
use serde::Deserialize;
use serde_json::json;
use std::io::{BufRead, Write};

/// Longest input line accepted; longer ones are answered with an error, unread.
const MAX_LINE: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceRequest {
    start: [f64; 3],
    end: [f64; 3],
    mins: Option<[f64; 3]>,
    maxs: Option<[f64; 3]>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateRequest {
    mins: [f64; 3],
    maxs: [f64; 3],
    position: [f64; 3],
    origin: [f64; 3],
    axis: [f64; 3],
    /// Degrees, right-handed about the axis.
    angle: f64,
}

fn hull_of(req: &TraceRequest) -> Result<Hull, String> {
    match (req.mins, req.maxs) {
        (None, None) => Ok(Hull::point()),
        (Some(mins), Some(maxs)) => {
            Hull::aabb(vec3(mins, "mins")?, vec3(maxs, "maxs")?).map_err(|e| e.to_string())
        }
        _ => Err("give both mins and maxs, or neither for a point".into()),
    }
}

/// The last request's box and its hull: consecutive lines usually share one.
type CachedHull = (Option<[f64; 3]>, Option<[f64; 3]>, Hull);

fn answer(
    model: &CollisionModel,
    line: &str,
    hulls: &mut Option<CachedHull>,
    scratch: &mut TraceScratch,
) -> Result<serde_json::Value, String> {
    let req: TraceRequest = serde_json::from_str(line).map_err(|e| format!("bad request: {e}"))?;
    let start = vec3(req.start, "start")?;
    let end = vec3(req.end, "end")?;
    let reuse = matches!(hulls, Some((m, x, _)) if *m == req.mins && *x == req.maxs);
    if !reuse {
        *hulls = Some((req.mins, req.maxs, hull_of(&req)?));
    }
    let hull = &hulls.as_ref().expect("set above").2;
    let t = model.trace(hull, start, end, Contents::ALL, scratch);
    Ok(json!({
        "fraction": t.sweep.fraction,
        "endpos": t.sweep.end.to_array(),
        "normal": t.sweep.normal().map(|n| n.to_array()),
        "startsolid": t.start_solid,
        "allsolid": t.all_solid,
    }))
}

fn answer_rotate(
    model: &CollisionModel,
    line: &str,
    scratch: &mut TraceScratch,
) -> Result<serde_json::Value, String> {
    let req: RotateRequest = serde_json::from_str(line).map_err(|e| format!("bad request: {e}"))?;
    let position = vec3(req.position, "position")?;
    let origin = vec3(req.origin, "origin")?;
    let axis = DVec3::from_array(req.axis);
    if expel_core::geom::unit_axis(axis).is_none() {
        return Err(format!(
            "axis {:?} must be a finite non-zero vector",
            req.axis
        ));
    }
    if !req.angle.is_finite() || req.angle.abs() > 36_000.0 {
        return Err(format!(
            "angle {} must be finite and within ±36000 degrees",
            req.angle
        ));
    }
    let hull =
        Hull::aabb(vec3(req.mins, "mins")?, vec3(req.maxs, "maxs")?).map_err(|e| e.to_string())?;
    let rot = Rotation {
        origin,
        axis,
        angle: expel_core::geom::radians(req.angle),
    };
    let t = model.rotate(&hull, position, &rot, Contents::ALL, scratch);
    Ok(json!({
        "fraction": t.fraction,
        "normal": t.hit.map(|h| h.normal.to_array()),
        "startsolid": t.start_solid,
    }))
}

/// Which request format `run` reads.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Trace,
    Rotate,
}

/// Answers every request line; a bad line gets `{"error": ...}` and the rest go on.
pub(crate) fn run(
    model: &CollisionModel,
    kind: Kind,
    input: impl BufRead,
    mut out: impl Write,
) -> Result<()> {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_message("traces");
    let mut hulls = None;
    let mut scratch = TraceScratch::new();
    let errors = answer_each(
        input,
        &mut out,
        MAX_LINE,
        tracing::Level::DEBUG,
        |line| match kind {
            Kind::Trace => answer(model, line, &mut hulls, &mut scratch),
            Kind::Rotate => answer_rotate(model, line, &mut scratch),
        },
        || bar.inc(1),
    )?;
    bar.finish_and_clear();
    if errors > 0 {
        tracing::warn!(errors, "some trace requests were rejected");
    }
    Ok(())
}
