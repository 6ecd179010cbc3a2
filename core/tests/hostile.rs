//! Hostile input, each class at the place it enters: map files, compiled `.bsp`s, cached
//! models, movement settings, mover keys, rotation requests and world states. Each gets a
//! clear error or a correct answer; none panics, overflows or stalls.

mod common;

use expel_core::collision::rotate::Rotation;
use expel_core::mover::{Mover, MoverState, Phase};
use expel_core::PlayerId;
use expel_core::{
    CollisionModel, Contents, Hull, MapData, MoveCommand, MoveConfig, PlayerState, Sim, SimError,
    SimScratch, TraceScratch,
};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A Quake-format axis-aligned brush with texture `tex`.
fn brush(min: DVec3, max: DVec3, tex: &str) -> String {
    let (a, b) = (min.to_array(), max.to_array());
    let p = |v: [f64; 3]| format!("( {} {} {} )", v[0], v[1], v[2]);
    let faces = [
        [a, [a[0], a[1] + 1.0, a[2]], [a[0], a[1], a[2] + 1.0]],
        [b, [b[0], b[1], b[2] + 1.0], [b[0], b[1] + 1.0, b[2]]],
        [a, [a[0], a[1], a[2] + 1.0], [a[0] + 1.0, a[1], a[2]]],
        [b, [b[0] + 1.0, b[1], b[2]], [b[0], b[1], b[2] + 1.0]],
        [a, [a[0] + 1.0, a[1], a[2]], [a[0], a[1] + 1.0, a[2]]],
        [b, [b[0], b[1] + 1.0, b[2]], [b[0] + 1.0, b[1], b[2]]],
    ];
    let mut s = String::from("{\n");
    for f in faces {
        s += &format!("{} {} {} {tex} 0 0 0 1 1\n", p(f[0]), p(f[1]), p(f[2]));
    }
    s + "}\n"
}

fn floor_map(extra: &str) -> String {
    format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n\
         {{\n\"classname\" \"info_player_start\"\n\"origin\" \"0 0 40\"\n}}\n{extra}",
        brush(
            DVec3::new(-512.0, -512.0, -16.0),
            DVec3::new(512.0, 512.0, 0.0),
            "base/floor"
        )
    )
}

fn err_of(text: &str) -> String {
    MapData::parse_map(text).unwrap_err().to_string()
}

#[test]
fn a_stray_brush_out_of_range_is_dropped_and_an_oversized_one_refused() {
    // A brush with a point beyond ±2^20 (the field's was 1.28e8 units out): the map loads
    // without it, and the warning names its line.
    let stray = brush(DVec3::splat(-64.0), DVec3::splat(64.0), "t");
    for far in ["1e7", "1.28e8", "-2000000", "1e300"] {
        let extra = stray.replacen("( -64 ", &format!("( {far} "), 1);
        let text = floor_map("").replacen(
            "}\n{\n\"classname\" \"info_player_start\"",
            &format!("{extra}}}\n{{\n\"classname\" \"info_player_start\""),
            1,
        );
        let map = MapData::parse_map(&text).unwrap_or_else(|e| panic!("{far}: {e}"));
        assert_eq!(map.brush_count(), 1, "{far}: {:?}", map.warnings);
        let w = map
            .warnings
            .iter()
            .find(|w| w.message.contains("outside the supported"))
            .unwrap_or_else(|| panic!("{far}: {:?}", map.warnings));
        assert_eq!(w.line, 11, "{far}: {w:?}"); // the stray brush opens after the floor
        let b = CollisionModel::build(&map).bounds();
        assert!(b.max.abs().max_element() <= 512.0, "{far}: {b:?}");
    }
    // A cylinder of 144 sides (real editors make such brushes; the id compilers take up
    // to 1024): loaded, and solid where it stands.
    let sides = 144;
    let mut cyl = String::from("{\n\"classname\" \"worldspawn\"\n{\n");
    cyl += "( 0 0 0 ) ( 1 0 0 ) ( 0 1 0 ) t 0 0 0 1 1\n"; // bottom, z = 0, facing down
    cyl += "( 0 0 64 ) ( 0 1 64 ) ( 1 0 64 ) t 0 0 0 1 1\n"; // top, z = 64, facing up
    for i in 0..sides {
        let a = std::f64::consts::TAU * i as f64 / sides as f64;
        let (c, s) = (libm::cos(a), libm::sin(a));
        // The tangent plane at radius 100: p1 on it, p2 above p1, p3 along the tangent.
        let p = (100.0 * c, 100.0 * s);
        let t = (p.0 - s, p.1 + c);
        cyl += &format!(
            "( {} {} 0 ) ( {} {} 1 ) ( {} {} 0 ) t 0 0 0 1 1\n",
            p.0, p.1, p.0, p.1, t.0, t.1
        );
    }
    cyl += "}\n}\n";
    let map = MapData::parse_map(&cyl).unwrap_or_else(|e| panic!("144 sides: {e}"));
    assert_eq!(map.brush_count(), 1, "{:?}", map.warnings);
    let b = CollisionModel::build(&map).bounds();
    assert!(
        (b.max.x - 100.0).abs() < 1.0 && (b.min.z).abs() < 1e-6 && (b.max.z - 64.0).abs() < 1e-6,
        "{b:?}"
    );
    // A brush of thousands of faces: refused at once, naming its line.
    let mut huge = String::from("{\n\"classname\" \"worldspawn\"\n{\n");
    for i in 0..5000 {
        let a = i as f64 * 0.001;
        huge += &format!("( {a} 0 0 ) ( {a} 1 0 ) ( {a} 0 1 ) t 0 0 0 1 1\n");
    }
    huge += "}\n}\n";
    #[allow(clippy::disallowed_methods)] // a wall-time figure
    let t0 = std::time::Instant::now();
    let e = err_of(&huge);
    assert!(e.starts_with("line 3:") && e.contains("5000 faces"), "{e}");
    assert!(e.contains("at most 1024"), "{e}");
    assert!(t0.elapsed().as_secs() < 5);
}

#[test]
fn a_byte_order_mark_and_bad_spawn_origins_are_handled() {
    let text = format!(
        "\u{feff}{}",
        floor_map(
            "{\n\"classname\" \"info_player_deathmatch\"\n\"origin\" \"nan 0 40\"\n}\n\
             {\n\"classname\" \"info_player_deathmatch\"\n\"origin\" \"1e400 0 40\"\n}\n\
             {\n\"classname\" \"info_player_deathmatch\"\n\"origin\" \"1e9 0 40\"\n}\n"
        )
    );
    let map = MapData::parse_any(text.as_bytes()).unwrap();
    let (spawns, warnings) = map.checked_spawn_points();
    assert_eq!(spawns, vec![DVec3::new(0.0, 0.0, 40.0)]);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings
        .iter()
        .all(|w| w.message.contains("info_player_deathmatch (line")));
}

