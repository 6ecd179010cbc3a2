//! Reader for `.map` text: Quake standard, Valve 220, Quake 3 legacy (trailing flags),
//! Quake 3 brush primitives (`brushDef`), curved patches (`patchDef2`, `patchDef3`), and the
//! Doom 3 family (a `Version` header, `brushDef3` planes, quoted material names).
//!
//! Forgiving where editors and compilers are: a face whose points are collinear, or that
//! repeats a plane of its brush, is dropped with a warning naming its line; `;` lines are
//! comments (QuArK); brushes outside any entity join the world with a warning.
//!
//! All dialects share one face grammar: three points, an optional brush-primitive texture
//! matrix, a raw texture token (names like `{trigger` and `*04water1` exist), then texture
//! fields (numbers, Valve's `[ ... ]` axes, Quake 3's trailing flags) up to the next face.

use super::{Brush, Face, MapData, MapEntity, MapError, MapWarning, Patch, MAX_BRUSH_FACES};
use crate::geom::{planes_to_polygons, Plane, MAX_COORD};
use glam::DVec3;

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: usize,
    warnings: Vec<MapWarning>,
    /// A point of the brush being read that lies beyond the supported coordinates: the
    /// brush is dropped (a stray brush far outside a map must not refuse the map).
    far: Option<DVec3>,
}

