//! The numeric heart of PromQL's functions as Prometheus 2.x computes
//! them, as pure functions over plain points so each can be tested with
//! values worked out by hand.

/// `rate`, `increase` and `delta`: the change over the window,
/// extrapolated towards the window's ends (at most half an average sample
/// interval past the first and last points, and never below zero for a
/// counter), counter resets added back for counters. `None` with fewer
/// than two points.
pub fn extrapolated_rate(
    points: &[(i64, f64)],
    range_start: i64,
    range_end: i64,
    range_ms: i64,
    is_counter: bool,
    is_rate: bool,
) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (first_t, first_v) = points[0];
    let (last_t, last_v) = points[points.len() - 1];
    let mut result = last_v - first_v;
    if is_counter {
        let mut last = 0.0;
        for &(_, v) in points {
            if v < last {
                result += last;
            }
            last = v;
        }
    }
    let mut to_start = (first_t - range_start) as f64 / 1000.0;
    let to_end = (range_end - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let avg_gap = sampled / (points.len() - 1) as f64;
    if is_counter && result > 0.0 && first_v >= 0.0 {
        let to_zero = sampled * (first_v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = avg_gap * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        avg_gap / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        avg_gap / 2.0
    };
    let mut factor = interval / sampled;
    if is_rate {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

/// `irate` and `idelta`: from the last two points only.
pub fn instant_value(points: &[(i64, f64)], is_rate: bool) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (pt, pv) = points[points.len() - 2];
    let (lt, lv) = points[points.len() - 1];
    let mut result = if is_rate && lv < pv { lv } else { lv - pv };
    let interval = lt - pt;
    if interval == 0 {
        return None;
    }
    if is_rate {
        result /= interval as f64 / 1000.0;
    }
    Some(result)
}

/// Least-squares slope and intercept, x in seconds from `intercept_t`.
pub fn linear_regression(points: &[(i64, f64)], intercept_t: i64) -> (f64, f64) {
    let (mut n, mut sx, mut sy, mut sxy, mut sx2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let init = points[0].1;
    let mut constant = true;
    for (i, &(t, v)) in points.iter().enumerate() {
        if constant && i > 0 && v != init {
            constant = false;
        }
        let x = (t - intercept_t) as f64 / 1000.0;
        n += 1.0;
        sy += v;
        sx += x;
        sxy += x * v;
        sx2 += x * x;
    }
    if constant {
        if init.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init);
    }
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

pub fn deriv(points: &[(i64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    Some(linear_regression(points, points[0].0).0)
}

/// The value `secs` seconds after the evaluation time `t` on the
/// regression line.
pub fn predict_linear(points: &[(i64, f64)], t: i64, secs: f64) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (slope, intercept) = linear_regression(points, t);
    Some(slope * secs + intercept)
}

/// Double exponential smoothing (`holt_winters`), Prometheus's
/// `calcTrendValue` loop; `sf` and `tf` in (0, 1) are checked by the caller.
pub fn holt_winters(points: &[(i64, f64)], sf: f64, tf: f64) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (mut s0, mut s1, mut b) = (0.0, points[0].1, points[1].1 - points[0].1);
    for (i, &(_, x)) in points.iter().enumerate().skip(1) {
        // The trend is smoothed from the second step on.
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let next = sf * x + (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = next;
    }
    Some(s1)
}

pub fn changes(points: &[(i64, f64)]) -> Option<f64> {
    let first = points.first()?;
    let mut n = 0;
    let mut prev = first.1;
    for &(_, cur) in &points[1..] {
        if cur != prev && !(cur.is_nan() && prev.is_nan()) {
            n += 1;
        }
        prev = cur;
    }
    Some(n as f64)
}

pub fn resets(points: &[(i64, f64)]) -> Option<f64> {
    let first = points.first()?;
    let mut n = 0;
    let mut prev = first.1;
    for &(_, cur) in &points[1..] {
        if cur < prev {
            n += 1;
        }
        prev = cur;
    }
    Some(n as f64)
}

/// The `*_over_time` family; `None` for an empty window.
pub fn over_time(name: &str, points: &[(i64, f64)]) -> Option<f64> {
    if points.is_empty() {
        return None;
    }
    let vals = points.iter().map(|p| p.1);
    Some(match name {
        "avg_over_time" => incremental_mean(vals),
        "count_over_time" => points.len() as f64,
        "sum_over_time" => vals.sum(),
        "max_over_time" => vals.fold(f64::NAN, |m, v| if v > m || m.is_nan() { v } else { m }),
        "min_over_time" => vals.fold(f64::NAN, |m, v| if v < m || m.is_nan() { v } else { m }),
        "last_over_time" => points[points.len() - 1].1,
        "present_over_time" => 1.0,
        "stddev_over_time" => welford_variance(vals).sqrt(),
        "stdvar_over_time" => welford_variance(vals),
        _ => return None,
    })
}

/// The running mean Prometheus computes (dividing as it goes so that
/// large values do not overflow), with its handling of infinities.
pub fn incremental_mean(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut mean, mut count) = (0.0f64, 0.0);
    for v in vals {
        count += 1.0;
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        mean += v / count - mean / count;
    }
    mean
}

/// Population variance by Welford's method.
pub fn welford_variance(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut count, mut mean, mut aux) = (0.0, 0.0, 0.0);
    for v in vals {
        count += 1.0;
        let delta = v - mean;
        mean += delta / count;
        aux += delta * (v - mean);
    }
    aux / count
}

/// The φ-quantile of `values` by linear interpolation between closest
/// ranks (`quantile`, `quantile_over_time`); NaN sorts first.
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(nan_first);
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

pub fn nan_first(a: &f64, b: &f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
    }
}

/// `histogram_quantile` over classic buckets `(upper bound, cumulative
/// count)`: the bucket holding the rank, interpolated linearly inside it.
pub fn bucket_quantile(q: f64, buckets: &mut Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    match buckets.last() {
        Some(b) if b.0 == f64::INFINITY => {}
        _ => return f64::NAN,
    }
    coalesce_buckets(buckets);
    ensure_monotonic(buckets);
    if buckets.len() < 2 {
        return f64::NAN;
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|x| x.1 < rank);
    if b == buckets.len() - 1 {
        return buckets[buckets.len() - 2].0;
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return buckets[0].0;
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

/// Buckets with the same upper bound (e.g. `le="1"` and `le="1.0"`) add up.
fn coalesce_buckets(buckets: &mut Vec<(f64, f64)>) {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(le, c) in buckets.iter() {
        match out.last_mut() {
            Some(last) if last.0 == le => last.1 += c,
            _ => out.push((le, c)),
        }
    }
    *buckets = out;
}

/// Counts scraped at slightly different times may dip; a cumulative
/// count must not decrease.
fn ensure_monotonic(buckets: &mut [(f64, f64)]) {
    let mut max = f64::NEG_INFINITY;
    for b in buckets.iter_mut() {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
}

/// `round(v, to_nearest)`: half rounds up, as Go's `math.Floor(x+0.5)`.
pub fn round(v: f64, to_nearest: f64) -> f64 {
    let inv = 1.0 / to_nearest;
    (v * inv + 0.5).floor() / inv
}

/// The one-argument math functions; `None` for an unknown name.
pub fn math(name: &str, v: f64) -> Option<f64> {
    Some(match name {
        "abs" => v.abs(),
        "ceil" => v.ceil(),
        "floor" => v.floor(),
        "exp" => v.exp(),
        "sqrt" => v.sqrt(),
        "ln" => v.ln(),
        "log2" => v.log2(),
        "log10" => v.log10(),
        "sgn" => sgn(v),
        "sin" => v.sin(),
        "cos" => v.cos(),
        "tan" => v.tan(),
        "asin" => v.asin(),
        "acos" => v.acos(),
        "atan" => v.atan(),
        "sinh" => v.sinh(),
        "cosh" => v.cosh(),
        "tanh" => v.tanh(),
        "asinh" => v.asinh(),
        "acosh" => v.acosh(),
        "atanh" => v.atanh(),
        "deg" => v * 180.0 / std::f64::consts::PI,
        "rad" => v * std::f64::consts::PI / 180.0,
        _ => return None,
    })
}

fn sgn(v: f64) -> f64 {
    if v < 0.0 {
        -1.0
    } else if v > 0.0 {
        1.0
    } else {
        // 0 stays 0 and NaN stays NaN, as in Prometheus.
        v
    }
}

/// The calendar functions, in UTC, of a time given in seconds.
pub fn calendar(name: &str, secs: f64) -> Option<f64> {
    use chrono::{Datelike, Timelike};
    let t = chrono::DateTime::from_timestamp(secs as i64, 0)?;
    Some(match name {
        "day_of_month" => t.day() as f64,
        "day_of_week" => t.weekday().num_days_from_sunday() as f64,
        "day_of_year" => t.ordinal() as f64,
        "days_in_month" => days_in_month(t.year(), t.month()) as f64,
        "hour" => t.hour() as f64,
        "minute" => t.minute() as f64,
        "month" => t.month() as f64,
        "year" => t.year() as f64,
        _ => return None,
    })
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Go's `strconv.FormatFloat(v, 'f', -1, 64)`, which `count_values` and
/// label values use.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}
