//! Naming rules: what a measurement, field key, tag key, tag value, series
//! key and database name may be. ONE place, used by the router before a
//! write is proposed and by the engine before it creates a table, so that
//! everything acknowledged can be stored.
//!
//! The binding limit is the engine's: ClickHouse stores a table as files
//! named after the table, escaped byte by byte (every byte outside
//! `[A-Za-z0-9_]` becomes `%XX`, 3 bytes), and refuses a table whose
//! escaped name is longer than `213 - len(escaped database name)` bytes
//! (`NAME_MAX` 255 minus the database directory, a UUID and `.sql`): 203
//! for `shard_0000`. Measurements are held to 160 escaped bytes, which
//! leaves room for database names of up to 53 bytes. Column files of long
//! field names are hashed by ClickHouse (`replace_long_file_name_to_hash`),
//! so field keys only need InfluxDB's own limits. Docs: `docs/api.md`
//! ("Limits").

use std::fmt;

/// The table every Prometheus sample of a database is stored in (the
/// metric name is its series' measurement). It is one of the engine's own
/// tables ([`is_engine_table`]); users cannot write a measurement of that
/// name.
pub const SAMPLES_TABLE: &str = "_samples";

/// The engine's own tables, in a data database (`_series`, `_samples`,
/// `_database`) or a shard's own database (`_flushed`, `_rewrites`).
/// Measurements share the table namespace with them, so these names are
/// refused as measurements.
pub const ENGINE_TABLES: &[&str] = &[
    "_series",
    SAMPLES_TABLE,
    "_database",
    "_flushed",
    "_rewrites",
];

/// Prefix kept for engine tables added later: no measurement may start
/// with it, so a new engine table can never meet user data of its name.
pub const ENGINE_TABLE_PREFIX: &str = "_sh_";

/// Whether `name` is (or may later be) one of the engine's own tables.
/// Any other name starting with `_` (`_cpu`, `_`) is a measurement, as in
/// InfluxDB.
pub fn is_engine_table(name: &str) -> bool {
    ENGINE_TABLES.contains(&name) || name.starts_with(ENGINE_TABLE_PREFIX)
}

/// Longest measurement, counted as [`escaped_file_name_len`].
pub const MAX_MEASUREMENT_ESCAPED_BYTES: usize = 160;
/// Longest field key or tag key, in bytes.
pub const MAX_KEY_BYTES: usize = 255;
/// Longest canonical series key (measurement and tags), in bytes:
/// InfluxDB's maximum key length.
pub const MAX_SERIES_KEY_BYTES: usize = 65_535;
/// Longest database name, in bytes.
pub const MAX_DATABASE_BYTES: usize = 64;
/// How many characters of a user's value an error message repeats.
pub const EXCERPT_CHARS: usize = 64;

/// Quotes an identifier for ClickHouse SQL (the engine's DDL and the
/// router's planned reads).
pub fn sql_ident(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('`');
    for c in name.chars() {
        match c {
            '`' => s.push_str("\\`"),
            '\\' => s.push_str("\\\\"),
            _ => s.push(c),
        }
    }
    s.push('`');
    s
}

/// Quotes a string literal for ClickHouse SQL.
pub fn sql_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Length of `name` once ClickHouse escapes it for a file name
/// (`escapeForFileName`): bytes of `[A-Za-z0-9_]` count 1, every other
/// byte 3 (`%XX`).
pub fn escaped_file_name_len(name: &[u8]) -> usize {
    name.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b == b'_' {
                1
            } else {
                3
            }
        })
        .sum()
}

/// A short, printable excerpt of a user's value for error messages: the
/// value itself when it has at most [`EXCERPT_CHARS`] characters, else its
/// first [`EXCERPT_CHARS`] characters followed by `…(N bytes)`. Invalid
/// UTF-8 is shown lossily.
pub fn excerpt(value: &[u8]) -> String {
    let s = String::from_utf8_lossy(value);
    match s.char_indices().nth(EXCERPT_CHARS) {
        None => s.into_owned(),
        Some((cut, _)) => format!("{}…({} bytes)", &s[..cut], value.len()),
    }
}

