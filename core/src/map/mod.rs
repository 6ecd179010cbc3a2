//! Map sources: brushes and entities read from `.map` text or compiled Quake 3 `.bsp`.

mod bsp29;
mod ibsp;
mod lumps;
mod parse;
mod q2bsp;
pub mod solidity;

use crate::geom::Plane;
use glam::DVec3;
use thiserror::Error;

/// Most faces one brush may have: the id-family compilers' own limit (qbsp's
/// MAX_BRUSH_SIDES is 1024 in its later forks; editors make cylinders and arches of a
/// few hundred). Loading such a brush costs its faces squared once; a trace near it tests
/// each face once. Thousands are refused: a brush like that is made to slow the server.
pub const MAX_BRUSH_FACES: usize = 1024;

/// A map file that could not be read.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MapError {
    /// A `.map` text error at a line.
    #[error("line {line}: {message}")]
    Syntax {
        /// Line of the file (from 1).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A `.bsp` error.
    #[error("bsp: {0}")]
    Bsp(String),
}

/// Something in a map that could not be used as written: what was done instead, and
/// where.
#[derive(Debug, Clone, PartialEq)]
pub struct MapWarning {
    /// Source line (0 for `.bsp` content).
    pub line: usize,
    /// What was wrong and what was done.
    pub message: String,
}

impl std::fmt::Display for MapWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One brush face: its plane (normal out of the brush) and texture name as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Face {
    /// The face's plane, normal out of the brush.
    pub plane: Plane,
    /// Texture name as written.
    pub texture: String,
}

/// A convex brush: the set where `n·x <= d` for every face.
#[derive(Clone, Debug, PartialEq)]
pub struct Brush {
    /// The faces.
    pub faces: Vec<Face>,
    /// Source line of the brush's opening brace (0 for `.bsp` brushes).
    pub line: usize,
}

/// Largest patch control grid along either side (Quake 3's own limit).
pub const MAX_PATCH_GRID: usize = 129;

/// A curved surface: a grid of biquadratic Bézier control points (`patchDef2`/`patchDef3`
/// in a `.map`, a patch surface in a `.bsp`). Both sides are odd, from 3 to
/// [`MAX_PATCH_GRID`]; each 3 × 3 block sharing its border rows with its neighbours is one
/// Bézier piece.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    /// Control points along the first grid index.
    pub width: usize,
    /// Control points along the second grid index.
    pub height: usize,
    /// Control points: `points[i * height + j]` for `i < width`, `j < height` (the order
    /// a `.map` writes them).
    pub points: Vec<DVec3>,
    /// Texture or shader name as written.
    pub texture: String,
    /// Contents flags of the shader as the compiler recorded them (`.bsp` only); a `.map`
    /// patch is judged by its texture name.
    pub contents: Option<u32>,
    /// Source line of the patch's opening brace (0 for `.bsp` patches).
    pub line: usize,
}

impl Patch {
    /// Control point `(i, j)`.
    pub fn point(&self, i: usize, j: usize) -> DVec3 {
        self.points[i * self.height + j]
    }

    /// Checks a grid size before reading (or allocating) its points.
    pub fn check_size(width: usize, height: usize) -> Result<(), String> {
        for (side, n) in [("width", width), ("height", height)] {
            if n < 3 || n % 2 == 0 || n > MAX_PATCH_GRID {
                return Err(format!(
                    "patch {side} {n} is not an odd number from 3 to {MAX_PATCH_GRID}"
                ));
            }
        }
        Ok(())
    }

    /// Checks the grid's shape and coordinates: what a reader must refuse.
    pub fn check(&self) -> Result<(), String> {
        Self::check_size(self.width, self.height)?;
        if self.points.len() != self.width * self.height {
            return Err(format!(
                "patch has {} control points; {} x {} needs {}",
                self.points.len(),
                self.width,
                self.height,
                self.width * self.height
            ));
        }
        if let Some(p) = self
            .points
            .iter()
            .find(|p| !(p.is_finite() && p.abs().max_element() <= crate::geom::MAX_COORD))
        {
            return Err(format!(
                "patch control point {:?} is outside the supported coordinates (±{})",
                p.to_array(),
                crate::geom::MAX_COORD
            ));
        }
        Ok(())
    }
}

/// An entity with its key/value pairs in file order, its brushes and its patches.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MapEntity {
    /// Key/value pairs in file order.
    pub properties: Vec<(String, String)>,
    /// The brushes.
    pub brushes: Vec<Brush>,
    /// The curved patches.
    pub patches: Vec<Patch>,
    /// Source line of the entity's opening brace.
    pub line: usize,
}

impl MapEntity {
    /// First value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The `classname` key, or empty.
    pub fn classname(&self) -> &str {
        self.get("classname").unwrap_or("")
    }

    /// `origin` key as a vector, when present and well formed (three finite numbers).
    pub fn origin(&self) -> Option<DVec3> {
        let v: Vec<f64> = self
            .get("origin")?
            .split_whitespace()
            .map(|s| s.parse().ok().filter(|x: &f64| x.is_finite()))
            .collect::<Option<_>>()?;
        (v.len() == 3).then(|| DVec3::new(v[0], v[1], v[2]))
    }
}

/// A loaded map: every entity that is part of the exported map, in file order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MapData {
    /// Entities in file order.
    pub entities: Vec<MapEntity>,
    /// Entities dropped because their TrenchBroom layer is omitted from export.
    pub omitted_entities: usize,
    /// What the reader forgave (dropped faces, loose brushes), each naming its line.
    pub warnings: Vec<MapWarning>,
}

