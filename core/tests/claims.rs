//! Trusted-client validation: honest claims (the shared movement's own results) are never
//! flagged on any map; cheating claims are caught, and the authoritative position never
//! enters solid (by the independent oracle) nor passes a wall.

mod common;

use common::*;
use expel_core::movement::buttons;
use expel_core::validate::{
    claim_from_values, ClaimOutcome, ClaimValidator, Judge, NoRecords, ViolationKind,
};
use expel_core::PlayerId;
use expel_core::{CollisionModel, MapData, MoveCommand, MoveConfig, Movement, PlayerState, Sim};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

fn sim_of(map: &MapData, movement: Movement) -> Sim {
    Sim::from_map(Arc::new(CollisionModel::build(map)), map, movement).0
}

/// What the shared movement does for `commands` from `start`: the honest claims.
fn claims_of(sim: &Sim, start: PlayerState, commands: &[MoveCommand]) -> Vec<PlayerState> {
    let mut world = sim.new_state();
    sim.add_player(&mut world, PlayerId(0), start).unwrap();
    let mut s = expel_core::SimScratch::new();
    let mut cmds = BTreeMap::new();
    commands
        .iter()
        .map(|c| {
            cmds.insert(PlayerId(0), *c);
            sim.step(&mut world, &cmds, &mut s);
            *world.player(PlayerId(0)).unwrap()
        })
        .collect()
}

fn judge(sim: &Sim, start: PlayerState, claims: &[PlayerState]) -> Vec<ClaimOutcome> {
    let mut v = ClaimValidator::new(sim, start).unwrap();
    claims.iter().map(|c| v.check(sim, c)).collect()
}

/// Random play in stretches: walking, strafe-jumping, bunny hopping, crouching, standing,
/// spinning and pure noise.
fn random_commands(rng: &mut ChaCha8Rng, n: usize) -> Vec<MoveCommand> {
    let mut out = Vec::with_capacity(n);
    let mut yaw: f64 = rng.gen_range(0.0..360.0);
    while out.len() < n {
        let style = rng.gen_range(0..6);
        let (f, s) = (rng.gen_range(-1.0..=1.0), rng.gen_range(-1.0..=1.0));
        let turn = rng.gen_range(-6.0..6.0);
        for i in 0..rng.gen_range(5..200) {
            let (mut fwd, mut side, mut b) = (f, s, 0);
            match style {
                0 => {
                    fwd = rng.gen_range(-1.0..=1.0);
                    side = rng.gen_range(-1.0..=1.0);
                    yaw = rng.gen_range(0.0..360.0);
                    b = rng.gen_range(0..4);
                }
                1 | 2 => {
                    // Strafe-jumping: forward and side, turning with the strafe.
                    fwd = 1.0;
                    side = if (i / 30) % 2 == 0 { 1.0 } else { -1.0 };
                    yaw += 3.0 * side;
                    if style == 2 || rng.gen_bool(0.5) {
                        b = buttons::JUMP;
                    }
                }
                3 => {
                    if rng.gen_bool(0.8) {
                        b = buttons::CROUCH;
                    }
                }
                4 => {
                    fwd = 0.0;
                    side = 0.0;
                }
                _ => {
                    yaw += turn;
                    if rng.gen_bool(0.05) {
                        b = buttons::JUMP;
                    }
                }
            }
            let pitch = rng.gen_range(-89.0..89.0);
            out.push(
                MoveCommand::new(fwd, side, 0.0, yaw.rem_euclid(360.0), pitch).with_buttons(b),
            );
        }
    }
    out.truncate(n);
    out
}

fn map_files(dir: PathBuf) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(&dir) else {
        eprintln!("{} is absent: skipping its maps", dir.display());
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("map" | "bsp")))
        .collect();
    v.sort();
    v
}

