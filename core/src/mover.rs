//! Movers: doors, platforms, buttons, trains and rotators that push and carry players.
//!
//! Each mover is its own [`CollisionModel`], built from its brushes in coordinates relative
//! to its pivot, placed in the world by a transform (an offset and a turn about an axis
//! through the pivot). Its state is integer (progress in 1/256 units or degrees, and a
//! wait timer in ticks), so every client advances it exactly as the server does.

use crate::collision::{
    hull::Hull, CollisionModel, Contents, Sweep, Target, TraceScratch, ROTATED_KEPT,
};
use crate::geom::{axis_angle, radians, Aabb, Plane, MAX_COORD};
use crate::map::{solidity, Brush, Face, MapData, MapEntity, MapWarning, Patch};
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// Progress quantum: 1/256 of a unit (slides, paths) or of a degree (turns).
const STEP: f64 = 256.0;
/// Fastest mover, units (or degrees) per second: keys above it are clamped.
pub const MAX_MOVER_SPEED: f64 = 65_536.0;
/// Longest wait, in seconds: keys above it are clamped.
pub const MAX_MOVER_WAIT: f64 = 3_600.0;
/// Most path corners a train follows.
pub const MAX_PATH_CORNERS: usize = 64;

/// How a mover moves.
#[derive(Clone, Debug)]
pub enum MoverMotion {
    /// Back and forth along `dir` by `distance` (doors, platforms, buttons). `wait`: ticks
    /// to stay open before returning (`None`: stays open).
    Slide {
        /// Unit direction of opening.
        dir: DVec3,
        /// How far it opens.
        distance: f64,
        /// Units per second.
        speed: f64,
        /// Seconds open before returning (`None`: stays open).
        wait: Option<f64>,
        /// Cycles on its own (platforms) rather than when a player comes near.
        auto: bool,
    },
    /// Around a loop of offsets (trains along their path corners), pausing `wait` seconds
    /// at each.
    Path {
        /// Offsets of the corners from where the train was drawn.
        points: Vec<DVec3>,
        /// Units per second.
        speed: f64,
        /// Seconds to pause at each corner.
        wait: f64,
    },
    /// Turning for ever about `axis` at `speed` degrees per second (fans).
    Spin {
        /// Unit axis.
        axis: DVec3,
        /// Degrees per second.
        speed: f64,
    },
    /// Back and forth by `angle` degrees about `axis` (rotating doors).
    Swing {
        /// Unit axis.
        axis: DVec3,
        /// Degrees to turn when opening (sign gives the direction).
        angle: f64,
        /// Degrees per second.
        speed: f64,
        /// Seconds open before returning (`None`: stays open).
        wait: Option<f64>,
    },
}

/// Phase of a back-and-forth mover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Phase {
    /// At rest.
    #[default]
    Closed,
    /// Moving to open.
    Opening,
    /// Open, waiting.
    Open,
    /// Moving back to rest.
    Closing,
}

/// A mover's state, integer so it is exact on every machine. Any value is safe to step
/// (a state read from the network is clamped into range, never trusted to be).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct MoverState {
    /// Progress along the motion, in 1/256 units (or degrees for turns).
    pub progress: i64,
    /// Back-and-forth phase.
    pub phase: Phase,
    /// Ticks left to wait.
    pub timer: u32,
}

/// Where a mover stands at one tick: an offset of its pivot and a turn about it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    /// Offset from where the mover was drawn.
    pub offset: DVec3,
    /// Turn about the pivot.
    pub rotation: DQuat,
}

impl Pose {
    /// The pose of a mover at rest.
    pub const REST: Pose = Pose {
        offset: DVec3::ZERO,
        rotation: DQuat::IDENTITY,
    };
}

/// A mover and its collision model.
#[derive(Clone, Debug)]
pub struct Mover {
    /// The entity's class.
    pub classname: String,
    /// The collision model, relative to the pivot.
    pub model: CollisionModel,
    /// World position of the model's local origin (the rotation origin for turns).
    pub pivot: DVec3,
    /// How it moves.
    pub motion: MoverMotion,
    /// World box around the mover at rest, grown by 60 units: a player inside triggers it.
    pub trigger: Aabb,
}

const MOVER_CLASSES: [&str; 6] = [
    "func_door",
    "func_plat",
    "func_button",
    "func_train",
    "func_rotating",
    "func_door_rotating",
];

