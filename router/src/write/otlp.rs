//! OTLP metrics as Prometheus samples, mapped the way Prometheus's own
//! OTLP receiver maps them (`storage/remote/otlptranslator`, default
//! settings): names from [`otlp_names`](super::otlp_names); labels from
//! the data point's attributes, `job` from `service.namespace/service.name`
//! and `instance` from `service.instance.id`; one `target_info` sample per
//! resource with its other attributes; gauges and cumulative sums as one
//! sample per point, cumulative histograms as `_bucket{le}` (cumulative
//! counts, `+Inf` = count), `_sum`, `_count`, summaries as
//! `{quantile}`, `_sum`, `_count`; the "no recorded value" flag as
//! Prometheus's stale marker. Timestamps are cut to milliseconds.
//!
//! Refused, point by point, with a message naming the metric: delta (or
//! unspecified) temporality and exponential histograms (Prometheus turns
//! those into native histograms, which Shardhouse does not store), points
//! with no value or no time, attributes that escape to no label name.
//! [`add_samples`] then adds the samples through remote_write's own path
//! (`parse::add_prom_sample`).

use super::batch::RequestBatch;
use super::otlp_names::{excerpt, label_name, metric_name, NameKind, OtlpError};
use super::parse::{add_prom_sample, prom_samples_batch};
use base64::Engine as _;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, HistogramDataPoint, Metric,
    NumberDataPoint, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Prometheus's stale marker (`value.StaleNaN`): what a point flagged
/// "no recorded value" becomes.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
/// OTLP's `DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`.
const NO_RECORDED_VALUE: u32 = 1;

/// A data point's labels: sorted by name, no empty value, no `__name__`.
pub type Labels = Arc<[(String, String)]>;

/// One Prometheus sample.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: Arc<str>,
    pub labels: Labels,
    /// `le` or `quantile`, over a base label of the same name.
    pub extra: Option<(&'static str, String)>,
    pub time_ms: i64,
    pub value: f64,
    /// The OTLP data point it came from (0-based, in request order);
    /// `None` for `target_info`.
    pub point: Option<usize>,
}

/// A data point that was refused, and why (the message names the metric).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub point: Option<usize>,
    pub message: String,
}

/// An OTLP request as samples.
#[derive(Debug, Default)]
pub struct Converted {
    pub samples: Vec<Sample>,
    /// Data points in the request.
    pub points: usize,
    /// Data points refused here (each at most once).
    pub rejected: Vec<Rejection>,
    /// Metrics dropped that had no data point to count (no data, or an
    /// empty list of points).
    pub warnings: Vec<String>,
}

/// What the resource says about every point of it.
struct ResourceLabels {
    job: Option<String>,
    instance: Option<String>,
}

const SERVICE_NAME: &str = "service.name";
const SERVICE_NAMESPACE: &str = "service.namespace";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// Maps every resource, scope and metric of `req`.
pub fn convert(req: &ExportMetricsServiceRequest) -> Converted {
    let mut out = Converted::default();
    for rm in &req.resource_metrics {
        let empty = Resource::default();
        let resource = rm.resource.as_ref().unwrap_or(&empty);
        let rl = resource_labels(&resource.attributes);
        let mut latest_ns = 0u64;
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                latest_ns = latest_ns.max(latest_time(metric));
                convert_metric(&mut out, &rl, metric);
            }
        }
        target_info(&mut out, &resource.attributes, &rl, latest_ns);
    }
    out
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a KeyValue> {
    attrs.iter().find(|kv| kv.key == key)
}

fn resource_labels(attrs: &[KeyValue]) -> ResourceLabels {
    let value = |kv: &KeyValue| any_string(kv.value.as_ref());
    let job = attr(attrs, SERVICE_NAME).map(|name| match attr(attrs, SERVICE_NAMESPACE) {
        Some(ns) => format!("{}/{}", value(ns), value(name)),
        None => value(name),
    });
    let instance = attr(attrs, SERVICE_INSTANCE_ID).map(value);
    ResourceLabels { job, instance }
}

/// Labels from attributes (keys escaped; two keys that escape to the same
/// name get their values joined with `;` in key order, as Prometheus
/// does), then `job` and `instance` from the resource over them.
fn labels_of(attrs: &[KeyValue], skip: &[&str], rl: &ResourceLabels) -> Result<Labels, OtlpError> {
    let mut sorted: Vec<&KeyValue> = attrs
        .iter()
        .filter(|kv| !skip.contains(&kv.key.as_str()))
        .collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for kv in sorted {
        let name = label_name(&kv.key)?;
        let v = any_string(kv.value.as_ref());
        match map.get_mut(&name) {
            Some(existing) if !existing.is_empty() => {
                existing.push(';');
                existing.push_str(&v);
            }
            _ => {
                map.insert(name, v);
            }
        }
    }
    if let Some(job) = &rl.job {
        map.insert("job".into(), job.clone());
    }
    if let Some(instance) = &rl.instance {
        map.insert("instance".into(), instance.clone());
    }
    Ok(map
        .into_iter()
        .filter(|(k, v)| !v.is_empty() && k != "__name__")
        .collect())
}

