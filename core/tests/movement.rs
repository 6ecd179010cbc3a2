//! Player movement: one named test per hard case, on the authored arena map.
//!
//! Layout (see maps/generate.py): floor top at z = 0; stair flights of 8/16/18/19-unit
//! steps at x = -960 + 160 i (96 wide) rising along +y from y = 320 in six 32-deep steps to
//! a landing at y 512..640; ramps of 20/30/40/45/50° at x = -960 + 160 i rising along +y
//! from y = -960 over 192 units to a plateau at y -768..-704; a V crease of two ~50° slopes
//! along y at x = 328 (y -960..-704); pillars at (0,0), (256,0), (0,256); thin walls at
//! x = 600/696/792 (4, 2, 1 thick, y 400..700); a crouch tunnel x 600..900, y -600..-400
//! with its ceiling at z = 48; a low ceiling x 600..900, y -300..-100 at z = 96.

use expel_core::movement::buttons;
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, Contents, MapData, MoveCommand, Movement, PlayerState, Sim, SimScratch,
    TraceScratch, WorldState,
};
use glam::DVec3;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

fn arena() -> Arc<CollisionModel> {
    static M: OnceLock<Arc<CollisionModel>> = OnceLock::new();
    M.get_or_init(|| {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map"))
                .unwrap();
        Arc::new(CollisionModel::build(&MapData::parse_map(&text).unwrap()))
    })
    .clone()
}

/// The arena without its movers: movement alone.
fn sim() -> &'static Sim {
    static S: OnceLock<Sim> = OnceLock::new();
    S.get_or_init(|| Sim::new(arena(), Movement::default(), Vec::new(), Vec::new()))
}

/// One player (id 1) in the arena.
struct One {
    world: WorldState,
    scratch: SimScratch,
}

impl One {
    fn at(x: f64, y: f64, z: f64) -> One {
        let mut world = sim().new_state();
        sim()
            .add_player(
                &mut world,
                PlayerId(1),
                PlayerState::at(DVec3::new(x, y, z)),
            )
            .unwrap();
        One {
            world,
            scratch: SimScratch::new(),
        }
    }

    fn p(&self) -> PlayerState {
        *self.world.player(PlayerId(1)).unwrap()
    }

    /// Runs `n` ticks of `cmd`, returning the state after each.
    fn run(&mut self, n: usize, cmd: MoveCommand) -> Vec<PlayerState> {
        let mut cmds = BTreeMap::new();
        cmds.insert(PlayerId(1), cmd);
        (0..n)
            .map(|_| {
                sim().step(&mut self.world, &cmds, &mut self.scratch);
                self.p()
            })
            .collect()
    }

    /// Lets the player settle onto the ground.
    fn settle(&mut self) {
        self.run(30, MoveCommand::default());
        assert!(self.p().on_ground(), "did not land: {:?}", self.p());
    }
}

fn walk(yaw: f64) -> MoveCommand {
    MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
}

fn free(p: &PlayerState) -> bool {
    let hull = sim().movement().hull(p);
    let mut s = TraceScratch::new();
    !arena().position_solid(hull, p.origin(), Contents::PLAYER, &mut s)
}

/// Walks +y at stair flight `i` and returns the highest z reached.
fn climb(i: usize) -> f64 {
    let x = -912.0 + 160.0 * i as f64;
    let mut sim = One::at(x, 270.0, 30.0);
    sim.settle();
    let states = sim.run(90, walk(90.0));
    assert!(states.iter().all(free));
    states.iter().map(|s| s.origin().z).fold(f64::MIN, f64::max)
}

#[test]
fn climbs_8_16_and_18_unit_steps_and_refuses_19() {
    for (i, h) in [(0, 8.0), (1, 16.0), (2, 18.0)] {
        let top = climb(i);
        assert!(
            (top - (6.0 * h + 24.0)).abs() < 0.1,
            "{h}-unit stairs: reached z {top}, landing at {}",
            6.0 * h + 24.0
        );
    }
    let top = climb(3);
    assert!(top < 24.0 + 19.0, "climbed a 19-unit step: z {top}");
}