/// Reads an entity's numeric keys, checking each against its range and reporting what it
/// had to change or ignore, naming the entity.
struct Keys<'a> {
    e: &'a MapEntity,
    warnings: &'a mut Vec<MapWarning>,
}

impl Keys<'_> {
    fn warn(&mut self, message: String) {
        self.warnings.push(MapWarning {
            line: self.e.line,
            message: format!("{} (line {}): {message}", self.e.classname(), self.e.line),
        });
    }

    /// Key `k` within `lo..=hi`: absent gives `default`; unreadable or non-finite values
    /// are ignored and out-of-range ones clamped, with a warning.
    fn f64(&mut self, k: &str, default: f64, lo: f64, hi: f64) -> f64 {
        let Some(raw) = self.e.get(k) else {
            return default;
        };
        match raw.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => {
                let c = v.clamp(lo, hi);
                if c != v {
                    let raw = raw.trim();
                    self.warn(format!("\"{k}\" {raw} is outside {lo}..={hi}; using {c}"));
                }
                c
            }
            _ => {
                self.warn(format!(
                    "\"{k}\" \"{raw}\" is not a number; using {default}"
                ));
                default
            }
        }
    }

    /// A speed: must be positive.
    fn speed(&mut self, default: f64) -> f64 {
        let v = self.f64("speed", default, 0.0, MAX_MOVER_SPEED);
        if v > 0.0 {
            return v;
        }
        self.warn(format!("\"speed\" must be positive; using {default}"));
        default
    }

    /// A wait in seconds; negative means "never returns".
    fn wait(&mut self, default: f64) -> Option<f64> {
        let w = self.f64("wait", default, -1.0, MAX_MOVER_WAIT);
        (w >= 0.0).then_some(w)
    }

    /// Quake's `angle` key: -1 up, -2 down, else a yaw in degrees.
    fn angle_dir(&mut self) -> DVec3 {
        let a = self.f64("angle", 0.0, -360.0, 360.0);
        if a == -1.0 {
            DVec3::Z
        } else if a == -2.0 {
            -DVec3::Z
        } else {
            let (s, c) = libm::sincos(radians(a));
            DVec3::new(c, s, 0.0)
        }
    }
}

/// A train's path: its corners as offsets from where it was drawn (`drawn_at`, its
/// mins), following the targets until the loop closes, a target is missing, or
/// [`MAX_PATH_CORNERS`]. At least one corner (standing still).
fn train_path(keys: &mut Keys, map: &MapData, drawn_at: DVec3) -> Vec<DVec3> {
    let e = keys.e;
    // Quake puts the train's mins at each path corner in turn; the loop closes
    // where it started. Offsets are from where the train was drawn.
    let mut points = Vec::new();
    let mut target = e.get("target").map(str::to_string);
    while let Some(t) = target.take() {
        let Some(pc) = map
            .entities
            .iter()
            .find(|x| x.get("targetname") == Some(t.as_str()))
        else {
            keys.warn(format!("path target \"{t}\" does not exist"));
            break;
        };
        let Some(o) = pc.origin().filter(|o| o.abs().max_element() <= MAX_COORD) else {
            keys.warn(format!("path corner \"{t}\" has no usable origin"));
            break;
        };
        let at = o - drawn_at;
        if points.contains(&at) {
            break;
        }
        if points.len() >= MAX_PATH_CORNERS {
            keys.warn(format!("path longer than {MAX_PATH_CORNERS} corners; cut"));
            break;
        }
        points.push(at);
        target = pc.get("target").map(str::to_string);
    }
    if points.is_empty() {
        points.push(DVec3::ZERO);
    }
    points
}

fn spin_axis(e: &MapEntity) -> DVec3 {
    let flags = e
        .get("spawnflags")
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    if flags & 4 != 0 {
        DVec3::X
    } else if flags & 8 != 0 {
        DVec3::Y
    } else {
        DVec3::Z
    }
}

impl Mover {
    /// Movers of a map, in file order, with a warning for every mover that could not be
    /// built and every key that was out of range.
    pub fn from_map(map: &MapData) -> (Vec<Mover>, Vec<MapWarning>) {
        let mut warnings = Vec::new();
        let movers = map
            .entities
            .iter()
            .filter(|e| MOVER_CLASSES.contains(&e.classname()))
            .filter_map(|e| {
                let mut keys = Keys {
                    e,
                    warnings: &mut warnings,
                };
                let m = Self::from_entity(&mut keys, map);
                if m.is_none() {
                    keys.warn("has no solid brush that encloses a volume; ignored".into());
                }
                m
            })
            .collect();
        (movers, warnings)
    }