/// What kind of name broke a rule (for the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Measurement,
    FieldKey,
    TagKey,
    TagValue,
    SeriesKey,
    Database,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Measurement => "measurement",
            NameKind::FieldKey => "field key",
            NameKind::TagKey => "tag key",
            NameKind::TagValue => "tag value",
            NameKind::SeriesKey => "series key",
            NameKind::Database => "database name",
        })
    }
}

/// The rule a name broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRule {
    Empty,
    InvalidUtf8,
    /// A forbidden character (described, e.g. "NUL", "`/`").
    Forbidden(&'static str),
    /// One of the engine's own table names, or starts with
    /// [`ENGINE_TABLE_PREFIX`].
    ReservedPrefix,
    /// A tag key InfluxDB reserves (`time`).
    ReservedTagKey,
    /// Too long once escaped for a file name: (escaped length, limit).
    EscapedTooLong(usize, usize),
    /// Too long: (length in bytes, limit).
    TooLong(usize, usize),
}

/// A name that breaks a rule: the kind of name, an excerpt of it and the
/// rule. Its `Display` names the rule and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    pub kind: NameKind,
    /// [`excerpt`] of the name.
    pub name: String,
    pub rule: NameRule,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = (self.kind, &self.name);
        match &self.rule {
            NameRule::Empty => write!(f, "{kind} is empty"),
            NameRule::InvalidUtf8 => write!(f, "{kind} {name:?} is not valid UTF-8"),
            NameRule::Forbidden(what) => write!(f, "{kind} {name:?} contains {what}"),
            NameRule::ReservedTagKey => write!(
                f,
                "invalid tag key: input tag {name:?} is reserved (it names the time column; InfluxDB refuses it too): rename the tag"
            ),
            NameRule::ReservedPrefix => write!(
                f,
                "{kind} {name:?} is reserved for the engine's own tables ({}, or a name starting with `{ENGINE_TABLE_PREFIX}`); rename it",
                ENGINE_TABLES.join(", ")
            ),
            NameRule::EscapedTooLong(len, limit) => write!(
                f,
                "{kind} {name:?} is too long for a table name: {len} bytes once every byte \
                 outside A-Z a-z 0-9 _ counts 3, the limit is {limit} (e.g. {limit} ASCII \
                 letters or {} `-`)",
                limit / 3
            ),
            NameRule::TooLong(len, limit) if self.kind == NameKind::SeriesKey => write!(
                f,
                "series key {name:?} (measurement and tags) is {len} bytes, the limit is \
                 {limit} (InfluxDB's maximum key length)"
            ),
            NameRule::TooLong(len, limit) => {
                write!(f, "{kind} {name:?} is {len} bytes, the limit is {limit}")
            }
        }
    }
}

impl std::error::Error for NameError {}

fn error(kind: NameKind, name: &[u8], rule: NameRule) -> NameError {
    NameError {
        kind,
        name: excerpt(name),
        rule,
    }
}

/// A measurement (a table name on the nodes): non-empty, valid UTF-8, no
/// NUL or `/`, not an engine table's name ([`is_engine_table`]), and at most
/// [`MAX_MEASUREMENT_ESCAPED_BYTES`] once escaped for a file name.
pub fn validate_measurement(name: impl AsRef<[u8]>) -> Result<(), NameError> {
    let name = name.as_ref();
    let bad = |rule| Err(error(NameKind::Measurement, name, rule));
    if name.is_empty() {
        return bad(NameRule::Empty);
    }
    let Ok(text) = std::str::from_utf8(name) else {
        return bad(NameRule::InvalidUtf8);
    };
    if name.contains(&0) {
        return bad(NameRule::Forbidden("NUL"));
    }
    if name.contains(&b'/') {
        return bad(NameRule::Forbidden("`/`"));
    }
    if is_engine_table(text) {
        return bad(NameRule::ReservedPrefix);
    }
    let len = escaped_file_name_len(name);
    if len > MAX_MEASUREMENT_ESCAPED_BYTES {
        return bad(NameRule::EscapedTooLong(len, MAX_MEASUREMENT_ESCAPED_BYTES));
    }
    Ok(())
}

