//! Reading the files a command is given, and showing their bytes in messages: every
//! input is read with a size limit (`/dev/zero` is a valid path), and control bytes
//! from an input are escaped before they reach a terminal.

use std::borrow::Cow;
use std::io::Read;

/// The largest machine profile read (the built-in ones are about 5 KiB).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;
/// The largest report or result file `compare` reads.
pub const MAX_REPORT_BYTES: u64 = 64 << 20;

/// The bytes of `path` (a file, pipe or device), refused past `max` without holding
/// more than `max + 1` bytes; the message names no path (the caller adds it).
pub fn read_limited(path: &str, max: u64) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "larger than the {} this input may be",
            crate::hostmem::fmt_bytes(max)
        ));
    }
    Ok(bytes)
}

/// `read_limited` as UTF-8 text.
pub fn read_text(path: &str, max: u64) -> Result<String, String> {
    String::from_utf8(read_limited(path, max)?)
        .map_err(|e| format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
}

/// `s` with every control character but newline and tab written as an escape (`\u{1b}`),
/// so an input's ESC, BEL or NUL cannot drive the terminal a message is printed on.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_escaped) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| {
                if is_escaped(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

fn is_escaped(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// A token as an error message shows it: control characters escaped, at most its
/// first 40 characters, then `…` and its length, so a megabyte-long token does not
/// come back whole.
pub struct Echo<'a>(pub &'a str);

impl std::fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        const SHOWN: usize = 40;
        match self.0.char_indices().nth(SHOWN) {
            None => f.write_str(&escape_controls(self.0)),
            Some((end, _)) => write!(f, "{}… ({} bytes)", escape_controls(&self.0[..end]), self.0.len()),
        }
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_past_their_limit_are_refused_without_reading_them_whole() {
        let e = read_limited("/dev/zero", 1 << 20).unwrap_err();
        assert_eq!(e, "larger than the 1.0 MiB this input may be");
        assert!(read_limited("/nonexistent/x", 10)
            .unwrap_err()
            .starts_with("cannot read: "));
        assert!(read_text("/proc/self/stat", 1 << 20).is_ok());
    }

    #[test]
    fn control_bytes_are_escaped_and_long_tokens_cut() {
        assert_eq!(escape_controls("a\x1b[2Jb\x07\0\n\t"), "a\\u{1b}[2Jb\\u{7}\\u{0}\n\t");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(Echo("x\x1by").to_string(), "x\\u{1b}y");
        let long = "a".repeat(100);
        assert_eq!(Echo(&long).to_string(), format!("{}… (100 bytes)", "a".repeat(40)));
    }

    #[test]
    fn positions_count_lines_and_characters() {
        assert_eq!(line_col("ab\ncé\nd", 0), (1, 1));
        assert_eq!(line_col("ab\ncé\nd", 3), (2, 1));
        assert_eq!(line_col("ab\ncé\nd", 7), (3, 1));
        assert_eq!(line_col("ab\ncé\nd", 5), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}