#[test]
fn honest_play_is_never_flagged_on_any_map() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = map_files(root.join("../maps"));
    files.extend(map_files(root.join("../../shared/maps")));
    assert!(files.len() >= 3, "the repo's maps are missing");
    let mut total = 0;
    for path in files {
        let map = MapData::parse_any(&std::fs::read(&path).unwrap()).unwrap();
        let sim = sim_of(&map, Movement::default());
        let spawn = sim.spawns().first().copied().unwrap_or(DVec3::ZERO);
        // From the spawn point, and from anywhere in the map's box: in the air, on
        // ledges, inside solid.
        let b = map_bounds(&map);
        for seed in 0..6u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ total as u64);
            let (at, ticks) = if seed < 3 {
                (spawn, 4000)
            } else {
                let p = DVec3::new(
                    rng.gen_range(b.0.x..=b.1.x),
                    rng.gen_range(b.0.y..=b.1.y),
                    rng.gen_range(b.0.z..=b.1.z),
                );
                (p, 1500)
            };
            let cmds = random_commands(&mut rng, ticks);
            let start = PlayerState::at(at);
            let claims = claims_of(&sim, start, &cmds);
            for (i, out) in judge(&sim, start, &claims).iter().enumerate() {
                assert!(
                    out.accepted,
                    "{} from {at} seed {seed} tick {}: {:?}",
                    path.display(),
                    i + 1,
                    out.violation
                );
                assert_eq!(out.state.origin, claims[i].origin);
            }
            total += claims.len();
        }
    }
    eprintln!("{total} honest claims, all accepted");
}

/// The box of the map's brushes (by the oracle's own reading of them).
fn map_bounds(map: &MapData) -> (DVec3, DVec3) {
    map_brushes(map).iter().fold(
        (DVec3::splat(f64::MAX), DVec3::splat(f64::MIN)),
        |(lo, hi), (_, a, b)| (lo.min(*a), hi.max(*b)),
    )
}

/// A floor 2048 units square; with `wall`, a wall across it at x 0..16.
fn floor_map(wall: bool) -> MapData {
    let mut text = String::from("{\n\"classname\" \"worldspawn\"\n");
    text += &brush(
        DVec3::new(-1024.0, -1024.0, -16.0),
        DVec3::new(1024.0, 1024.0, 0.0),
    );
    if wall {
        text += &brush(
            DVec3::new(0.0, -1024.0, 0.0),
            DVec3::new(16.0, 1024.0, 256.0),
        );
    }
    text += "}\n";
    MapData::parse_map(&text).unwrap()
}

/// A player standing on the floor at x = -200 after a second at rest.
fn settled(sim: &Sim) -> PlayerState {
    let start = PlayerState::at(DVec3::new(-200.0, 0.0, 30.0));
    *claims_of(sim, start, &[MoveCommand::default(); 60])
        .last()
        .unwrap()
}

fn run_east() -> MoveCommand {
    MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0)
}

fn first_violation(outs: &[ClaimOutcome]) -> Option<(usize, ViolationKind)> {
    outs.iter()
        .enumerate()
        .find_map(|(i, o)| o.violation.as_ref().map(|v| (i, v.kind)))
}

#[test]
fn a_path_through_a_wall_is_flagged_at_the_wall_and_never_passes_it() {
    let walled = floor_map(true);
    let sim = sim_of(&walled, Movement::default());
    let open = sim_of(&floor_map(false), Movement::default());
    let start = settled(&sim);
    // The cheat moves as if the wall were not there.
    let claims = claims_of(&open, start, &[run_east(); 240]);
    let outs = judge(&sim, start, &claims);
    let half = Movement::default().stand().bounds().max.x;
    let reaches = claims
        .iter()
        .position(|c| c.origin().x + half > 0.0)
        .expect("the cheat reaches the wall");
    let (at, kind) = first_violation(&outs).expect("flagged");
    assert_eq!(kind, ViolationKind::Blocked);
    assert_eq!(at, reaches, "flagged at the tick the claim enters the wall");
    // The authoritative position stays on the near side and out of solid (oracle).
    let brushes = map_brushes(&walled);
    let hull = OHull::aabb(
        Movement::default().stand().bounds().min,
        Movement::default().stand().bounds().max,
    );
    for (i, o) in outs.iter().enumerate() {
        let p = o.state.origin();
        assert!(p.x + half <= 0.0, "tick {}: {p} is past the wall", i + 1);
        let sep = brushes
            .iter()
            .map(|(b, _, _)| separation(&hull, p, b))
            .fold(f64::INFINITY, f64::min);
        assert!(sep >= 0.0, "tick {}: {p} is {sep} into solid", i + 1);
    }
    // Stopped at the wall, not where it started.
    assert!(
        outs[at].state.origin().x + half > -1.0,
        "{:?}",
        outs[at].state
    );
}

