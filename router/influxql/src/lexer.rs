//! Tokens of InfluxQL. The parser pulls them one at a time because `/` is
//! ambiguous: where an operand is expected it opens a regex literal
//! (`Lexer::regex`), elsewhere it divides.

use crate::error::{ErrorKind, ParseError, Result};

/// Reserved words: unquoted they are never identifiers, and `Display` quotes
/// identifiers that spell one. InfluxDB 1.8's list, plus AND/OR/TRUE/FALSE
/// which its scanner also treats as tokens.
pub const KEYWORDS: &[&str] = &[
    "ALL",
    "ALTER",
    "ANALYZE",
    "AND",
    "ANY",
    "AS",
    "ASC",
    "BEGIN",
    "BY",
    "CARDINALITY",
    "CONTINUOUS",
    "CREATE",
    "DATABASE",
    "DATABASES",
    "DEFAULT",
    "DELETE",
    "DESC",
    "DESTINATIONS",
    "DIAGNOSTICS",
    "DISTINCT",
    "DROP",
    "DURATION",
    "END",
    "EVERY",
    "EXACT",
    "EXPLAIN",
    "FALSE",
    "FIELD",
    "FOR",
    "FROM",
    "GRANT",
    "GRANTS",
    "GROUP",
    "GROUPS",
    "IN",
    "INF",
    "INSERT",
    "INTO",
    "KEY",
    "KEYS",
    "KILL",
    "LIMIT",
    "MEASUREMENT",
    "MEASUREMENTS",
    "NAME",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "PASSWORD",
    "POLICIES",
    "POLICY",
    "PRIVILEGES",
    "QUERIES",
    "QUERY",
    "READ",
    "REPLICATION",
    "RESAMPLE",
    "RETENTION",
    "REVOKE",
    "SELECT",
    "SERIES",
    "SET",
    "SHARD",
    "SHARDS",
    "SHOW",
    "SLIMIT",
    "SOFFSET",
    "STATS",
    "SUBSCRIPTION",
    "SUBSCRIPTIONS",
    "TAG",
    "TO",
    "TRUE",
    "USER",
    "USERS",
    "VALUES",
    "WHERE",
    "WITH",
    "WRITE",
];

/// The keyword `word` spells (ASCII case-insensitive), as its upper-case
/// entry of `KEYWORDS`.
pub fn keyword(word: &str) -> Option<&'static str> {
    KEYWORDS
        .iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(word))
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    Eof,
    /// An unquoted identifier that is not a keyword.
    Ident(String),
    /// A double-quoted identifier (may spell a keyword).
    QuotedIdent(String),
    /// A reserved word, upper case.
    Keyword(&'static str),
    /// A single-quoted string, unescaped.
    Str(String),
    /// An unsigned integer literal (the sign is an operator).
    Integer(u64),
    Float(f64),
    /// A duration literal in nanoseconds.
    Duration(i64),
    /// Digits followed by letters that do not spell a duration (`0xdb0`).
    BadDuration(String),
    /// `$name`.
    Param(String),
    /// A regex literal's pattern; only produced by `Lexer::regex`.
    Regex(String),
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Amp,
    Pipe,
    Caret,
    Eq,
    /// `!=` or `<>`.
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    EqRegex,
    NotEqRegex,
    LParen,
    RParen,
    Comma,
    Semicolon,
    Dot,
    Colon,
    DoubleColon,
    Illegal(char),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned {
    pub token: Token,
    pub start: usize,
    pub end: usize,
}

/// Duration units, longest first so `ms` wins over `m`, in nanoseconds.
pub(crate) const DURATION_UNITS: &[(&str, i64)] = &[
    ("ns", 1),
    ("ms", 1_000_000),
    ("u", 1_000),
    ("µ", 1_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("w", 604_800_000_000_000),
];

/// InfluxQL's `ParseDuration` of a duration token: one or more
/// `<digits><unit>` (`90m`, `1h30m`), in nanoseconds; `None` when the text
/// is not one or overflows.
pub(crate) fn parse_duration(text: &str) -> Option<i64> {
    let mut rest = text;
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit_len, unit_ns) = if rest.starts_with("ns") {
            (2, 1)
        } else if rest.starts_with("ms") {
            (2, 1_000_000)
        } else {
            let c = rest.chars().next()?;
            let ns = DURATION_UNITS
                .iter()
                .find(|(u, _)| u.chars().count() == 1 && u.starts_with(c))?
                .1;
            (c.len_utf8(), ns)
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(unit_ns)?)?;
    }
    Some(total)
}

