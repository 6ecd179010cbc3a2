//! Movers: doors, platforms, buttons, trains and rotators that push and carry players.
//!
//! Each mover is its own [`CollisionModel`], built from its brushes in coordinates relative
//! to its pivot, placed in the world by a transform (an offset and a turn about an axis
//! through the pivot). Its state is integer (progress in 1/256 units or degrees, and a
//! wait timer in ticks), so every client advances it exactly as the server does.

use crate::collision::{hull::Hull, CollisionModel, Contents, TraceScratch};
use crate::geom::{Aabb, Plane};
use crate::map::{solidity, Brush, Entity, Face, MapData};
use glam::{DQuat, DVec3};

/// Progress quantum: 1/256 of a unit (slides, paths) or of a degree (turns).
const STEP: f64 = 256.0;

/// How a mover moves.
#[derive(Clone, Debug)]
pub enum Motion {
    /// Back and forth along `dir` by `distance` (doors, platforms, buttons). `wait`: ticks
    /// to stay open before returning (`None`: stays open).
    Slide {
        dir: DVec3,
        distance: f64,
        speed: f64,
        wait: Option<u32>,
        auto: bool,
    },
    /// Around a loop of offsets (trains along their path corners), pausing `wait` ticks at each.
    Path {
        points: Vec<DVec3>,
        speed: f64,
        wait: u32,
    },
    /// Turning for ever about `axis` at `speed` degrees per second (fans).
    Spin { axis: DVec3, speed: f64 },
    /// Back and forth by `angle` degrees about `axis` (rotating doors).
    Swing {
        axis: DVec3,
        angle: f64,
        speed: f64,
        wait: Option<u32>,
    },
}

/// Phase of a back-and-forth mover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    #[default]
    Closed,
    Opening,
    Open,
    Closing,
}

/// A mover's state, integer so it is exact on every machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MoverState {
    /// Progress along the motion, in 1/256 units (or degrees for turns).
    pub progress: i64,
    pub phase: Phase,
    /// Ticks left to wait.
    pub timer: u32,
}