/// A minimal IBSP v46 file: one world brush (a box) from six planes.
fn ibsp(planes: &[([f32; 3], f32)]) -> Vec<u8> {
    let planes: Vec<(DVec3, f64)> = planes
        .iter()
        .map(|(n, d)| (DVec3::new(n[0] as f64, n[1] as f64, n[2] as f64), *d as f64))
        .collect();
    common::ibsp_file(&[planes], &[])
}

fn box_planes() -> Vec<([f32; 3], f32)> {
    vec![
        ([1.0, 0.0, 0.0], 64.0),
        ([-1.0, 0.0, 0.0], 64.0),
        ([0.0, 1.0, 0.0], 64.0),
        ([0.0, -1.0, 0.0], 64.0),
        ([0.0, 0.0, 1.0], 64.0),
        ([0.0, 0.0, -1.0], 64.0),
    ]
}

#[test]
fn bsp_planes_that_are_not_finite_unit_planes_are_refused() {
    let ok = MapData::parse_any(&ibsp(&box_planes())).unwrap();
    assert_eq!(CollisionModel::build(&ok).stats().solid_brushes, 1);
    let cases: [(usize, [f32; 3], f32, &str); 5] = [
        (0, [f32::NAN, 0.0, 0.0], 64.0, "not a unit vector"),
        (1, [f32::INFINITY, 0.0, 0.0], 64.0, "not a unit vector"),
        (2, [0.0, 2.0, 0.0], 64.0, "not a unit vector"),
        (3, [0.0, -1.0, 0.0], f32::NAN, "distance"),
        (4, [0.0, 0.0, 1.0], 1e30, "distance"),
    ];
    for (i, n, d, want) in cases {
        let mut p = box_planes();
        p[i] = (n, d);
        let e = MapData::parse_any(&ibsp(&p)).unwrap_err().to_string();
        assert!(e.contains(&format!("plane {i}")) && e.contains(want), "{e}");
    }
}

