//! Valid SELECT statements and their canonical text. The first block is
//! what Grafana's InfluxQL editor sends after macro expansion
//! (`$timeFilter` -> `time >= <ms>ms and time <= <ms>ms`,
//! `$__interval` -> a duration).

use crate::Valid;

pub const VALID: &[Valid] = &[
    // ---- Grafana's InfluxQL editor --------------------------------------
    (
        r#"SELECT mean("value") FROM "cpu" WHERE ("host" =~ /^a$/) AND time >= 1795385275890ms and time <= 1795388870598ms GROUP BY time(10s), "host" fill(null)"#,
        "SELECT mean(value) FROM cpu WHERE host =~ /^a$/ AND time >= 1795385275890ms AND time <= 1795388870598ms GROUP BY time(10s), host fill(null)",
    ),
    (
        r#"SELECT mean("usage_idle") FROM "autogen"."cpu" WHERE time >= now() - 6h and time <= now() GROUP BY time(1m) fill(none)"#,
        "SELECT mean(usage_idle) FROM autogen.cpu WHERE time >= now() - 6h AND time <= now() GROUP BY time(1m) fill(none)",
    ),
    (
        r#"SELECT max("x") FROM (SELECT mean("x") AS "x" FROM "m" GROUP BY time(1m))"#,
        "SELECT max(x) FROM (SELECT mean(x) AS x FROM m GROUP BY time(1m))",
    ),
    (
        r#"SELECT "value" FROM "cpu" WHERE time >= 1795385275890ms and time <= 1795388870598ms"#,
        "SELECT value FROM cpu WHERE time >= 1795385275890ms AND time <= 1795388870598ms",
    ),
    (
        r#"SELECT derivative(mean("bytes_recv"), 1s) *8 FROM "net" WHERE ("host" = 'web1' AND "interface" = 'eth0') AND time >= now() - 1h GROUP BY time(10s) fill(null)"#,
        "SELECT derivative(mean(bytes_recv), 1s) * 8 FROM net WHERE host = 'web1' AND interface = 'eth0' AND time >= now() - 1h GROUP BY time(10s) fill(null)",
    ),
    (
        r#"SELECT non_negative_derivative(mean("value"), 10s) FROM "interface" WHERE time >= 1795385275890ms and time <= 1795388870598ms GROUP BY time(10s), "host" fill(null)"#,
        "SELECT non_negative_derivative(mean(value), 10s) FROM interface WHERE time >= 1795385275890ms AND time <= 1795388870598ms GROUP BY time(10s), host fill(null)",
    ),
    (
        r#"SELECT mean("value") AS "A" FROM "cpu" WHERE ("host" =~ /^(web1|web2)$/) AND time >= now() - 5m GROUP BY time(200ms), "host"::tag fill(previous)"#,
        "SELECT mean(value) AS A FROM cpu WHERE host =~ /^(web1|web2)$/ AND time >= now() - 5m GROUP BY time(200ms), host fill(previous)",
    ),
    (
        r#"SELECT "usage_user"::field, "host"::tag FROM "cpu" WHERE time >= now() - 1h"#,
        "SELECT usage_user::field, host::tag FROM cpu WHERE time >= now() - 1h",
    ),
    (
        r#"SELECT mean("value") * 100 FROM "mem" WHERE time >= now() - 1h GROUP BY time(1m) fill(0)"#,
        "SELECT mean(value) * 100 FROM mem WHERE time >= now() - 1h GROUP BY time(1m) fill(0)",
    ),
    (
        r#"SELECT last("value") FROM "cpu" WHERE time >= now() - 1h GROUP BY "host" ORDER BY time DESC LIMIT 1 SLIMIT 10"#,
        "SELECT last(value) FROM cpu WHERE time >= now() - 1h GROUP BY host ORDER BY time DESC LIMIT 1 SLIMIT 10",
    ),
    (
        r#"SELECT mean("value") FROM "cpu" WHERE time >= now() - 1d GROUP BY time(1h) fill(linear) tz('Europe/Paris')"#,
        "SELECT mean(value) FROM cpu WHERE time >= now() - 1d GROUP BY time(1h) fill(linear) tz('Europe/Paris')",
    ),
    (
        r#"SELECT count(distinct("host")) FROM "cpu" WHERE time >= now() - 1h GROUP BY time(5m)"#,
        "SELECT count(distinct(host)) FROM cpu WHERE time >= now() - 1h GROUP BY time(5m)",
    ),
    (
        r#"SELECT moving_average(mean("value"), 10) FROM "cpu" WHERE time >= now() - 1h GROUP BY time(1m)"#,
        "SELECT moving_average(mean(value), 10) FROM cpu WHERE time >= now() - 1h GROUP BY time(1m)",
    ),
    (
        r#"SELECT cumulative_sum(sum("requests")) FROM "http" GROUP BY time(1m)"#,
        "SELECT cumulative_sum(sum(requests)) FROM http GROUP BY time(1m)",
    ),
    (
        r#"SELECT difference(mean("value")), non_negative_difference(max("value")) FROM "m" GROUP BY time(1m)"#,
        "SELECT difference(mean(value)), non_negative_difference(max(value)) FROM m GROUP BY time(1m)",
    ),
    (
        r#"SELECT holt_winters(mean("value"), 10, 4) FROM "m" WHERE time > now() - 7d GROUP BY time(1h)"#,
        "SELECT holt_winters(mean(value), 10, 4) FROM m WHERE time > now() - 1w GROUP BY time(1h)",
    ),
    (
        r#"SELECT top("value", 3) FROM "cpu" WHERE time >= now() - 1h"#,
        "SELECT top(value, 3) FROM cpu WHERE time >= now() - 1h",
    ),
    (
        r#"SELECT bottom("value", "host", 3) FROM "cpu""#,
        "SELECT bottom(value, host, 3) FROM cpu",
    ),
    (
        r#"SELECT percentile("value", 95) FROM "cpu" WHERE time > now() - 1h GROUP BY time(1m)"#,
        "SELECT percentile(value, 95) FROM cpu WHERE time > now() - 1h GROUP BY time(1m)",
    ),
    (
        r#"SELECT percentile("latency", 99.9) AS "p999" FROM "http""#,
        "SELECT percentile(latency, 99.9) AS p999 FROM http",
    ),
    (
        r#"SELECT elapsed(mean("value"), 10s) FROM "m" GROUP BY time(1m)"#,
        "SELECT elapsed(mean(value), 10s) FROM m GROUP BY time(1m)",
    ),
    (
        r#"SELECT integral("value", 1h), stddev("value"), spread("value"), mode("value"), median("value") FROM "m""#,
        "SELECT integral(value, 1h), stddev(value), spread(value), mode(value), median(value) FROM m",
    ),
    (
        r#"SELECT first("value"), last("value"), min("value"), max("value"), sum("value"), count("value") FROM "m""#,
        "SELECT first(value), last(value), min(value), max(value), sum(value), count(value) FROM m",
    ),
    (
        r#"SELECT mean("value") FROM "cpu" WHERE "host" =~ /^(a|b|c)$/ AND time >= now() - 30m GROUP BY time(30s), * fill(null)"#,
        "SELECT mean(value) FROM cpu WHERE host =~ /^(a|b|c)$/ AND time >= now() - 30m GROUP BY time(30s), * fill(null)",
    ),
    (
        r#"SELECT mean("value") FROM "cpu" WHERE time >= now() - 1h GROUP BY time(1m) ORDER BY time DESC LIMIT 100"#,
        "SELECT mean(value) FROM cpu WHERE time >= now() - 1h GROUP BY time(1m) ORDER BY time DESC LIMIT 100",
    ),
    // ---- fields, functions and arithmetic -------------------------------
    ("SELECT * FROM cpu", "SELECT * FROM cpu"),
    ("SELECT *::field FROM cpu", "SELECT *::field FROM cpu"),
    ("SELECT *::tag, value FROM cpu", "SELECT *::tag, value FROM cpu"),
    ("SELECT /usage/ FROM cpu", "SELECT /usage/ FROM cpu"),
    ("SELECT a::integer, b::float, c::string, d::boolean, e::unsigned FROM m", "SELECT a::integer, b::float, c::string, d::boolean, e::unsigned FROM m"),
    ("SELECT COUNT(DISTINCT host) FROM cpu", "SELECT count(distinct(host)) FROM cpu"),
    ("SELECT DISTINCT host FROM cpu", "SELECT distinct(host) FROM cpu"),
    ("SELECT distinct(host) FROM cpu", "SELECT distinct(host) FROM cpu"),
    ("SELECT count(*) FROM cpu", "SELECT count(*) FROM cpu"),
    ("SELECT mean(/usage_/) FROM cpu", "SELECT mean(/usage_/) FROM cpu"),
    // An aggregate of a non-field parses; running it is InfluxDB's
    // "expected field argument in count()" (the router's planner).
    ("SELECT count(2) FROM cpu", "SELECT count(2) FROM cpu"),
    ("SELECT max(mean(a)) FROM m", "SELECT max(mean(a)) FROM m"),
    ("SELECT a + b * c FROM m", "SELECT a + b * c FROM m"),
    ("SELECT (a + b) * c FROM m", "SELECT (a + b) * c FROM m"),
    ("SELECT a - (b - c) FROM m", "SELECT a - (b - c) FROM m"),
    ("SELECT (a - b) - c FROM m", "SELECT a - b - c FROM m"),
    ("SELECT a / b / c, a % 2 FROM m", "SELECT a / b / c, a % 2 FROM m"),
    ("SELECT ((a)) FROM m", "SELECT a FROM m"),
    ("SELECT -a FROM m", "SELECT -1 * a FROM m"),
    ("SELECT a * -b FROM m", "SELECT a * (-1 * b) FROM m"),
    ("SELECT a - -1, a * -2.5, +3 FROM m", "SELECT a - -1, a * -2.5, 3 FROM m"),
    ("SELECT a & 1, b | 2, c ^ 3 FROM m", "SELECT a & 1, b | 2, c ^ 3 FROM m"),
    ("SELECT .5 + 5. + 1.50 FROM m", "SELECT 0.5 + 5.0 + 1.5 FROM m"),
    ("SELECT 18446744073709551615, -9223372036854775808 FROM m", "SELECT 18446744073709551615, -9223372036854775808 FROM m"),
    ("SELECT mean(a) + mean(b) AS total FROM m", "SELECT mean(a) + mean(b) AS total FROM m"),
    ("SELECT abs(a), sqrt(b), pow(a, 2), log(a, 10), round(c) FROM m", "SELECT abs(a), sqrt(b), pow(a, 2), log(a, 10), round(c) FROM m"),
    ("SELECT sample(a, 5), exponential_moving_average(a, 3) FROM m", "SELECT sample(a, 5), exponential_moving_average(a, 3) FROM m"),
    ("SELECT MEAN(Value) FROM Cpu", "SELECT mean(Value) FROM Cpu"),
    ("SELECT derivative(value) FROM m", "SELECT derivative(value) FROM m"),
    ("SELECT non_negative_derivative(value, 1m) FROM m", "SELECT non_negative_derivative(value, 1m) FROM m"),
    ("SELECT first(value), host FROM cpu GROUP BY time(1h)", "SELECT first(value), host FROM cpu GROUP BY time(1h)"),
    // ---- identifiers and literals ----------------------------------------
    ("select Value from Cpu where Host = 'a'", "SELECT Value FROM Cpu WHERE Host = 'a'"),
    (r#"SELECT "select", "from" FROM "where""#, r#"SELECT "select", "from" FROM "where""#),
    (r#"SELECT "a \"quoted\" name" FROM "my measurement""#, r#"SELECT "a \"quoted\" name" FROM "my measurement""#),
    (r#"SELECT "1h", "_x", "üñí" FROM m"#, r#"SELECT "1h", _x, "üñí" FROM m"#),
    (r"SELECT a FROM m WHERE s = 'it\'s' AND p = 'C:\\dir'", r"SELECT a FROM m WHERE s = 'it\'s' AND p = 'C:\\dir'"),
    ("SELECT a FROM m WHERE up = true OR down = FALSE", "SELECT a FROM m WHERE up = true OR down = false"),
    (r#"SELECT a FROM m WHERE host = "a""#, "SELECT a FROM m WHERE host = a"),
    ("SELECT a -- trailing comment\nFROM m", "SELECT a FROM m"),
    ("SELECT /* inline */ a FROM /* another */ m", "SELECT a FROM m"),
    // ---- FROM ---------------------------------------------------------------
    ("SELECT a FROM m1, m2", "SELECT a FROM m1, m2"),
    ("SELECT a FROM db.rp.m", "SELECT a FROM db.rp.m"),
    ("SELECT a FROM db..m", "SELECT a FROM db..m"),
    ("SELECT a FROM rp.m", "SELECT a FROM rp.m"),
    (r#"SELECT a FROM "my db"."my rp"."my m""#, r#"SELECT a FROM "my db"."my rp"."my m""#),
    ("SELECT * FROM /cpu.*/", "SELECT * FROM /cpu.*/"),
    ("SELECT * FROM db.rp./^c/", "SELECT * FROM db.rp./^c/"),
    (r"SELECT * FROM /a\/b/", r"SELECT * FROM /a\/b/"),
    ("SELECT a FROM m, (SELECT b AS a FROM n)", "SELECT a FROM m, (SELECT b AS a FROM n)"),
    (
        "SELECT mean(max) FROM (SELECT max(value) FROM cpu GROUP BY host, time(20s)) GROUP BY time(20s)",
        "SELECT mean(max) FROM (SELECT max(value) FROM cpu GROUP BY host, time(20s)) GROUP BY time(20s)",
    ),
    (
        "SELECT max(m) FROM (SELECT mean(x) AS m FROM (SELECT x FROM raw WHERE x > 0) GROUP BY time(1m))",
        "SELECT max(m) FROM (SELECT mean(x) AS m FROM (SELECT x FROM raw WHERE x > 0) GROUP BY time(1m))",
    ),
    // ---- WHERE ----------------------------------------------------------------
    ("SELECT a FROM m WHERE host != 'a' AND region <> 'b'", "SELECT a FROM m WHERE host != 'a' AND region != 'b'"),
    ("SELECT a FROM m WHERE a > 1 OR b < 2 AND c = 3", "SELECT a FROM m WHERE a > 1 OR b < 2 AND c = 3"),
    ("SELECT a FROM m WHERE (a > 1 OR b < 2) AND c = 3", "SELECT a FROM m WHERE (a > 1 OR b < 2) AND c = 3"),
    ("SELECT a FROM m WHERE host = 'a' AND (interface = 'b' AND time > 0)", "SELECT a FROM m WHERE host = 'a' AND (interface = 'b' AND time > 0)"),
    ("SELECT a FROM m WHERE host !~ /^db/ AND a >= -5.5 AND b <= 7", "SELECT a FROM m WHERE host !~ /^db/ AND a >= -5.5 AND b <= 7"),
    ("SELECT a FROM m WHERE time > '2024-01-01T00:00:00Z'", "SELECT a FROM m WHERE time > '2024-01-01T00:00:00Z'"),
    ("SELECT a FROM m WHERE time > '2024-01-01 00:00:00' AND time < '2024-01-02'", "SELECT a FROM m WHERE time > '2024-01-01 00:00:00' AND time < '2024-01-02'"),
    ("SELECT a FROM m WHERE time > now() - 1d AND time < now() + 1w", "SELECT a FROM m WHERE time > now() - 1d AND time < now() + 1w"),
    ("SELECT a FROM m WHERE time >= 0 AND time < 100u", "SELECT a FROM m WHERE time >= 0 AND time < 100u"),
    ("SELECT a FROM m WHERE time > 1µ AND time < 1000ms", "SELECT a FROM m WHERE time > 1u AND time < 1s"),
    ("SELECT a FROM m WHERE time > 60s AND time < 1ns", "SELECT a FROM m WHERE time > 1m AND time < 1ns"),
    ("SELECT a FROM m WHERE time > 1536364800000000000 - 24h", "SELECT a FROM m WHERE time > 1536364800000000000 - 1d"),
    (r"SELECT a FROM m WHERE path =~ /a\/b\.c/", r"SELECT a FROM m WHERE path =~ /a\/b\.c/"),
    ("SELECT a FROM m WHERE a + 1 > b * 2", "SELECT a FROM m WHERE a + 1 > b * 2"),
    ("SELECT a FROM m WHERE host::tag = 'a' AND value::field > 1", "SELECT a FROM m WHERE host::tag = 'a' AND value::field > 1"),
    // ---- GROUP BY, fill, ORDER BY, limits, tz, INTO ----------------------------
    ("SELECT mean(a) FROM m GROUP BY *", "SELECT mean(a) FROM m GROUP BY *"),
    ("SELECT mean(a) FROM m GROUP BY /^h/", "SELECT mean(a) FROM m GROUP BY /^h/"),
    ("SELECT mean(a) FROM m GROUP BY time(1h, 15m)", "SELECT mean(a) FROM m GROUP BY time(1h, 15m)"),
    ("SELECT mean(a) FROM m GROUP BY time(1d, -1h)", "SELECT mean(a) FROM m GROUP BY time(1d, -1h)"),
    ("SELECT mean(a) FROM m GROUP BY time(10m, now())", "SELECT mean(a) FROM m GROUP BY time(10m, now())"),
    ("SELECT mean(a) FROM m GROUP BY host, region", "SELECT mean(a) FROM m GROUP BY host, region"),
    (r#"SELECT mean(a) FROM m GROUP BY "time""#, "SELECT mean(a) FROM m GROUP BY time"),
    ("SELECT mean(a) FROM m GROUP BY TIME(60m) FILL(NULL)", "SELECT mean(a) FROM m GROUP BY time(1h) fill(null)"),
    ("SELECT mean(a) FROM m GROUP BY time(1m) fill(-1)", "SELECT mean(a) FROM m GROUP BY time(1m) fill(-1)"),
    ("SELECT mean(a) FROM m GROUP BY time(1m) fill(1.5)", "SELECT mean(a) FROM m GROUP BY time(1m) fill(1.5)"),
    ("SELECT mean(a) FROM m fill(0)", "SELECT mean(a) FROM m fill(0)"),
    ("SELECT a FROM m ORDER BY DESC", "SELECT a FROM m ORDER BY time DESC"),
    ("SELECT a FROM m ORDER BY time", "SELECT a FROM m ORDER BY time ASC"),
    ("SELECT a FROM m LIMIT 10 OFFSET 5 SLIMIT 2 SOFFSET 1", "SELECT a FROM m LIMIT 10 OFFSET 5 SLIMIT 2 SOFFSET 1"),
    ("SELECT a FROM m SOFFSET 1", "SELECT a FROM m SOFFSET 1"),
    ("SELECT a FROM m TZ('America/Chicago')", "SELECT a FROM m tz('America/Chicago')"),
    ("SELECT mean(a) INTO cpu_1h FROM cpu GROUP BY time(1h)", "SELECT mean(a) INTO cpu_1h FROM cpu GROUP BY time(1h)"),
    (r#"SELECT mean(a) INTO "db"."rp".:MEASUREMENT FROM /.*/ GROUP BY time(1h)"#, "SELECT mean(a) INTO db.rp.:MEASUREMENT FROM /.*/ GROUP BY time(1h)"),
    ("SELECT a INTO rp.m2 FROM m", "SELECT a INTO rp.m2 FROM m"),
    ("SELECT a INTO db..m2 FROM m", "SELECT a INTO db..m2 FROM m"),
    // ---- several statements, EXPLAIN ------------------------------------------
    ("SELECT a FROM m; SELECT b FROM n", "SELECT a FROM m; SELECT b FROM n"),
    ("SELECT a FROM m;;\n SELECT b FROM n;", "SELECT a FROM m; SELECT b FROM n"),
    ("EXPLAIN SELECT a FROM m", "EXPLAIN SELECT a FROM m"),
    ("EXPLAIN ANALYZE SELECT mean(a) FROM m GROUP BY time(1m)", "EXPLAIN ANALYZE SELECT mean(a) FROM m GROUP BY time(1m)"),
];
