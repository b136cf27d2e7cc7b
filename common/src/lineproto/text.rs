//! Tokens of a line: ranges of the input, or of a parser's scratch buffer
//! when escapes had to be removed.

/// A token: either a range of the input or of the parser's scratch buffer
/// (when it had escapes to remove).
#[derive(Debug, Clone, Copy)]
pub(super) enum Text {
    Input(u32, u32),
    Scratch(u32, u32),
}

impl Text {
    #[inline]
    pub(super) fn get<'s>(self, input: &'s [u8], scratch: &'s [u8]) -> &'s [u8] {
        match self {
            Text::Input(s, e) => &input[s as usize..e as usize],
            Text::Scratch(s, e) => &scratch[s as usize..e as usize],
        }
    }
}

/// Bytes that a backslash escapes in a measurement.
pub(super) const MEASUREMENT_ESCAPES: &[u8] = b", \\";
/// Bytes that a backslash escapes in tag keys, tag values and field keys.
pub(super) const KEY_ESCAPES: &[u8] = b",= \\";

/// Copies `raw` into `scratch` without the escaping backslashes.
fn unescape_into(scratch: &mut Vec<u8>, raw: &[u8], escapes: &[u8]) -> Text {
    let start = scratch.len();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'\\' && i + 1 < raw.len() && escapes.contains(&raw[i + 1]) {
            scratch.push(raw[i + 1]);
            i += 2;
        } else {
            scratch.push(b);
            i += 1;
        }
    }
    Text::Scratch(start as u32, scratch.len() as u32)
}

pub(super) fn text_of(
    scratch: &mut Vec<u8>,
    input: &[u8],
    start: usize,
    end: usize,
    escaped: bool,
    escapes: &[u8],
) -> Text {
    if escaped {
        unescape_into(scratch, &input[start..end], escapes)
    } else {
        Text::Input(start as u32, end as u32)
    }
}

/// Error messages stay short even for absurd lines: at most 64 characters
/// of a value, then `…(N bytes)`.
pub(super) fn lossy(b: &[u8]) -> String {
    crate::names::excerpt(b)
}