#[test]
fn a_frozen_player_may_claim_only_the_place_it_holds() {
    let sim = sim_of(&floor_map(false), Movement::default());
    let mut start = settled(&sim);
    start.mode = expel_core::MoveMode::Frozen;
    // The shared movement holds it whatever it asks: the honest claims are all accepted.
    let honest = claims_of(&sim, start, &[run_east(); 30]);
    assert!(honest
        .iter()
        .all(|c| c.origin == start.origin && c.velocity == [0; 3]));
    let outs = judge(&sim, start, &honest);
    assert_eq!(first_violation(&outs), None);
    // A client that walks on while frozen is refused at its first step, and held.
    let mut walking = start;
    walking.mode = expel_core::MoveMode::Walk;
    let mut claims = claims_of(&sim, walking, &[run_east(); 30]);
    for c in &mut claims {
        c.mode = expel_core::MoveMode::Frozen;
    }
    let outs = judge(&sim, start, &claims);
    assert_eq!(first_violation(&outs), Some((0, ViolationKind::Teleport)));
    assert!(outs.iter().all(|o| o.state.origin == start.origin));
    // So is one that claims to crouch (its box would change).
    let mut crouched = start;
    crouched.flags |= expel_core::movement::flags::CROUCHED;
    let outs = judge(&sim, start, &[crouched]);
    assert_eq!(first_violation(&outs), Some((0, ViolationKind::Teleport)));
}

#[test]
fn a_teleport_is_flagged_that_tick() {
    let sim = sim_of(&floor_map(false), Movement::default());
    let start = settled(&sim);
    let mut claims = claims_of(&sim, start, &[run_east(); 60]);
    for c in &mut claims[30..] {
        *c = PlayerState::at(c.origin() + DVec3::new(0.0, 100.0, 0.0));
        c.flags = expel_core::movement::flags::ON_GROUND;
    }
    let outs = judge(&sim, start, &claims);
    assert_eq!(first_violation(&outs), Some((30, ViolationKind::Teleport)));
    assert_eq!(
        outs[30].state.origin, claims[29].origin,
        "left where it was"
    );
}

#[test]
fn doubled_speed_is_flagged_within_a_second() {
    let sim = sim_of(&floor_map(false), Movement::default());
    let fast = MoveConfig {
        max_speed: MoveConfig::default().max_speed * 2.0,
        ..MoveConfig::default()
    }
    .validate()
    .unwrap();
    let cheat = sim_of(&floor_map(false), fast);
    let start = settled(&sim);
    let claims = claims_of(&cheat, start, &[run_east(); 120]);
    let outs = judge(&sim, start, &claims);
    let (at, kind) = first_violation(&outs).expect("flagged");
    assert_eq!(kind, ViolationKind::Speed);
    assert!(at < 60, "flagged after {at} ticks");
    eprintln!("doubled speed: flagged at tick {}", at + 1);
    // The honest run beside it is not.
    let honest = claims_of(&sim, start, &[run_east(); 120]);
    assert_eq!(first_violation(&judge(&sim, start, &honest)), None);
}

#[test]
fn flying_is_flagged_within_half_a_second() {
    let sim = sim_of(&floor_map(false), Movement::default());
    let start = settled(&sim);
    // Rising steadily at 120 units/s; hovering 8 units up.
    for (rise, hover) in [(120.0, false), (0.0, true)] {
        let base = start.origin();
        let claims: Vec<PlayerState> = (1..=60)
            .map(|i| {
                let z = if hover { 8.0 } else { rise * i as f64 / 60.0 };
                let o = base + DVec3::new(0.0, 0.0, z);
                claim_from_values(o.to_array(), [0.0, 0.0, rise], false, false).unwrap()
            })
            .collect();
        let (at, kind) = first_violation(&judge(&sim, start, &claims)).expect("flagged");
        assert_eq!(
            kind,
            ViolationKind::Fly,
            "rising at {rise}, hovering {hover}"
        );
        assert!(at < 30, "flagged after {at} ticks");
        eprintln!(
            "flying (rise {rise}, hover {hover}): flagged at tick {}",
            at + 1
        );
    }
}

#[test]
fn bad_values_are_refused_before_quantization() {
    let ok = claim_from_values([1.0, 2.0, 3.0], [0.0; 3], true, false).unwrap();
    assert_eq!(ok.origin(), DVec3::new(1.0, 2.0, 3.0));
    for (o, v) in [
        ([f64::NAN, 0.0, 0.0], [0.0; 3]),
        ([0.0; 3], [f64::INFINITY, 0.0, 0.0]),
        ([1.0e12, 0.0, 0.0], [0.0; 3]),
        ([0.0; 3], [0.0, -1.0e300, 0.0]),
    ] {
        let e = claim_from_values(o, v, false, false).unwrap_err();
        assert!(
            e.contains("finite") || e.contains("range") || e.contains("beyond"),
            "{e}"
        );
    }
    // A claim far outside the map is a teleport, judged without a panic.
    let sim = sim_of(&floor_map(false), Movement::default());
    let start = settled(&sim);
    let far = claim_from_values([1.0e6, 0.0, 0.0], [0.0; 3], false, false).unwrap();
    let out = &judge(&sim, start, &[far])[0];
    assert_eq!(
        out.violation.as_ref().map(|v| v.kind),
        Some(ViolationKind::Teleport)
    );
}

