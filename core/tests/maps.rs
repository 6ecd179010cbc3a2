//! Map readers: layers, dialect details, and robustness against malformed input.

mod common;

use expel_core::map::MapData;
use expel_core::{CollisionModel, Contents, Hull, MapError, TraceScratch};
use glam::DVec3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BOX: &str = "( -64 -64 -16 ) ( -64 -63 -16 ) ( -63 -64 -16 ) base/floor 0 0 0 1 1
( 64 64 16 ) ( 64 65 16 ) ( 65 64 16 ) base/floor 0 0 0 1 1
( -64 -64 -16 ) ( -63 -64 -16 ) ( -64 -64 -15 ) base/floor 0 0 0 1 1
( 64 64 16 ) ( 64 64 17 ) ( 65 64 16 ) base/floor 0 0 0 1 1
( -64 -64 -16 ) ( -64 -64 -15 ) ( -64 -63 -16 ) base/floor 0 0 0 1 1
( 64 64 16 ) ( 65 64 16 ) ( 64 65 16 ) base/floor 0 0 0 1 1";

fn brush(tex: &str) -> String {
    format!("{{\n{}\n}}\n", BOX.replace("base/floor", tex))
}

#[test]
fn omitted_layers_and_their_groups_are_not_part_of_the_map() {
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n\
         {{\n\"classname\" \"func_group\"\n\"_tb_type\" \"_tb_layer\"\n\"_tb_name\" \"hidden\"\n\"_tb_id\" \"7\"\n\"_tb_layer_omit_from_export\" \"1\"\n{}}}\n\
         {{\n\"classname\" \"func_group\"\n\"_tb_type\" \"_tb_group\"\n\"_tb_id\" \"9\"\n\"_tb_layer\" \"7\"\n{}}}\n\
         {{\n\"classname\" \"func_group\"\n\"_tb_type\" \"_tb_group\"\n\"_tb_id\" \"10\"\n\"_tb_group\" \"9\"\n{}}}\n\
         {{\n\"classname\" \"info_player_start\"\n\"origin\" \"0 0 100\"\n\"_tb_layer\" \"7\"\n}}\n\
         {{\n\"classname\" \"func_group\"\n\"_tb_type\" \"_tb_layer\"\n\"_tb_id\" \"8\"\n{}}}\n",
        brush("a"),
        brush("b"),
        brush("c"),
        brush("d"),
        brush("e")
    );
    let m = MapData::parse_map(&text).unwrap();
    assert_eq!(m.omitted_entities, 4);
    assert_eq!(m.entities.len(), 2);
    assert_eq!(m.world_solid_brushes().count(), 2);
    assert!(m.spawn_points().is_empty());
}

#[test]
fn solidity_rule_applies_per_brush_and_entity() {
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}{}{}{}}}\n{{\n\"classname\" \"func_door\"\n{}}}\n{{\n\"classname\" \"func_detail\"\n{}}}\n",
        brush("common/trigger"),
        brush("*lava1"),
        brush("common/clip"),
        brush("{trigger"),
        brush("door"),
        brush("detail")
    );
    let m = MapData::parse_map(&text).unwrap();
    // trigger: all tool; *lava1: liquid; clip: solid; "{trigger" is a plain (fence) name.
    assert_eq!(m.world_solid_brushes().count(), 3);
    let model = CollisionModel::build(&m);
    assert_eq!(model.stats().solid_brushes, 3);
    assert_eq!(m.brush_count(), 6);
}

#[test]
fn netradiant_header_and_comments_are_accepted() {
    let text = format!(
        "\n//@$& layerdef \"0\" -1 0 0 0\n// entity 0\n{{\n\"classname\" \"worldspawn\" // trailing\n// brush 0\n{}}}\n",
        brush("x")
    );
    assert_eq!(MapData::parse_map(&text).unwrap().brush_count(), 1);
}

