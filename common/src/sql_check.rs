//! The statement check of `/api/v1/sql`: one read-only `SELECT`, decided
//! on ClickHouse's tokens, not on raw text. Defence in depth: the nodes
//! also run queries read-only.
//!
//! The lexer follows ClickHouse's own (`src/Parsers/Lexer.cpp`) wherever
//! it matters for what is code and what is not: single-quoted strings and
//! `"`/`` ` `` quoted identifiers (each with `\` escapes and doubled
//! quotes), `x'..'`/`b'..'` literals, `--`, `//`, `# ` and `#!` line
//! comments and nested `/* */` comments. Where it cannot be sure it agrees
//! with ClickHouse, it refuses the statement instead of guessing: `$`
//! (heredoc strings, `$` in names), a `#` that is not a comment, an
//! unterminated string or comment, and `--` right after a number's
//! exponent letter (`1e--1`: ClickHouse reads `1e-` as a number).
//!
//! Accepted: exactly one statement whose first keyword (after any `(`) is
//! `SELECT` or `WITH`, with an optional trailing `;`. Refused, naming what
//! was found and where:
//! - a second statement, or any other first keyword;
//! - a `SETTINGS` clause (the bare word anywhere) and `INTO OUTFILE`;
//! - any identifier followed by `(` (a function call, anywhere in the
//!   statement, not only after FROM/JOIN) whose name, compared
//!   case-insensitively, is one of [`FORBIDDEN_FUNCTIONS`]: the table
//!   functions that read outside the database (files, URLs, object
//!   stores, other servers, processes, dictionaries, other tables).

/// Functions (table functions, and the `file` scalar function) that read
/// outside the shard's database. Compared in lower case.
pub const FORBIDDEN_FUNCTIONS: &[&str] = &[
    "file",
    "filecluster",
    "url",
    "urlcluster",
    "s3",
    "s3cluster",
    "gcs",
    "oss",
    "cosn",
    "hdfs",
    "hdfscluster",
    "azureblobstorage",
    "azureblobstoragecluster",
    "deltalake",
    "deltalakes3",
    "deltalakeazure",
    "deltalakelocal",
    "deltalakecluster",
    "iceberg",
    "icebergs3",
    "icebergazure",
    "iceberghdfs",
    "iceberglocal",
    "icebergcluster",
    "icebergs3cluster",
    "icebergazurecluster",
    "iceberghdfscluster",
    "hudi",
    "hudicluster",
    "paimon",
    "remote",
    "remotesecure",
    "cluster",
    "clusterallreplicas",
    "executable",
    "input",
    "jdbc",
    "odbc",
    "mysql",
    "postgresql",
    "sqlite",
    "mongodb",
    "redis",
    "arrowflight",
    "ytsaurus",
    "dictionary",
    "merge",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bare word: keyword, identifier or number (word characters).
    Word,
    /// `"..."` or `` `...` ``.
    QuotedIdent,
    /// `'...'`, `x'..'`, `b'..'`.
    Str,
    Semicolon,
    /// Any other single character.
    Punct(char),
}