#[test]
fn walks_down_stairs_without_leaving_the_ground() {
    for (i, h) in [(0, 8.0), (1, 16.0), (2, 18.0)] {
        let x = -912.0 + 160.0 * i as f64;
        let mut sim = One::at(x, 600.0, 6.0 * h + 30.0);
        sim.settle();
        let states = sim.run(60, walk(270.0));
        let bottom = states.iter().position(|s| s.origin().y < 300.0);
        let bottom = bottom.expect("reached the foot of the stairs");
        for s in &states[..bottom] {
            assert!(
                s.on_ground(),
                "{h}-unit stairs: left the ground at {:?}",
                s.origin()
            );
        }
    }
}

#[test]
fn walks_down_a_30_degree_ramp_without_leaving_the_ground() {
    let x = -912.0 + 160.0;
    let rise = (192.0f64 * libm::tan(30f64.to_radians())).round();
    let mut sim = One::at(x, -736.0, rise + 30.0);
    sim.settle();
    let states = sim.run(90, walk(270.0));
    let bottom = states
        .iter()
        .position(|s| s.origin().y < -975.0)
        .expect("reached the bottom");
    for s in &states[..bottom] {
        assert!(s.on_ground(), "left the ramp at {:?}", s.origin());
    }
}

#[test]
fn walks_up_a_40_degree_slope_and_slides_down_a_50_degree_one() {
    let rise40 = (192.0f64 * libm::tan(40f64.to_radians())).round();
    let mut sim = One::at(-912.0 + 320.0, -995.0, 30.0);
    sim.settle();
    let states = sim.run(75, walk(90.0));
    // Walks all the way up (on the ground near the crest) and over the top.
    assert!(
        states
            .iter()
            .any(|s| s.on_ground() && s.origin().z > rise40 + 24.0 - 8.0),
        "40°: did not walk up: {:?}",
        states.last()
    );
    assert!(states.last().unwrap().origin().y > -768.0);
    // 50°: can't walk up...
    let rise50 = (192.0f64 * libm::tan(50f64.to_radians())).round();
    let mut sim = One::at(-912.0 + 640.0, -995.0, 30.0);
    sim.settle();
    let states = sim.run(120, walk(90.0));
    let top = states.iter().map(|s| s.origin().z).fold(f64::MIN, f64::max);
    assert!(top < rise50 * 0.5, "50°: walked up to {top}");
    // ...and dropped onto it, slides down to the floor.
    let mut sim = One::at(-912.0 + 640.0, -860.0, rise50 + 40.0);
    let states = sim.run(120, MoveCommand::default());
    let last = states.last().unwrap();
    assert!(
        last.origin().y < -960.0 + 15.0,
        "did not slide off: {:?}",
        last.origin()
    );
    assert!(states.iter().all(free));
}

#[test]
fn does_not_stick_in_a_v_shaped_crease() {
    let mut sim = One::at(328.0, -940.0, 140.0);
    let states = sim.run(150, walk(90.0));
    let y = states.last().unwrap().origin().y;
    assert!(y > -780.0, "stuck in the crease at y {y}");
    assert!(states.iter().all(free));
}

#[test]
fn slides_around_corners() {
    // Walking diagonally into the pillar at (0, 0) from its -x side: slides past it.
    let mut sim = One::at(-100.0, -10.0, 30.0);
    sim.settle();
    let states = sim.run(90, walk(10.0));
    let end = states.last().unwrap().origin();
    assert!(end.x > 60.0, "blocked by the pillar corner at {end:?}");
    assert!(states.iter().all(free));
}

#[test]
fn a_jump_into_a_ceiling_loses_its_upward_speed() {
    let mut sim = One::at(750.0, -200.0, 30.0);
    sim.settle();
    let jump = MoveCommand::default().with_buttons(buttons::JUMP);
    let states = sim.run(40, jump);
    let top = states.iter().map(|s| s.origin().z).fold(f64::MIN, f64::max);
    assert!(
        top <= 96.0 - 32.0 + 0.01,
        "head went through the ceiling: {top}"
    );
    // Right after the bump the vertical speed is gone (not reflected, not kept).
    let bump = states
        .iter()
        .position(|s| s.origin().z >= 96.0 - 32.0 - 0.1)
        .unwrap();
    assert!(states[bump].velocity().z <= 0.0, "{:?}", states[bump]);
    // An open-air jump peaks much higher: the ceiling really cut it.
    let mut open = One::at(-300.0, -300.0, 30.0);
    open.settle();
    let peak = open
        .run(40, jump)
        .iter()
        .map(|s| s.origin().z)
        .fold(f64::MIN, f64::max);
    assert!(peak > 24.0 + 40.0, "open jump peak {peak}");
}