/// A vertical prism brush over the triangle `tri` (counter-clockwise seen from above),
/// from `z0` to `z1`: a wall at any angle.
fn prism(tri: [(f64, f64); 3], z0: f64, z1: f64) -> String {
    let f = |(x, y): (f64, f64), z: f64| format!("( {x} {y} {z} )");
    let [a, b, c] = tri;
    let face = |p1: String, p2: String, p3: String| format!("{p1} {p2} {p3} t 0 0 0 1 1\n");
    let mut s = String::from("{\n");
    // Sides: p1 at the edge's start, p2 above it, p3 at its end (normal outward).
    for (p, q) in [(a, b), (b, c), (c, a)] {
        s += &face(f(p, z0), f(p, z1), f(q, z0));
    }
    s += &face(f(a, z0), f(b, z0), f(c, z0));
    s += &face(f(a, z1), f(c, z1), f(b, z1));
    s + "}\n"
}

/// A floor with walls facing every way: one across x at 0 (facing -x), one across y at
/// 600 (facing -y), a diagonal one facing (-1, -1), a corner of two walls, and a wall
/// under a ceiling slab 120 units up.
fn walls_map() -> MapData {
    let mut text = String::from("{\n\"classname\" \"worldspawn\"\n");
    let b = |x0, y0, z0, x1, y1, z1| brush(DVec3::new(x0, y0, z0), DVec3::new(x1, y1, z1));
    text += &b(-2048.0, -2048.0, -16.0, 2048.0, 2048.0, 0.0);
    text += &b(0.0, -300.0, 0.0, 16.0, 300.0, 512.0); // facing -x
    text += &b(-600.0, 600.0, 0.0, -200.0, 616.0, 512.0); // facing -y
    text += &prism(
        [(-900.0, -600.0), (-500.0, -1000.0), (-500.0, -600.0)],
        0.0,
        512.0,
    ); // facing (-1, -1)
    text += &b(1000.0, 1000.0, 0.0, 1016.0, 1400.0, 512.0); // a corner: facing -x...
    text += &b(600.0, 1384.0, 0.0, 1016.0, 1400.0, 512.0); // ...and -y
    text += &b(1600.0, -300.0, 0.0, 1616.0, 300.0, 512.0); // facing -x, under...
    text += &b(1300.0, -300.0, 120.0, 1616.0, 300.0, 136.0); // ...a ceiling
    text += "}\n";
    MapData::parse_map(&text).unwrap()
}

/// Honest play from `from` for `cmds`, then the state after the last.
fn after(sim: &Sim, from: DVec3, cmds: &[MoveCommand]) -> PlayerState {
    *claims_of(sim, PlayerState::at(from), cmds).last().unwrap()
}