/// ClickHouse's own limit on the escaped name of a table in database `db`
/// (`NAME_MAX` 255, less the escaped database name, a UUID, `.sql` and
/// separators): `213 - escaped_file_name_len(db)`, 203 for `shard_0000`.
pub fn max_table_name_len(db: &str) -> usize {
    213usize.saturating_sub(escaped_file_name_len(db.as_bytes()))
}

/// Whether ClickHouse can create table `name` in `db` at all: the looser,
/// physical limit. New writes are held to [`validate_measurement`]; this
/// is for entries admitted before that rule existed (a name of 161 to 203
/// escaped bytes was storable then and still is).
pub fn validate_storable_table(name: impl AsRef<[u8]>, db: &str) -> Result<(), NameError> {
    let name = name.as_ref();
    let limit = max_table_name_len(db);
    let len = escaped_file_name_len(name);
    if name.is_empty() {
        return Err(error(NameKind::Measurement, name, NameRule::Empty));
    }
    if len > limit {
        return Err(error(
            NameKind::Measurement,
            name,
            NameRule::EscapedTooLong(len, limit),
        ));
    }
    Ok(())
}

fn validate_key(kind: NameKind, name: &[u8]) -> Result<(), NameError> {
    let bad = |rule| Err(error(kind, name, rule));
    if name.is_empty() {
        return bad(NameRule::Empty);
    }
    if name.len() > MAX_KEY_BYTES {
        return bad(NameRule::TooLong(name.len(), MAX_KEY_BYTES));
    }
    if name.contains(&0) {
        return bad(NameRule::Forbidden("NUL"));
    }
    if std::str::from_utf8(name).is_err() {
        return bad(NameRule::InvalidUtf8);
    }
    Ok(())
}

/// A field key (a column name): non-empty, at most [`MAX_KEY_BYTES`], no
/// NUL, valid UTF-8. (`time` and `series_id` are reserved as well; the
/// parsers check that, see `lineproto::RESERVED_FIELD_KEYS`.)
pub fn validate_field_key(name: impl AsRef<[u8]>) -> Result<(), NameError> {
    validate_key(NameKind::FieldKey, name.as_ref())
}

/// A tag key: non-empty, at most [`MAX_KEY_BYTES`], no NUL, valid UTF-8,
/// not `time`.
pub fn validate_tag_key(name: impl AsRef<[u8]>) -> Result<(), NameError> {
    let name = name.as_ref();
    if name == b"time" {
        return Err(error(NameKind::TagKey, name, NameRule::ReservedTagKey));
    }
    validate_key(NameKind::TagKey, name)
}

/// A tag value: non-empty and valid UTF-8; its length is bounded by the
/// series key ([`validate_series_key`]).
pub fn validate_tag_value(value: impl AsRef<[u8]>) -> Result<(), NameError> {
    let value = value.as_ref();
    if value.is_empty() {
        return Err(error(NameKind::TagValue, value, NameRule::Empty));
    }
    if std::str::from_utf8(value).is_err() {
        return Err(error(NameKind::TagValue, value, NameRule::InvalidUtf8));
    }
    Ok(())
}

/// The canonical series key (`crate::series`): at most
/// [`MAX_SERIES_KEY_BYTES`].
pub fn validate_series_key(key: impl AsRef<[u8]>) -> Result<(), NameError> {
    let key = key.as_ref();
    if key.len() > MAX_SERIES_KEY_BYTES {
        return Err(error(
            NameKind::SeriesKey,
            key,
            NameRule::TooLong(key.len(), MAX_SERIES_KEY_BYTES),
        ));
    }
    Ok(())
}