fn arena() -> (MapData, CollisionModel) {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let map = MapData::parse_map(&text).unwrap();
    let model = CollisionModel::build(&map);
    (map, model)
}

#[test]
fn cache_files_that_are_corrupt_or_of_another_map_are_refused() {
    let (_, model) = arena();
    let source = *blake3::hash(b"the arena's bytes").as_bytes();
    let bytes = model.to_cache_bytes(&source);
    let back = CollisionModel::from_cache_bytes(&bytes, &source).unwrap();
    assert_eq!(back.stats(), model.stats());
    // Another map's model under this key.
    let other = *blake3::hash(b"another map").as_bytes();
    let e = CollisionModel::from_cache_bytes(&bytes, &other).unwrap_err();
    assert!(e.to_string().contains("another map"), "{e}");
    // Flipped bits anywhere: refused, never used.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for _ in 0..200 {
        let mut c = bytes.clone();
        let i = rng.gen_range(0..c.len());
        c[i] ^= 1 << rng.gen_range(0..8);
        assert!(CollisionModel::from_cache_bytes(&c, &source).is_err());
    }
    for len in [0, 10, 75, 76, bytes.len() / 2, bytes.len() - 1] {
        assert!(CollisionModel::from_cache_bytes(&bytes[..len], &source).is_err());
    }
}

/// A forger who also fixes the checksum: every index and count is still checked, so the
/// decoded model is either refused or safe to query.
#[test]
fn forged_cache_contents_with_a_valid_checksum_never_panic_a_query() {
    let (_, model) = arena();
    let source = [7u8; 32];
    let bytes = model.to_cache_bytes(&source);
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let hull = Hull::aabb(
        DVec3::new(-15.0, -15.0, -24.0),
        DVec3::new(15.0, 15.0, 32.0),
    )
    .unwrap();
    let (mut refused, mut accepted) = (0, 0);
    for _ in 0..400 {
        let mut c = bytes.clone();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(76..c.len());
            c[i] = rng.gen();
        }
        let sum = *blake3::hash(&c[76..]).as_bytes();
        c[44..76].copy_from_slice(&sum);
        match CollisionModel::from_cache_bytes(&c, &source) {
            Err(_) => refused += 1,
            Ok(m) => {
                accepted += 1;
                let mut s = TraceScratch::new();
                for _ in 0..20 {
                    let a = DVec3::new(
                        rng.gen_range(-1000.0..1000.0),
                        rng.gen_range(-1000.0..1000.0),
                        rng.gen_range(0.0..300.0),
                    );
                    let b = a + DVec3::new(rng.gen_range(-500.0..500.0), 0.0, -200.0);
                    m.trace(&hull, a, b, Contents::ALL, &mut s);
                }
            }
        }
    }
    // Most random bytes land in coordinates and stay a valid model; the rest must be
    // caught by the structural check rather than panic.
    assert!(
        refused > 20 && accepted > 20,
        "{refused} refused, {accepted} accepted"
    );
    eprintln!("forged caches: {refused} refused, {accepted} decoded as valid models");
}

#[test]
fn movement_settings_are_validated_once() {
    assert!(MoveConfig::default().validate().is_ok());
    let bad: Vec<(&str, MoveConfig)> = vec![
        (
            "tick_rate",
            MoveConfig {
                tick_rate: 0,
                ..Default::default()
            },
        ),
        (
            "tick_rate",
            MoveConfig {
                tick_rate: 1000,
                ..Default::default()
            },
        ),
        (
            "gravity",
            MoveConfig {
                gravity: f64::NAN,
                ..Default::default()
            },
        ),
        (
            "max_speed",
            MoveConfig {
                max_speed: f64::INFINITY,
                ..Default::default()
            },
        ),
        (
            "friction",
            MoveConfig {
                friction: -1.0,
                ..Default::default()
            },
        ),
        (
            "max_velocity",
            MoveConfig {
                max_velocity: 0.0,
                ..Default::default()
            },
        ),
        (
            "walkable_normal_z",
            MoveConfig {
                walkable_normal_z: 0.0,
                ..Default::default()
            },
        ),
        (
            "overclip",
            MoveConfig {
                overclip: 0.5,
                ..Default::default()
            },
        ),
        (
            "ground_distance",
            MoveConfig {
                ground_distance: 0.0,
                ..Default::default()
            },
        ),
        (
            "stand_mins/stand_maxs",
            MoveConfig {
                stand_mins: [0.0, -15.0, -24.0],
                stand_maxs: [0.0, 15.0, 32.0],
                ..Default::default()
            },
        ),
        (
            "stand_mins/stand_maxs",
            MoveConfig {
                stand_mins: [15.0, -15.0, -24.0],
                ..Default::default()
            },
        ),
        (
            "stand_mins/stand_maxs",
            MoveConfig {
                stand_maxs: [1e9, 15.0, 32.0],
                ..Default::default()
            },
        ),
        (
            "crouch_max_z",
            MoveConfig {
                crouch_max_z: 40.0,
                ..Default::default()
            },
        ),
        (
            "crouch_max_z",
            MoveConfig {
                crouch_max_z: -24.0,
                ..Default::default()
            },
        ),
    ];
    for (field, cfg) in bad {
        let e = cfg.clone().validate().unwrap_err();
        assert_eq!(e.field, field, "{cfg:?}: {e}");
        assert!(e.to_string().contains(field));
    }
}