#[derive(Debug, Clone, Copy)]
pub struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// Line and column (1-based, columns in characters) of byte `at`.
pub fn at_pos(q: &str, at: usize) -> String {
    let before = &q[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {col}")
}

fn shown(text: &str) -> String {
    crate::names::excerpt(text.as_bytes())
}

/// End of a quoted string or identifier starting at `start` (the quote),
/// as ClickHouse reads it: `\` escapes the next byte, a doubled quote is
/// one quote.
fn quoted_end(b: &[u8], start: usize) -> Option<usize> {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            c if c == quote => {
                if b.get(i + 1) == Some(&quote) {
                    i += 2;
                    continue;
                }
                return Some(i + 1);
            }
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

pub fn lex(q: &str) -> Result<Vec<Token>, String> {
    let b = q.as_bytes();
    let n = b.len();
    let mut out = Vec::new();
    let mut i = 0;
    let line_end = |from: usize| memchr_nl(b, from);
    while i < n {
        let c = b[i];
        let start = i;
        let next = b.get(i + 1).copied();
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'\x0b' => {
                i += 1;
                continue;
            }
            b'\'' | b'"' | b'`' => {
                let token = quoted(q, start)?;
                i = token.end;
                out.push(token);
            }
            b'-' if next == Some(b'-') => {
                if exponent_before(b, i) {
                    return Err(format!(
                        "ambiguous `--` right after a number's exponent at {} (ClickHouse \
                         reads `e-` as part of the number); put a space before the comment",
                        at_pos(q, start)
                    ));
                }
                i = line_end(i);
            }
            b'/' if next == Some(b'/') => i = line_end(i),
            b'/' if next == Some(b'*') => i = block_comment_end(q, start)?,
            b'#' => {
                if matches!(next, Some(b' ' | b'!')) {
                    i = line_end(i);
                } else {
                    return Err(format!(
                        "`#` at {} is not a comment (ClickHouse comments are `-- `, `# ` or \
                         `/* */`)",
                        at_pos(q, start)
                    ));
                }
            }
            b'$' => {
                return Err(format!(
                    "`$` at {} is not supported here (heredoc strings, `$` in names); use \
                     single-quoted strings and backquoted names",
                    at_pos(q, start)
                ));
            }
            b';' => {
                out.push(Token {
                    kind: Kind::Semicolon,
                    start,
                    end: i + 1,
                });
                i += 1;
            }
            b'x' | b'X' | b'b' | b'B' if next == Some(b'\'') => {
                let token = digits_string(q, start)?;
                i = token.end;
                out.push(token);
            }
            c if is_word(c) => {
                while i < n && is_word(b[i]) {
                    i += 1;
                }
                out.push(Token {
                    kind: Kind::Word,
                    start,
                    end: i,
                });
            }
            _ => {
                let ch = q[i..].chars().next().expect("at a char boundary");
                i += ch.len_utf8();
                if ch.is_whitespace() {
                    continue;
                }
                out.push(Token {
                    kind: Kind::Punct(ch),
                    start,
                    end: i,
                });
            }
        }
    }
    Ok(out)
}

/// The string or quoted identifier whose quote is at `q[start]`.
fn quoted(q: &str, start: usize) -> Result<Token, String> {
    let c = q.as_bytes()[start];
    let Some(end) = quoted_end(q.as_bytes(), start) else {
        let what = match c {
            b'\'' => "string",
            b'"' => "double-quoted identifier",
            _ => "backquoted identifier",
        };
        return Err(format!(
            "unterminated {what} starting at {}",
            at_pos(q, start)
        ));
    };
    let kind = if c == b'\'' {
        Kind::Str
    } else {
        Kind::QuotedIdent
    };
    Ok(Token { kind, start, end })
}

/// The index just after the `/* */` comment opening at `q[start]`
/// (nested, as in ClickHouse).
fn block_comment_end(q: &str, start: usize) -> Result<usize, String> {
    let b = q.as_bytes();
    let mut depth = 1usize;
    let mut i = start + 2;
    while depth > 0 {
        if i + 1 >= b.len() {
            return Err(format!(
                "unterminated `/*` comment starting at {}",
                at_pos(q, start)
            ));
        }
        if b[i] == b'/' && b[i + 1] == b'*' {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            depth -= 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    Ok(i)
}

/// The `x'4142'` or `b'0101'` literal at `q[start]`: ClickHouse reads
/// digits up to a quote.
fn digits_string(q: &str, start: usize) -> Result<Token, String> {
    let b = q.as_bytes();
    let hex = matches!(b[start], b'x' | b'X');
    let mut j = start + 2;
    while j < b.len()
        && (if hex {
            b[j].is_ascii_hexdigit()
        } else {
            matches!(b[j], b'0' | b'1')
        })
    {
        j += 1;
    }
    if b.get(j) != Some(&b'\'') {
        return Err(format!(
            "invalid or unterminated {} string literal at {}",
            if hex { "hex" } else { "binary" },
            at_pos(q, start)
        ));
    }
    Ok(Token {
        kind: Kind::Str,
        start,
        end: j + 1,
    })
}

/// Index of the next `\n` at or after `from`, or the end.
fn memchr_nl(b: &[u8], from: usize) -> usize {
    b[from..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| from + p)
}

/// Whether the `--` at `at` follows an exponent letter of a number: the
/// byte before is `e`/`E`/`p`/`P` and the run of word characters and dots
/// it ends starts with a digit or a dot (a number, as ClickHouse lexes it).
fn exponent_before(b: &[u8], at: usize) -> bool {
    if at == 0 || !matches!(b[at - 1], b'e' | b'E' | b'p' | b'P') {
        return false;
    }
    let mut s = at - 1;
    while s > 0 && (is_word(b[s - 1]) || b[s - 1] == b'.') {
        s -= 1;
    }
    b[s].is_ascii_digit() || b[s] == b'.'
}

/// The name of a quoted identifier without its quotes (doubled quotes
/// collapsed), or `None` when it has a backslash escape (which ClickHouse
/// would decode, e.g. `\x66`).
pub fn unquote(raw: &str) -> Option<String> {
    let quote = raw.chars().next()?;
    let inner = &raw[1..raw.len() - 1];
    if inner.contains('\\') {
        return None;
    }
    Some(inner.replace(&format!("{quote}{quote}"), &quote.to_string()))
}

/// Checks `q` (see the module doc) and returns the statement to run: from
/// its first token to its last, without a trailing `;` or comments.
pub fn check_select(q: &str) -> Result<String, String> {
    let tokens = lex(q)?;
    let Some(first) = tokens.first() else {
        return Err("empty query: send one SELECT statement".into());
    };
    // One statement: a `;` may only be the last token.
    let mut end = tokens.len();
    if let Some(s) = tokens.iter().position(|t| t.kind == Kind::Semicolon) {
        if s + 1 < tokens.len() {
            let more = &tokens[s + 1];
            return Err(format!(
                "send one statement per request: `;` at {} is followed by {:?} at {}",
                at_pos(q, tokens[s].start),
                shown(&q[more.start..more.end]),
                at_pos(q, more.start)
            ));
        }
        end = s;
    }
    let tokens = &tokens[..end];
    let text = |t: &Token| &q[t.start..t.end];
    // The first keyword, after any opening brackets.
    let lead = tokens
        .iter()
        .find(|t| t.kind != Kind::Punct('('))
        .unwrap_or(first);
    let keyword_ok = lead.kind == Kind::Word
        && ["select", "with"]
            .iter()
            .any(|k| text(lead).eq_ignore_ascii_case(k));
    if !keyword_ok {
        return Err(format!(
            "only SELECT statements (or WITH ... SELECT) are allowed here, found {:?} at {}",
            shown(text(lead)),
            at_pos(q, lead.start)
        ));
    }
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1);
        match t.kind {
            Kind::Word if text(t).eq_ignore_ascii_case("settings") => {
                return Err(format!(
                    "SETTINGS clauses are not allowed here (found at {}): queries run with \
                     the nodes' settings",
                    at_pos(q, t.start)
                ));
            }
            Kind::Word
                if text(t).eq_ignore_ascii_case("into")
                    && next.is_some_and(|n| {
                        n.kind == Kind::Word && text(n).eq_ignore_ascii_case("outfile")
                    }) =>
            {
                return Err(format!(
                    "INTO OUTFILE is not allowed here (found at {})",
                    at_pos(q, t.start)
                ));
            }
            Kind::Word | Kind::QuotedIdent if next.is_some_and(|n| n.kind == Kind::Punct('(')) => {
                let name = if t.kind == Kind::Word {
                    text(t).to_owned()
                } else {
                    match unquote(text(t)) {
                        Some(n) => n,
                        None => {
                            return Err(format!(
                                "a quoted function name with escape sequences is not allowed \
                                 here: {:?} at {}",
                                shown(text(t)),
                                at_pos(q, t.start)
                            ))
                        }
                    }
                };
                let lower = name.to_ascii_lowercase();
                if FORBIDDEN_FUNCTIONS.contains(&lower.as_str()) {
                    return Err(format!(
                        "function {:?} at {} reads outside the database and is not allowed \
                         here (only the shard's tables can be queried)",
                        shown(&name),
                        at_pos(q, t.start)
                    ));
                }
            }
            _ => {}
        }
    }
    let last = tokens.last().expect("at least the first keyword");
    Ok(q[first.start..last.end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_statements_and_what_is_sent() {
        let cases: &[(&str, &str)] = &[
            ("SELECT 1", "SELECT 1"),
            (" select 1; ", "select 1"),
            ("SELECT 1;  -- done", "SELECT 1"),
            ("SELECT 1 -- trailing comment", "SELECT 1"),
            (
                "WITH x AS (SELECT 1) SELECT * FROM x",
                "WITH x AS (SELECT 1) SELECT * FROM x",
            ),
            ("with 2 as y select y", "with 2 as y select y"),
            (
                "(SELECT 1) UNION ALL (SELECT 2)",
                "(SELECT 1) UNION ALL (SELECT 2)",
            ),
            ("SELECT 'a;b'", "SELECT 'a;b'"),
            ("SELECT * FROM `a;b`", "SELECT * FROM `a;b`"),
            (
                "SELECT * FROM \"a;b\" FINAL;",
                "SELECT * FROM \"a;b\" FINAL",
            ),
            (
                "SELECT 'it''s; ok', 'x\\';y'",
                "SELECT 'it''s; ok', 'x\\';y'",
            ),
            ("SELECT `a``;b`", "SELECT `a``;b`"),
            ("/* c; */ SELECT 1", "SELECT 1"),
            (
                "SELECT /* a /* nested; */ b; */ 1",
                "SELECT /* a /* nested; */ b; */ 1",
            ),
            ("SELECT 1 # comment; x\n", "SELECT 1"),
            ("SELECT 1 // comment; x", "SELECT 1"),
            ("SELECT x'3B', b'0101'", "SELECT x'3B', b'0101'"),
            ("SELECT * FROM numbers(3)", "SELECT * FROM numbers(3)"),
            (
                "SELECT count() FROM cpu WHERE host = 'file('",
                "SELECT count() FROM cpu WHERE host = 'file('",
            ),
            ("SELECT file_size FROM t", "SELECT file_size FROM t"),
            ("SELECT `settings` FROM t", "SELECT `settings` FROM t"),
            ("SELECT some_value--comment\n", "SELECT some_value"),
            ("SELECT 1e-5, 2.5e+3", "SELECT 1e-5, 2.5e+3"),
            ("SELECT 'é' AS ü", "SELECT 'é' AS ü"),
            (
                "SELECT toDateTime64(time, 9, 'UTC') FROM cpu",
                "SELECT toDateTime64(time, 9, 'UTC') FROM cpu",
            ),
        ];
        for (q, want) in cases {
            assert_eq!(check_select(q).as_deref(), Ok(*want), "{q:?}");
        }
    }

    #[test]
    fn refused_statements_name_what_and_where() {
        let cases: &[(&str, &str)] = &[
            ("", "empty query"),
            ("  -- only a comment", "empty query"),
            (
                "INSERT INTO t VALUES (1)",
                "found \"INSERT\" at line 1, column 1",
            ),
            ("DROP TABLE cpu", "found \"DROP\""),
            (
                "  (INSERT INTO t VALUES (1))",
                "found \"INSERT\" at line 1, column 4",
            ),
            ("EXPLAIN SELECT 1", "found \"EXPLAIN\""),
            (
                "select 1; drop table x",
                "`;` at line 1, column 9 is followed by \"drop\"",
            ),
            ("SELECT 1;;", "is followed by \";\""),
            ("SELECT 1;\nSELECT 2", "at line 2, column 1"),
            ("SELECT 'a", "unterminated string"),
            ("SELECT `a", "unterminated backquoted identifier"),
            ("SELECT \"a", "unterminated double-quoted identifier"),
            ("SELECT 'a\\'", "unterminated string"),
            ("SELECT 1 /* a /* b */", "unterminated `/*` comment"),
            (
                "SELECT * FROM file('/etc/passwd', 'LineAsString')",
                "function \"file\" at line 1, column 15",
            ),
            (
                "SELECT * FROM url('http://127.0.0.1:8086/health', 'JSONAsString')",
                "function \"url\"",
            ),
            ("SELECT * FROM cpu, s3('http://x/y')", "function \"s3\""),
            (
                "SELECT * FROM executable('x', 'TSV', 'a String')",
                "function \"executable\"",
            ),
            ("SELECT * FROM REMOTE ('h', db.t)", "function \"REMOTE\""),
            ("SELECT * FROM file /* c */ ('x')", "function \"file\""),
            ("SELECT * FROM `file`('x')", "function \"file\""),
            ("SELECT * FROM \"url\"('x')", "function \"url\""),
            ("SELECT * FROM `\\x66ile`('x')", "escape sequences"),
            ("SELECT file('/etc/passwd')", "function \"file\""),
            (
                "SELECT * FROM merge('shard_.*', '.*')",
                "function \"merge\"",
            ),
            (
                "SELECT * FROM t WHERE x IN (SELECT * FROM mysql('h', 'd', 't', 'u', 'p'))",
                "function \"mysql\"",
            ),
            ("SELECT * FROM dictionary('d')", "function \"dictionary\""),
            ("SELECT * FROM input('x String')", "function \"input\""),
            (
                "SELECT * FROM cluster('c', system.one)",
                "function \"cluster\"",
            ),
            (
                "SELECT * FROM azureBlobStorage('x')",
                "function \"azureBlobStorage\"",
            ),
            (
                "SELECT 1 SETTINGS readonly = 0",
                "SETTINGS clauses are not allowed here (found at line 1, column 10)",
            ),
            ("SELECT * FROM t settings max_threads=1", "SETTINGS clauses"),
            (
                "SELECT 1 INTO OUTFILE '/tmp/x'",
                "INTO OUTFILE is not allowed here (found at line 1, column 10)",
            ),
            ("SELECT 1 into /* c */ outfile '/tmp/x'", "INTO OUTFILE"),
            ("SELECT $$a$$", "`$` at line 1, column 8"),
            ("SELECT $$'$$, file('/etc/passwd') --'", "`$`"),
            ("SELECT 1 #, 2", "`#` at line 1, column 10 is not a comment"),
            ("SELECT 1e--, file('/etc/passwd')", "ambiguous `--`"),
            ("SELECT 0x1.p--1", "ambiguous `--`"),
            ("SELECT x'zz'", "invalid or unterminated hex string"),
            // What a string or a comment hides stays hidden, and only that.
            (
                "SELECT 'x' --\n, file('/etc/passwd')",
                "function \"file\" at line 2, column 3",
            ),
            ("SELECT 'a''b', file('x')", "function \"file\""),
            ("SELECT /* /* */ */ file('x')", "function \"file\""),
        ];
        for (q, want) in cases {
            match check_select(q) {
                Ok(s) => panic!("{q:?} should be refused, got {s:?}"),
                Err(e) => assert!(e.contains(want), "{q:?}: {e:?} should contain {want:?}"),
            }
        }
    }

    #[test]
    fn echoed_text_is_bounded() {
        let q = format!("{} 1", "X".repeat(100_000));
        let e = check_select(&q).unwrap_err();
        assert!(e.len() < 300, "{} bytes", e.len());
        assert!(e.contains("…(100000 bytes)"), "{e}");
    }
}