/// A database (bucket) name: non-empty, at most [`MAX_DATABASE_BYTES`],
/// valid UTF-8, no NUL, `/` or control characters. (Invalid
/// percent-escapes in a URL are refused before this, where the query
/// string is decoded.)
pub fn validate_database(name: impl AsRef<[u8]>) -> Result<(), NameError> {
    let name = name.as_ref();
    let bad = |rule| Err(error(NameKind::Database, name, rule));
    if name.is_empty() {
        return bad(NameRule::Empty);
    }
    if name.len() > MAX_DATABASE_BYTES {
        return bad(NameRule::TooLong(name.len(), MAX_DATABASE_BYTES));
    }
    let Ok(s) = std::str::from_utf8(name) else {
        return bad(NameRule::InvalidUtf8);
    };
    if s.contains('\0') {
        return bad(NameRule::Forbidden("NUL"));
    }
    if s.contains('/') {
        return bad(NameRule::Forbidden("`/`"));
    }
    if s.chars().any(char::is_control) {
        return bad(NameRule::Forbidden("a control character"));
    }
    Ok(())
}

/// Separates a database from a retention policy in a storage name.
/// InfluxDB forbids `/` in both, so no user name contains it.
pub const POLICY_SEPARATOR: char = '/';

/// The storage name of a database's retention policy that is not the
/// database's home policy: `db/rp`. The nodes keep one storage (tables,
/// tag index, retention) per name, so a policy's points are dropped,
/// retained and backed up as a unit (docs/storage.md, "Retention
/// policies").
pub fn policy_storage(database: &str, policy: &str) -> String {
    format!("{database}{POLICY_SEPARATOR}{policy}")
}

/// The database a storage name belongs to: `db` for `db` and `db/rp`.
pub fn storage_database(storage: &str) -> &str {
    storage
        .split_once(POLICY_SEPARATOR)
        .map_or(storage, |(db, _)| db)
}

/// A storage name as the nodes take it: a database name, or
/// `db/rp` with both halves valid database names.
pub fn validate_storage(name: impl AsRef<[u8]>) -> Result<(), NameError> {
    let name = name.as_ref();
    match std::str::from_utf8(name)
        .ok()
        .and_then(|s| s.split_once(POLICY_SEPARATOR))
    {
        Some((db, policy)) => {
            validate_database(db)?;
            validate_database(policy)
        }
        None => validate_database(name),
    }
}