/// The latest `time_unix_nano` of a metric's points (`target_info`'s time).
fn latest_time(metric: &Metric) -> u64 {
    let max = |it: &mut dyn Iterator<Item = u64>| it.max().unwrap_or(0);
    match &metric.data {
        Some(Data::Gauge(g)) => max(&mut g.data_points.iter().map(|p| p.time_unix_nano)),
        Some(Data::Sum(s)) => max(&mut s.data_points.iter().map(|p| p.time_unix_nano)),
        Some(Data::Histogram(h)) => max(&mut h.data_points.iter().map(|p| p.time_unix_nano)),
        Some(Data::ExponentialHistogram(h)) => {
            max(&mut h.data_points.iter().map(|p| p.time_unix_nano))
        }
        Some(Data::Summary(s)) => max(&mut s.data_points.iter().map(|p| p.time_unix_nano)),
        None => 0,
    }
}

/// `target_info`: the resource's attributes other than the three that
/// make `job` and `instance`, at the resource's latest point time; only
/// when there are such attributes and a `job` or `instance`.
fn target_info(out: &mut Converted, attrs: &[KeyValue], rl: &ResourceLabels, latest_ns: u64) {
    let identifying = [SERVICE_NAMESPACE, SERVICE_NAME, SERVICE_INSTANCE_ID];
    let others = attrs
        .iter()
        .filter(|kv| !identifying.contains(&kv.key.as_str()))
        .count();
    if others == 0 || latest_ns == 0 {
        return;
    }
    let labels = match labels_of(attrs, &identifying, rl) {
        Ok(l) => l,
        Err(why) => {
            out.rejected.push(Rejection {
                point: None,
                message: format!("target_info of a resource: {why}"),
            });
            return;
        }
    };
    if !labels.iter().any(|(k, _)| k == "job" || k == "instance") {
        return;
    }
    out.samples.push(Sample {
        name: Arc::from("target_info"),
        labels,
        extra: None,
        time_ms: (latest_ns / 1_000_000) as i64,
        value: 1.0,
        point: None,
    });
}

/// The points of one metric, and how to name it. `Err` is why every
/// point of it is refused.
fn classify(metric: &Metric) -> Result<NameKind, OtlpError> {
    let cumulative = |t: i32| match AggregationTemporality::try_from(t) {
        Ok(AggregationTemporality::Cumulative) => Ok(()),
        Ok(AggregationTemporality::Delta) => Err(OtlpError::Refused(
            "delta temporality is not taken (Prometheus reads cumulative sums and histograms); \
             export cumulative temporality (SDK: cumulative temporality preference; \
             Collector: the deltatocumulative processor)"
                .to_string(),
        )),
        _ => Err(OtlpError::Refused(format!(
            "aggregation temporality {t} (unspecified) is not taken; export cumulative temporality"
        ))),
    };
    match &metric.data {
        Some(Data::Gauge(_)) => Ok(NameKind::Gauge),
        Some(Data::Sum(s)) => {
            cumulative(s.aggregation_temporality)?;
            Ok(if s.is_monotonic {
                NameKind::Counter
            } else {
                NameKind::Other
            })
        }
        Some(Data::Histogram(h)) => cumulative(h.aggregation_temporality).map(|_| NameKind::Other),
        Some(Data::ExponentialHistogram(_)) => Err(OtlpError::Refused(
            "exponential histograms are not taken (Prometheus makes native histograms of them, \
             which Shardhouse does not store); export explicit-bucket histograms"
                .to_string(),
        )),
        Some(Data::Summary(_)) => Ok(NameKind::Other),
        None => Ok(NameKind::Other),
    }
}

fn point_count(metric: &Metric) -> usize {
    match &metric.data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
        None => 0,
    }
}