#[test]
fn crouches_under_a_low_ceiling_and_stays_crouched_until_there_is_room() {
    let mut sim = One::at(550.0, -500.0, 30.0);
    sim.settle();
    // Standing, the tunnel (48 clear) refuses the 56-unit hull.
    let stand = sim.run(60, walk(0.0));
    assert!(
        stand.last().unwrap().origin().x < 600.0 - 15.0 + 0.1,
        "{:?}",
        stand.last()
    );
    // Crouched, it goes in.
    let crouch = walk(0.0).with_buttons(buttons::CROUCH);
    let inside = sim.run(120, crouch);
    let p = *inside.last().unwrap();
    assert!(p.crouched() && p.origin().x > 650.0, "{p:?}");
    // Releasing crouch inside: stays crouched, keeps moving.
    let walking = sim.run(60, walk(0.0));
    assert!(walking
        .iter()
        .filter(|s| s.origin().x < 900.0 + 15.0)
        .all(|s| s.crouched()));
    assert!(walking.iter().all(free));
    assert!(walking.last().unwrap().origin().x > p.origin().x);
    // Out in the open, stands up.
    let out = sim.run(240, walk(0.0));
    let last = out.last().unwrap();
    assert!(last.origin().x > 915.0 && !last.crouched(), "{last:?}");
}

#[test]
fn strafe_jumping_gains_speed() {
    let mut sim = One::at(-600.0, -300.0, 30.0);
    sim.settle();
    // Run up to full speed along +y.
    sim.run(40, walk(90.0));
    let start_speed = sim.p().velocity().truncate().length();
    // Hop repeatedly, holding forward+right and turning the view to the right each tick.
    let mut yaw = 90.0;
    let mut best: f64 = 0.0;
    for tick in 0..240 {
        yaw -= 0.8;
        let jump = if tick % 2 == 0 { buttons::JUMP } else { 0 };
        let cmd = MoveCommand::new(1.0, 1.0, 0.0, yaw, 0.0).with_buttons(jump);
        let s = sim.run(1, cmd)[0];
        best = best.max(s.velocity().truncate().length());
    }
    assert!(
        best > start_speed * 1.2,
        "strafe-jumping peaked at {best}, ground speed {start_speed}"
    );
}

#[test]
fn walking_into_walls_at_any_angle_never_passes_or_jitters() {
    for wall_x in [600.0, 696.0, 792.0] {
        for k in 0..13 {
            let yaw = -75.0 + k as f64 * 12.5; // towards +x, from grazing to head-on and back
            let mut sim = One::at(wall_x - 40.0, 550.0, 30.0);
            sim.settle();
            let states = sim.run(30, walk(yaw));
            for s in &states {
                assert!(
                    s.origin().x + 15.0 <= wall_x,
                    "passed the wall at x {wall_x}: {:?}",
                    s.origin()
                );
            }
            // Once against the wall, x stays put (no back-and-forth).
            let xs: Vec<f64> = states.iter().map(|s| s.origin().x).collect();
            let first = xs
                .iter()
                .position(|x| wall_x - 15.0 - x < 0.1)
                .unwrap_or_else(|| panic!("never reached the wall at yaw {yaw}: {xs:?}"));
            let rest = &xs[first..];
            assert!(
                rest.windows(2).all(|w| w[0] <= w[1]) && rest.len() > 5,
                "bounced off the wall at yaw {yaw}: {rest:?}"
            );
            let tail = &rest[rest.len() - 5..];
            assert!(
                tail.windows(2).all(|w| w[0] == w[1]),
                "jittered at yaw {yaw}: {rest:?}"
            );
        }
    }
}

