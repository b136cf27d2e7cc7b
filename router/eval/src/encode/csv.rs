//! CSV as InfluxDB 1.8's `csvFormatter` writes it (Go's `encoding/csv`,
//! `\n` line ends).

use super::json::go_float_positional;
use super::{Format, Response};
use crate::value::{Series, Value};

/// Writes CSV bodies. Keep one writer for all chunks of one response: the
/// header is written once per statement, as InfluxDB's formatter (which
/// lives for the whole request) does.
#[derive(Debug, Clone, Default)]
pub struct CsvWriter {
    statement_id: Option<usize>,
}

impl CsvWriter {
    pub fn new() -> Self {
        CsvWriter::default()
    }

    /// The CSV text of one response (or chunk). A request error is written
    /// as `error\n<message>\n`; statements without series are skipped (so
    /// are statement errors, as in InfluxDB); a blank line separates
    /// statements and precedes a header whose columns changed.
    pub fn write(&mut self, response: &Response, format: &Format) -> String {
        let mut out = String::new();
        if let Some(error) = &response.error {
            record(&mut out, ["error"]);
            record(&mut out, [error.as_str()]);
            return out;
        }
        for result in &response.results {
            if self.statement_id != Some(result.statement_id) {
                let Some(first) = result.series.first() else {
                    continue;
                };
                if self.statement_id.is_some() {
                    out.push('\n');
                }
                self.statement_id = Some(result.statement_id);
                header(&mut out, first);
            }
            for (i, series) in result.series.iter().enumerate() {
                if i > 0 && result.series[i - 1].columns != series.columns {
                    out.push('\n');
                    header(&mut out, series);
                }
                let tags = hash_key(series);
                for row in &series.values {
                    let cells: Vec<String> = row
                        .iter()
                        .enumerate()
                        .map(|(i, v)| cell(v, i == 0, format))
                        .collect();
                    let fields = [series.name.as_str(), tags.as_str()]
                        .into_iter()
                        .chain(cells.iter().map(String::as_str));
                    record(&mut out, fields);
                }
            }
        }
        out
    }
}

fn header(out: &mut String, series: &Series) {
    let names = ["name", "tags"]
        .into_iter()
        .chain(series.columns.iter().map(String::as_str));
    record(out, names);
}

/// InfluxDB's tag hash key without the leading comma: `k=v,k2=v2`, keys
/// sorted, `,` ` ` `=` escaped with `\`, empty values left out.
fn hash_key(series: &Series) -> String {
    let escape = |s: &str| {
        s.replace(',', "\\,")
            .replace(' ', "\\ ")
            .replace('=', "\\=")
    };
    series
        .tags
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn cell(value: &Value, first_column: bool, format: &Format) -> String {
    match value {
        Value::Null => String::new(),
        Value::Float(f) if f.is_nan() => String::new(),
        Value::Float(f) => go_float_positional(*f),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Time(t) => match format.epoch {
            Some(divisor) if first_column => (t / divisor).to_string(),
            _ => t.to_string(),
        },
    }
}

/// One record as Go's `csv.Writer` writes it: a field is quoted when it
/// contains `,`, `"`, `\r` or `\n`, is `\.`, or starts with a space.
fn record<'a>(out: &mut String, fields: impl IntoIterator<Item = &'a str>) {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let quote = !field.is_empty()
            && (field == r"\."
                || field.contains([',', '"', '\r', '\n'])
                || field.chars().next().is_some_and(char::is_whitespace));
        if quote {
            out.push('"');
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(field);
        }
    }
    out.push('\n');
}