fn convert_metric(out: &mut Converted, rl: &ResourceLabels, metric: &Metric) {
    let first = out.points;
    let n = point_count(metric);
    out.points += n;
    let what = format!("metric {:?}", excerpt(&metric.name));
    if metric.data.is_none() || n == 0 {
        out.warnings
            .push(format!("{what} has no data points; dropped"));
        return;
    }
    let named = classify(metric).and_then(|kind| metric_name(&metric.name, &metric.unit, kind));
    let name = match named {
        Ok(name) => name,
        Err(why) => {
            out.rejected.extend((first..first + n).map(|p| Rejection {
                point: Some(p),
                message: format!("{what}: {why}"),
            }));
            return;
        }
    };
    let mut cx = PointCx {
        out,
        rl,
        what: &what,
        names: Names::new(&name),
        index: first,
    };
    match &metric.data {
        Some(Data::Gauge(g)) => g.data_points.iter().for_each(|p| cx.number(p)),
        Some(Data::Sum(s)) => s.data_points.iter().for_each(|p| cx.number(p)),
        Some(Data::Histogram(h)) => h.data_points.iter().for_each(|p| cx.histogram(p)),
        Some(Data::Summary(s)) => s.data_points.iter().for_each(|p| cx.summary(p)),
        Some(Data::ExponentialHistogram(_)) | None => {}
    }
}

/// A metric's series names, shared by its samples.
struct Names {
    base: Arc<str>,
    sum: Arc<str>,
    count: Arc<str>,
    bucket: Arc<str>,
}

impl Names {
    fn new(base: &str) -> Names {
        Names {
            base: Arc::from(base),
            sum: Arc::from(format!("{base}_sum")),
            count: Arc::from(format!("{base}_count")),
            bucket: Arc::from(format!("{base}_bucket")),
        }
    }
}

/// Converts the points of one metric, numbering them.
struct PointCx<'a> {
    out: &'a mut Converted,
    rl: &'a ResourceLabels,
    what: &'a str,
    names: Names,
    index: usize,
}

/// What every kind of point has.
struct Common {
    labels: Labels,
    time_ms: i64,
    stale: bool,
    point: usize,
}

impl PointCx<'_> {
    /// The next point's labels and time, or its rejection recorded.
    fn common(&mut self, attrs: &[KeyValue], time_ns: u64, flags: u32) -> Option<Common> {
        let point = self.index;
        self.index += 1;
        let checked = match time_ns {
            0 => Err(OtlpError::Refused(
                "time_unix_nano is 0 (unset)".to_string(),
            )),
            t if t > i64::MAX as u64 => Err(OtlpError::Refused(format!(
                "time_unix_nano {t} is out of range"
            ))),
            _ => labels_of(attrs, &[], self.rl),
        };
        match checked {
            Ok(labels) => Some(Common {
                labels,
                time_ms: (time_ns / 1_000_000) as i64,
                stale: flags & NO_RECORDED_VALUE != 0,
                point,
            }),
            Err(why) => {
                self.reject(point, why.to_string());
                None
            }
        }
    }

    fn reject(&mut self, point: usize, why: String) {
        self.out.rejected.push(Rejection {
            point: Some(point),
            message: format!("{} data point {point}: {why}", self.what),
        });
    }

    fn push(&mut self, c: &Common, name: &Arc<str>, extra: Option<(&'static str, String)>, v: f64) {
        self.out.samples.push(Sample {
            name: name.clone(),
            labels: c.labels.clone(),
            extra,
            time_ms: c.time_ms,
            value: if c.stale {
                f64::from_bits(STALE_NAN)
            } else {
                v
            },
            point: Some(c.point),
        });
    }

    fn number(&mut self, p: &NumberDataPoint) {
        let Some(c) = self.common(&p.attributes, p.time_unix_nano, p.flags) else {
            return;
        };
        let v = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None if c.stale => f64::NAN,
            None => {
                let why = "has no value (no asDouble or asInt, or one that is not a number)";
                return self.reject(c.point, why.into());
            }
        };
        let base = self.names.base.clone();
        self.push(&c, &base, None, v);
    }

    fn histogram(&mut self, p: &HistogramDataPoint) {
        let Some(c) = self.common(&p.attributes, p.time_unix_nano, p.flags) else {
            return;
        };
        let (sum, count, bucket) = (
            self.names.sum.clone(),
            self.names.count.clone(),
            self.names.bucket.clone(),
        );
        if let Some(s) = p.sum {
            self.push(&c, &sum, None, s);
        }
        self.push(&c, &count, None, p.count as f64);
        let mut cumulative = 0u64;
        for (bound, n) in p.explicit_bounds.iter().zip(&p.bucket_counts) {
            cumulative = cumulative.saturating_add(*n);
            self.push(
                &c,
                &bucket,
                Some(("le", prom_float(*bound))),
                cumulative as f64,
            );
        }
        self.push(&c, &bucket, Some(("le", "+Inf".into())), p.count as f64);
    }

    fn summary(&mut self, p: &SummaryDataPoint) {
        let Some(c) = self.common(&p.attributes, p.time_unix_nano, p.flags) else {
            return;
        };
        let (base, sum, count) = (
            self.names.base.clone(),
            self.names.sum.clone(),
            self.names.count.clone(),
        );
        self.push(&c, &sum, None, p.sum);
        self.push(&c, &count, None, p.count as f64);
        for q in &p.quantile_values {
            self.push(
                &c,
                &base,
                Some(("quantile", prom_float(q.quantile))),
                q.value,
            );
        }
    }
}

