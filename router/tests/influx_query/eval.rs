//! The plain evaluation the oracle compares with: result series by tags,
//! float closeness, median, InfluxDB's percentile and the sample stddev.

use std::collections::BTreeMap;

use serde_json::Value;

/// Series of a result keyed by `tag=value,...` (sorted) -> rows.
pub fn by_tags(result: &Value) -> BTreeMap<String, Vec<Vec<Value>>> {
    let mut out = BTreeMap::new();
    for s in result["series"].as_array().cloned().unwrap_or_default() {
        let tags = s["tags"]
            .as_object()
            .map(|t| {
                t.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let rows = s["values"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.as_array().cloned().unwrap_or_default())
            .collect();
        out.insert(tags, rows);
    }
    out
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// InfluxDB's nearest-rank percentile.
pub fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64) * p / 100.0 + 0.5).floor() as i64 - 1;
    (i >= 0 && (i as usize) < v.len()).then(|| v[i as usize])
}

pub fn stddev(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    Some(var.sqrt())
}
