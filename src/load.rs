//! Loading a map into a collision model, with an on-disk cache of compiled models.

use anyhow::{Context, Result};
use expel_core::{CollisionModel, MapData, MoveConfig, Sim};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The embedded default map (authored for Expel, see `maps/`).
pub(crate) const DEFAULT_MAP: &str = include_str!("../maps/arena.map");
pub(crate) const DEFAULT_MAP_NAME: &str = "maps/arena.map (embedded)";

pub(crate) struct Loaded {
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
    pub(crate) fn into_sim(self, config: MoveConfig) -> Result<Sim> {
        Ok(self.into_map().sim(config)?)
    }

    /// The map as the server library holds it.
    pub(crate) fn into_map(self) -> expel_server::Map {
        use std::sync::Arc;
        expel_server::Map::from_parts(
            self.name,
            Arc::new(self.bytes),
            Arc::new(self.model),
            self.map,
        )
    }

    pub(crate) fn info_json(&self) -> serde_json::Value {
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
            "model_bytes": self.model.memory().iter().map(|p| p.1).sum::<usize>(),
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
pub(crate) fn load_model(path: Option<&Path>) -> Result<Loaded> {
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
            Ok(m) => {
                // A hit counts as a use: eviction goes by modification time.
                let used = std::fs::File::options()
                    .append(true)
                    .open(f)
                    .and_then(|h| h.set_modified(std::time::SystemTime::now()));
                if let Err(e) = used {
                    tracing::debug!(file = %f.display(), error = %e, "could not mark cache use");
                }
                Some(m)
            }
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
                evict(f, cache_max_bytes());
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

/// Default bound on the model cache (MB), overridden by `EXPEL_CACHE_MAX_MB`.
const CACHE_MAX_MB: f64 = 512.0;

fn cache_max_bytes() -> u64 {
    let mb = match std::env::var("EXPEL_CACHE_MAX_MB") {
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(mb) if mb.is_finite() && mb >= 0.0 => mb,
            _ => {
                tracing::warn!(value = %v, "EXPEL_CACHE_MAX_MB is not a size in MB; using {CACHE_MAX_MB}");
                CACHE_MAX_MB
            }
        },
        Err(_) => CACHE_MAX_MB,
    };
    (mb * 1024.0 * 1024.0) as u64
}

/// Deletes the least recently used compiled models beside `keep` (never `keep` itself)
/// until the cache holds at most `max` bytes.
fn evict(keep: &Path, max: u64) {
    let Some(dir) = keep.parent() else { return };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = rd
        .filter_map(|e| {
            let e = e.ok()?;
            let path = e.path();
            if path.extension()? != "model" {
                return None;
            }
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), path))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    // Oldest first; the path breaks ties so the order never depends on the listing.
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                tracing::info!(file = %path.display(), bytes = len, "evicted from the model cache");
            }
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "could not evict"),
        }
    }
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