    fn from_entity(keys: &mut Keys, map: &MapData) -> Option<Mover> {
        let e = keys.e;
        let class = e.classname();
        let is_origin = |b: &Brush| {
            b.faces
                .iter()
                .all(|f| f.texture.to_ascii_lowercase().ends_with("origin"))
        };
        let solid: Vec<&Brush> = e
            .brushes
            .iter()
            .filter(|b| !is_origin(b) && solidity::brush_is_solid(b))
            .collect();
        if solid.is_empty() {
            return None;
        }
        let corners = |bs: &[&Brush]| {
            let mut bb = Aabb::EMPTY;
            for b in bs {
                let ps: Vec<Plane> = b.faces.iter().map(|f| f.plane).collect();
                for (_, w) in crate::geom::planes_to_polygons(&ps, 1e-6) {
                    for p in w {
                        bb.add_point(p);
                    }
                }
            }
            bb
        };
        let bounds = corners(&solid);
        if bounds.is_empty() {
            return None;
        }
        // Rotation origin: an origin brush's centre, else the origin key, else the centre.
        let origin_brushes: Vec<&Brush> = e.brushes.iter().filter(|b| is_origin(b)).collect();
        let pivot = if !origin_brushes.is_empty() {
            corners(&origin_brushes).center()
        } else if class.contains("rotat") {
            e.origin()
                .filter(|o| o.abs().max_element() <= MAX_COORD)
                .unwrap_or(bounds.center())
        } else {
            bounds.center()
        };
        // The model, moved so the pivot is its origin.
        let local: Vec<Brush> = solid
            .iter()
            .map(|b| Brush {
                faces: b
                    .faces
                    .iter()
                    .map(|f| Face {
                        plane: Plane {
                            normal: f.plane.normal,
                            dist: f.plane.dist - f.plane.normal.dot(pivot),
                        },
                        texture: f.texture.clone(),
                    })
                    .collect(),
                line: b.line,
            })
            .collect();
        let model = CollisionModel::build(&MapData {
            entities: vec![MapEntity {
                properties: vec![("classname".into(), "worldspawn".into())],
                brushes: local,
                // Solid curved patches ride along, moved the same way.
                patches: e
                    .patches
                    .iter()
                    .filter(|p| solidity::patch_is_solid(p))
                    .map(|p| Patch {
                        points: p.points.iter().map(|q| *q - pivot).collect(),
                        ..p.clone()
                    })
                    .collect(),
                line: e.line,
            }],
            ..Default::default()
        });
        // Distances stay inside the supported coordinate box.
        let far = 2.0 * MAX_COORD;
        let size = bounds.size();
        let motion = match class {
            "func_door" | "func_button" => {
                let button = class == "func_button";
                let dir = keys.angle_dir();
                let extent = size.dot(dir.abs());
                let lip = keys.f64("lip", if button { 4.0 } else { 8.0 }, -far, far);
                MoverMotion::Slide {
                    dir,
                    distance: (extent - lip).clamp(0.0, far),
                    speed: keys.speed(if button { 40.0 } else { 100.0 }),
                    wait: keys.wait(if button { 1.0 } else { 3.0 }),
                    auto: false,
                }
            }
            "func_plat" => {
                let lip = keys.f64("lip", 8.0, -far, far);
                let height = keys.f64("height", size.z - lip, 0.0, far);
                MoverMotion::Slide {
                    dir: -DVec3::Z,
                    distance: height.max(0.0),
                    speed: keys.speed(150.0),
                    wait: keys.wait(3.0),
                    auto: true,
                }
            }
            "func_train" => {
                let points = train_path(keys, map, bounds.min);
                MoverMotion::Path {
                    points,
                    speed: keys.speed(100.0),
                    wait: keys.wait(0.0).unwrap_or(0.0),
                }
            }
            "func_rotating" => MoverMotion::Spin {
                axis: spin_axis(e),
                speed: keys.speed(100.0),
            },
            _ => MoverMotion::Swing {
                axis: spin_axis(e),
                angle: keys.f64("distance", 90.0, -360.0, 360.0),
                speed: keys.speed(100.0),
                wait: keys.wait(3.0),
            },
        };
        Some(Mover {
            classname: class.to_string(),
            model,
            pivot,
            motion,
            trigger: bounds.expand(60.0),
        })
    }