/// Any mutation of a real map gives a map or a line-numbered error, never a panic.
#[test]
fn mutated_map_text_never_panics() {
    let base =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/arena.map")).unwrap();
    let bytes = base.as_bytes();
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let noise = b"{}()[]\"/ \n0123456789.-eabc*";
    for _ in 0..300 {
        let mut b = bytes.to_vec();
        for _ in 0..rng.gen_range(1..6) {
            let i = rng.gen_range(0..b.len());
            match rng.gen_range(0..3) {
                0 => b[i] = noise[rng.gen_range(0..noise.len())],
                1 => {
                    b.remove(i);
                }
                _ => b.truncate(i),
            }
        }
        match MapData::parse_any(&b) {
            Ok(m) => {
                CollisionModel::build(&m);
            }
            Err(MapError::Syntax { line, .. }) => assert!(line >= 1),
            Err(e) => panic!("unexpected error kind {e}"),
        }
    }
}

/// Truncated or corrupted `.bsp` files are refused with an error, never a panic.
#[test]
fn corrupt_bsp_is_an_error() {
    let mut b = vec![0u8; 8 + 17 * 8];
    b[..4].copy_from_slice(b"IBSP");
    b[4..8].copy_from_slice(&47i32.to_le_bytes());
    assert!(MapData::parse_any(&b)
        .unwrap_err()
        .to_string()
        .contains("version 47"));
    b[4..8].copy_from_slice(&46i32.to_le_bytes());
    // Entities lump pointing past the end.
    b[8..12].copy_from_slice(&1000i32.to_le_bytes());
    b[12..16].copy_from_slice(&10i32.to_le_bytes());
    assert!(MapData::parse_any(&b)
        .unwrap_err()
        .to_string()
        .contains("past the end"));
    assert!(MapData::parse_any(b"IBSP").is_err());
    let real = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/maps/oa_fan.bsp");
    if let Ok(full) = std::fs::read(real) {
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        for _ in 0..200 {
            let mut c = full.clone();
            if rng.gen_bool(0.5) {
                c.truncate(rng.gen_range(0..c.len()));
            }
            for _ in 0..8 {
                let i = rng.gen_range(0..c.len().max(1));
                if i < c.len() {
                    c[i] = rng.gen();
                }
            }
            if let Ok(m) = MapData::parse_any(&c) {
                CollisionModel::build(&m);
            }
        }
    }
}