#[test]
fn a_player_started_in_solid_moves_to_the_nearest_free_spot() {
    // Sunk 4 units into the floor: rises out, and not through to the other side.
    let mut sim = One::at(-300.0, -300.0, 20.0);
    let s = sim.run(1, MoveCommand::default())[0];
    assert!(free(&s), "still in solid: {s:?}");
    assert!(
        s.origin().z >= 24.0 && s.origin().z < 28.1,
        "{:?}",
        s.origin()
    );
    // Overlapping a pillar's side by 3: pushed out sideways, not through.
    let mut sim = One::at(-28.0, 0.0, 24.03125);
    let s = sim.run(1, MoveCommand::default())[0];
    assert!(free(&s) && s.origin().x <= -31.0, "{:?}", s.origin());
}

#[test]
fn players_block_each_other() {
    let mut world = sim().new_state();
    let mut s = SimScratch::new();
    let at = |x| PlayerState::at(DVec3::new(x, 0.0, 24.03125));
    sim()
        .add_player(&mut world, PlayerId(1), at(-400.0))
        .unwrap();
    sim()
        .add_player(&mut world, PlayerId(2), at(-300.0))
        .unwrap();
    let mut cmds = BTreeMap::new();
    cmds.insert(PlayerId(1), walk(0.0));
    cmds.insert(PlayerId(2), walk(180.0));
    for _ in 0..120 {
        sim().step(&mut world, &cmds, &mut s);
        let (a, b) = (
            world.player(PlayerId(1)).unwrap().origin(),
            world.player(PlayerId(2)).unwrap().origin(),
        );
        assert!(b.x - a.x >= 30.0, "players overlap: {a:?} {b:?}");
    }
}

#[test]
fn replaying_the_same_inputs_gives_the_same_hash() {
    let run = || {
        let mut world = sim().new_state();
        let mut s = SimScratch::new();
        for i in 0..8 {
            let at = PlayerState::at(DVec3::new(-500.0 + 40.0 * i as f64, -100.0, 40.0));
            sim().add_player(&mut world, PlayerId(i), at).unwrap();
        }
        let mut hashes = Vec::new();
        for t in 0..600u32 {
            let cmds: BTreeMap<PlayerId, MoveCommand> = (0..8)
                .map(|i| {
                    let k = t.wrapping_mul(2654435761).wrapping_add(i * 40503);
                    let b = if k % 7 == 0 { buttons::JUMP } else { 0 };
                    (
                        PlayerId(i),
                        MoveCommand::new(
                            1.0,
                            ((k >> 8) % 3) as f64 - 1.0,
                            0.0,
                            (k % 360) as f64,
                            0.0,
                        )
                        .with_buttons(b),
                    )
                })
                .collect();
            sim().step(&mut world, &cmds, &mut s);
            hashes.push(world.hash());
        }
        hashes
    };
    let a = run();
    assert_eq!(a, run());
    assert_eq!(a.len(), 600);
    assert!(a.windows(2).all(|w| w[0] != w[1]));
}