#[test]
fn mover_keys_out_of_range_are_clamped_and_reported() {
    let door = |speed: &str, wait: &str, lip: &str| {
        format!(
            "{{\n\"classname\" \"func_door\"\n\"speed\" \"{speed}\"\n\"wait\" \"{wait}\"\n\"lip\" \"{lip}\"\n{}}}\n",
            brush(DVec3::new(-8.0, -64.0, 0.0), DVec3::new(8.0, 64.0, 128.0), "base/door")
        )
    };
    let text = floor_map(
        &(door("1e300", "1e300", "nan")
            + &door("-5", "x", "1e12")
            + "{\n\"classname\" \"func_door\"\n}\n"
            + &format!(
                "{{\n\"classname\" \"func_plat\"\n{}}}\n",
                brush(
                    DVec3::new(100.0, 100.0, 0.0),
                    DVec3::new(164.0, 164.0, 8.0),
                    "common/trigger"
                )
            )),
    );
    let map = MapData::parse_map(&text).unwrap();
    let (movers, warnings) = Mover::from_map(&map);
    assert_eq!(movers.len(), 2);
    let text_of = |w: &Vec<expel_core::MapWarning>| {
        w.iter()
            .map(|w| w.message.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let all = text_of(&warnings);
    for want in [
        "\"speed\" 1e300",
        "\"wait\" 1e300",
        "\"lip\" \"nan\"",
        "\"speed\" must be positive",
        "\"wait\" \"x\"",
        "\"lip\" 1e12",
        "func_plat (line",
        "no solid brush",
    ] {
        assert!(all.contains(want), "missing {want:?} in\n{all}");
    }
    // Every clamped mover steps for a long time, from any state, without overflow.
    for m in &movers {
        for start in [
            MoverState::default(),
            MoverState {
                progress: i64::MAX,
                phase: Phase::Opening,
                timer: u32::MAX,
            },
            MoverState {
                progress: i64::MIN,
                phase: Phase::Closing,
                timer: 0,
            },
        ] {
            let mut s = start;
            for t in 0..10_000 {
                s = m.advance(&s, t % 3 == 0, 240);
                let pose = m.pose(&s);
                assert!(pose.offset.is_finite() && pose.rotation.is_finite());
            }
        }
    }
}

#[test]
fn rotation_axes_of_any_finite_length_turn_like_the_unit_axis() {
    let (_, model) = arena();
    let hull = Hull::aabb(DVec3::new(-40.0, -4.0, -4.0), DVec3::new(40.0, 4.0, 4.0)).unwrap();
    let mut s = TraceScratch::new();
    // A bar lying on the floor beside a pillar, turned about z into it.
    let pos = DVec3::new(-60.0, 0.0, 8.0);
    let rot = |axis: DVec3| Rotation {
        origin: pos,
        axis,
        angle: std::f64::consts::FRAC_PI_2,
    };
    let unit = model.rotate(&hull, pos, &rot(DVec3::Z), Contents::ALL, &mut s);
    for scale in [1e-200, 1e-8, 3.0, 1e200, f64::MAX / 2.0] {
        let t = model.rotate(&hull, pos, &rot(DVec3::Z * scale), Contents::ALL, &mut s);
        assert_eq!(t, unit, "axis length {scale}");
    }
    let none = model.rotate(&hull, pos, &rot(DVec3::ZERO), Contents::ALL, &mut s);
    assert_eq!(none.fraction, 1.0);
    assert!(none.hit.is_none());
}

fn arena_sim() -> Sim {
    let (map, model) = arena();
    let (sim, warnings) = Sim::from_map(
        Arc::new(model),
        &map,
        MoveConfig::default().validate().unwrap(),
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    sim
}

#[test]
fn add_player_refuses_an_id_in_use_and_far_origins() {
    let sim = arena_sim();
    let mut w = sim.new_state();
    let at = PlayerState::at(DVec3::new(-300.0, -300.0, 40.0));
    sim.add_player(&mut w, PlayerId(3), at).unwrap();
    assert_eq!(
        sim.add_player(&mut w, PlayerId(3), at),
        Err(SimError::PlayerExists(PlayerId(3)))
    );
    let far = PlayerState {
        origin: [i32::MAX; 3],
        ..Default::default()
    };
    assert!(matches!(
        sim.add_player(&mut w, PlayerId(4), far),
        Err(SimError::OutOfRange {
            id: PlayerId(4),
            ..
        })
    ));
    assert_eq!(w.players.len(), 1);
}

/// A player thrown at any speed is capped, and one that leaves the map is respawned, so it
/// can never stall the tick for everyone.
#[test]
fn runaway_players_are_capped_and_respawned() {
    let sim = arena_sim();
    let mut w = sim.new_state();
    let mut s = SimScratch::new();
    let mut fast = PlayerState::at(DVec3::new(-300.0, -300.0, 200.0));
    fast.velocity = [i32::MAX, i32::MIN, i32::MAX];
    sim.add_player(&mut w, PlayerId(1), fast).unwrap();
    // Far below the map, falling.
    let mut lost = PlayerState::at(DVec3::new(0.0, 0.0, -900_000.0));
    lost.velocity = [0, 0, i32::MIN];
    sim.add_player(&mut w, PlayerId(2), lost).unwrap();
    let cap = sim.config().max_velocity;
    let reports = sim.step(&mut w, &BTreeMap::new(), &mut s);
    let p1 = w.player(PlayerId(1)).unwrap();
    assert!(p1.velocity().abs().max_element() <= cap, "{p1:?}");
    let r2 = reports.iter().find(|r| r.id == PlayerId(2)).unwrap();
    assert!(r2.respawned && r2.repeated_command);
    let p2 = w.player(PlayerId(2)).unwrap();
    assert_eq!(p2.origin(), sim.spawns()[2 % sim.spawns().len()]);
    assert_eq!(p2.velocity, [0; 3]);
    for _ in 0..600 {
        sim.step(&mut w, &BTreeMap::new(), &mut s);
    }
    for p in w.players.values() {
        assert!(sim.arena().min.cmple(p.state.origin()).all());
        assert!(p.state.velocity().abs().max_element() <= cap);
    }
}

#[test]
fn a_player_without_a_command_repeats_its_last_one() {
    let sim = arena_sim();
    let mut s = SimScratch::new();
    let start = PlayerState::at(DVec3::new(-600.0, -300.0, 24.03125));
    let run = |send_every_tick: bool, s: &mut SimScratch| {
        let mut w = sim.new_state();
        sim.add_player(&mut w, PlayerId(1), start).unwrap();
        let walk = MoveCommand::new(1.0, 0.5, 0.0, 37.0, 10.0);
        let mut c = BTreeMap::new();
        c.insert(PlayerId(1), walk);
        for t in 0..40 {
            if send_every_tick || t < 5 {
                sim.step(&mut w, &c, s);
            } else {
                sim.step(&mut w, &BTreeMap::new(), s);
            }
        }
        *w.player(PlayerId(1)).unwrap()
    };
    let (always, lost) = (run(true, &mut s), run(false, &mut s));
    assert_eq!(always, lost);
    assert!((lost.origin() - start.origin()).length() > 100.0);
}

#[test]
fn hulls_beyond_the_supported_range_are_refused() {
    use expel_core::collision::hull::HullError;
    let big = DVec3::splat(1e300);
    assert_eq!(Hull::aabb(-big, big).unwrap_err(), HullError::OutOfRange);
    assert_eq!(
        Hull::convex(&[DVec3::ZERO, DVec3::X, DVec3::Y, DVec3::Z * 1e9]).unwrap_err(),
        HullError::OutOfRange
    );
    assert_eq!(
        Hull::aabb(DVec3::new(0.0, 0.0, f64::NAN), DVec3::ONE).unwrap_err(),
        HullError::NotFinite
    );
}