impl<'a> Lexer<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, MapError> {
        Err(MapError::Syntax {
            line: self.line,
            message: message.into(),
        })
    }

    fn warn(&mut self, line: usize, message: String) {
        self.warnings.push(MapWarning { line, message });
    }

    /// Whether only white space precedes `pos` on its line.
    fn at_line_start(&self) -> bool {
        self.src[..self.pos]
            .iter()
            .rev()
            .take_while(|&&b| b != b'\n')
            .all(|b| b.is_ascii_whitespace())
    }

    /// Skips white space, `//` comments and `;` comment lines; returns the next byte
    /// without consuming it.
    fn peek(&mut self) -> Option<u8> {
        loop {
            let c = *self.src.get(self.pos)?;
            if c == b'\n' {
                self.line += 1;
                self.pos += 1;
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if (c == b'/' && self.src.get(self.pos + 1) == Some(&b'/'))
                || (c == b';' && self.at_line_start())
            {
                while let Some(&c) = self.src.get(self.pos) {
                    if c == b'\n' {
                        break;
                    }
                    self.pos += 1;
                }
            } else {
                return Some(c);
            }
        }
    }

    fn expect(&mut self, want: u8) -> Result<(), MapError> {
        match self.peek() {
            Some(c) if c == want => {
                self.pos += 1;
                Ok(())
            }
            Some(c) => self.err(format!(
                "expected '{}', found '{}'",
                want as char,
                self.word_preview(c)
            )),
            None => self.err(format!("expected '{}', found end of file", want as char)),
        }
    }

    fn word_preview(&self, c: u8) -> String {
        let end = self.src[self.pos..]
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .map_or(self.src.len(), |n| self.pos + n);
        let w = String::from_utf8_lossy(&self.src[self.pos..end.min(self.pos + 40)]).to_string();
        if w.is_empty() {
            (c as char).to_string()
        } else {
            w
        }
    }

    /// A whitespace-delimited token, taken raw.
    fn word(&mut self) -> Result<&'a str, MapError> {
        if self.peek().is_none() {
            return self.err("unexpected end of file");
        }
        let start = self.pos;
        while let Some(&c) = self.src.get(self.pos) {
            if c.is_ascii_whitespace() {
                break;
            }
            self.pos += 1;
        }
        // Input came from a &str and we split at ASCII white space, so this is UTF-8.
        Ok(std::str::from_utf8(&self.src[start..self.pos]).unwrap_or(""))
    }

    /// A `"..."` string; `\"` escapes a quote.
    fn quoted(&mut self) -> Result<String, MapError> {
        self.expect(b'"')?;
        let start_line = self.line;
        let mut out = Vec::new();
        loop {
            match self.src.get(self.pos) {
                None => {
                    return Err(MapError::Syntax {
                        line: start_line,
                        message: "unterminated string".into(),
                    })
                }
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') if self.src.get(self.pos + 1) == Some(&b'"') => {
                    out.push(b'"');
                    self.pos += 2;
                }
                Some(&c) => {
                    if c == b'\n' {
                        self.line += 1;
                    }
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn number(&mut self) -> Result<f64, MapError> {
        let w = self.word()?;
        match w.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => self.err(format!("expected a number, found '{w}'")),
        }
    }

    /// A point of a brush face; one beyond the supported range is noted in `far` (and
    /// clamped).
    fn point(&mut self) -> Result<DVec3, MapError> {
        self.expect(b'(')?;
        let p = DVec3::new(self.number()?, self.number()?, self.number()?);
        self.expect(b')')?;
        if p.abs().max_element() > MAX_COORD {
            // Kept within range so the face's plane stays finite; the brush is dropped.
            self.far.get_or_insert(p);
            return Ok(p.clamp(DVec3::splat(-MAX_COORD), DVec3::splat(MAX_COORD)));
        }
        Ok(p)
    }

    /// A `( a b c )` row of a brush-primitive texture matrix (any finite numbers).
    fn texture_row(&mut self) -> Result<(), MapError> {
        self.expect(b'(')?;
        for _ in 0..3 {
            self.number()?;
        }
        self.expect(b')')
    }

    /// A `( n n ... )` group of numbers (at most `max`).
    fn numbers(&mut self, max: usize, what: &str) -> Result<Vec<f64>, MapError> {
        self.expect(b'(')?;
        let mut v = Vec::new();
        while self.peek() != Some(b')') {
            if v.len() == max {
                return self.err(format!("{what} has more than {max} numbers"));
            }
            v.push(self.number()?);
        }
        self.pos += 1;
        Ok(v)
    }

    /// A texture name: quoted (Doom 3) or a raw token.
    fn texture(&mut self) -> Result<String, MapError> {
        if self.peek() == Some(b'"') {
            self.quoted()
        } else {
            Ok(self.word()?.to_string())
        }
    }

    /// The body of a patch after its keyword: `{ texture ( w h ... ) ( rows ) }`, where
    /// each of the `w` rows is `( ( x y z s t ) ... )` with `h` points.
    fn patch(&mut self, line: usize) -> Result<Patch, MapError> {
        self.expect(b'{')?;
        let texture = self.texture()?;
        let header = self.numbers(8, "patch header")?;
        let dim = |k: usize| -> Result<usize, MapError> {
            match header.get(k) {
                Some(&v) if v.fract() == 0.0 && (0.0..=1e6).contains(&v) => Ok(v as usize),
                _ => self.err(format!(
                    "patch header needs whole-number sizes, found {header:?}"
                )),
            }
        };
        let (width, height) = (dim(0)?, dim(1)?);
        // Size first, so a forged size cannot make us allocate without bound.
        Patch::check_size(width, height).map_err(|message| MapError::Syntax { line, message })?;
        let mut patch = Patch {
            width,
            height,
            points: Vec::with_capacity(width * height),
            texture,
            contents: None,
            line,
        };
        self.expect(b'(')?;
        for _ in 0..width {
            self.expect(b'(')?;
            for _ in 0..height {
                let v = self.numbers(8, "patch control point")?;
                if v.len() < 3 {
                    return self.err("patch control point needs x y z");
                }
                patch.points.push(DVec3::new(v[0], v[1], v[2]));
            }
            self.expect(b')')?;
        }
        self.expect(b')')?;
        self.expect(b'}')?;
        patch
            .check()
            .map_err(|message| MapError::Syntax { line, message })?;
        Ok(patch)
    }
}

pub(super) fn parse(text: &str) -> Result<MapData, MapError> {
    let mut lx = Lexer {
        src: text.as_bytes(),
        pos: 0,
        line: 1,
        warnings: Vec::new(),
        far: None,
    };
    let mut map = MapData::default();
    // Doom 3 family: `Version 2` (Doom 3) or `Version 3` (Quake 4) before the entities.
    if lx.peek() == Some(b'V') && lx.word_preview(b'V') == "Version" {
        lx.word()?;
        lx.number()?;
    }
    // Brushes and patches outside any entity (editor clipboard files).
    let mut loose = MapEntity {
        properties: vec![("classname".into(), "worldspawn".into())],
        ..Default::default()
    };
    while lx.peek().is_some() {
        let line = lx.line;
        let (pos, at_line) = (lx.pos, lx.line);
        lx.expect(b'{')?;
        if !matches!(lx.peek(), Some(b'"') | Some(b'{') | Some(b'}') | None) {
            (lx.pos, lx.line) = (pos, at_line);
            match parse_brush(&mut lx)? {
                Part::Brush(b) => loose.brushes.push(b),
                Part::Patch(p) => loose.patches.push(p),
                Part::Dropped => {}
            }
            lx.warn(
                line,
                format!("line {line}: brush outside any entity; treated as world geometry"),
            );
            continue;
        }
        let mut ent = MapEntity {
            line,
            ..Default::default()
        };
        loop {
            match lx.peek() {
                Some(b'"') => {
                    let k = lx.quoted()?;
                    if lx.peek() != Some(b'"') {
                        return lx.err(format!("key \"{k}\" has no value"));
                    }
                    let v = lx.quoted()?;
                    ent.properties.push((k, v));
                }
                Some(b'{') => match parse_brush(&mut lx)? {
                    Part::Brush(b) => ent.brushes.push(b),
                    Part::Patch(p) => ent.patches.push(p),
                    Part::Dropped => {}
                },
                Some(b'}') => {
                    lx.pos += 1;
                    break;
                }
                Some(_) => {
                    let w = lx.word_preview(0);
                    return lx.err(format!("expected a key, a brush or '}}', found '{w}'"));
                }
                None => {
                    return Err(MapError::Syntax {
                        line,
                        message: "entity is not closed".into(),
                    })
                }
            }
        }
        map.entities.push(ent);
    }
    if !loose.brushes.is_empty() || !loose.patches.is_empty() {
        // Into the map's world if it has one, else as the world.
        match map
            .entities
            .iter_mut()
            .find(|e| e.classname() == "worldspawn")
        {
            Some(w) => {
                w.brushes.append(&mut loose.brushes);
                w.patches.append(&mut loose.patches);
            }
            None => map.entities.insert(0, loose),
        }
    }
    map.warnings = lx.warnings;
    Ok(map)
}

/// One `{ ... }` inside an entity.
enum Part {
    Brush(Brush),
    Patch(Patch),
    /// A brush left out, with a warning.
    Dropped,
}

/// Parses one `{ ... }` inside an entity: a brush (either grammar) or a patch.
fn parse_brush(lx: &mut Lexer) -> Result<Part, MapError> {
    let line = lx.line;
    lx.expect(b'{')?;
    let mut faces = Vec::new();
    match lx.peek() {
        Some(b'(') => {
            parse_faces(lx, &mut faces)?;
        }
        Some(_) => {
            let kw = lx.word()?;
            match kw {
                "brushDef" => {
                    lx.expect(b'{')?;
                    parse_faces(lx, &mut faces)?;
                    lx.expect(b'}')?;
                }
                "brushDef3" => {
                    lx.expect(b'{')?;
                    parse_plane_faces(lx, &mut faces)?;
                    lx.expect(b'}')?;
                }
                "patchDef2" | "patchDef3" | "patchDefWS" | "patchDef3WS" => {
                    let patch = lx.patch(line)?;
                    lx.expect(b'}')?;
                    return Ok(Part::Patch(patch));
                }
                other => return lx.err(format!("unknown brush type '{other}'")),
            }
        }
        None => return lx.err("unexpected end of file in brush"),
    }
    lx.expect(b'}')?;
    if faces.len() > MAX_BRUSH_FACES {
        return Err(MapError::Syntax {
            line,
            message: format!(
                "brush has {} faces; at most {MAX_BRUSH_FACES} are supported",
                faces.len()
            ),
        });
    }
    if let Some(p) = lx.far.take() {
        lx.warn(
            line,
            format!(
                "line {line}: brush has a point ( {} {} {} ) outside the supported coordinates (±{MAX_COORD}); brush dropped",
                p.x, p.y, p.z
            ),
        );
        return Ok(Part::Dropped);
    }
    if let Some(far) = outside_range(&faces) {
        lx.warn(
            line,
            format!(
                "line {line}: brush is not closed within ±{MAX_COORD} by its planes (a corner at {far:?}: a face dropped, or a brush open or far outside the map); brush dropped"
            ),
        );
        return Ok(Part::Dropped);
    }
    Ok(Part::Brush(Brush { faces, line }))
}

/// A corner of the region the faces' planes enclose that lies beyond the supported
/// coordinates, if there is one: the planes do not bound the brush (a face was dropped,
/// or the brush was written open), or it lies far outside any map. Solid must never reach
/// past ±[`MAX_COORD`]. Brushes of fewer than four faces enclose no volume and are left
/// to the collision build, which counts them as degenerate.
fn outside_range(faces: &[Face]) -> Option<[f64; 3]> {
    if faces.len() < 4 {
        return None;
    }
    let planes: Vec<Plane> = faces.iter().map(|f| f.plane).collect();
    planes_to_polygons(&planes, 0.0)
        .iter()
        .flat_map(|(_, w)| w.iter())
        .find(|p| !p.is_finite() || p.abs().max_element() > MAX_COORD)
        .map(|p| p.to_array())
}

/// Faces up to (not including) the closing `}`.
fn parse_faces(lx: &mut Lexer, faces: &mut Vec<Face>) -> Result<(), MapError> {
    while lx.peek() == Some(b'(') {
        let line = lx.line;
        let (p1, p2, p3) = (lx.point()?, lx.point()?, lx.point()?);
        if lx.peek() == Some(b'(') {
            // Brush primitives: ( ( a b c ) ( d e f ) ) texture matrix.
            lx.expect(b'(')?;
            lx.texture_row()?;
            lx.texture_row()?;
            lx.expect(b')')?;
        }
        let texture = lx.texture()?;
        // Texture fields: numbers and Valve 220's bracketed axes.
        loop {
            match lx.peek() {
                Some(b'(') | Some(b'}') | None => break,
                Some(b'[') | Some(b']') => lx.pos += 1,
                Some(_) => {
                    lx.number()?;
                }
            }
        }
        match Plane::from_points(p1, p2, p3) {
            Some(plane) => push_face(lx, faces, Face { plane, texture }, line),
            None => lx.warn(
                line,
                format!("line {line}: face points are collinear; face dropped"),
            ),
        }
    }
    Ok(())
}

/// Adds a face unless its brush already has that plane (then it is dropped with a
/// warning: the brush is the same without it).
fn push_face(lx: &mut Lexer, faces: &mut Vec<Face>, face: Face, line: usize) {
    if faces
        .iter()
        .any(|f| f.plane.same_as(&face.plane, 1e-9, 1e-6))
    {
        lx.warn(
            line,
            format!("line {line}: face repeats a plane of its brush; face dropped"),
        );
    } else {
        faces.push(face);
    }
}

/// Doom 3 `brushDef3` faces up to the closing `}`: `( a b c d )`, the plane
/// `a·x + b·y + c·z + d = 0` with its normal out of the brush, a texture matrix
/// `( ( .. ) ( .. ) )`, a material, and trailing numbers.
fn parse_plane_faces(lx: &mut Lexer, faces: &mut Vec<Face>) -> Result<(), MapError> {
    while lx.peek() == Some(b'(') {
        let line = lx.line;
        let v = lx.numbers(4, "brushDef3 plane")?;
        if v.len() != 4 {
            return lx.err(format!("brushDef3 plane needs a b c d, found {v:?}"));
        }
        lx.expect(b'(')?;
        lx.texture_row()?;
        lx.texture_row()?;
        lx.expect(b')')?;
        let texture = lx.texture()?;
        while !matches!(lx.peek(), Some(b'(') | Some(b'}') | None) {
            lx.number()?;
        }
        let n = DVec3::new(v[0], v[1], v[2]);
        let len = n.length();
        if len <= 1e-9 || !len.is_finite() {
            lx.warn(
                line,
                format!("line {line}: plane normal is zero or not finite; face dropped"),
            );
            continue;
        }
        let dist = -v[3] / len;
        if dist.abs() > MAX_COORD {
            return lx.err(format!(
                "plane distance {dist} is outside the supported coordinates (±{MAX_COORD})"
            ));
        }
        let plane = Plane {
            normal: n / len,
            dist,
        };
        push_face(lx, faces, Face { plane, texture }, line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects_parse_to_the_same_planes() {
        let quake = "{\n\"classname\" \"worldspawn\"\n{\n( 0 0 0 ) ( 0 1 0 ) ( 1 0 0 ) tex 0 0 0 1 1\n}\n}\n";
        let valve = "{\n\"classname\" \"worldspawn\"\n{\n( 0 0 0 ) ( 0 1 0 ) ( 1 0 0 ) tex [ 1 0 0 0 ] [ 0 -1 0 0 ] 0 1 1\n}\n}\n";
        let q3 = "{\n\"classname\" \"worldspawn\"\n{\n( 0 0 0 ) ( 0 1 0 ) ( 1 0 0 ) tex 0 0 0 0.5 0.5 0 0 0\n}\n}\n";
        let bp = "{\n\"classname\" \"worldspawn\"\n{\nbrushDef\n{\n( 0 0 0 ) ( 0 1 0 ) ( 1 0 0 ) ( ( 0.03 0 0 ) ( 0 0.03 0 ) ) tex 0 0 0\n}\n}\n}\n";
        let planes: Vec<_> = [quake, valve, q3, bp]
            .iter()
            .map(|t| parse(t).unwrap().entities[0].brushes[0].faces[0].clone())
            .collect();
        for f in &planes {
            assert_eq!(f.texture, "tex");
            // (p3 - p1) x (p2 - p1) = x cross y = +z... downward? (1,0,0)x(0,1,0) = +z.
            assert_eq!(f.plane.normal, DVec3::Z);
            assert_eq!(f.plane.dist, 0.0);
        }
    }

    #[test]
    fn patches_are_read_with_their_grid() {
        let rows: String = (0..3)
            .map(|i| {
                let pts: String = (0..5)
                    .map(|j| format!("( {i} {j} {} 0 0 ) ", i * j))
                    .collect();
                format!("( {pts})\n")
            })
            .collect();
        for (kw, header) in [
            ("patchDef2", "( 3 5 0 0 0 )"),
            ("patchDef3", "( 3 5 4 4 0 0 0 )"),
        ] {
            let t = format!(
                "{{\n\"classname\" \"worldspawn\"\n{{\n{kw}\n{{\nbase/tex\n{header}\n(\n{rows})\n}}\n}}\n}}\n"
            );
            let m = parse(&t).unwrap();
            let p = &m.entities[0].patches[0];
            assert_eq!((p.width, p.height, p.line), (3, 5, 3));
            assert_eq!(p.texture, "base/tex");
            assert_eq!(p.point(2, 4), DVec3::new(2.0, 4.0, 8.0));
            assert_eq!(m.entities[0].brushes.len(), 0);
        }
        // Even sizes and short grids are refused with the patch's line.
        let bad =
            "{\n\"classname\" \"worldspawn\"\n{\npatchDef2\n{\nt\n( 4 3 0 0 0 )\n(\n)\n}\n}\n}\n";
        assert!(matches!(parse(bad), Err(MapError::Syntax { line: 3, .. })));
        let short = "{\n{\npatchDef2\n{\nt\n( 3 3 0 0 0 )\n(\n( ( 0 0 0 ) ( 1 0 0 ) ( 2 0 0 ) )\n)\n}\n}\n}\n";
        assert!(parse(short).is_err());
    }

    #[test]
    fn errors_name_the_line() {
        let t = "{\n\"classname\" \"worldspawn\"\n{\n( 0 0 0 ) ( 0 x 0 ) ( 1 0 0 ) tex 0 0 0 1 1\n}\n}\n";
        assert_eq!(
            parse(t).unwrap_err(),
            MapError::Syntax {
                line: 4,
                message: "expected a number, found 'x'".into()
            }
        );
        assert!(matches!(
            parse("{\n\"a\" \"b\"\n"),
            Err(MapError::Syntax { line: 1, .. })
        ));
        // A face of collinear points is forgiven: dropped, with a warning naming its line.
        let m = parse("{\n{\n( 0 0 0 ) ( 0 0 0 ) ( 1 0 0 ) t\n}\n}").unwrap();
        assert_eq!(m.warnings[0].line, 3);
        assert!(m.entities[0].brushes[0].faces.is_empty());
    }
}
