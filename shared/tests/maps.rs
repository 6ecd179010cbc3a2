//! Map readers: layers, dialect details, and robustness against malformed input.

use expel_shared::map::MapData;
use expel_shared::{CollisionModel, MapError};
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