#[test]
fn a_flyhack_along_a_wall_is_flagged_within_thirty_ticks_and_wall_hugging_never() {
    let map = walls_map();
    let sim = sim_of(&map, Movement::default());
    let crouch = |yaw: f64, jump: bool| {
        let mut c = MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0);
        c.buttons = buttons::CROUCH | if jump { buttons::JUMP } else { 0 };
        c
    };
    // (name, where the player starts, the heading into the wall)
    let places: [(&str, DVec3, f64); 5] = [
        ("east wall", DVec3::new(-100.0, 0.0, 30.0), 0.0),
        ("north wall", DVec3::new(-400.0, 500.0, 30.0), 90.0),
        ("diagonal wall", DVec3::new(-800.0, -900.0, 30.0), 45.0),
        ("corner", DVec3::new(900.0, 1300.0, 30.0), 45.0),
        ("under a ceiling", DVec3::new(1500.0, 0.0, 30.0), 0.0),
    ];
    for (name, from, yaw) in places {
        // Pressed against the wall, crouched: at rest on the floor, and in the air (a
        // crouched jump into the wall, 12 ticks in).
        let mut grounded: Vec<MoveCommand> = vec![crouch(yaw, false); 90];
        let ground = after(&sim, from, &grounded);
        grounded.push(crouch(yaw, true));
        grounded.extend(vec![crouch(yaw, false); 12]);
        let air = after(&sim, from, &grounded);
        assert!(!air.on_ground(), "{name}: not airborne");
        for (when, start) in [("on the ground", ground), ("in the air", air)] {
            // The cheat: rise 4 units a tick at 240 units/s, crouched, airborne.
            let claims: Vec<PlayerState> = (1..=50)
                .map(|i| {
                    let o = start.origin() + DVec3::new(0.0, 0.0, 4.0 * i as f64);
                    claim_from_values(o.to_array(), [0.0, 0.0, 240.0], false, true).unwrap()
                })
                .collect();
            let outs = judge(&sim, start, &claims);
            let (at, kind) = first_violation(&outs)
                .unwrap_or_else(|| panic!("{name}, {when}: the flyhack was never flagged"));
            println!("{name}, {when}: {kind:?} at tick {}", at + 1);
            assert!(at < 30, "{name}, {when}: flagged at tick {}", at + 1);
            let risen = outs[..at]
                .iter()
                .map(|o| o.state.origin().z)
                .fold(0.0, f64::max)
                - start.origin().z;
            assert!(risen <= 50.0, "{name}, {when}: rose {risen} units first");
        }
        // Honest play against the same wall: running and jumping into it, strafing
        // along it with jumps and crouch-jumps, and sliding down it from high up.
        let mut honest: Vec<MoveCommand> = Vec::new();
        for i in 0..600u32 {
            let mut c = MoveCommand::new(1.0, if i % 80 < 40 { 1.0 } else { -1.0 }, 0.0, yaw, 0.0);
            if i % 37 < 2 {
                c.buttons |= buttons::JUMP;
            }
            if (i / 100) % 2 == 1 {
                c.buttons |= buttons::CROUCH;
            }
            honest.push(c);
        }
        for start in [
            PlayerState::at(from),
            PlayerState::at(from + DVec3::new(0.0, 0.0, 200.0)),
        ] {
            let claims = claims_of(&sim, start, &honest);
            for (i, out) in judge(&sim, start, &claims).iter().enumerate() {
                assert!(
                    out.accepted,
                    "{name}: honest tick {} flagged: {:?}",
                    i + 1,
                    out.violation
                );
            }
        }
    }
}

/// After a correction the server holds the player where it put it, at rest, and judges
/// the client's next claim over every tick since (a round trip's worth). An honest fall
/// over such a span rounds its velocity and position every tick, and comes short of the
/// exact fall by more than one tick's rounding (13 ticks came 0.03 units short): it must
/// still pass, for every span a claim may be judged over, from anywhere in mid-air.
#[test]
fn an_honest_fall_over_a_long_span_is_never_flagged() {
    use expel_core::validate::{SeenWorld, TickClaim, MAX_SPAN};
    use expel_core::PlayerId;
    let sim = sim_of(&floor_map(false), Movement::default());
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut s = expel_core::SimScratch::new();
    let mut judged = 0;
    for _ in 0..40 {
        let at = DVec3::new(
            rng.gen_range(-500.0..500.0),
            rng.gen_range(-500.0..500.0),
            rng.gen_range(300.0..600.0),
        );
        let start = PlayerState::at(at);
        let fall = claims_of(&sim, start, &[MoveCommand::default(); MAX_SPAN as usize]);
        for (i, claim) in fall.iter().enumerate() {
            let mut world = sim.new_state();
            sim.add_player(&mut world, PlayerId(0), start).unwrap();
            let span = i as u32 + 1;
            let claims = BTreeMap::from([(
                PlayerId(0),
                TickClaim {
                    state: *claim,
                    span,
                    seen: 0,
                },
            )]);
            let report = &Judge::new(&sim).step_claims(
                &mut world,
                &claims,
                &SeenWorld::default(),
                &mut NoRecords,
                &mut s,
            )[0];
            let outcome = report.outcome.as_ref().unwrap();
            assert!(
                outcome.accepted,
                "a fall of {span} ticks from {at:?}: {:?}",
                outcome.violation
            );
            judged += 1;
        }
    }
    assert_eq!(judged, 40 * MAX_SPAN);
}