/// A float as Prometheus writes `le` and `quantile` (Go's
/// `FormatFloat(f, 'f', -1, 64)`: shortest, no exponent).
pub fn prom_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{f}")
    }
}

/// An attribute value as a label value, as OpenTelemetry's Go
/// `pcommon.Value.AsString` writes it (what Prometheus stores): bools
/// `true`/`false`, doubles as JavaScript numbers, bytes in base64, arrays
/// and maps as JSON, nothing as the empty string.
pub fn any_string(v: Option<&AnyValue>) -> String {
    use any_value::Value as V;
    match v.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(V::StringValue(s)) => s.clone(),
        Some(V::BoolValue(b)) => b.to_string(),
        Some(V::IntValue(i)) => i.to_string(),
        Some(V::DoubleValue(d)) => js_float(*d),
        Some(V::BytesValue(b)) => base64::engine::general_purpose::STANDARD.encode(b),
        Some(nested @ (V::ArrayValue(_) | V::KvlistValue(_))) => raw_json(Some(nested)).to_string(),
        // A profiles-only reference into a string table: no text here.
        Some(V::StringValueStrindex(_)) => String::new(),
    }
}

/// A nested value as JSON (Go's `json.Marshal` of `AsRaw`: maps with
/// sorted keys, bytes in base64, integral doubles without a fraction).
fn raw_json(v: Option<&any_value::Value>) -> serde_json::Value {
    use any_value::Value as V;
    use serde_json::Value as J;
    match v {
        None => J::Null,
        Some(V::StringValue(s)) => J::String(s.clone()),
        Some(V::BoolValue(b)) => J::Bool(*b),
        Some(V::IntValue(i)) => J::from(*i),
        Some(V::DoubleValue(d)) if d.fract() == 0.0 && d.abs() < 1e15 => J::from(*d as i64),
        Some(V::DoubleValue(d)) => serde_json::Number::from_f64(*d).map_or(J::Null, J::Number),
        Some(V::BytesValue(b)) => J::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Some(V::ArrayValue(a)) => J::Array(
            a.values
                .iter()
                .map(|x| raw_json(x.value.as_ref()))
                .collect(),
        ),
        Some(V::KvlistValue(kv)) => J::Object(
            kv.values
                .iter()
                .map(|x| {
                    let inner = x.value.as_ref().and_then(|v| v.value.as_ref());
                    (x.key.clone(), raw_json(inner))
                })
                .collect::<serde_json::Map<_, _>>(),
        ),
        Some(V::StringValueStrindex(_)) => J::Null,
    }
}

/// A double as Go's pdata writes it: JavaScript number formatting
/// (exponent below 1e-6 and from 1e21, `e+21`/`e-7`).
pub fn js_float(f: f64) -> String {
    if !f.is_finite() {
        let g = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return format!("json: unsupported value: {g}");
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{f}")
}

/// Adds the samples to a batch through remote_write's path and returns
/// the samples the batch refused, by data point (each message names the
/// metric). Positions in the batch's own count are sample indexes.
pub fn add_samples(b: &mut RequestBatch<'_>, samples: &[Sample]) -> Vec<Rejection> {
    prom_samples_batch(b);
    let mut refused: Vec<Rejection> = Vec::new();
    let mut tags: Vec<(&str, &str)> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        tags.clear();
        let extra = s.extra.as_ref().map(|(k, v)| (*k, v.as_str()));
        tags.extend(
            s.labels
                .iter()
                .filter(|(k, _)| extra.is_none_or(|(e, _)| e != k))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        tags.extend(extra);
        if let Err((reason, msg)) = add_prom_sample(b, &s.name, &tags, s.value, s.time_ms) {
            let message = format!("series {:?}: {msg}", excerpt(&s.name));
            b.reject(i, reason, message.clone());
            if refused
                .last()
                .is_none_or(|r| r.point != s.point || s.point.is_none())
            {
                refused.push(Rejection {
                    point: s.point,
                    message,
                });
            }
        }
    }
    refused
}

#[cfg(test)]
#[path = "otlp_tests.rs"]
mod tests;
