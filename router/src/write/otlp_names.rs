//! OTLP metric and attribute names as Prometheus names, the way
//! Prometheus's own OTLP receiver makes them by default
//! (`otlp.translation_strategy: UnderscoreEscapingWithSuffixes`, with its
//! defaults `label_name_underscore_sanitization: true` and
//! `label_name_preserve_multiple_underscores: true`, which are also what
//! Prometheus 2.47-2.55 did): names escaped to `[a-zA-Z0-9_:]`, the unit
//! and type suffixes added (`_seconds`, `_bytes_per_second`, `_total`,
//! `_ratio`), attribute keys escaped to `[a-zA-Z0-9_]`.

/// What a metric is, as far as its name is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A monotonic cumulative sum: gets `_total`.
    Counter,
    /// A gauge: gets `_ratio` when its unit is `1`.
    Gauge,
    /// Anything else (a non-monotonic sum, a histogram, a summary).
    Other,
}

/// UCUM units to Prometheus's base unit words.
fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

/// The denominator of a `x/y` unit, singular (`By/s` is bytes per second).
fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

fn is_metric_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// The unit's suffix words: (main, `per_<denominator>`), each empty when
/// absent, blank or an annotation in braces (`{requests}` adds nothing).
fn unit_suffixes(unit: &str) -> (String, String) {
    let mut parts = unit.splitn(2, '/');
    let usable = |u: &str| !u.is_empty() && !u.contains(['{', '}']);
    let main = parts.next().map(str::trim).filter(|u| usable(u));
    let main = main.map(|u| clean_unit(unit_word(u))).unwrap_or_default();
    let per = parts.next().filter(|u| !u.is_empty()).map(str::trim);
    let per = match per.filter(|u| usable(u)).map(per_unit_word) {
        Some(p) if !p.is_empty() => clean_unit(&format!("per_{p}")),
        _ => String::new(),
    };
    (main, per)
}

/// A unit word escaped to metric characters, runs of `_` collapsed, no
/// leading `_`.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if is_metric_char(c) { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out.trim_start_matches('_').to_string()
}

/// Why an OTLP body, metric or data point is not taken. The text names
/// it and says what to send instead: the client reads it in
/// `partial_success` or in the 4xx body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OtlpError {
    /// The `Content-Type` is not an OTLP encoding (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body does not decode (400).
    #[error("{0}")]
    Undecodable(String),
    /// A metric or data point that cannot be stored; the rest of the
    /// body is.
    #[error("{0}")]
    Refused(String),
}

/// The Prometheus name of an OTLP metric: `name`'s runs of characters
/// other than `[a-zA-Z0-9:]` become one `_`, then the unit's words
/// (unless already in the name), `_total` for counters and `_ratio` for
/// gauges of unit `1`; a leading digit gets a `_`. `Err` names why no
/// valid name came out.
pub fn metric_name(name: &str, unit: &str, kind: NameKind) -> Result<String, OtlpError> {
    let mut tokens: Vec<String> = name
        .split(|c: char| !is_metric_char(c))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let (mut main, per) = unit_suffixes(unit);
    if tokens.contains(&main) {
        main.clear();
    }
    let per = if per == "per_" {
        String::new()
    } else {
        let p = per.trim_end_matches('_').to_string();
        if tokens.contains(&p) {
            String::new()
        } else {
            p
        }
    };
    if !per.is_empty() {
        main = main.trim_end_matches('_').to_string();
    }
    tokens.extend([main, per].into_iter().filter(|t| !t.is_empty()));
    let mut add_last = |word: &str| {
        tokens.retain(|t| t != word);
        tokens.push(word.to_string());
    };
    if kind == NameKind::Counter {
        add_last("total");
    }
    if kind == NameKind::Gauge && unit == "1" {
        add_last("ratio");
    }
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if out.is_empty() {
        return Err(OtlpError::Refused(format!(
            "metric name {:?} has no letter or digit left once escaped to a Prometheus name",
            excerpt(name)
        )));
    }
    Ok(out)
}