/// A player level with a step's top, its box touching the plane of the step's side and
/// over the step's end, runs off that end while drifting toward the side: its hull meets
/// the top's edge at once and slides along it, so it does not fall that tick though
/// nothing is under it where it ends. (Seen in a trusted crowd on the arena: flagged as
/// flying, since the validator's lowered probe met the step's side, not its top.)
#[test]
fn running_off_a_steps_corner_is_not_flying() {
    let mut text = String::from("{\n\"classname\" \"worldspawn\"\n");
    text += &brush(
        DVec3::new(-512.0, -512.0, -16.0),
        DVec3::new(512.0, 512.0, 0.0),
    );
    text += &brush(DVec3::new(0.0, 0.0, 0.0), DVec3::new(96.0, 32.0, 18.0));
    text += "}\n";
    let sim = sim_of(&MapData::parse_map(&text).unwrap(), Movement::default());
    // The box: x -26.6..3.4 (over the step's end by 3.4), y -30..0 (touching the side's
    // plane), its feet one expel zone above the top; running -x, drifting +y.
    let mut start = PlayerState::at(DVec3::new(-11.58984375, -15.0, 42.03125));
    start.set_velocity(DVec3::new(-319.5625, 27.9375, 0.0));
    start.flags = expel_core::movement::flags::ON_GROUND;
    let claim = claims_of(&sim, start, &[MoveCommand::default()])[0];
    assert!(!claim.on_ground(), "the case: it ends off the step");
    assert_eq!(
        claim.origin[2], start.origin[2],
        "the case: it did not fall"
    );
    let out = judge(&sim, start, &[claim]);
    assert!(out[0].accepted, "{:?}", out[0].violation);
}

/// A failing claim's retries look only at what the server keeps, and cost a fixed budget
/// at most, whatever the client says it acknowledged: on a server up for a million ticks
/// (simulated), a claim acknowledging nothing (tick 0) costs no more than one
/// acknowledging a recent snapshot, and both are flagged.
#[test]
fn a_failing_claims_retries_cost_no_more_for_an_ancient_acknowledgement() {
    use expel_core::validate::{SeenWorld, TickClaim, RETRY_BUDGET};
    use expel_core::PlayerId;
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n{{\n\"classname\" \"func_rotating\"\n\"origin\" \"0 0 32\"\n\"speed\" \"90\"\n{}}}\n",
        brush(
            DVec3::new(-512.0, -512.0, -16.0),
            DVec3::new(512.0, 512.0, 0.0)
        ),
        brush(DVec3::new(-96.0, -8.0, 8.0), DVec3::new(96.0, 8.0, 56.0))
    );
    let map = MapData::parse_map(&text).unwrap();
    let sim = sim_of(&map, Movement::default());
    let mut s = expel_core::SimScratch::new();
    let mut world = sim.new_state();
    // Beside the fan's sweep, and another player nearby.
    sim.add_player(
        &mut world,
        PlayerId(0),
        PlayerState::at(DVec3::new(0.0, 140.0, 24.0)),
    )
    .unwrap();
    sim.add_player(
        &mut world,
        PlayerId(1),
        PlayerState::at(DVec3::new(60.0, 140.0, 24.0)),
    )
    .unwrap();
    world.tick = 1_000_000;
    let mut seen = SeenWorld::default();
    for _ in 0..200 {
        Judge::new(&sim).step_claims(&mut world, &BTreeMap::new(), &seen, &mut NoRecords, &mut s);
        seen.record(&world);
    }
    let tick = world.tick;
    let prev = *world.player(PlayerId(0)).unwrap();
    // Half a map up in one tick.
    let cheat = PlayerState::at(prev.origin() + DVec3::new(0.0, 0.0, 300.0));
    let mut cost = Vec::new();
    for ack in [0, tick - 10, tick - 127] {
        let mut w = world.clone();
        let claims = BTreeMap::from([(
            PlayerId(0),
            TickClaim {
                state: cheat,
                span: 1,
                seen: ack,
            },
        )]);
        let report = Judge::new(&sim)
            .step_claims(&mut w, &claims, &seen, &mut NoRecords, &mut s)
            .into_iter()
            .find(|r| r.id == PlayerId(0))
            .unwrap();
        let outcome = report.outcome.unwrap();
        assert!(!outcome.accepted, "ack {ack}");
        assert!(outcome.violation.is_some(), "ack {ack}");
        assert!(report.retry_cost <= RETRY_BUDGET, "ack {ack}");
        cost.push(report.retry_cost);
    }
    // The recent acknowledgement's retries did look (the fan moves, the other stands).
    assert!(cost[1] > 10, "{cost:?}");
    assert!(cost[0] <= cost[1], "{cost:?}");
    assert!(cost[2] <= RETRY_BUDGET, "{cost:?}");
}
