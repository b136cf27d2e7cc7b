//! What Grafana 10.0 substitutes into a raw InfluxQL query before it reaches
//! `/query` (public/app/plugins/datasource/influxdb and pkg/tsdb/influxdb
//! of the Grafana version scripts/deps.d/grafana.sh builds).

use anyhow::{anyhow, Result};

/// The datasource's minimum interval (`timeInterval`, deploy/grafana and
/// the chart): Telegraf's 10 s.
pub const MIN_INTERVAL_MS: i64 = 10_000;

/// One dashboard refresh: the time range, the interval and the hosts picked.
#[derive(Debug, Clone)]
pub struct View {
    pub from_ms: i64,
    pub to_ms: i64,
    pub interval_ms: i64,
    pub hosts: Vec<&'static str>,
    /// `Some("1h")`: a relative range ("Last 1 hour") as the frontend's
    /// classic path sends it, `time >= now() - 1h and time <= now()`;
    /// `from_ms` / `to_ms` are then the test's estimate of the router's now.
    pub relative: Option<&'static str>,
}

/// Grafana's `escapeRegex` (packages/grafana-data/src/text/string.ts).
pub fn escape_regex(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\^$*+?.()|[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Grafana's `roundInterval`: a computed interval snaps to the step of the
/// first bound it is below.
fn round_interval(ms: i64) -> i64 {
    const BELOW: [i64; 29] = [
        10,
        15,
        35,
        75,
        150,
        350,
        750,
        1_500,
        3_500,
        7_500,
        12_500,
        17_500,
        25_000,
        45_000,
        90_000,
        210_000,
        450_000,
        750_000,
        1_050_000,
        1_500_000,
        2_700_000,
        5_400_000,
        9_000_000,
        16_200_000,
        32_400_000,
        86_400_000,
        604_800_000,
        1_814_400_000,
        3_628_800_000,
    ];
    const STEP: [i64; 30] = [
        1,
        10,
        20,
        50,
        100,
        200,
        500,
        1_000,
        2_000,
        5_000,
        10_000,
        15_000,
        20_000,
        30_000,
        60_000,
        120_000,
        300_000,
        600_000,
        900_000,
        1_200_000,
        1_800_000,
        3_600_000,
        7_200_000,
        10_800_000,
        21_600_000,
        43_200_000,
        86_400_000,
        604_800_000,
        2_592_000_000,
        31_536_000_000,
    ];
    STEP[BELOW.iter().position(|b| ms < *b).unwrap_or(BELOW.len())]
}

/// The interval a panel of `max_data_points` gets for a range.
pub fn grafana_interval(range_ms: i64, max_data_points: i64) -> i64 {
    round_interval(range_ms / max_data_points).max(MIN_INTERVAL_MS)
}

/// Grafana's `FormatDuration` (pkg/tsdb/intervalv2): the largest whole unit.
pub fn interval_text(ms: i64) -> String {
    const UNITS: [(i64, &str); 6] = [
        (31_536_000_000, "y"),
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let (size, unit) = UNITS
        .iter()
        .find(|(size, _)| ms >= *size)
        .unwrap_or(&UNITS[5]);
    format!("{}{unit}", (ms / size).max(1))
}

/// `query` as Grafana sends it for `view` (variables: `host`, multi + All).
pub fn expand(query: &str, view: &View) -> Result<String> {
    let mut out = String::new();
    let mut rest = query;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let n = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let value = match &after[..n] {
            "" => "$".to_string(),
            "host" => {
                let v: Vec<String> = view.hosts.iter().map(|h| escape_regex(h)).collect();
                format!("({})", v.join("|"))
            }
            "timeFilter" => match view.relative {
                Some(r) => format!("time >= now() - {r} and time <= now()"),
                None => format!("time >= {}ms and time <= {}ms", view.from_ms, view.to_ms),
            },
            "__interval" | "interval" => interval_text(view.interval_ms),
            "__interval_ms" => view.interval_ms.to_string(),
            other => return Err(anyhow!("the dashboard uses ${other}, unknown to this test")),
        };
        out.push_str(&value);
        rest = &after[n..];
    }
    out.push_str(rest);
    Ok(out)
}

#[test]
fn expansion_matches_grafana() {
    assert_eq!(escape_regex("api.example.com"), r"api\.example\.com");
    assert_eq!(round_interval(3_400), 2_000);
    assert_eq!(round_interval(3_600), 5_000);
    assert_eq!(round_interval(4_000_000_000), 31_536_000_000);
    assert_eq!(grafana_interval(3_600_000, 1_000), 10_000);
    assert_eq!(grafana_interval(3 * 3_600_000, 300), 30_000);
    assert_eq!(grafana_interval(6 * 3_600_000, 200), 120_000);
    assert_eq!(interval_text(10_000), "10s");
    assert_eq!(interval_text(120_000), "2m");
    assert_eq!(interval_text(500), "500ms");
    let mut view = View {
        from_ms: 1_000,
        to_ms: 2_000,
        interval_ms: 60_000,
        hosts: vec!["a.b", "c"],
        relative: None,
    };
    let q = "SELECT mean(x) FROM m WHERE h =~ /^$host$/ AND $timeFilter GROUP BY time($__interval), time($interval) $__interval_ms";
    assert_eq!(
        expand(q, &view).unwrap(),
        r"SELECT mean(x) FROM m WHERE h =~ /^(a\.b|c)$/ AND time >= 1000ms and time <= 2000ms GROUP BY time(1m), time(1m) 60000"
    );
    view.relative = Some("6h");
    assert!(expand(q, &view)
        .unwrap()
        .contains("time >= now() - 6h and time <= now()"));
    assert!(expand("$other", &view).is_err());
}
