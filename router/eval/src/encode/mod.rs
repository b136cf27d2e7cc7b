//! InfluxDB 1.8 `/query` response bodies, byte for byte:
//!
//! * JSON: `{"results":[{"statement_id":0,"series":[{"name":..,"tags":{..},
//!   "columns":[..],"values":[[..]]}]}]}` with Go's omit-empty rules (no
//!   `series` key for an empty result, no `tags` without `GROUP BY` tags),
//!   Go's float and string formatting, a trailing newline; `pretty=true` is
//!   Go's `MarshalIndent` with four spaces. A float that JSON cannot hold
//!   (±Inf) turns the whole body into `{"error":"json: unsupported value:
//!   +Inf"}`, as InfluxDB's formatter does.
//! * times: RFC3339 with nanoseconds (in the `tz()` zone) unless `epoch=`
//!   asks for integers (`h`, `m`, `s`, `ms`, `u`; anything else is `ns`),
//!   which applies to the first column only, as InfluxDB converts it.
//! * chunked (`chunked=true`): [`chunk`] splits a statement's series into
//!   results of at most `chunk_size` rows, one per line; a series split
//!   across chunks carries `"partial":true` on all but its last piece, and
//!   every result but the statement's last carries `"partial":true`.
//! * CSV (`Accept: application/csv` or `text/csv`): [`CsvWriter`], with
//!   `name,tags,time,<columns>` headers, tags as `k=v,k2=v2` (escaped as in
//!   line protocol, empty values left out), times as integers.
//! * errors: a statement's error is `{"results":[{"statement_id":0,
//!   "error":"..."}]}` ([`StatementResult::error`]); a request error is
//!   `{"error":"..."}` ([`Response::error`]).

mod csv;
mod json;
mod time;

use json::{go_float, Json};

use crate::value::{Series, Value};
use crate::window::Zone;

pub use self::csv::CsvWriter;
pub use self::time::rfc3339_nano;

/// InfluxDB's default `chunk_size`; also the row count at which even an
/// unchunked response is built in pieces (then merged back).
pub const DEFAULT_CHUNK_SIZE: usize = 10_000;

/// A whole response body (one line of a chunked response).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Response {
    pub results: Vec<StatementResult>,
    /// A request-level error (`{"error":"..."}`); results are then ignored.
    pub error: Option<String>,
}

impl Response {
    pub fn error(message: impl Into<String>) -> Self {
        Response {
            results: Vec::new(),
            error: Some(message.into()),
        }
    }
}

/// The result of one statement (or one chunk of it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatementResult {
    pub statement_id: usize,
    pub series: Vec<Series>,
    pub messages: Vec<Message>,
    /// More results of this statement follow (chunked responses).
    pub partial: bool,
    pub error: Option<String>,
}

impl StatementResult {
    pub fn error(statement_id: usize, message: impl Into<String>) -> Self {
        StatementResult {
            statement_id,
            error: Some(message.into()),
            ..StatementResult::default()
        }
    }
}

/// A message shown with a result (InfluxDB uses level `warning`).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub level: String,
    pub text: String,
}

/// How values are written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Format {
    /// `epoch=`: divide times by this many nanoseconds and write integers;
    /// `None` writes RFC3339 strings.
    pub epoch: Option<i64>,
    /// `pretty=true`.
    pub pretty: bool,
    /// The `tz()` zone RFC3339 times are shown in (`None`: UTC).
    pub zone: Option<Zone>,
}

impl Format {
    /// From the request's `epoch` and `pretty` parameters, as InfluxDB
    /// reads them (`pretty` must be exactly `true`).
    pub fn from_params(epoch: Option<&str>, pretty: Option<&str>) -> Format {
        Format {
            epoch: epoch.and_then(epoch_divisor),
            pretty: pretty == Some("true"),
            zone: None,
        }
    }
}

/// The divisor for an `epoch=` value: `h`, `m`, `s`, `ms`, `u`; any other
/// non-blank value means nanoseconds; blank means RFC3339.
pub fn epoch_divisor(epoch: &str) -> Option<i64> {
    Some(match epoch.trim() {
        "" => return None,
        "u" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => 1,
    })
}

/// The `chunk_size` parameter: a positive integer, else the default.
pub fn chunk_size(param: Option<&str>) -> usize {
    param
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|n| *n > 0)
        .map_or(DEFAULT_CHUNK_SIZE, |n| n as usize)
}