impl MapData {
    /// Parses `.map` text in any of the supported dialects.
    pub fn parse_map(text: &str) -> Result<MapData, MapError> {
        // Editors on Windows may write a UTF-8 byte-order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut map = parse::parse(text)?;
        map.omitted_entities = solidity::drop_omitted_layers(&mut map.entities);
        Ok(map)
    }

    /// Reads the entities and brushes of a compiled Quake 3 `.bsp` (IBSP version 46).
    pub fn parse_ibsp(bytes: &[u8]) -> Result<MapData, MapError> {
        ibsp::parse(bytes)
    }

    /// Reads a compiled Quake or Hexen 2 (BSP29) or Half-Life (BSP30) map, or one of
    /// Quake's large-map variants (BSP2, 2PSB): the solid leaves of its BSP trees as
    /// brushes, and its entities.
    pub fn parse_bsp29(bytes: &[u8]) -> Result<MapData, MapError> {
        bsp29::parse(bytes)
    }

    /// Picks the reader by content: `IBSP` magic (version 46, Quake 3; 38, Quake 2), BSP
    /// version 29 or 30, the `BSP2` or
    /// `2PSB` magic, or map text. Other
    /// compiled formats get an error naming their magic and version.
    pub fn parse_any(bytes: &[u8]) -> Result<MapData, MapError> {
        if q2bsp::is_q2bsp(bytes) {
            return q2bsp::parse(bytes);
        }
        if bytes.starts_with(b"IBSP") {
            return Self::parse_ibsp(bytes);
        }
        if bsp29::is_bsp29(bytes) {
            return bsp29::parse(bytes);
        }
        const OTHER: [&[u8; 4]; 5] = [b"VBSP", b"RBSP", b"FBSP", b"FAKK", b"EF2!"];
        if let Some(magic) = OTHER.iter().find(|m| bytes.starts_with(&m[..])) {
            let version = bytes
                .get(4..8)
                .map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]]).to_string())
                .unwrap_or_else(|| "(truncated)".into());
            return Err(MapError::Bsp(format!(
                "compiled map format {} version {version} is not supported (IBSP 46 and 38, BSP 29, BSP 30, BSP2 and 2PSB are)",
                String::from_utf8_lossy(&magic[..])
            )));
        }
        if bytes.len() >= 4 && std::str::from_utf8(bytes).is_err() {
            let v = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            if (0..256).contains(&v) {
                return Err(MapError::Bsp(format!(
                    "compiled map with version {v} is not supported (IBSP 46 and 38, BSP 29, BSP 30, BSP2 and 2PSB are)"
                )));
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::parse_map(text),
            Err(e) => {
                // Quake-era text: bytes past 127 are Quake's charset (the "gold" letters of
                // a `message`), not UTF-8. Read it byte for byte as Latin-1: every byte is
                // one character, so the syntax, the numbers and the line count are as the
                // tools that wrote it saw them.
                let line = bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1;
                let text: String = bytes.iter().map(|&b| char::from(b)).collect();
                let mut map = Self::parse_map(&text)?;
                map.warnings.insert(
                    0,
                    MapWarning {
                        line,
                        message: format!(
                            "line {line}: map text is not UTF-8; read as Latin-1 (Quake's charset in strings)"
                        ),
                    },
                );
                Ok(map)
            }
        }
    }

    /// Brushes that are solid world geometry, by [`solidity::is_world_solid`].
    pub fn world_solid_brushes(&self) -> impl Iterator<Item = &Brush> {
        self.entities.iter().flat_map(|e| {
            let class = e.classname();
            e.brushes
                .iter()
                .filter(move |b| solidity::is_world_solid(class, b))
        })
    }

    /// Patches that are solid world geometry, by [`solidity::is_world_solid_patch`].
    pub fn world_solid_patches(&self) -> impl Iterator<Item = &Patch> {
        self.entities.iter().flat_map(|e| {
            let class = e.classname();
            e.patches
                .iter()
                .filter(move |p| solidity::is_world_solid_patch(class, p))
        })
    }

    /// Total patch count over all entities.
    pub fn patch_count(&self) -> usize {
        self.entities.iter().map(|e| e.patches.len()).sum()
    }

    /// Total brush count over all entities.
    pub fn brush_count(&self) -> usize {
        self.entities.iter().map(|e| e.brushes.len()).sum()
    }

    /// Player spawn points: the origins of `info_player_*` entities that have a usable
    /// one (three finite numbers within the supported coordinates).
    pub fn spawn_points(&self) -> Vec<DVec3> {
        self.checked_spawn_points().0
    }

    /// [`MapData::spawn_points`], with a warning naming each spawn entity left out.
    pub fn checked_spawn_points(&self) -> (Vec<DVec3>, Vec<MapWarning>) {
        let mut warnings = Vec::new();
        let mut points = Vec::new();
        for e in self
            .entities
            .iter()
            .filter(|e| e.classname().starts_with("info_player_"))
        {
            match e.origin() {
                Some(o) if o.abs().max_element() <= crate::geom::MAX_COORD => points.push(o),
                _ => warnings.push(MapWarning {
                    line: e.line,
                    message: format!(
                        "{} (line {}): origin {:?} is not three finite numbers within the \
                         supported coordinates; spawn point ignored",
                        e.classname(),
                        e.line,
                        e.get("origin").unwrap_or("")
                    ),
                }),
            }
        }
        (points, warnings)
    }
}