pub(crate) struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    /// Where the last token before the end ended, and how many characters
    /// past it InfluxDB reports a missing token (`found EOF ... char N`).
    pub last_end: usize,
    pub eof_gap: usize,
    last_was_word: bool,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl<'a> Lexer<'a> {
    pub fn new(text: &'a str) -> Self {
        Lexer {
            text,
            pos: 0,
            last_end: 0,
            eof_gap: 0,
            last_was_word: false,
        }
    }

    fn peek_char(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Records where `token` ended and where a missing token after it is
    /// reported (the tests: `eof_positions_follow_influxdb`). InfluxDB's scanner reads one character past a word (an
    /// identifier, keyword) without giving it back, so the end it reports
    /// after one is a character further than after an operator or literal;
    /// the parser's look-ahead does the same after `,`, `.`, `=~` and a
    /// call's `(` (measured against influxd 1.8.10).
    fn ended(&mut self, token: &Token) {
        let far = matches!(
            token,
            Token::Ident(_)
                | Token::Keyword(_)
                | Token::Comma
                | Token::Dot
                | Token::EqRegex
                | Token::NotEqRegex
        ) || (*token == Token::LParen && self.last_was_word);
        self.last_end = self.pos;
        self.eof_gap = if far { 2 } else { 1 };
        // A call's `(` follows a name; `SELECT (` and `AND (` do not count.
        self.last_was_word = matches!(token, Token::Ident(_));
    }

    fn error(&self, kind: ErrorKind, offset: usize) -> ParseError {
        ParseError::new(kind, self.text, offset)
    }

    /// Skips whitespace and `--` / `/* */` comments.
    fn skip_trivia(&mut self) {
        loop {
            let rest = &self.text[self.pos..];
            if let Some(c) = rest.chars().next().filter(|c| c.is_whitespace()) {
                self.pos += c.len_utf8();
            } else if rest.starts_with("--") {
                self.pos += rest.find('\n').unwrap_or(rest.len());
            } else if let Some(body) = rest.strip_prefix("/*") {
                // An unclosed comment runs to the end, as in InfluxDB.
                self.pos += body.find("*/").map_or(rest.len(), |i| i + 4);
            } else {
                return;
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Spanned> {
        self.skip_trivia();
        let start = self.pos;
        let Some(c) = self.bump() else {
            return Ok(Spanned {
                token: Token::Eof,
                start,
                end: start,
            });
        };
        let token = match c {
            c if is_ident_start(c) => {
                while self.peek_char().is_some_and(is_ident_char) {
                    self.pos += 1;
                }
                let word = &self.text[start..self.pos];
                match keyword(word) {
                    Some(k) => Token::Keyword(k),
                    None => Token::Ident(word.to_string()),
                }
            }
            '"' => Token::QuotedIdent(self.quoted('"', start, "quoted identifier")?),
            '\'' => Token::Str(self.quoted('\'', start, "string")?),
            '0'..='9' => self.number(start)?,
            '.' if self.peek_char().is_some_and(|c| c.is_ascii_digit()) => self.number(start)?,
            '$' if self.peek_char().is_some_and(is_ident_char) => {
                while self.peek_char().is_some_and(is_ident_char) {
                    self.pos += 1;
                }
                Token::Param(self.text[start + 1..self.pos].to_string())
            }
            '+' => Token::Plus,
            '-' => Token::Minus,
            '*' => Token::Star,
            '/' => Token::Slash,
            '%' => Token::Percent,
            '&' => Token::Amp,
            '|' => Token::Pipe,
            '^' => Token::Caret,
            '(' => Token::LParen,
            ')' => Token::RParen,
            ',' => Token::Comma,
            ';' => Token::Semicolon,
            '.' => Token::Dot,
            ':' if self.peek_char() == Some(':') => {
                self.pos += 1;
                Token::DoubleColon
            }
            ':' => Token::Colon,
            '=' if self.peek_char() == Some('~') => {
                self.pos += 1;
                Token::EqRegex
            }
            '=' => Token::Eq,
            '!' if self.peek_char() == Some('=') => {
                self.pos += 1;
                Token::NotEq
            }
            '!' if self.peek_char() == Some('~') => {
                self.pos += 1;
                Token::NotEqRegex
            }
            '<' if self.peek_char() == Some('=') => {
                self.pos += 1;
                Token::LtEq
            }
            '<' if self.peek_char() == Some('>') => {
                self.pos += 1;
                Token::NotEq
            }
            '<' => Token::Lt,
            '>' if self.peek_char() == Some('=') => {
                self.pos += 1;
                Token::GtEq
            }
            '>' => Token::Gt,
            other => Token::Illegal(other),
        };
        self.ended(&token);
        Ok(Spanned {
            token,
            start,
            end: self.pos,
        })
    }

    /// A quoted string or identifier; the opening quote is consumed.
    /// Escapes: `\\`, `\n`, `\'`, `\"`; a raw newline ends it with an error.
    fn quoted(&mut self, quote: char, start: usize, what: &'static str) -> Result<String> {
        let mut out = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => {
                    return Err(self.error(ErrorKind::Unterminated { what }, start));
                }
                Some(c) if c == quote => return Ok(out),
                Some('\\') => {
                    let at = self.pos - 1;
                    match self.bump() {
                        Some('\\') => out.push('\\'),
                        Some('n') => out.push('\n'),
                        Some('\'') => out.push('\''),
                        Some('"') => out.push('"'),
                        Some(other) => {
                            return Err(self.error(ErrorKind::BadEscape(other), at));
                        }
                        None => return Err(self.error(ErrorKind::Unterminated { what }, start)),
                    }
                }
                Some(c) => out.push(c),
            }
        }
    }

    fn number(&mut self, start: usize) -> Result<Token> {
        while self.peek_char().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let mut is_float = self.text[start..].starts_with('.');
        if !is_float && self.peek_char() == Some('.') {
            // `1.5`, or `1.` followed by nothing numeric; `db..m` never
            // reaches here because identifiers cannot start with a digit.
            is_float = true;
            self.pos += 1;
            while self.peek_char().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        let digits = &self.text[start..self.pos];
        if is_float {
            return digits
                .parse::<f64>()
                .map(Token::Float)
                .map_err(|_| self.error(ErrorKind::Number(digits.to_string()), start));
        }
        let value: u64 = digits
            .parse()
            .map_err(|_| self.error(ErrorKind::Number(digits.to_string()), start))?;
        // Letters right after the digits make a duration token, as in
        // InfluxDB's scanner: digits, a unit, then any letters and digits
        // (`1h30m`). One that does not read as a duration is still one
        // token (`0xdb0`), which no rule accepts.
        if !self
            .peek_char()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == 'µ')
        {
            return Ok(Token::Integer(value));
        }
        while self
            .peek_char()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == 'µ')
        {
            self.pos += self.peek_char().map_or(1, char::len_utf8);
        }
        let text = &self.text[start..self.pos];
        Ok(match parse_duration(text) {
            Some(nanos) => Token::Duration(nanos),
            None => Token::BadDuration(text.to_string()),
        })
    }

    /// Scans a regex literal whose opening `/` is at byte `start`.
    /// `\/` stands for `/`; every other escape is kept for the regex engine.
    pub fn regex(&mut self, start: usize) -> Result<Spanned> {
        self.pos = start + 1;
        let mut pattern = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(self.error(ErrorKind::Unterminated { what: "regex" }, start));
                }
                Some('/') => break,
                Some('\\') => match self.bump() {
                    Some('/') => pattern.push('/'),
                    Some(c) => {
                        pattern.push('\\');
                        pattern.push(c);
                    }
                    None => {
                        return Err(self.error(ErrorKind::Unterminated { what: "regex" }, start));
                    }
                },
                Some(c) => pattern.push(c),
            }
        }
        if let Some(message) = regex_error(&pattern) {
            return Err(self.error(ErrorKind::Regex { pattern, message }, start));
        }
        self.ended(&Token::Regex(String::new()));
        Ok(Spanned {
            token: Token::Regex(pattern),
            start,
            end: self.pos,
        })
    }
}