/// The Prometheus label name of an attribute key: every character other
/// than `[a-zA-Z0-9]` becomes `_` (runs kept), a leading digit gets
/// `key_` and a single leading `_` gets `key` (`__x` is kept). `Err` for
/// an empty key or one that is only underscores once escaped.
pub fn label_name(key: &str) -> Result<String, OtlpError> {
    if key.is_empty() {
        return Err(OtlpError::Refused("an attribute has an empty key".into()));
    }
    let fast = key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && (key.starts_with("__") || !key.starts_with('_'))
        && key.bytes().any(|b| b != b'_');
    if fast {
        return Ok(key.to_string());
    }
    let mut out: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    if out.bytes().all(|b| b == b'_') {
        return Err(OtlpError::Refused(format!(
            "attribute key {:?} is only underscores once escaped to a Prometheus label name",
            excerpt(key)
        )));
    }
    Ok(out)
}

/// At most 64 characters of a client's name in a message.
pub(crate) fn excerpt(s: &str) -> String {
    shardhouse_common::names::excerpt(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::NameKind::{Counter, Gauge, Other};
    use super::*;

    fn name(n: &str, unit: &str, kind: NameKind) -> String {
        metric_name(n, unit, kind).unwrap()
    }

    #[test]
    fn units_become_suffix_words() {
        assert_eq!(
            name("http.server.duration", "s", Other),
            "http_server_duration_seconds"
        );
        assert_eq!(
            name("system.memory.usage", "By", Gauge),
            "system_memory_usage_bytes"
        );
        assert_eq!(name("net.io", "By/s", Gauge), "net_io_bytes_per_second");
        assert_eq!(
            name("disk.ops", "{operation}/s", Gauge),
            "disk_ops_per_second"
        );
        assert_eq!(name("queue.depth", "{item}", Gauge), "queue_depth");
        assert_eq!(name("latency", "ms", Gauge), "latency_milliseconds");
        assert_eq!(name("temp", "Cel", Gauge), "temp_celsius");
        assert_eq!(name("rate", "1/h", Gauge), "rate_per_hour");
        // An unknown unit is used as it is, escaped.
        assert_eq!(name("widgets", "furlongs", Gauge), "widgets_furlongs");
        assert_eq!(name("x", "km/h+", Gauge), "x_km_per_h");
        // Already in the name: not repeated.
        assert_eq!(name("duration_seconds", "s", Other), "duration_seconds");
        assert_eq!(name("io_bytes", "By/s", Gauge), "io_bytes_per_second");
        assert_eq!(name("x", "", Gauge), "x");
        assert_eq!(name("x", "  ", Gauge), "x");
    }

    #[test]
    fn counters_get_total_and_unit_one_gauges_ratio() {
        assert_eq!(name("http.requests", "1", Counter), "http_requests_total");
        assert_eq!(
            name("requests.total.count", "", Counter),
            "requests_count_total"
        );
        assert_eq!(name("cpu.time", "s", Counter), "cpu_time_seconds_total");
        assert_eq!(name("cpu.utilization", "1", Gauge), "cpu_utilization_ratio");
        assert_eq!(name("hit_ratio", "1", Gauge), "hit_ratio");
        // A non-monotonic sum and a histogram get neither.
        assert_eq!(name("active", "1", Other), "active");
        assert_eq!(name("up.down", "{conn}", Other), "up_down");
    }

    #[test]
    fn names_are_escaped_like_prometheus() {
        assert_eq!(name("a..b__c", "", Gauge), "a_b_c");
        assert_eq!(name("ns:sub.metric", "", Gauge), "ns:sub_metric");
        assert_eq!(name("2xx.count", "", Gauge), "_2xx_count");
        assert_eq!(name("café.temp", "", Gauge), "caf_temp");
        assert_eq!(name("_leading", "", Gauge), "leading");
        assert!(metric_name("...", "", Gauge)
            .unwrap_err()
            .to_string()
            .contains("no letter or digit"));
        assert!(metric_name("", "", Gauge).is_err());
        // A counter with no name at all is still just `total`.
        assert_eq!(name("", "", Counter), "total");
    }

    #[test]
    fn attribute_keys_become_label_names() {
        let l = |k: &str| label_name(k).unwrap();
        assert_eq!(l("http.method"), "http_method");
        assert_eq!(l("host_name"), "host_name");
        assert_eq!(l("a..b"), "a__b");
        assert_eq!(l("123abc"), "key_123abc");
        assert_eq!(l("_private"), "key_private");
        assert_eq!(l("__reserved__"), "__reserved__");
        assert_eq!(l("k8s.pod.name"), "k8s_pod_name");
        assert_eq!(l("é"), "key_");
        assert!(label_name("").is_err());
        assert!(label_name("__")
            .unwrap_err()
            .to_string()
            .contains("only underscores"));
        assert!(label_name("..").is_err());
    }
}