/// A box 64 units across about the origin, as Doom 3 writes it (`brushDef3` planes with
/// outward normals), with a patch beside it (quoted material) and a `patchDef3`.
const DOOM3: &str = r#"Version 2
// entity 0
{
"classname" "worldspawn"
// primitive 0
{
 brushDef3
 {
  ( 0 0 -1 -32 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
  ( 0 0 1 -32 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
  ( 0 -1 0 -32 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
  ( 2 0 0 -64 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
  ( 0 1 0 -32 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
  ( -1 0 0 -32 ) ( ( 0.03125 0 0 ) ( 0 0.03125 0 ) ) "textures/base_wall/a" 0 0 0
 }
}
// primitive 1
{
 patchDef2
 {
  "textures/base_floor/b"
  ( 3 3 0 0 0 )
  (
   ( ( 64 -32 0 0 0 ) ( 64 0 16 0 0.5 ) ( 64 32 0 0 1 ) )
   ( ( 96 -32 0 0.5 0 ) ( 96 0 16 0.5 0.5 ) ( 96 32 0 0.5 1 ) )
   ( ( 128 -32 0 1 0 ) ( 128 0 16 1 0.5 ) ( 128 32 0 1 1 ) )
  )
 }
}
// primitive 2
{
 patchDef3
 {
  "textures/common/trigger"
  ( 3 3 4 4 0 0 0 )
  (
   ( ( 64 64 0 0 0 ) ( 64 96 0 0 0.5 ) ( 64 128 0 0 1 ) )
   ( ( 96 64 0 0.5 0 ) ( 96 96 0 0.5 0.5 ) ( 96 128 0 0.5 1 ) )
   ( ( 128 64 0 1 0 ) ( 128 96 0 1 0.5 ) ( 128 128 0 1 1 ) )
  )
 }
}
}
"#;

#[test]
fn doom3_maps_read_with_planes_materials_and_patches() {
    let m = MapData::parse_map(DOOM3).unwrap();
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    let model = CollisionModel::build(&m);
    let st = model.stats();
    assert_eq!(
        (st.solid_brushes, st.patches, st.patches_skipped),
        (1, 1, 1)
    );
    // The same box written in the Quake format gives the same planes and the same traces.
    let quake = MapData::parse_map(&format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n",
        common::brush(DVec3::splat(-32.0), DVec3::splat(32.0))
    ))
    .unwrap();
    let q = CollisionModel::build(&quake);
    let mut s = TraceScratch::new();
    let hull = Hull::aabb(DVec3::splat(-4.0), DVec3::splat(4.0)).unwrap();
    for (from, to) in [
        (DVec3::new(-100.0, 0.0, 0.0), DVec3::new(0.0, 0.0, 0.0)),
        (DVec3::new(0.0, 0.0, 100.0), DVec3::new(10.0, 5.0, 0.0)),
        (DVec3::new(0.0, -90.0, 3.0), DVec3::new(0.0, 90.0, 3.0)),
    ] {
        let a = model.trace(&hull, from, to, Contents::ALL, &mut s).sweep;
        let b = q.trace(&hull, from, to, Contents::ALL, &mut s).sweep;
        assert_eq!((a.fraction, a.normal()), (b.fraction, b.normal()));
        assert!(a.fraction < 1.0);
    }
    // The oracle agrees: random box moves around the Doom 3 box never end in it or cross it.
    let solids = common::map_brushes(&m);
    let ohull = common::OHull::aabb(DVec3::splat(-4.0), DVec3::splat(4.0));
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..500 {
        let from = DVec3::new(
            rng.gen_range(-60.0..-40.0),
            rng.gen_range(-80.0..80.0),
            rng.gen_range(-80.0..80.0),
        );
        let to = DVec3::new(
            rng.gen_range(-80.0..80.0),
            rng.gen_range(-80.0..80.0),
            rng.gen_range(-80.0..80.0),
        );
        let t = model.trace(&hull, from, to, Contents::ALL, &mut s).sweep;
        for (b, _, _) in &solids {
            assert!(
                common::separation(&ohull, t.end, b) >= -1e-6,
                "{from:?} -> {to:?}"
            );
            assert!(common::overlap_interval(&ohull, from, t.end - from, b, 1e-6).is_none());
        }
    }
    // The curved floor beside it collides; the trigger patch does not.
    let down = model.trace(
        &hull,
        DVec3::new(96.0, 0.0, 60.0),
        DVec3::new(96.0, 0.0, -60.0),
        Contents::ALL,
        &mut s,
    );
    assert!(
        (down.sweep.end.z - (8.0 + 4.0)).abs() < 0.6,
        "{:?}",
        down.sweep.end
    );
    let through = model.trace(
        &hull,
        DVec3::new(96.0, 96.0, 60.0),
        DVec3::new(96.0, 96.0, -60.0),
        Contents::ALL,
        &mut s,
    );
    assert_eq!(through.sweep.fraction, 1.0);
}

#[test]
fn forgivable_faults_are_warnings_naming_their_line() {
    // Line 5: collinear points; line 7 repeats line 6's plane; the brush keeps six faces.
    let brush = common::brush(DVec3::splat(-32.0), DVec3::splat(32.0));
    let faces: Vec<&str> = brush.lines().filter(|l| l.starts_with('(')).collect();
    let (first, box_faces) = (faces[0], faces.join("\n"));
    let text = format!(
        "; written by QuArK\n{{\n\"classname\" \"worldspawn\"\n{{\n\
         ( 0 0 0 ) ( 1 1 1 ) ( 2 2 2 ) t 0 0 0 1 1\n{first}\n{box_faces}\n}}\n}}\n"
    );
    let m = MapData::parse_map(&text).unwrap();
    let lines: Vec<usize> = m.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines, vec![5, 7], "{:?}", m.warnings);
    assert!(m.warnings[0].message.contains("collinear"));
    assert!(m.warnings[1].message.contains("repeats"));
    assert_eq!(m.entities[0].brushes[0].faces.len(), 6);
    assert_eq!(CollisionModel::build(&m).stats().solid_brushes, 1);

    // Loose brushes (an editor's clipboard): world geometry, with a warning.
    let loose = format!("// clipboard\n{brush}");
    let m = MapData::parse_map(&loose).unwrap();
    assert_eq!(m.warnings.len(), 1);
    assert!(m.warnings[0].message.contains("outside any entity"));
    assert_eq!(m.entities[0].classname(), "worldspawn");
    assert_eq!(CollisionModel::build(&m).stats().solid_brushes, 1);
}

/// A player's box (Quake's standing hull).
const PLAYER: (DVec3, DVec3) = (
    DVec3::new(-16.0, -16.0, -24.0),
    DVec3::new(16.0, 16.0, 32.0),
);

fn player_hull() -> Hull {
    Hull::aabb(PLAYER.0, PLAYER.1).unwrap()
}

/// A start inside the small room the BSP readers' test maps share.
fn inside_the_room(rng: &mut ChaCha8Rng) -> DVec3 {
    DVec3::new(
        rng.gen_range(40.0..90.0),
        rng.gen_range(-90.0..90.0),
        rng.gen_range(-90.0..90.0),
    )
}

/// The model of a `.map` whose world is these boxes, as brushes.
fn boxes_as_map(boxes: &[(DVec3, DVec3)]) -> CollisionModel {
    let text = format!(
        "{{\n\"classname\" \"worldspawn\"\n{}}}\n",
        boxes
            .iter()
            .map(|(a, b)| common::brush(*a, *b))
            .collect::<String>()
    );
    CollisionModel::build(&MapData::parse_map(&text).unwrap())
}

/// The trace of `hull` from `from` to `to` in `model`, which must end where the same trace
/// in `reference` does (the same brushes written otherwise), with the same normal.
fn same_trace(
    model: &CollisionModel,
    reference: &CollisionModel,
    hull: &Hull,
    from: DVec3,
    to: DVec3,
    s: &mut TraceScratch,
) -> expel_core::Trace {
    let a = model.trace(hull, from, to, Contents::ALL, s);
    let b = reference.trace(hull, from, to, Contents::ALL, s);
    assert_eq!(a.start_solid, b.start_solid);
    assert!(
        (a.sweep.end - b.sweep.end).length() < 1e-6,
        "{from:?} -> {to:?}"
    );
    assert_eq!(a.sweep.normal(), b.sweep.normal());
    a
}

/// A room 256 units across with a pillar, compiled as Quake (BSP29), Hexen 2 (BSP29 with
/// 80-byte models) and Half-Life (BSP30) write it: the solid leaves of the tree become
/// brushes, and every trace inside agrees with the same room written as brushes.
#[test]
fn bsp29_and_bsp30_solid_leaves_collide_like_brushes() {
    const SOLID: i32 = -2;
    const EMPTY: i32 = -1;
    let axes = [
        DVec3::X,
        -DVec3::X,
        DVec3::Y,
        -DVec3::Y,
        DVec3::Z,
        -DVec3::Z,
    ];
    let mut planes: Vec<(DVec3, f64)> = axes.iter().map(|a| (*a, 128.0)).collect();
    planes.extend(axes[..4].iter().map(|a| (*a, 16.0)));
    planes.push((DVec3::Z, 0.0));
    use common::BspChild::{Leaf, Node};
    let mut nodes: Vec<(usize, common::BspChild, common::BspChild)> =
        (0..6).map(|i| (i, Leaf(SOLID), Node(i + 1))).collect();
    nodes.extend((6..10).map(|i| (i, Leaf(EMPTY), Node(i + 1))));
    nodes.push((10, Leaf(EMPTY), Leaf(SOLID)));
    let ents = "{\n\"classname\" \"worldspawn\"\n}\n{\n\"classname\" \"info_player_start\"\n\"origin\" \"64 64 -100\"\n}\n";
    let bounds = (DVec3::splat(-144.0), DVec3::splat(144.0));

    let walls = [
        (
            DVec3::new(128.0, -144.0, -144.0),
            DVec3::new(144.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, -144.0),
            DVec3::new(-128.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, 128.0, -144.0),
            DVec3::new(144.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, -144.0),
            DVec3::new(144.0, -128.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, 128.0),
            DVec3::new(144.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, -144.0),
            DVec3::new(144.0, 144.0, -128.0),
        ),
        (
            DVec3::new(-16.0, -16.0, -128.0),
            DVec3::new(16.0, 16.0, 0.0),
        ),
    ];
    let reference = boxes_as_map(&walls);
    let hull = player_hull();
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let mut s = TraceScratch::new();
    // Quake's large-map variants of BSP29 hold the same tree in wider records.
    let classic = common::bsp29_file(29, ents, &planes, &nodes, bounds, false);
    let variants = [
        common::bsp29_file(29, ents, &planes, &nodes, bounds, false),
        common::bsp29_file(29, ents, &planes, &nodes, bounds, true),
        common::bsp29_file(30, ents, &planes, &nodes, bounds, false),
        common::widen_bsp29(&classic, b"BSP2"),
        common::widen_bsp29(&classic, b"2PSB"),
    ];
    for (variant, bytes) in variants.iter().enumerate() {
        let version = ["29", "29 (Hexen 2)", "30", "BSP2", "2PSB"][variant];
        let map = MapData::parse_any(bytes).unwrap();
        assert_eq!(map.spawn_points(), vec![DVec3::new(64.0, 64.0, -100.0)]);
        let model = CollisionModel::build(&map);
        assert_eq!(model.stats().solid_brushes, 7, "version {version}");
        // The oracle, on the cells as the reader made them.
        let cells = common::map_brushes(&map);
        let ohull = common::OHull::aabb(PLAYER.0, PLAYER.1);
        let mut hits = 0;
        for _ in 0..400 {
            let from = inside_the_room(&mut rng);
            let to = DVec3::new(
                rng.gen_range(-300.0..300.0),
                rng.gen_range(-300.0..300.0),
                rng.gen_range(-300.0..300.0),
            );
            let a = same_trace(&model, &reference, &hull, from, to, &mut s);
            let clear = cells
                .iter()
                .map(|(c, _, _)| common::separation(&ohull, a.sweep.end, c))
                .fold(f64::INFINITY, f64::min);
            assert!(clear >= -1e-6, "{from:?} -> {to:?} ends in a cell");
            for (c, _, _) in &cells {
                let d = a.sweep.end - from;
                assert!(common::overlap_interval(&ohull, from, d, c, 1e-6).is_none());
            }
            hits += a.sweep.hit.is_some() as usize;
        }
        assert!(hits > 300);
    }

    // A model whose bounds cross by a unit (a compiler's rounding) loads with a warning,
    // as the box between them; crossed further, it is refused.
    let crossed = |by: f64| {
        let (lo, hi) = bounds;
        let lo = DVec3::new(hi.x + by, lo.y, lo.z);
        common::bsp29_file(29, ents, &planes, &nodes, (lo, hi), false)
    };
    let map = MapData::parse_any(&crossed(1.0)).unwrap();
    assert!(
        map.warnings
            .iter()
            .any(|w| w.message.contains("crossed by 1")),
        "{:?}",
        map.warnings
    );
    assert!(CollisionModel::build(&map).stats().solid_brushes > 0);
    let e = MapData::parse_any(&crossed(3.0)).unwrap_err().to_string();
    assert!(e.contains("not usable"), "{e}");

    // Other compiled formats are named; a broken tree is refused, not walked forever.
    let mut vbsp = b"VBSP".to_vec();
    vbsp.extend(20i32.to_le_bytes());
    vbsp.extend(vec![0xffu8; 64]);
    let e = MapData::parse_any(&vbsp).unwrap_err().to_string();
    assert!(e.contains("VBSP") && e.contains("version 20"), "{e}");
    let mut old = common::bsp29_file(29, ents, &planes, &nodes, bounds, false);
    old[..4].copy_from_slice(&28i32.to_le_bytes());
    old.push(0xff);
    let e = MapData::parse_any(&old).unwrap_err().to_string();
    assert!(e.contains("version 28"), "{e}");
    let mut looped: Vec<_> = nodes
        .iter()
        .map(|(p, f, b)| (*p, f.clone(), b.clone()))
        .collect();
    looped[10] = (10, Leaf(EMPTY), Node(3));
    let e = MapData::parse_any(&common::bsp29_file(
        29, ents, &planes, &looped, bounds, false,
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("not a tree"), "{e}");
    // Random corruption: an error or a map, never a panic.
    let good = common::bsp29_file(30, ents, &planes, &nodes, bounds, false);
    for _ in 0..2000 {
        let mut b = good.clone();
        for _ in 0..rng.gen_range(1..6) {
            let i = rng.gen_range(0..b.len());
            b[i] = rng.gen();
        }
        if let Ok(m) = MapData::parse_any(&b) {
            CollisionModel::build(&m);
        }
    }
}

/// A Quake 2 `.bsp` (IBSP 38, and Qbism's QBSP with its wider records): the brushes its
/// models' leaves name, solid and clip brushes colliding as the same brushes written as a
/// `.map`, water left out, bevels dropped, a door's brush with the door.
#[test]
fn quake_2_bsp_brushes_collide_like_the_same_brushes() {
    use common::Q2Brush;
    let walls = [
        (
            DVec3::new(128.0, -144.0, -144.0),
            DVec3::new(144.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, -144.0),
            DVec3::new(-128.0, 144.0, 144.0),
        ),
        (
            DVec3::new(-144.0, -144.0, -144.0),
            DVec3::new(144.0, 144.0, -128.0),
        ),
        (
            DVec3::new(-16.0, -16.0, -128.0),
            DVec3::new(16.0, 16.0, 0.0),
        ),
    ];
    let mut brushes: Vec<Q2Brush> = walls
        .iter()
        .enumerate()
        .map(|(i, (a, b))| {
            let mut planes = common::box_planes(*a, *b);
            if i == 3 {
                // A bevel: a plane that cuts nothing (the pillar's top edge, pushed out).
                planes.push((DVec3::new(1.0, 0.0, 1.0).normalize(), 1000.0));
            }
            // Solid, then window, then player clip, then solid.
            Q2Brush {
                planes,
                contents: [0x1, 0x2, 0x10000, 0x1][i],
                model: 0,
            }
        })
        .collect();
    // Water fills the room's bottom: it does not collide.
    brushes.push(Q2Brush {
        planes: common::box_planes(
            DVec3::new(-128.0, -128.0, -128.0),
            DVec3::new(128.0, 128.0, -64.0),
        ),
        contents: 0x20,
        model: 0,
    });
    // A door in model 1.
    let door = (
        DVec3::new(-128.0, 100.0, -128.0),
        DVec3::new(-100.0, 128.0, 0.0),
    );
    brushes.push(Q2Brush {
        planes: common::box_planes(door.0, door.1),
        contents: 0x1,
        model: 1,
    });
    let ents =
        "{\n\"classname\" \"worldspawn\"\n}\n{\n\"classname\" \"func_door\"\n\"model\" \"*1\"\n}\n";
    for qbism in [false, true] {
        let map = MapData::parse_any(&common::q2bsp_file(ents, &brushes, qbism)).unwrap();
        assert_eq!(map.entities[0].brushes.len(), 4, "water left out");
        assert_eq!(map.entities[1].brushes.len(), 1, "the door's brush");
        assert!(
            map.entities[0].brushes.iter().all(|b| b.faces.len() == 6),
            "bevel dropped"
        );
        let reference = boxes_as_map(&walls);
        let model = CollisionModel::build(&map);
        assert_eq!(model.stats().solid_brushes, 4);
        let hull = player_hull();
        let mut rng = ChaCha8Rng::seed_from_u64(38);
        let mut s = TraceScratch::new();
        let mut hits = 0;
        for _ in 0..400 {
            let from = inside_the_room(&mut rng);
            let to = from
                + DVec3::new(
                    rng.gen_range(-300.0..300.0),
                    rng.gen_range(-300.0..300.0),
                    rng.gen_range(-300.0..300.0),
                );
            let a = same_trace(&model, &reference, &hull, from, to, &mut s);
            hits += a.sweep.hit.is_some() as usize;
        }
        assert!(hits > 200, "{hits}");
    }
    // Another IBSP version is named.
    let mut other = common::q2bsp_file(ents, &brushes, false);
    other[4..8].copy_from_slice(&37i32.to_le_bytes());
    let e = MapData::parse_any(&other).unwrap_err().to_string();
    assert!(e.contains("version 37"), "{e}");
}

/// Quake text with bytes past 127 in a string (the "gold" letters of Quake's charset in a
/// `message`) loads, read as Latin-1, with a warning naming the line of the first such byte;
/// the brushes and the rest of the entity are as in the same map without them.
#[test]
fn quake_charset_in_strings_loads_as_latin_1() {
    let text = |msg: &[u8]| {
        let mut t = b"{\n\"classname\" \"worldspawn\"\n\"message\" \"".to_vec();
        t.extend_from_slice(msg);
        t.extend_from_slice(format!("\"\n{}}}\n", brush("x")).as_bytes());
        t
    };
    let gold = MapData::parse_any(&text(b"The \xc7\xef\xec\xe4 Keep")).unwrap();
    let plain = MapData::parse_any(&text(b"The Gold Keep")).unwrap();
    assert_eq!(gold.brush_count(), 1);
    assert_eq!(gold.brush_count(), plain.brush_count());
    assert_eq!(
        gold.entities[0].get("message"),
        Some("The \u{c7}\u{ef}\u{ec}\u{e4} Keep")
    );
    assert!(plain.warnings.is_empty(), "{:?}", plain.warnings);
    assert_eq!(gold.warnings.len(), 1, "{:?}", gold.warnings);
    assert_eq!(gold.warnings[0].line, 3);
    assert!(gold.warnings[0].message.contains("Latin-1"));
}

/// A brush that loses a face (collinear points) and is no longer closed by the planes left
/// is dropped with a warning naming its line; it never becomes solid reaching far outside
/// the map.
#[test]
fn a_brush_its_planes_do_not_close_is_dropped() {
    let good = common::brush(DVec3::splat(-64.0), DVec3::splat(64.0));
    let mut faces: Vec<&str> = good.lines().collect();
    assert_eq!(faces.len(), 8, "{good}");
    // The last face's points made collinear: the face is dropped, the brush left open.
    faces[6] = "( 0 0 64 ) ( 1 1 64 ) ( 2 2 64 ) t 0 0 0 1 1";
    let open = faces.join("\n");
    let text = format!("{{\n\"classname\" \"worldspawn\"\n{good}\n{open}\n}}\n");
    let map = MapData::parse_map(&text).unwrap();
    assert_eq!(
        map.brush_count(),
        1,
        "only the closed brush is kept: {:?}",
        map.warnings
    );
    let dropped: Vec<_> = map
        .warnings
        .iter()
        .filter(|w| w.message.contains("brush dropped"))
        .collect();
    assert_eq!(dropped.len(), 1, "{:?}", map.warnings);
    assert_eq!(dropped[0].line, 12, "{:?}", dropped[0]);
    let model = CollisionModel::build(&map);
    assert_eq!(model.brushes().len(), 1);
    let b = model.bounds();
    assert!(
        b.min.abs().max_element() <= 64.0 && b.max.abs().max_element() <= 64.0,
        "{b:?}"
    );
}