/// Why `pattern` does not compile, or `None` when it does.
pub(crate) fn regex_error(pattern: &str) -> Option<String> {
    let err = regex::Regex::new(pattern).err()?.to_string();
    // The regex crate's message spans lines; the last one says why.
    let last = err.lines().last().unwrap_or("").trim();
    Some(last.strip_prefix("error: ").unwrap_or(last).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<Token> {
        let mut lexer = Lexer::new(text);
        let mut out = Vec::new();
        loop {
            let t = lexer.next_token().unwrap().token;
            if t == Token::Eof {
                return out;
            }
            out.push(t);
        }
    }

    #[test]
    fn durations_numbers_and_words() {
        assert_eq!(
            tokens("10m 100ms 1u 1µ 1ns 1d 1w 5 1.5 .5 5x"),
            vec![
                Token::Duration(600_000_000_000),
                Token::Duration(100_000_000),
                Token::Duration(1_000),
                Token::Duration(1_000),
                Token::Duration(1),
                Token::Duration(86_400_000_000_000),
                Token::Duration(604_800_000_000_000),
                Token::Integer(5),
                Token::Float(1.5),
                Token::Float(0.5),
                // One token, as InfluxDB scans it (its parser refuses it).
                Token::BadDuration("5x".into()),
            ]
        );
        assert_eq!(
            tokens("select Cpu \"a \\\"b\" 'it\\'s' $host"),
            vec![
                Token::Keyword("SELECT"),
                Token::Ident("Cpu".into()),
                Token::QuotedIdent("a \"b".into()),
                Token::Str("it's".into()),
                Token::Param("host".into()),
            ]
        );
    }

    #[test]
    fn operators_and_comments() {
        assert_eq!(
            tokens("a<>b -- comment\n/* c */ != =~ !~ <= >= :: :"),
            vec![
                Token::Ident("a".into()),
                Token::NotEq,
                Token::Ident("b".into()),
                Token::NotEq,
                Token::EqRegex,
                Token::NotEqRegex,
                Token::LtEq,
                Token::GtEq,
                Token::DoubleColon,
                Token::Colon,
            ]
        );
    }

    #[test]
    fn regex_escapes_and_errors() {
        let mut lexer = Lexer::new(r"/a\/b\d/ x");
        assert_eq!(lexer.regex(0).unwrap().token, Token::Regex(r"a/b\d".into()));
        let err = Lexer::new("/(/").regex(0).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Regex { .. }), "{err}");
        let err = Lexer::new("/abc").regex(0).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unterminated { what: "regex" });
    }

    #[test]
    fn lexical_errors_have_positions() {
        let err = Lexer::new("  'abc").next_token().unwrap_err();
        assert_eq!((err.position.offset, err.position.column), (2, 3));
        let err = Lexer::new("'a\\qb'").next_token().unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadEscape('q'));
        let err = Lexer::new("99999999999999999999").next_token().unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Number(_)));
        let tok = Lexer::new("9999999999999w").next_token().unwrap();
        assert_eq!(tok.token, Token::BadDuration("9999999999999w".into()));
    }

    #[test]
    fn eof_positions_follow_influxdb() {
        // (statement, column influxd 1.8.10 reports for the missing token)
        for (q, column) in [
            ("SELECT a,", 11),
            ("SELECT (", 9),
            ("SELECT mean(", 14),
            ("SELECT a FROM m WHERE x =", 26),
            ("SELECT a FROM m WHERE a =~", 28),
            ("SELECT a FROM m WHERE a !=", 27),
            ("SELECT a FROM m WHERE (a = 1", 29),
            ("SELECT a FROM m WHERE a = 5 AND (b", 36),
            ("SELECT a FROM db.", 19),
            ("SELECT a::", 11),
            ("CREATE DATABASE db0 WITH NAME", 31),
            ("DROP", 6),
        ] {
            let err = crate::parse(q).unwrap_err();
            assert_eq!(err.position.column, column, "{q}: {err}");
        }
    }

    #[test]
    fn durations_read_as_influxdb_scans_them() {
        let one = |t: &str| Lexer::new(t).next_token().unwrap().token;
        assert_eq!(one("1h30m"), Token::Duration(90 * 60_000_000_000));
        assert_eq!(one("2ms5ns"), Token::Duration(2_000_005));
        assert_eq!(one("10µs"), Token::BadDuration("10µs".into()));
        assert_eq!(one("10µ"), Token::Duration(10_000));
        // Digits then letters are one token even when not a duration.
        assert_eq!(one("0xdb0"), Token::BadDuration("0xdb0".into()));
        assert_eq!(one("5n"), Token::BadDuration("5n".into()));
        assert_eq!(one("12"), Token::Integer(12));
    }
}