/// A mover and its collision model.
#[derive(Clone, Debug)]
pub struct Mover {
    pub classname: String,
    pub model: CollisionModel,
    /// World position of the model's local origin (the rotation origin for turns).
    pub pivot: DVec3,
    pub motion: Motion,
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

fn key_f64(e: &Entity, k: &str) -> Option<f64> {
    e.get(k)?
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// Quake's `angle` key: -1 up, -2 down, else a yaw in degrees.
fn angle_dir(e: &Entity) -> DVec3 {
    let a = key_f64(e, "angle").unwrap_or(0.0);
    if a == -1.0 {
        DVec3::Z
    } else if a == -2.0 {
        -DVec3::Z
    } else {
        let r = a.to_radians();
        DVec3::new(libm::cos(r), libm::sin(r), 0.0)
    }
}

fn wait_ticks(e: &Entity, default: f64, tick_rate: u32) -> Option<u32> {
    let w = key_f64(e, "wait").unwrap_or(default);
    (w >= 0.0).then(|| (w * tick_rate as f64).round() as u32)
}

fn spin_axis(e: &Entity) -> DVec3 {
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
    /// Movers of a map, in file order.
    pub fn from_map(map: &MapData, tick_rate: u32) -> Vec<Mover> {
        map.entities
            .iter()
            .filter(|e| MOVER_CLASSES.contains(&e.classname()))
            .filter_map(|e| Self::from_entity(e, map, tick_rate))
            .collect()
    }

    fn from_entity(e: &Entity, map: &MapData, tick_rate: u32) -> Option<Mover> {
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
            e.origin().unwrap_or(bounds.center())
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
            entities: vec![Entity {
                properties: vec![("classname".into(), "worldspawn".into())],
                brushes: local,
                line: e.line,
            }],
            ..Default::default()
        });
        let speed = |d: f64| key_f64(e, "speed").filter(|v| *v > 0.0).unwrap_or(d);
        let lip = key_f64(e, "lip").unwrap_or(8.0);
        let size = bounds.size();
        let motion = match class {
            "func_door" | "func_button" => {
                let dir = angle_dir(e);
                let extent = size.dot(dir.abs());
                let lip = if class == "func_button" {
                    key_f64(e, "lip").unwrap_or(4.0)
                } else {
                    lip
                };
                Motion::Slide {
                    dir,
                    distance: (extent - lip).max(0.0),
                    speed: speed(if class == "func_button" { 40.0 } else { 100.0 }),
                    wait: wait_ticks(e, if class == "func_button" { 1.0 } else { 3.0 }, tick_rate),
                    auto: false,
                }
            }
            "func_plat" => {
                let height = key_f64(e, "height").unwrap_or(size.z - lip);
                Motion::Slide {
                    dir: -DVec3::Z,
                    distance: height.max(0.0),
                    speed: speed(150.0),
                    wait: wait_ticks(e, 3.0, tick_rate),
                    auto: true,
                }
            }
            "func_train" => {
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
                        break;
                    };
                    let Some(o) = pc.origin() else { break };
                    let at = o - bounds.min;
                    if points.contains(&at) || points.len() >= 64 {
                        break;
                    }
                    points.push(at);
                    target = pc.get("target").map(str::to_string);
                }
                if points.is_empty() {
                    points.push(DVec3::ZERO);
                }
                Motion::Path {
                    points,
                    speed: speed(100.0),
                    wait: wait_ticks(e, 0.0, tick_rate).unwrap_or(0),
                }
            }
            "func_rotating" => Motion::Spin {
                axis: spin_axis(e),
                speed: speed(100.0),
            },
            _ => Motion::Swing {
                axis: spin_axis(e),
                angle: key_f64(e, "distance").unwrap_or(90.0),
                speed: speed(100.0),
                wait: wait_ticks(e, 3.0, tick_rate),
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

    /// World box around the mover at a transform (for a turned mover, around the sphere it
    /// can sweep).
    pub fn world_bounds(&self, off: DVec3, q: DQuat) -> Aabb {
        let b = self.model.bounds();
        if b.is_empty() {
            return b;
        }
        if q == DQuat::IDENTITY {
            return Aabb {
                min: b.min + self.pivot + off,
                max: b.max + self.pivot + off,
            };
        }
        let r = b.min.abs().max(b.max.abs()).length();
        let c = self.pivot + off;
        Aabb {
            min: c - DVec3::splat(r),
            max: c + DVec3::splat(r),
        }
    }

    /// The state a mover starts in.
    pub fn initial(&self) -> MoverState {
        MoverState::default()
    }

    /// Offset and turn of the model for a state.
    pub fn transform(&self, s: &MoverState) -> (DVec3, DQuat) {
        let p = s.progress as f64 / STEP;
        match &self.motion {
            Motion::Slide { dir, .. } => (*dir * p, DQuat::IDENTITY),
            Motion::Path { points, .. } => (path_point(points, p), DQuat::IDENTITY),
            Motion::Spin { axis, .. } => {
                (DVec3::ZERO, DQuat::from_axis_angle(*axis, p.to_radians()))
            }
            Motion::Swing { axis, angle, .. } => (
                DVec3::ZERO,
                DQuat::from_axis_angle(*axis, (angle.signum() * p).to_radians()),
            ),
        }
    }

    /// The next state; `triggered` when a player is in the trigger box.
    pub fn advance(&self, s: &MoverState, triggered: bool, tick_rate: u32) -> MoverState {
        let dt = 1.0 / tick_rate as f64;
        let step = |speed: f64| ((speed * dt) * STEP).round().max(1.0) as i64;
        let mut n = *s;
        match &self.motion {
            Motion::Spin { speed, .. } => {
                n.progress = (s.progress + step(*speed)) % (360 * STEP as i64);
            }
            Motion::Path {
                points,
                speed,
                wait,
            } => {
                let total: f64 = loop_length(points);
                if total <= 0.0 {
                    return n;
                }
                if n.timer > 0 {
                    n.timer -= 1;
                    return n;
                }
                let before = corner_index(points, s.progress as f64 / STEP);
                n.progress = (s.progress + step(*speed)) % ((total * STEP) as i64).max(1);
                if corner_index(points, n.progress as f64 / STEP) != before {
                    n.timer = *wait;
                }
            }
            Motion::Slide {
                distance,
                speed,
                wait,
                auto,
                ..
            } => {
                let end = (distance * STEP) as i64;
                shuttle(&mut n, end, step(*speed), *wait, triggered || *auto);
            }
            Motion::Swing {
                angle, speed, wait, ..
            } => {
                shuttle(
                    &mut n,
                    (angle.abs() * STEP) as i64,
                    step(*speed),
                    *wait,
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
            Phase::Opening if matches!(self.motion, Motion::Slide { auto: true, .. }) => {
                Phase::Closing
            }
            p => p,
        };
        n
    }

    /// The hull as the mover's frame sees it when the mover is turned by `q` (`None`: not
    /// turned, use the hull as it is).
    pub fn local_hull(&self, hull: &Hull, q: DQuat) -> Option<Hull> {
        if q == DQuat::IDENTITY {
            return None;
        }
        let inv = q.inverse();
        let pts: Vec<DVec3> = hull.vertices().iter().map(|v| inv * *v).collect();
        Hull::convex(&pts).ok()
    }

    pub fn to_local(&self, p: DVec3, off: DVec3, q: DQuat) -> DVec3 {
        q.inverse() * (p - self.pivot - off)
    }

    /// Whether `hull` at `pos` overlaps the mover at `state`.
    pub fn overlaps(
        &self,
        hull: &Hull,
        pos: DVec3,
        state: &MoverState,
        s: &mut TraceScratch,
    ) -> bool {
        let (off, q) = self.transform(state);
        let lp = self.to_local(pos, off, q);
        match self.local_hull(hull, q) {
            Some(h) => self.model.position_solid(&h, lp, Contents::ALL, s),
            None => self.model.position_solid(hull, lp, Contents::ALL, s),
        }
    }
}

/// Back-and-forth phase machine over progress `0..=end`.
fn shuttle(n: &mut MoverState, end: i64, step: i64, wait: Option<u32>, triggered: bool) {
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
