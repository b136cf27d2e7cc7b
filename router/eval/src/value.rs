//! The plain data everything else works on: typed values, points, the
//! row-set of one series (shaped like InfluxDB 1.8's `models.Row`) and the
//! series order InfluxDB emits.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One cell. Field values are `Float`, `Int`, `UInt`, `Bool` or `String`;
/// `Time` (nanoseconds since the Unix epoch) only appears in the `time`
/// column; `Null` is an empty cell.
///
/// A `Float(NaN)` is InfluxDB's "null float" (`stddev()` of one point): it
/// is a value for `fill()` and transformations and prints as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Null,
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    String(String),
    Time(i64),
}

impl Value {
    /// The type's name as InfluxDB writes it in messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Float(_) => "float",
            Value::Int(_) => "integer",
            Value::UInt(_) => "unsigned",
            Value::Bool(_) => "boolean",
            Value::String(_) => "string",
            Value::Time(_) => "time",
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as a float, as InfluxDB's `float64(v)` converts numbers.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Int(v) => Some(v as f64),
            Value::UInt(v) => Some(v as f64),
            _ => None,
        }
    }

    /// Orders two values of the same type (`None` across types). Floats use
    /// IEEE order, so NaN compares as `None` like Go's `<` and `>` say false.
    pub fn partial_cmp_same_type(&self, other: &Value) -> Option<Ordering> {
        match (self, other) {
            (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
            (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
            (Value::UInt(a), Value::UInt(b)) => Some(a.cmp(b)),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            (Value::Time(a), Value::Time(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

/// One field value at one time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub time: i64,
    pub value: Value,
    /// Other columns of the same row that travel with a selected point
    /// (`SELECT tx, max(rx)`: `tx` at the point `max` picks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aux: Vec<Value>,
}

impl Point {
    pub fn new(time: i64, value: Value) -> Self {
        Point {
            time,
            value,
            aux: Vec::new(),
        }
    }

    /// A point with the row's other columns (see [`Point::aux`]).
    pub fn with_aux(time: i64, value: Value, aux: Vec<Value>) -> Self {
        Point { time, value, aux }
    }
}

/// The rows of one series in a result, as InfluxDB 1.8's `/query` returns
/// them: `values[i][j]` is row `i`, column `j`; column 0 is `time`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub name: String,
    /// The `GROUP BY` tag values (a grouped tag a series lacks is `""`).
    pub tags: BTreeMap<String, String>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<Value>>,
    /// InfluxDB's per-series `partial`: more rows of this series follow in
    /// the next chunk of a chunked response.
    pub partial: bool,
}

/// A series' identity: measurement name and `GROUP BY` tags. Orders the way
/// InfluxDB 1.8 emits series: by name, then by its tag-set id (sorted keys
/// then values, each joined by NUL), which for one set of keys is the order
/// of the values in key order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SeriesKey {
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

impl SeriesKey {
    pub fn new(name: &str, tags: &[(&str, &str)]) -> Self {
        SeriesKey {
            name: name.to_string(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// InfluxDB's `Tags.ID()`: keys, then values, NUL-separated.
    pub fn tags_id(&self) -> Vec<u8> {
        self.tags_id_bytes().collect()
    }

    fn tags_id_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let parts = self.tags.keys().chain(self.tags.values());
        parts
            .enumerate()
            .flat_map(|(i, part)| (i > 0).then_some(0u8).into_iter().chain(part.bytes()))
    }
}

impl Ord for SeriesKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name
            .cmp(&other.name)
            .then_with(|| self.tags_id_bytes().cmp(other.tags_id_bytes()))
    }
}

impl PartialOrd for SeriesKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A field value with a total order, for maps keyed by value (`mode`,
/// `distinct`). `-0.0` is stored as `0.0`: Go's `==` treats them as one
/// value. NaN cannot be written through line protocol; it sorts last.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ValueKey {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    String(String),
}

impl ValueKey {
    /// `None` for `Null` and `Time`, which are not field values.
    pub fn from_value(value: &Value) -> Option<ValueKey> {
        Some(match value {
            Value::Float(v) if *v == 0.0 => ValueKey::Float(0.0),
            Value::Float(v) => ValueKey::Float(*v),
            Value::Int(v) => ValueKey::Int(*v),
            Value::UInt(v) => ValueKey::UInt(*v),
            Value::Bool(v) => ValueKey::Bool(*v),
            Value::String(v) => ValueKey::String(v.clone()),
            Value::Null | Value::Time(_) => return None,
        })
    }

    pub fn to_value(&self) -> Value {
        match self {
            ValueKey::Float(v) => Value::Float(*v),
            ValueKey::Int(v) => Value::Int(*v),
            ValueKey::UInt(v) => Value::UInt(*v),
            ValueKey::Bool(v) => Value::Bool(*v),
            ValueKey::String(v) => Value::String(v.clone()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            ValueKey::Float(_) => 0,
            ValueKey::Int(_) => 1,
            ValueKey::UInt(_) => 2,
            ValueKey::Bool(_) => 3,
            ValueKey::String(_) => 4,
        }
    }
}

impl Ord for ValueKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (ValueKey::Float(a), ValueKey::Float(b)) => a.total_cmp(b),
            (ValueKey::Int(a), ValueKey::Int(b)) => a.cmp(b),
            (ValueKey::UInt(a), ValueKey::UInt(b)) => a.cmp(b),
            (ValueKey::Bool(a), ValueKey::Bool(b)) => a.cmp(b),
            (ValueKey::String(a), ValueKey::String(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for ValueKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ValueKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ValueKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_order_follows_the_tag_id() {
        let mut keys = [
            SeriesKey::new("cpu", &[("host", "b"), ("region", "a")]),
            SeriesKey::new("cpu", &[("host", "a"), ("region", "z")]),
            SeriesKey::new("cpu", &[("host", "a"), ("region", "")]),
            SeriesKey::new("aaa", &[("host", "z"), ("region", "z")]),
        ];
        keys.sort();
        let order: Vec<_> = keys
            .iter()
            .map(|k| format!("{} {:?}", k.name, k.tags.values().collect::<Vec<_>>()))
            .collect();
        assert_eq!(
            order,
            [
                "aaa [\"z\", \"z\"]",
                "cpu [\"a\", \"\"]",
                "cpu [\"a\", \"z\"]",
                "cpu [\"b\", \"a\"]"
            ]
        );
        assert_eq!(keys[1].tags_id(), b"host\0region\0a\0");
    }

    #[test]
    fn value_keys_merge_negative_zero() {
        let a = ValueKey::from_value(&Value::Float(-0.0)).unwrap();
        let b = ValueKey::from_value(&Value::Float(0.0)).unwrap();
        assert_eq!(a, b);
        assert!(ValueKey::Float(-1.0) < ValueKey::Float(0.5));
        assert!(ValueKey::from_value(&Value::Null).is_none());
    }
}