    /// World box around the mover at a pose (for a turned mover, around the sphere it
    /// can sweep).
    pub fn world_bounds(&self, pose: &Pose) -> Aabb {
        let b = self.model.bounds();
        if b.is_empty() {
            return b;
        }
        if pose.rotation == DQuat::IDENTITY {
            return Aabb {
                min: b.min + self.pivot + pose.offset,
                max: b.max + self.pivot + pose.offset,
            };
        }
        let r = b.min.abs().max(b.max.abs()).length();
        let c = self.pivot + pose.offset;
        Aabb {
            min: c - DVec3::splat(r),
            max: c + DVec3::splat(r),
        }
    }

    /// The state a mover starts in.
    pub fn initial(&self) -> MoverState {
        MoverState::default()
    }

    /// Where the mover stands in state `s`.
    pub fn pose(&self, s: &MoverState) -> Pose {
        let p = s.progress as f64 / STEP;
        match &self.motion {
            MoverMotion::Slide { dir, .. } => Pose {
                offset: *dir * p,
                rotation: DQuat::IDENTITY,
            },
            MoverMotion::Path { points, .. } => Pose {
                offset: path_point(points, p),
                rotation: DQuat::IDENTITY,
            },
            MoverMotion::Spin { axis, .. } => Pose {
                offset: DVec3::ZERO,
                rotation: axis_angle(*axis, radians(p)),
            },
            MoverMotion::Swing { axis, angle, .. } => Pose {
                offset: DVec3::ZERO,
                rotation: axis_angle(*axis, radians(angle.signum() * p)),
            },
        }
    }

    /// The next state at `tick_rate` ticks per second; `triggered` when a player is in the
    /// trigger box. Total for any input state: progress is brought into range first.
    pub fn advance(&self, s: &MoverState, triggered: bool, tick_rate: u32) -> MoverState {
        let rate = tick_rate.max(1) as f64;
        // Speeds are clamped at load, so a step is at most 65536 * 256 per tick.
        let step = |speed: f64| ((speed / rate) * STEP).round().max(1.0) as i64;
        let ticks = |w: f64| (w * rate).round() as u32;
        let mut n = *s;
        match &self.motion {
            MoverMotion::Spin { speed, .. } => {
                let turn = 360 * STEP as i64;
                n.progress = (s.progress.rem_euclid(turn) + step(*speed)) % turn;
            }
            MoverMotion::Path {
                points,
                speed,
                wait,
            } => {
                let total = ((loop_length(points) * STEP) as i64).max(0);
                if total == 0 {
                    return n;
                }
                if n.timer > 0 {
                    n.timer -= 1;
                    return n;
                }
                let from = s.progress.rem_euclid(total);
                let before = corner_index(points, from as f64 / STEP);
                n.progress = (from + step(*speed)) % total;
                if corner_index(points, n.progress as f64 / STEP) != before {
                    n.timer = ticks(*wait);
                }
            }
            MoverMotion::Slide {
                distance,
                speed,
                wait,
                auto,
                ..
            } => {
                let end = (distance * STEP) as i64;
                shuttle(
                    &mut n,
                    end,
                    step(*speed),
                    wait.map(ticks),
                    triggered || *auto,
                );
            }
            MoverMotion::Swing {
                angle, speed, wait, ..
            } => {
                shuttle(
                    &mut n,
                    (angle.abs() * STEP) as i64,
                    step(*speed),
                    wait.map(ticks),
                    triggered,
                );
            }
        }
        n
    }

    /// A blocked back-and-forth mover turns back (a door closing on a player reopens).
    pub fn blocked(&self, s: &MoverState) -> MoverState {
        let mut n = *s;
        n.phase = match s.phase {
            Phase::Closing => Phase::Opening,
            Phase::Opening if matches!(self.motion, MoverMotion::Slide { auto: true, .. }) => {
                Phase::Closing
            }
            p => p,
        };
        n
    }

    /// A world point in the mover's frame at `pose`.
    pub fn to_local(&self, p: DVec3, pose: &Pose) -> DVec3 {
        pose.rotation.inverse() * (p - self.pivot - pose.offset)
    }

    /// A point of the mover's frame in the world at `pose`.
    pub fn to_world(&self, p: DVec3, pose: &Pose) -> DVec3 {
        self.pivot + pose.offset + pose.rotation * p
    }

