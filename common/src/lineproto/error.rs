//! Why a line was rejected, as clients see it.

/// Why a line was rejected. The `Display` text is what clients see after
/// `line N: `, so it says what is wrong and, where useful, how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LineProtocolError {
    #[error("line is not valid UTF-8; send UTF-8 text")]
    InvalidUtf8,
    #[error("missing measurement name")]
    MissingMeasurement,
    #[error("missing fields: a point needs at least one field (`key=value`) after a space")]
    MissingFields,
    #[error("invalid tag {0:?}: expected `key=value`")]
    InvalidTag(String),
    #[error("empty tag key")]
    EmptyTagKey,
    #[error("missing value for tag {0:?}")]
    EmptyTagValue(String),
    #[error("duplicate tag key {0:?}")]
    DuplicateTag(String),
    #[error("invalid field {0:?}: expected `key=value`")]
    InvalidField(String),
    #[error("empty field key")]
    EmptyFieldKey,
    #[error("missing value for field {0:?}")]
    EmptyFieldValue(String),
    #[error("duplicate field key {0:?}")]
    DuplicateField(String),
    #[error("field key {0:?} is reserved (the fact table uses it); rename the field")]
    ReservedFieldKey(String),
    #[error("invalid value {value:?} for field {key:?}: {why}")]
    InvalidFieldValue {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("unterminated string value for field {0:?}: missing closing `\"`")]
    UnterminatedString(String),
    #[error("invalid timestamp {0:?}: expected an integer")]
    InvalidTimestamp(String),
    #[error(
        "timestamp {0} is out of range: in nanoseconds (after precision) it must be between \
         -9223372036854775806 and 9223372036854775806, as in InfluxDB"
    )]
    TimestampOutOfRange(i64),
    #[error(
        "timestamp {0} is out of range: it does not fit in int64 (InfluxDB's range is \
         -9223372036854775806 to 9223372036854775806 ns)"
    )]
    TimestampTooLarge(String),
    #[error("unexpected text {0:?} after the timestamp")]
    TrailingText(String),
}

pub type Result<T, E = LineProtocolError> = std::result::Result<T, E>;
