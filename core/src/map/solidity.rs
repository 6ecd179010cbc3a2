//! Which brushes collide: the one place that decides solidity.

use super::{Brush, MapEntity, Patch};

/// MapEntity classes whose brushes are static world geometry.
pub const WORLD_CLASSES: [&str; 5] = [
    "worldspawn",
    "func_group",
    "func_detail",
    "func_detail_wall",
    "func_wall",
];

const TOOL_TEXTURES: [&str; 17] = [
    // Doom 3 family: clips for monsters, moveables and IK only, portals, shadow casters.
    "monster_clip",
    "moveable_clip",
    "ik_clip",
    "visportal",
    "shadow",
    "shadow2",
    "trigger",
    "hint",
    "hintskip",
    "skip",
    "origin",
    "areaportal",
    "clusterportal",
    "botclip",
    "donotenter",
    "nodrop",
    "nodrawnonsolid",
];

/// Base name of a texture: after the last `/`, lower case.
fn base_name(texture: &str) -> String {
    texture
        .rsplit('/')
        .next()
        .unwrap_or(texture)
        .to_ascii_lowercase()
}

/// A non-solid tool texture (trigger, hint, skip, origin, portals, fog, ...).
pub fn is_tool_texture(texture: &str) -> bool {
    let b = base_name(texture);
    TOOL_TEXTURES.contains(&b.as_str()) || b.starts_with("fog") || b.ends_with("_nonsolid")
}

/// A liquid texture: `*name` (Quake) or a path naming liquid, water, lava or slime.
pub fn is_liquid_texture(texture: &str) -> bool {
    let lower = texture.to_ascii_lowercase();
    base_name(texture).starts_with('*')
        || ["liquid", "water", "lava", "slime"]
            .iter()
            .any(|w| lower.contains(w))
}

/// Player clip textures: solid for players only.
pub fn is_player_clip_texture(texture: &str) -> bool {
    matches!(
        base_name(texture).as_str(),
        "clip" | "playerclip" | "player_clip"
    )
}

/// Whether a brush is solid by its textures alone (independent of its entity): not when
/// every face is a tool texture, nor when any face is a liquid.
pub fn brush_is_solid(brush: &Brush) -> bool {
    let all_tool = brush.faces.iter().all(|f| is_tool_texture(&f.texture));
    let any_liquid = brush.faces.iter().any(|f| is_liquid_texture(&f.texture));
    !all_tool && !any_liquid
}

/// The solidity rule: a brush of a world entity class that is solid by its textures.
pub fn is_world_solid(classname: &str, brush: &Brush) -> bool {
    WORLD_CLASSES.contains(&classname) && brush_is_solid(brush)
}

/// Quake 3's contents bits that block players: solid and player clip.
const BSP_SOLID: u32 = 1;
const BSP_PLAYER_CLIP: u32 = 0x1_0000;

/// Whether a patch is solid: by the contents its compiler recorded (`.bsp`), or by the
/// same texture rule as brush faces (`.map`: not a tool texture, not a liquid).
pub fn patch_is_solid(patch: &Patch) -> bool {
    match patch.contents {
        Some(c) => c & (BSP_SOLID | BSP_PLAYER_CLIP) != 0,
        None => !is_tool_texture(&patch.texture) && !is_liquid_texture(&patch.texture),
    }
}

/// Whether a solid patch blocks players only (player clip).
pub fn patch_is_player_clip(patch: &Patch) -> bool {
    match patch.contents {
        Some(c) => c & BSP_SOLID == 0 && c & BSP_PLAYER_CLIP != 0,
        None => is_player_clip_texture(&patch.texture),
    }
}

/// The solidity rule for patches: a patch of a world entity class that is solid.
pub fn is_world_solid_patch(classname: &str, patch: &Patch) -> bool {
    WORLD_CLASSES.contains(&classname) && patch_is_solid(patch)
}

/// Removes the entities of TrenchBroom layers marked `_tb_layer_omit_from_export`, and
/// the groups and entities inside them (nested groups included). Returns how many went.
pub(super) fn drop_omitted_layers(entities: &mut Vec<MapEntity>) -> usize {
    let omitted_layers: Vec<&str> = entities
        .iter()
        .filter(|e| {
            e.get("_tb_type") == Some("_tb_layer")
                && e.get("_tb_layer_omit_from_export") == Some("1")
        })
        .filter_map(|e| e.get("_tb_id"))
        .collect();
    if omitted_layers.is_empty() {
        return 0;
    }
    let omitted_layers: Vec<String> = omitted_layers.into_iter().map(String::from).collect();
    // Whether `e`'s value for `key` names one of `ids`.
    let refers = |e: &MapEntity, key: &str, ids: &[String]| {
        e.get(key).is_some_and(|v| ids.iter().any(|x| x == v))
    };
    // Groups inherit omission from their layer or from an enclosing group; iterate to a
    // fixed point so nesting order in the file does not matter.
    let mut omitted_groups: Vec<String> = Vec::new();
    loop {
        let before = omitted_groups.len();
        for e in entities.iter() {
            if e.get("_tb_type") != Some("_tb_group") {
                continue;
            }
            let Some(id) = e.get("_tb_id") else { continue };
            if omitted_groups.iter().any(|g| g == id) {
                continue;
            }
            if refers(e, "_tb_layer", &omitted_layers) || refers(e, "_tb_group", &omitted_groups) {
                omitted_groups.push(id.to_string());
            }
        }
        if omitted_groups.len() == before {
            break;
        }
    }
    let before = entities.len();
    entities.retain(|e| {
        let own_layer =
            e.get("_tb_type") == Some("_tb_layer") && refers(e, "_tb_id", &omitted_layers);
        !(own_layer
            || refers(e, "_tb_layer", &omitted_layers)
            || refers(e, "_tb_group", &omitted_groups))
    });
    before - entities.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::Plane;
    use crate::map::Face;
    use glam::DVec3;

    fn brush(textures: &[&str]) -> Brush {
        Brush {
            faces: textures
                .iter()
                .map(|t| Face {
                    plane: Plane {
                        normal: DVec3::Z,
                        dist: 0.0,
                    },
                    texture: t.to_string(),
                })
                .collect(),
            line: 1,
        }
    }

    #[test]
    fn tool_liquid_and_solid_rules() {
        assert!(!brush_is_solid(&brush(&["common/trigger", "TRIGGER"])));
        assert!(!brush_is_solid(&brush(&["common/hint", "common/skip"])));
        assert!(!brush_is_solid(&brush(&["fog_dense", "sfx/fogwater"])));
        assert!(!brush_is_solid(&brush(&["stone", "*04water1"])));
        assert!(!brush_is_solid(&brush(&["liquids/lavahell", "caulk"])));
        assert!(!brush_is_solid(&brush(&["glass_nonsolid"])));
        assert!(brush_is_solid(&brush(&["trigger", "stone"])));
        assert!(brush_is_solid(&brush(&["common/clip"])));
        assert!(brush_is_solid(&brush(&["common/caulk", "common/nodraw"])));
        assert!(brush_is_solid(&brush(&["sky1"])));
        assert!(!brush_is_solid(&brush(&["textures/common/monster_clip"])));
        assert!(!brush_is_solid(&brush(&["textures/editor/visportal"])));
        assert!(is_player_clip_texture("textures/common/player_clip"));
        assert!(is_world_solid("func_detail_wall", &brush(&["stone"])));
        assert!(!is_world_solid("func_door", &brush(&["stone"])));
    }
}