    /// Sweeps `hull` (world-aligned) from `start` to `end` against the mover standing at
    /// `pose`, in world coordinates; a hit is reported as [`Target::Mover`] `index`.
    #[allow(clippy::too_many_arguments)]
    pub fn sweep(
        &self,
        index: u32,
        hull: &Hull,
        start: DVec3,
        end: DVec3,
        pose: &Pose,
        s: &mut TraceScratch,
    ) -> Sweep {
        let (a, b) = (self.to_local(start, pose), self.to_local(end, pose));
        let t = with_local_hull(hull, pose.rotation, s, |h, s| {
            self.model.sweep(h, a, b, Contents::ALL, s)
        });
        Sweep {
            fraction: t.fraction,
            end: if t.hit.is_some() {
                start + (end - start) * t.fraction
            } else {
                end
            },
            hit: t.hit.map(|mut hit| {
                hit.normal = pose.rotation * hit.normal;
                hit.point = self.to_world(hit.point, pose);
                if let Target::Model(feature) = hit.target {
                    hit.target = Target::Mover {
                        mover: index,
                        feature,
                    };
                }
                hit
            }),
        }
    }

    /// Whether `hull` at `pos` overlaps the mover standing at `pose`.
    pub fn overlaps(&self, hull: &Hull, pos: DVec3, pose: &Pose, s: &mut TraceScratch) -> bool {
        let lp = self.to_local(pos, pose);
        with_local_hull(hull, pose.rotation, s, |h, s| {
            self.model.position_solid(h, lp, Contents::ALL, s)
        })
    }
}

/// Runs `f` with `hull` as a frame turned by `q` sees it (the hull itself when `q` is no
/// turn, or when the turned hull cannot be built), reusing the one kept in `s` when it is
/// the same hull at the same angle.
fn with_local_hull<R>(
    hull: &Hull,
    q: DQuat,
    s: &mut TraceScratch,
    f: impl FnOnce(&Hull, &mut TraceScratch) -> R,
) -> R {
    if q == DQuat::IDENTITY {
        return f(hull, s);
    }
    let bits = q.to_array().map(f64::to_bits);
    let kept = &mut s.rotated;
    let found = kept
        .kept
        .iter()
        .position(|(b, src, _)| *b == bits && src.as_slice() == hull.vertices());
    let slot = match found {
        Some(i) => i,
        None => {
            let entry = (bits, hull.vertices().to_vec(), Some(hull.turned(q)));
            if kept.kept.len() < ROTATED_KEPT {
                kept.kept.push(entry);
                kept.kept.len() - 1
            } else {
                let i = kept.next;
                kept.next = (i + 1) % ROTATED_KEPT;
                kept.kept[i] = entry;
                i
            }
        }
    };
    match s.rotated.kept[slot].2.take() {
        Some(h) => {
            let r = f(&h, s);
            s.rotated.kept[slot].2 = Some(h);
            r
        }
        None => f(hull, s),
    }
}

/// Back-and-forth phase machine over progress `0..=end`.
fn shuttle(n: &mut MoverState, end: i64, step: i64, wait: Option<u32>, triggered: bool) {
    n.progress = n.progress.clamp(0, end);
    match n.phase {
        Phase::Closed => {
            if triggered {
                n.phase = Phase::Opening;
            }
        }
        Phase::Opening => {
            n.progress = (n.progress + step).min(end);
            if n.progress >= end {
                n.phase = Phase::Open;
                n.timer = wait.unwrap_or(u32::MAX);
            }
        }
        Phase::Open => {
            if wait.is_some() {
                if n.timer == 0 {
                    n.phase = Phase::Closing;
                } else {
                    n.timer -= 1;
                }
            }
        }
        Phase::Closing => {
            n.progress = (n.progress - step).max(0);
            if n.progress <= 0 {
                n.phase = Phase::Closed;
            }
        }
    }
}

fn loop_length(points: &[DVec3]) -> f64 {
    (0..points.len())
        .map(|i| (points[(i + 1) % points.len()] - points[i]).length())
        .sum()
}

fn corner_index(points: &[DVec3], mut d: f64) -> usize {
    for i in 0..points.len() {
        let seg = (points[(i + 1) % points.len()] - points[i]).length();
        if d < seg {
            return i;
        }
        d -= seg;
    }
    0
}

fn path_point(points: &[DVec3], mut d: f64) -> DVec3 {
    if points.len() < 2 {
        return points.first().copied().unwrap_or(DVec3::ZERO);
    }
    for i in 0..points.len() {
        let (a, b) = (points[i], points[(i + 1) % points.len()]);
        let seg = (b - a).length();
        if d <= seg && seg > 0.0 {
            return a + (b - a) * (d / seg);
        }
        d -= seg;
    }
    points[0]
}
