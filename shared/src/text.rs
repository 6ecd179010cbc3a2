//! Text from players made safe to draw: what a game shows of one player to the others
//! (chat lines, names) must not reorder, hide or paint over the text around it.

/// Most combining marks kept on one character: enough for any language's stacked
/// diacritics (Vietnamese takes two, pointed Hebrew three), not for "Zalgo" text.
pub const MOST_MARKS: usize = 3;

/// `s` as one clean line for display, at most `most` characters: without control
/// characters (C0, C1), line and paragraph separators, bidirectional embeddings,
/// overrides, isolates and marks (which would reorder the text drawn after it),
/// zero-width and other invisible characters (which hide what a line says or who says
/// it), and with at most [`MOST_MARKS`] combining marks on any character.
pub fn display_line(s: &str, most: usize) -> String {
    let mut out = String::with_capacity(s.len().min(most * 4));
    let mut marks = 0;
    let mut kept = 0;
    for c in s.chars() {
        if kept >= most {
            break;
        }
        if c.is_control() || invisible(c) {
            continue;
        }
        if combining(c) {
            // A mark with nothing to sit on is dropped too.
            if kept == 0 || marks >= MOST_MARKS {
                continue;
            }
            marks += 1;
        } else {
            marks = 0;
        }
        out.push(c);
        kept += 1;
    }
    out
}

/// Format and layout characters that draw nothing themselves or change how the rest is
/// drawn.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'                  // soft hyphen
        | '\u{034F}'                // combining grapheme joiner
        | '\u{061C}'                // Arabic letter mark
        | '\u{115F}' | '\u{1160}'   // Hangul fillers
        | '\u{17B4}' | '\u{17B5}'   // Khmer inherent vowels
        | '\u{180E}'                // Mongolian vowel separator
        | '\u{200B}'..='\u{200F}'   // zero-width space, joiners, LRM, RLM
        | '\u{2028}'..='\u{202E}'   // line and paragraph separators, embeddings, overrides
        | '\u{2060}'..='\u{206F}'   // word joiner, invisible operators, isolates
        | '\u{3164}'                // Hangul filler
        | '\u{FE00}'..='\u{FE0F}'   // variation selectors
        | '\u{FEFF}'                // zero-width no-break space
        | '\u{FFA0}'                // halfwidth Hangul filler
        | '\u{FFF9}'..='\u{FFFB}'   // interlinear annotation
        | '\u{E0000}'..='\u{E0FFF}' // tags, variation selectors supplement
    )
}

/// Combining marks of the blocks that stack on any letter.
fn combining(c: char) -> bool {
    matches!(
        c,
        '\u{0300}'..='\u{036F}'
            | '\u{0483}'..='\u{0489}'
            | '\u{0591}'..='\u{05BD}'
            | '\u{0610}'..='\u{061A}'
            | '\u{064B}'..='\u{065F}'
            | '\u{1AB0}'..='\u{1AFF}'
            | '\u{1DC0}'..='\u{1DFF}'
            | '\u{20D0}'..='\u{20FF}'
            | '\u{FE20}'..='\u{FE2F}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_reorders_hides_or_stacks_is_taken_out() {
        // A bidi override that would show "gg" the other way round and everything after.
        assert_eq!(display_line("hi \u{202E}gg\u{202C} all", 200), "hi gg all");
        assert_eq!(
            display_line("\u{2066}a\u{2069}\u{200F}b\u{061C}", 200),
            "ab"
        );
        // Zero-width characters that hide a word or forge a name.
        assert_eq!(
            display_line("ad\u{200B}m\u{200D}i\u{FEFF}n\u{2060}", 200),
            "admin"
        );
        // Line separators and controls: one line.
        assert_eq!(
            display_line("one\u{2028}two\u{2029}three\nfour\r\u{85}", 200),
            "onetwothreefour"
        );
        // 199 accents on one letter keep three; two on a Vietnamese letter stay.
        let zalgo = format!("a{}b", "\u{0301}".repeat(199));
        assert_eq!(display_line(&zalgo, 200), "a\u{0301}\u{0301}\u{0301}b");
        assert_eq!(
            display_line("Vie\u{0323}\u{0302}t", 200),
            "Vie\u{0323}\u{0302}t"
        );
        // A mark with nothing under it goes.
        assert_eq!(display_line("\u{0301}x", 200), "x");
        // The limit counts what is kept.
        assert_eq!(display_line(&"\u{200B}x".repeat(300), 5), "xxxxx");
        assert_eq!(
            display_line("héllo wörld ✓ 日本", 200),
            "héllo wörld ✓ 日本"
        );
    }
}