/// A statement's series as InfluxDB emits them in a chunked response: one
/// result per piece of at most `chunk_size` rows of one series.
pub fn chunk(statement_id: usize, series: Vec<Series>, chunk_size: usize) -> Vec<StatementResult> {
    let size = chunk_size.max(1);
    let mut pieces = Vec::new();
    for s in series {
        let count = s.values.len().div_ceil(size);
        let mut values = s.values.into_iter();
        for i in 0..count {
            pieces.push(Series {
                name: s.name.clone(),
                tags: s.tags.clone(),
                columns: s.columns.clone(),
                values: values.by_ref().take(size).collect(),
                partial: i + 1 < count,
            });
        }
    }
    if pieces.is_empty() {
        return vec![StatementResult {
            statement_id,
            ..StatementResult::default()
        }];
    }
    let last = pieces.len() - 1;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| StatementResult {
            statement_id,
            series: vec![piece],
            partial: i < last,
            ..StatementResult::default()
        })
        .collect()
}

/// The JSON body, with InfluxDB's trailing newline.
pub fn to_json(response: &Response, format: &Format) -> String {
    let json = match response_json(response, format) {
        Ok(json) => json,
        Err(unsupported) => Json::Object(vec![(
            "error",
            Json::String(format!("json: unsupported value: {unsupported}")),
        )]),
    };
    let mut out = String::new();
    json.write(&mut out, format.pretty);
    out.push('\n');
    out
}

fn response_json(response: &Response, format: &Format) -> Result<Json, &'static str> {
    let mut fields = Vec::new();
    if !response.results.is_empty() {
        let results = response
            .results
            .iter()
            .map(|r| result_json(r, format))
            .collect::<Result<_, _>>()?;
        fields.push(("results", Json::Array(results)));
    }
    if let Some(error) = &response.error {
        fields.push(("error", Json::String(error.clone())));
    }
    Ok(Json::Object(fields))
}

fn result_json(result: &StatementResult, format: &Format) -> Result<Json, &'static str> {
    let mut fields = vec![(
        "statement_id",
        Json::Number(result.statement_id.to_string()),
    )];
    if !result.series.is_empty() {
        let series = result
            .series
            .iter()
            .map(|s| series_json(s, format))
            .collect::<Result<_, _>>()?;
        fields.push(("series", Json::Array(series)));
    }
    if !result.messages.is_empty() {
        let messages = result
            .messages
            .iter()
            .map(|m| {
                Json::Object(vec![
                    ("level", Json::String(m.level.clone())),
                    ("text", Json::String(m.text.clone())),
                ])
            })
            .collect();
        fields.push(("messages", Json::Array(messages)));
    }
    if result.partial {
        fields.push(("partial", Json::Bool(true)));
    }
    if let Some(error) = &result.error {
        fields.push(("error", Json::String(error.clone())));
    }
    Ok(Json::Object(fields))
}

fn series_json(series: &Series, format: &Format) -> Result<Json, &'static str> {
    let mut fields = Vec::new();
    if !series.name.is_empty() {
        fields.push(("name", Json::String(series.name.clone())));
    }
    if !series.tags.is_empty() {
        let tags = series
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), Json::String(v.clone())))
            .collect();
        fields.push(("tags", Json::Map(tags)));
    }
    if !series.columns.is_empty() {
        let columns = series.columns.iter().map(|c| Json::String(c.clone()));
        fields.push(("columns", Json::Array(columns.collect())));
    }
    if !series.values.is_empty() {
        let mut rows = Vec::with_capacity(series.values.len());
        for row in &series.values {
            let cells = row
                .iter()
                .enumerate()
                .map(|(i, v)| value_json(v, i == 0, format))
                .collect::<Result<_, _>>()?;
            rows.push(Json::Array(cells));
        }
        fields.push(("values", Json::Array(rows)));
    }
    if series.partial {
        fields.push(("partial", Json::Bool(true)));
    }
    Ok(Json::Object(fields))
}

fn value_json(value: &Value, first_column: bool, format: &Format) -> Result<Json, &'static str> {
    Ok(match value {
        Value::Null => Json::Null,
        // InfluxDB turns NaN into a null float before marshalling.
        Value::Float(f) if f.is_nan() => Json::Null,
        Value::Float(f) => Json::Number(go_float(*f)?),
        Value::Int(i) => Json::Number(i.to_string()),
        Value::UInt(u) => Json::Number(u.to_string()),
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Time(t) => match format.epoch {
            Some(divisor) if first_column => Json::Number((t / divisor).to_string()),
            _ => Json::String(rfc3339_nano(*t, zone_offset(format, *t))),
        },
    })
}

fn zone_offset(format: &Format, t: i64) -> i64 {
    format.zone.as_ref().map_or(0, |z| z.offset_ns(t))
}
