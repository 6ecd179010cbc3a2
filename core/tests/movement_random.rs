//! Random-input player ticks per map (the authored maps, and the real maps in
//! `../shared/maps` when present): 100,000 each in the suite, `EXPEL_RANDOM_TICKS` more
//! (`tests/long.sh` runs 500,000). Every trace the movement makes is replayed against the
//! independent oracle: no sub-move passes through solid and no tick ends in solid.

mod common;

use common::*;
use expel_core::collision::{hull::Hull, Sweep};
use expel_core::movement::{buttons, Collider, MapCollider};
use expel_core::{
    pmove, CollisionModel, MapData, MoveCommand, Movement, PlayerState, TraceScratch,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::PathBuf;

/// Ticks per map unless `EXPEL_RANDOM_TICKS` says.
const TICKS_PER_MAP: usize = 100_000;
const PLAYERS: usize = 50;
/// Overlap the oracle tolerates (rounding).
const TOL: f64 = 1e-6;

/// The oracle's brushes and patch sheets with a uniform grid over their bounds.
struct Oracle {
    brushes: Vec<(OBrush, DVec3, DVec3)>,
    grid: HashMap<(i32, i32, i32), Vec<usize>>,
}

const CELL: f64 = 128.0;

impl Oracle {
    fn new(map: &MapData, model: &CollisionModel) -> Oracle {
        let mut brushes = map_brushes(map);
        brushes.extend(model_sheets(model));
        let mut grid: HashMap<(i32, i32, i32), Vec<usize>> = HashMap::new();
        for (i, (_, lo, hi)) in brushes.iter().enumerate() {
            let (a, b) = ((*lo / CELL).floor(), (*hi / CELL).floor());
            for x in a.x as i32..=b.x as i32 {
                for y in a.y as i32..=b.y as i32 {
                    for z in a.z as i32..=b.z as i32 {
                        grid.entry((x, y, z)).or_default().push(i);
                    }
                }
            }
        }
        Oracle { brushes, grid }
    }

    /// Brushes whose bounds meet the box [lo, hi].
    fn near(&self, lo: DVec3, hi: DVec3) -> Vec<usize> {
        let (a, b) = ((lo / CELL).floor(), (hi / CELL).floor());
        let mut out = Vec::new();
        if (b - a).max_element() > 64.0 {
            return (0..self.brushes.len()).collect();
        }
        for x in a.x as i32..=b.x as i32 {
            for y in a.y as i32..=b.y as i32 {
                for z in a.z as i32..=b.z as i32 {
                    if let Some(v) = self.grid.get(&(x, y, z)) {
                        out.extend(v.iter().copied());
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out.retain(|&i| {
            let (_, blo, bhi) = &self.brushes[i];
            lo.cmple(*bhi).all() && hi.cmpge(*blo).all()
        });
        out
    }

    fn separation(&self, h: &OHull, hb: (DVec3, DVec3), pos: DVec3) -> f64 {
        self.near(pos + hb.0 - DVec3::ONE, pos + hb.1 + DVec3::ONE)
            .into_iter()
            .map(|i| separation(h, pos, &self.brushes[i].0))
            .fold(f64::INFINITY, f64::min)
    }

    /// Whether moving from `a` to `b` passes through solid.
    fn crosses(&self, h: &OHull, hb: (DVec3, DVec3), a: DVec3, b: DVec3) -> bool {
        self.near(a.min(b) + hb.0, a.max(b) + hb.1)
            .into_iter()
            .any(|i| overlap_interval(h, a, b - a, &self.brushes[i].0, TOL).is_some())
    }
}

/// Records every trace movement makes.
struct Recorder<'a> {
    inner: MapCollider<'a>,
    traces: Vec<(Hull, DVec3, DVec3)>,
}

impl Collider for Recorder<'_> {
    fn sweep(&mut self, hull: &Hull, start: DVec3, end: DVec3) -> Sweep {
        let t = self.inner.sweep(hull, start, end);
        self.traces.push((hull.clone(), start, t.end));
        t
    }

    fn solid(&mut self, hull: &Hull, pos: DVec3) -> bool {
        self.inner.solid(hull, pos)
    }
}

fn random_command(rng: &mut ChaCha8Rng, prev: &MoveCommand) -> MoveCommand {
    if rng.gen_bool(0.95) {
        // Keep going, turning a little, toggling jump now and then.
        let mut c = *prev;
        c.yaw = c
            .yaw
            .wrapping_add(rng.gen_range(0..1500) as u16)
            .wrapping_sub(750);
        if rng.gen_bool(0.1) {
            c.buttons ^= buttons::JUMP;
        }
        return c;
    }
    let axis = |r: &mut ChaCha8Rng| [-1.0, 0.0, 1.0, 1.0][r.gen_range(0..4)];
    let mut b = 0;
    if rng.gen_bool(0.3) {
        b |= buttons::JUMP;
    }
    if rng.gen_bool(0.15) {
        b |= buttons::CROUCH;
    }
    MoveCommand::new(axis(rng), axis(rng), 0.0, rng.gen_range(0.0..360.0), 0.0).with_buttons(b)
}

fn run_map(path: &std::path::Path) {
    let map = MapData::parse_any(&std::fs::read(path).unwrap()).unwrap();
    let model = CollisionModel::build(&map);
    let oracle = Oracle::new(&map, &model);
    let mv = Movement::default();
    let (stand, crouch) = (mv.stand().clone(), mv.crouch().clone());
    let ohull = |h: &Hull| {
        let b = h.bounds();
        (OHull::aabb(b.min, b.max), (b.min, b.max))
    };
    let (o_stand, o_crouch) = (ohull(&stand), ohull(&crouch));
    let spawns = map.spawn_points();
    let mut rng = ChaCha8Rng::seed_from_u64(path.to_string_lossy().len() as u64);
    let mut scratch = TraceScratch::new();
    let mut players: Vec<(PlayerState, MoveCommand)> = (0..PLAYERS)
        .map(|i| {
            (
                PlayerState::at(spawns[i % spawns.len()] + DVec3::Z * 9.0),
                MoveCommand::default(),
            )
        })
        .collect();
    let per_map: usize = std::env::var("EXPEL_RANDOM_TICKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(TICKS_PER_MAP);
    let mut ticks = 0;
    let mut sub_moves = 0usize;
    while ticks < per_map {
        for (state, cmd) in players.iter_mut() {
            *cmd = random_command(&mut rng, cmd);
            let mut rec = Recorder {
                inner: MapCollider {
                    model: &model,
                    scratch: &mut scratch,
                },
                traces: Vec::new(),
            };
            let (next, _) = pmove(state, cmd, &mv, &mut rec);
            for (h, a, b) in &rec.traces {
                let (oh, hb) = if h.bounds().max.z < stand.bounds().max.z {
                    &o_crouch
                } else {
                    &o_stand
                };
                if oracle.separation(oh, *hb, *a) < -TOL {
                    continue; // a probe from an (unstuck) start: not a move
                }
                assert!(
                    !oracle.crosses(oh, *hb, *a, *b),
                    "{}: sub-move {a:?} -> {b:?} passes through solid (tick {ticks}, {state:?}, {cmd:?})",
                    path.display()
                );
                sub_moves += 1;
            }
            let (oh, hb) = if next.crouched() { &o_crouch } else { &o_stand };
            let sep = oracle.separation(oh, *hb, next.origin());
            assert!(
                sep >= -TOL,
                "{}: tick {ticks} ends {} inside solid: {state:?} -> {next:?} with {cmd:?}",
                path.display(),
                -sep
            );
            *state = next;
            ticks += 1;
        }
    }
    assert!(
        sub_moves > per_map,
        "{}: only {sub_moves} sub-moves",
        path.display()
    );
}

fn maps() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut v = vec![
        root.join("maps/arena.map"),
        root.join("maps/terrain.map"),
        root.join("maps/stress.map"),
        root.join("maps/curves.map"),
    ];
    let real = root.join("../shared/maps");
    if let Ok(rd) = std::fs::read_dir(&real) {
        let mut r: Vec<PathBuf> = rd
            .map(|e| e.unwrap().path())
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("map" | "bsp")))
            .collect();
        r.sort();
        v.extend(r);
    } else {
        eprintln!("../shared/maps is absent: only the authored maps run");
    }
    v
}

#[test]
fn random_ticks_on_every_map_never_end_in_or_pass_through_solid() {
    let maps = maps();
    // Two workers: the machines have two cores.
    let (a, b) = maps.split_at(maps.len() / 2);
    std::thread::scope(|s| {
        let h = s.spawn(|| a.iter().for_each(|p| run_map(p)));
        b.iter().for_each(|p| run_map(p));
        h.join().unwrap();
    });
}
