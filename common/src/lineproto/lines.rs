//! A request body as lines.

/// Whether `body` is valid UTF-8 (exactly `std::str::from_utf8(body).is_ok()`),
/// checked with SIMD: a whole request body is validated once this way, and
/// only a body that fails is checked again line by line.
#[inline]
pub fn is_utf8(body: &[u8]) -> bool {
    simdutf8::basic::from_utf8(body).is_ok()
}

/// Iterates the lines of a body as `(line_number, line)`, 1-based, skipping
/// empty lines and `#` comments, with a trailing `\r` and leading blanks
/// removed.
pub fn lines(body: &[u8]) -> Lines<'_> {
    Lines {
        body,
        pos: 0,
        line_no: 0,
    }
}

/// Iterator returned by [`lines`].
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    body: &'a [u8],
    /// Start of the next line; `body.len() + 1` once the last line is out.
    pos: usize,
    line_no: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a [u8])> {
        let body = self.body;
        while self.pos <= body.len() {
            let start = self.pos;
            let end = match memchr::memchr(b'\n', &body[start..]) {
                Some(i) => start + i,
                None => body.len(),
            };
            self.pos = end + 1;
            self.line_no += 1;
            let line = &body[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(first) = line.iter().position(|&b| b != b' ' && b != b'\t') else {
                continue;
            };
            let line = &line[first..];
            if line[0] != b'#' {
                return Some((self.line_no, line));
            }
        }
        None
    }
}
