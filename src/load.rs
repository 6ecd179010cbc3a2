//! Loading a map into a collision model, with an on-disk cache of compiled models.

use anyhow::{Context, Result};
use expel_shared::{CollisionModel, MapData, MoveConfig, Sim};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The embedded default map (authored for Expel, see `maps/`).
pub const DEFAULT_MAP: &str = include_str!("../maps/arena.map");
pub const DEFAULT_MAP_NAME: &str = "maps/arena.map (embedded)";

pub struct Loaded {
    /// The map file's bytes.
    pub bytes: Vec<u8>,
    pub model: CollisionModel,
    pub map: MapData,
    pub name: String,
    pub build_ms: f64,
    pub cached: bool,
}

impl Loaded {
    /// The simulation of this map with `config`, logging what in the map could not be used
    /// as written.
    pub fn into_sim(self, config: MoveConfig) -> Result<Sim> {
        let movement = config.validate().context("movement settings")?;
        let (sim, warnings) = Sim::from_map(std::sync::Arc::new(self.model), &self.map, movement);
        for w in &warnings {
            tracing::warn!(map = %self.name, "{w}");
        }
        Ok(sim)
    }

    pub fn info_json(&self) -> serde_json::Value {
        let s = self.model.stats();
        let b = self.model.bounds();
        let bounds = if b.is_empty() {
            serde_json::Value::Null
        } else {
            json!({"mins": b.min.to_array(), "maxs": b.max.to_array()})
        };
        json!({
            "map": self.name,
            "entities": s.entities,
            "brushes": s.brushes,
            "solid_brushes": s.solid_brushes,
            "degenerate_brushes": s.degenerate_brushes,
            "polygons": s.polygons,
            "buried_faces": s.buried_faces,
            "merged_polygons": s.merged_polygons,
            "edges": s.edges,
            "internal_edges": s.internal_edges,
            "vertices": s.vertices,
            "broad_phase_nodes": s.broad_phase_nodes,
            "patches": s.patches,
            "patch_polygons": s.patch_polygons,
            "patches_skipped": s.patches_skipped,
            "patch_deviation": s.patch_deviation,
            "spawn_points": self.map.spawn_points().len(),
            "warnings": self.map.warnings.len(),
            "bounds": bounds,
            "build_ms": self.build_ms,
            "cached": self.cached,
        })
    }
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("EXPEL_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("expel"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("expel"))
}

/// Loads `path` (or the embedded default map) and compiles or fetches its model.
pub fn load_model(path: Option<&Path>) -> Result<Loaded> {
    let (bytes, name) = match path {
        Some(p) => (
            std::fs::read(p).with_context(|| format!("reading map {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            DEFAULT_MAP.as_bytes().to_vec(),
            DEFAULT_MAP_NAME.to_string(),
        ),
    };
    let t0 = Instant::now();
    let map = MapData::parse_any(&bytes).with_context(|| format!("loading map {name}"))?;
    for w in &map.warnings {
        tracing::warn!(map = %name, "{w}");
    }
    // The cache is keyed by the map's bytes; the file repeats that hash inside, so a
    // cache copied under another map's key is refused too.
    let source: [u8; 32] = *blake3::hash(&bytes).as_bytes();
    let key = {
        let mut h = blake3::Hasher::new();
        // Old cache entries are simply not found once the model format changes.
        h.update(b"expel-model");
        h.update(&CollisionModel::FORMAT_VERSION.to_le_bytes());
        h.update(&source);
        h.finalize().to_hex().to_string()
    };
    let cache_file = cache_dir().map(|d| d.join(format!("{key}.model")));
    let cached_model = cache_file.as_ref().and_then(|f| {
        let data = std::fs::read(f).ok()?;
        match CollisionModel::from_cache_bytes(&data, &source) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(file = %f.display(), error = %e, "model cache refused; rebuilding");
                None
            }
        }
    });
    let cached = cached_model.is_some();
    let model = match cached_model {
        Some(m) => m,
        None => {
            let m = CollisionModel::build(&map);
            if let Some(f) = &cache_file {
                if let Err(e) = write_cache(f, &m.to_cache_bytes(&source)) {
                    tracing::warn!(file = %f.display(), error = %e, "could not write model cache");
                }
            }
            m
        }
    };
    let build_ms = t0.elapsed().as_secs_f64() * 1000.0;
    tracing::info!(map = %name, build_ms, cached, "model ready");
    Ok(Loaded {
        bytes,
        model,
        map,
        name,
        build_ms,
        cached,
    })
}

fn write_cache(file: &Path, bytes: &[u8]) -> Result<()> {
    let dir = file.parent().context("cache file has no folder")?;
    std::fs::create_dir_all(dir)?;
    // Write then rename, so a concurrent reader never sees half a file.
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}