/// A 64-bit key of a database name (XXH3-64, seed 0): nodes name a
/// shard's storage of a database after it (`shard_0007_<16 hex digits>`),
/// so names of any bytes fit the engine's file name limits. Frozen, like
/// `series_id`: stored data is found by it.
pub fn database_key(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_counts_three_bytes_outside_word_characters() {
        assert_eq!(escaped_file_name_len(b"cpu_1"), 5);
        assert_eq!(escaped_file_name_len(b"a-b"), 5);
        assert_eq!(escaped_file_name_len("é".as_bytes()), 6);
        assert_eq!(escaped_file_name_len(b""), 0);
    }

    #[test]
    fn measurements() {
        for ok in [
            "cpu",
            "disk io",
            "a;b",
            "ünï",
            &"a".repeat(160),
            &"-".repeat(53),
            &"é".repeat(26),
        ] {
            assert_eq!(validate_measurement(ok), Ok(()), "{ok}");
        }
        let rule = |name: &str| validate_measurement(name).unwrap_err().rule;
        assert_eq!(rule(""), NameRule::Empty);
        assert_eq!(rule("_series"), NameRule::ReservedPrefix);
        assert_eq!(rule("_samples"), NameRule::ReservedPrefix);
        assert_eq!(rule("_sh_rollup"), NameRule::ReservedPrefix);
        for user in ["_", "_cpu", "__name__", "_Series"] {
            assert_eq!(validate_measurement(user), Ok(()), "{user}");
        }
        assert_eq!(rule("a/b"), NameRule::Forbidden("`/`"));
        assert_eq!(rule("a\0b"), NameRule::Forbidden("NUL"));
        assert_eq!(rule(&"a".repeat(161)), NameRule::EscapedTooLong(161, 160));
        assert_eq!(rule(&"-".repeat(54)), NameRule::EscapedTooLong(162, 160));
        // The cases of issue 12: acknowledged, then never storable.
        assert_eq!(rule(&"-".repeat(200)), NameRule::EscapedTooLong(600, 160));
        assert_eq!(rule(&"é".repeat(100)), NameRule::EscapedTooLong(600, 160));
        assert_eq!(
            validate_measurement(b"\xff").unwrap_err().rule,
            NameRule::InvalidUtf8
        );
        let msg = validate_measurement("-".repeat(200))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("limit is 160"), "{msg}");
        assert!(msg.contains("…(200 bytes)"), "{msg}");
        assert!(msg.len() < 300, "{msg}");
    }

    #[test]
    fn clickhouse_table_name_limit() {
        // Measured with chDB 26.9: "The max length of table name for
        // database shard_0000 is 203" (and 211 for a database `t1`).
        assert_eq!(max_table_name_len("shard_0000"), 203);
        assert_eq!(max_table_name_len("t1"), 211);
        assert!(validate_storable_table("a".repeat(203), "shard_0000").is_ok());
        assert!(validate_storable_table("-".repeat(67), "shard_0000").is_ok());
        assert_eq!(
            validate_storable_table("-".repeat(68), "shard_0000")
                .unwrap_err()
                .rule,
            NameRule::EscapedTooLong(204, 203)
        );
        // Every measurement the rule admits is storable, with room to spare.
        assert!(MAX_MEASUREMENT_ESCAPED_BYTES <= max_table_name_len("shard_0000"));
    }

    #[test]
    fn time_is_not_a_tag_key() {
        let e = validate_tag_key("time").unwrap_err().to_string();
        assert!(e.contains("\"time\"") && e.contains("reserved"), "{e}");
        assert!(validate_tag_key("timestamp").is_ok());
    }

    #[test]
    fn keys_values_series_and_databases() {
        assert!(validate_field_key("usage").is_ok());
        assert!(validate_field_key("k".repeat(255)).is_ok());
        assert_eq!(
            validate_field_key("k".repeat(256)).unwrap_err().rule,
            NameRule::TooLong(256, 255)
        );
        assert_eq!(validate_tag_key("").unwrap_err().rule, NameRule::Empty);
        assert_eq!(
            validate_tag_key("a\0").unwrap_err().rule,
            NameRule::Forbidden("NUL")
        );
        assert!(validate_tag_value("x".repeat(70_000)).is_ok());
        assert!(validate_series_key("k".repeat(65_535)).is_ok());
        let e = validate_series_key("k".repeat(65_536)).unwrap_err();
        assert_eq!(e.rule, NameRule::TooLong(65_536, 65_535));
        assert!(e.to_string().contains("maximum key length"), "{e}");
        for ok in ["telegraf", "my-db.1", "ü", &"d".repeat(64)] {
            assert_eq!(validate_database(ok), Ok(()), "{ok}");
        }
        let rule = |name: &str| validate_database(name).unwrap_err().rule;
        assert_eq!(rule(""), NameRule::Empty);
        assert_eq!(rule(&"d".repeat(65)), NameRule::TooLong(65, 64));
        assert_eq!(rule("a/b"), NameRule::Forbidden("`/`"));
        assert_eq!(rule("a\nb"), NameRule::Forbidden("a control character"));
        assert_eq!(rule("a\0b"), NameRule::Forbidden("NUL"));
    }

    #[test]
    fn excerpts_are_short() {
        assert_eq!(excerpt(b"cpu"), "cpu");
        let long = "x".repeat(100 * 1024);
        let e = excerpt(long.as_bytes());
        assert_eq!(e, format!("{}…(102400 bytes)", "x".repeat(64)));
        let e = excerpt("é".repeat(100).as_bytes());
        assert!(
            e.starts_with(&"é".repeat(64)) && e.ends_with("…(200 bytes)"),
            "{e}"
        );
        assert_eq!(excerpt(&"y".repeat(64).into_bytes()), "y".repeat(64));
    }

    #[test]
    fn policy_storage_names() {
        let name = policy_storage("db0", "rp0");
        assert_eq!(name, "db0/rp0");
        assert_eq!(storage_database(&name), "db0");
        assert_eq!(storage_database("db0"), "db0");
        assert_eq!(validate_storage(&name), Ok(()));
        assert_eq!(validate_storage("db0"), Ok(()));
        for bad in ["/rp", "db/", "db/a/b", ""] {
            assert!(validate_storage(bad).is_err(), "{bad}");
        }
    }
}