/// A player walking a long gentle ramp never sinks into it: the same rounding of the
/// position every tick (here a slope of 1/8 at full speed, which rounds the climb down
/// and the run on) must not add up tick by tick until the box sits on the ramp itself and
/// sticks. It walks up at an even pace, always on the ground and clear of the ramp.
#[test]
fn walking_a_gentle_ramp_never_sinks_into_it_tick_by_tick() {
    use expel_core::map::{Brush, Face, MapEntity};
    use expel_core::Plane;
    use expel_core::PlayerId;
    let face = |n: DVec3, d: f64| Face {
        plane: Plane {
            normal: n.normalize(),
            dist: d / n.length(),
        },
        texture: "ramp".into(),
    };
    // From z = 0 at y = 0 up to z = 256 at y = 2048 (8 × 256 units), 256 wide.
    let ramp = Brush {
        faces: vec![
            face(DVec3::new(0.0, -1.0, 8.0), 0.0),
            face(-DVec3::Z, 64.0),
            face(DVec3::X, 128.0),
            face(-DVec3::X, 128.0),
            face(DVec3::Y, 2048.0),
            face(-DVec3::Y, 256.0),
        ],
        line: 1,
    };
    let map = MapData {
        entities: vec![MapEntity {
            properties: vec![("classname".into(), "worldspawn".into())],
            brushes: vec![ramp],
            ..Default::default()
        }],
        ..Default::default()
    };
    let model = Arc::new(CollisionModel::build(&map));
    let sim = Sim::new(model.clone(), Movement::default(), Vec::new(), Vec::new());
    let mut world = sim.new_state();
    sim.add_player(
        &mut world,
        PlayerId(1),
        PlayerState::at(DVec3::new(0.0, 16.0, 40.0)),
    )
    .unwrap();
    let (mut s, mut ts) = (SimScratch::new(), TraceScratch::new());
    let mut cmds = BTreeMap::new();
    cmds.insert(PlayerId(1), walk(90.0));
    let mut last = world.player(PlayerId(1)).unwrap().origin();
    for tick in 0..500 {
        sim.step(&mut world, &cmds, &mut s);
        let p = *world.player(PlayerId(1)).unwrap();
        let o = p.origin();
        if o.y > 1900.0 {
            return;
        }
        // The box's lowest edge above the ramp's plane at its back corner.
        let hull = sim.movement().hull(&p);
        let gap = (o.z + hull.bounds().min.z) - (o.y + hull.bounds().min.y) / 8.0;
        assert!(
            !model.position_solid(hull, o, Contents::PLAYER, &mut ts) && gap > 0.0,
            "tick {tick}: sank into the ramp at {o:?} (gap {gap})"
        );
        if tick > 30 {
            assert!(
                p.on_ground() && o.y - last.y > 4.0,
                "tick {tick}: stuck at {o:?}: {p:?}"
            );
        }
        last = o;
    }
    panic!("did not reach the top: {last:?}");
}

/// The ground flag a state carries is the ground test at the position it holds: rounding
/// the end of a tick can carry a box off a step's edge (or onto one), and the next tick,
/// the validator and everyone who draws the player must find the ground the flag says.
/// Walks up and down every stair flight and ramp and off the landings' edges, at angles
/// that cross the edges anywhere, tick by tick.
#[test]
fn the_ground_flag_is_the_ground_under_the_rounded_position_tick_by_tick() {
    let cfg = sim().movement().config().clone();
    let mut ts = TraceScratch::new();
    let mut ground_at = |p: &PlayerState| {
        let hull = sim().movement().hull(p);
        let o = p.origin();
        let down = o - DVec3::Z * cfg.ground_distance;
        let t = arena().sweep(hull, o, down, Contents::PLAYER, &mut ts);
        let v = p.velocity();
        t.normal()
            .is_some_and(|n| n.z >= cfg.walkable_normal_z && !(v.z > 0.0 && v.dot(n) > 10.0))
    };
    let (mut ticks, mut on_ground) = (0, 0);
    for i in 0..5 {
        // Stair flights (i < 4) from below and from the landing; ramps from the foot and
        // from the plateau.
        let x = -912.0 + 160.0 * i as f64;
        for (y, z, yaw) in [
            (270.0, 30.0, 90.0),
            (600.0, 6.0 * 18.0 + 30.0, 270.0),
            (-1000.0, 30.0, 90.0),
            (-736.0, 200.0, 270.0),
        ] {
            for turn in [-23.0, -7.0, 0.0, 3.0, 11.0, 37.0] {
                let mut one = One::at(x, y, z);
                one.run(30, MoveCommand::default());
                for k in 0..150 {
                    let speed = [1.0, 0.6, 0.3][k / 50];
                    let cmd = MoveCommand::new(speed, 0.0, 0.0, yaw + turn, 0.0);
                    let p = one.run(1, cmd)[0];
                    ticks += 1;
                    on_ground += usize::from(p.on_ground());
                    assert_eq!(
                        p.on_ground(),
                        ground_at(&p),
                        "flight {i} from ({x}, {y}) at {} degrees, tick {k}: {p:?}",
                        yaw + turn
                    );
                }
            }
        }
    }
    assert!(
        on_ground * 4 > ticks * 3,
        "{on_ground} of {ticks} ticks on the ground"
    );
}
