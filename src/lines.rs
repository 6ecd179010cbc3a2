//! Line-oriented input with a bound on line length, so no input can make us buffer
//! without limit.

use std::io::{BufRead, Read};

/// One line of input.
pub(crate) enum Line {
    /// A line (without its end-of-line bytes).
    Text(String),
    /// A line longer than the limit; the rest of it was skipped unread.
    TooLong,
    /// A line that is not UTF-8.
    NotUtf8,
}

/// Reads lines of at most `max` bytes from `input`, numbering them from 1.
pub(crate) struct Lines<R> {
    input: R,
    max: usize,
    buf: Vec<u8>,
    /// Number of the line last returned.
    pub number: u64,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R, max: usize) -> Self {
        Lines {
            input,
            max,
            buf: Vec::new(),
            number: 0,
        }
    }

    /// The next line, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        self.buf.clear();
        let n = (&mut self.input)
            .take(self.max as u64 + 1)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        if self.buf.len() > self.max && self.buf.last() != Some(&b'\n') {
            // Skip the rest of the over-long line in bounded pieces.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                let k = (&mut self.input)
                    .take(self.max as u64)
                    .read_until(b'\n', &mut rest)?;
                if k == 0 || rest.last() == Some(&b'\n') {
                    break;
                }
            }
            return Ok(Some(Line::TooLong));
        }
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        Ok(Some(match std::str::from_utf8(&self.buf) {
            Ok(s) => Line::Text(s.to_string()),
            Err(_) => Line::NotUtf8,
        }))
    }
}

/// Answers every line of `input` with one JSON line on `out`, so replies stay paired
/// with requests: `answer`'s for a line of text, else (or when it fails) `{"error":"line
/// N: ..."}`, logged at `level` too. `each` runs after every line. Returns how many lines
/// failed.
pub(crate) fn answer_each(
    input: impl BufRead,
    mut out: impl std::io::Write,
    max: usize,
    level: tracing::Level,
    mut answer: impl FnMut(&str) -> Result<serde_json::Value, String>,
    mut each: impl FnMut(),
) -> anyhow::Result<u64> {
    let mut errors = 0u64;
    let mut lines = Lines::new(input, max);
    while let Some(line) = lines.next_line()? {
        let lineno = lines.number;
        let reply = match line {
            Line::TooLong => Err(format!("longer than {max} bytes")),
            Line::NotUtf8 => Err("not UTF-8".to_string()),
            Line::Text(s) if s.trim().is_empty() => Err("empty line".to_string()),
            Line::Text(s) => answer(s.trim()),
        };
        let v = reply.unwrap_or_else(|e| {
            errors += 1;
            let e = format!("line {lineno}: {e}");
            if level == tracing::Level::WARN {
                tracing::warn!("{e}");
            } else {
                tracing::debug!("{e}");
            }
            serde_json::json!({ "error": e })
        });
        serde_json::to_writer(&mut out, &v)?;
        out.write_all(b"\n")?;
        each();
    }
    out.flush()?;
    Ok(errors)
}

/// A point from a request's `[x, y, z]`, refused (naming `what`) when it is not finite or
/// lies outside the supported coordinates.
pub(crate) fn vec3(v: [f64; 3], what: &str) -> Result<glam::DVec3, String> {
    use expel_core::MAX_COORD;
    let d = glam::DVec3::from_array(v);
    if !d.is_finite() || d.abs().max_element() > MAX_COORD {
        return Err(format!(
            "{what} {v:?} is outside the supported range of ±{MAX_COORD}"
        ));
    }
    Ok(d)
}
