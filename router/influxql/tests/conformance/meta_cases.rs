//! SHOW / CREATE / DROP / DELETE / retention policy statements, valid and
//! invalid, users and grants, and the statements refused as not supported.

use crate::{Invalid, Valid};

pub const VALID: &[Valid] = &[
    // ---- continuous queries ---------------------------------------------------
    ("SHOW CONTINUOUS QUERIES", "SHOW CONTINUOUS QUERIES"),
    (
        r#"CREATE CONTINUOUS QUERY "cq" ON db BEGIN SELECT mean(a) INTO b FROM m GROUP BY time(1m) END"#,
        "CREATE CONTINUOUS QUERY cq ON db BEGIN SELECT mean(a) INTO b FROM m GROUP BY time(1m) END",
    ),
    (
        "create continuous query cq on db resample every 30s for 2h begin select mean(a) into rp.b from m group by time(1m), host end",
        "CREATE CONTINUOUS QUERY cq ON db RESAMPLE EVERY 30s FOR 2h BEGIN SELECT mean(a) INTO rp.b FROM m GROUP BY time(1m), host END",
    ),
    ("DROP CONTINUOUS QUERY cq ON db", "DROP CONTINUOUS QUERY cq ON db"),
    // ---- what Grafana's editor and variables send ---------------------------
    ("SHOW DATABASES", "SHOW DATABASES"),
    (
        r#"SHOW RETENTION POLICIES on "telegraf""#,
        "SHOW RETENTION POLICIES ON telegraf",
    ),
    (
        r#"SHOW MEASUREMENTS WITH MEASUREMENT =~ /cp/ LIMIT 100"#,
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ /cp/ LIMIT 100",
    ),
    (
        r#"SHOW MEASUREMENTS WITH MEASUREMENT =~ /(?i)cpu/ LIMIT 100"#,
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ /(?i)cpu/ LIMIT 100",
    ),
    (r#"SHOW TAG KEYS FROM "cpu""#, "SHOW TAG KEYS FROM cpu"),
    (
        r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host""#,
        "SHOW TAG VALUES FROM cpu WITH KEY = host",
    ),
    (
        r#"SHOW TAG VALUES WITH KEY = "host""#,
        "SHOW TAG VALUES WITH KEY = host",
    ),
    (
        r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE "region" =~ /^us$/"#,
        "SHOW TAG VALUES FROM cpu WITH KEY = host WHERE region =~ /^us$/",
    ),
    (
        r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE time > now() - 1h"#,
        "SHOW TAG VALUES FROM cpu WITH KEY = host WHERE time > now() - 1h",
    ),
    (r#"SHOW FIELD KEYS FROM "cpu""#, "SHOW FIELD KEYS FROM cpu"),
    (
        r#"SHOW FIELD KEYS FROM "autogen"."cpu""#,
        "SHOW FIELD KEYS FROM autogen.cpu",
    ),
    // ---- SHOW ---------------------------------------------------------------------
    ("show databases", "SHOW DATABASES"),
    ("SHOW MEASUREMENTS", "SHOW MEASUREMENTS"),
    (
        r#"SHOW MEASUREMENTS ON "telegraf" WITH MEASUREMENT = "cpu""#,
        "SHOW MEASUREMENTS ON telegraf WITH MEASUREMENT = cpu",
    ),
    (
        r#"SHOW MEASUREMENTS WHERE "region" = 'uswest' AND "host" = 'serverA'"#,
        "SHOW MEASUREMENTS WHERE region = 'uswest' AND host = 'serverA'",
    ),
    (
        "SHOW MEASUREMENTS LIMIT 10 OFFSET 5",
        "SHOW MEASUREMENTS LIMIT 10 OFFSET 5",
    ),
    ("SHOW TAG KEYS", "SHOW TAG KEYS"),
    (
        "SHOW TAG KEYS ON db FROM cpu WHERE host = 'a' LIMIT 5 OFFSET 1",
        "SHOW TAG KEYS ON db FROM cpu WHERE host = 'a' LIMIT 5 OFFSET 1",
    ),
    (
        "SHOW TAG KEYS FROM /c.*/, mem",
        "SHOW TAG KEYS FROM /c.*/, mem",
    ),
    (
        r#"SHOW TAG VALUES FROM "cpu" WITH KEY IN ("region", "host") WHERE "service" = 'redis'"#,
        "SHOW TAG VALUES FROM cpu WITH KEY IN (region, host) WHERE service = 'redis'",
    ),
    (
        "SHOW TAG VALUES WITH KEY =~ /.*/",
        "SHOW TAG VALUES WITH KEY =~ /.*/",
    ),
    (
        "SHOW TAG VALUES WITH KEY !~ /.*c.*/",
        "SHOW TAG VALUES WITH KEY !~ /.*c.*/",
    ),
    (
        "SHOW TAG VALUES WITH KEY != host",
        "SHOW TAG VALUES WITH KEY != host",
    ),
    (
        r#"SHOW TAG VALUES ON "db" FROM "autogen"."cpu" WITH KEY = "host" LIMIT 10"#,
        "SHOW TAG VALUES ON db FROM autogen.cpu WITH KEY = host LIMIT 10",
    ),
    ("SHOW FIELD KEYS", "SHOW FIELD KEYS"),
    (
        r#"SHOW FIELD KEYS ON "db" FROM "rp"."cpu" LIMIT 3"#,
        "SHOW FIELD KEYS ON db FROM rp.cpu LIMIT 3",
    ),
    ("SHOW SERIES", "SHOW SERIES"),
    (
        r#"SHOW SERIES FROM "cpu" WHERE "host" = 'a' LIMIT 10 OFFSET 2"#,
        "SHOW SERIES FROM cpu WHERE host = 'a' LIMIT 10 OFFSET 2",
    ),
    ("SHOW SERIES ON db", "SHOW SERIES ON db"),
    ("SHOW RETENTION POLICIES", "SHOW RETENTION POLICIES"),
    ("SHOW SERIES CARDINALITY", "SHOW SERIES CARDINALITY"),
    (
        "SHOW SERIES EXACT CARDINALITY ON db FROM cpu WHERE host = 'a'",
        "SHOW SERIES EXACT CARDINALITY ON db FROM cpu WHERE host = 'a'",
    ),
    (
        "SHOW MEASUREMENT CARDINALITY",
        "SHOW MEASUREMENT CARDINALITY",
    ),
    (
        "SHOW TAG KEY CARDINALITY FROM cpu",
        "SHOW TAG KEY CARDINALITY FROM cpu",
    ),
    (
        "SHOW TAG VALUES CARDINALITY WITH KEY = host",
        "SHOW TAG VALUES CARDINALITY WITH KEY = host",
    ),
    (
        "SHOW TAG VALUES EXACT CARDINALITY FROM cpu WITH KEY =~ /h/",
        "SHOW TAG VALUES EXACT CARDINALITY FROM cpu WITH KEY =~ /h/",
    ),
    (
        "SHOW FIELD KEY CARDINALITY ON db",
        "SHOW FIELD KEY CARDINALITY ON db",
    ),
    // ---- CREATE / DROP / DELETE -------------------------------------------------
    (r#"CREATE DATABASE "foo""#, "CREATE DATABASE foo"),
    (
        r#"CREATE DATABASE "bar" WITH DURATION 1d REPLICATION 1 SHARD DURATION 30m NAME "myrp""#,
        "CREATE DATABASE bar WITH DURATION 1d REPLICATION 1 SHARD DURATION 30m NAME myrp",
    ),
    (
        r#"CREATE DATABASE "mydb" WITH NAME "myrp""#,
        "CREATE DATABASE mydb WITH NAME myrp",
    ),
    (
        "CREATE DATABASE db WITH DURATION INF",
        "CREATE DATABASE db WITH DURATION INF",
    ),
    (
        "CREATE DATABASE db WITH DURATION 0s REPLICATION 3",
        "CREATE DATABASE db WITH DURATION 0s REPLICATION 3",
    ),
    (r#"DROP DATABASE "mydb""#, "DROP DATABASE mydb"),
    (r#"DROP MEASUREMENT "cpu""#, "DROP MEASUREMENT cpu"),
    (
        r#"DROP SERIES FROM "telegraf"."autogen"."cpu" WHERE cpu = 'cpu8'"#,
        "DROP SERIES FROM telegraf.autogen.cpu WHERE cpu = 'cpu8'",
    ),
    (
        "DROP SERIES WHERE host = 'a'",
        "DROP SERIES WHERE host = 'a'",
    ),
    ("DROP SERIES FROM cpu, mem", "DROP SERIES FROM cpu, mem"),
    (r#"DELETE FROM "cpu""#, "DELETE FROM cpu"),
    (
        r#"DELETE FROM "cpu" WHERE time < '2000-01-01T00:00:00Z'"#,
        "DELETE FROM cpu WHERE time < '2000-01-01T00:00:00Z'",
    ),
    (
        "DELETE WHERE time < '2000-01-01T00:00:00Z'",
        "DELETE WHERE time < '2000-01-01T00:00:00Z'",
    ),
    (
        r#"CREATE RETENTION POLICY "10m.events" ON "somedb" DURATION 60m REPLICATION 2"#,
        r#"CREATE RETENTION POLICY "10m.events" ON somedb DURATION 1h REPLICATION 2"#,
    ),
    (
        r#"CREATE RETENTION POLICY "10m.events" ON "somedb" DURATION 60m REPLICATION 2 SHARD DURATION 30m DEFAULT"#,
        r#"CREATE RETENTION POLICY "10m.events" ON somedb DURATION 1h REPLICATION 2 SHARD DURATION 30m DEFAULT"#,
    ),
    (
        r#"ALTER RETENTION POLICY "1h.cpu" ON "mydb" DEFAULT"#,
        r#"ALTER RETENTION POLICY "1h.cpu" ON mydb DEFAULT"#,
    ),
    (
        r#"ALTER RETENTION POLICY "policy1" ON "somedb" REPLICATION 4 DURATION 2h"#,
        "ALTER RETENTION POLICY policy1 ON somedb DURATION 2h REPLICATION 4",
    ),
    (
        r#"DROP RETENTION POLICY "1h.cpu" ON "mydb""#,
        r#"DROP RETENTION POLICY "1h.cpu" ON mydb"#,
    ),
    (
        "SHOW DATABASES; SHOW MEASUREMENTS ON db",
        "SHOW DATABASES; SHOW MEASUREMENTS ON db",
    ),
    // ---- users and privileges ------------------------------------------------
    ("SHOW USERS", "SHOW USERS"),
    (
        r#"CREATE USER "jdoe" WITH PASSWORD '1337password'"#,
        "CREATE USER jdoe WITH PASSWORD '1337password'",
    ),
    ("DROP USER jdoe", "DROP USER jdoe"),
    ("GRANT ALL TO jdoe", "GRANT ALL PRIVILEGES TO jdoe"),
    (
        "REVOKE ALL PRIVILEGES FROM jdoe",
        "REVOKE ALL PRIVILEGES FROM jdoe",
    ),
    ("grant write on db0 to jdoe", "GRANT WRITE ON db0 TO jdoe"),
    ("SET PASSWORD FOR jdoe = 'x'", "SET PASSWORD FOR jdoe = 'x'"),
    ("SHOW GRANTS FOR jdoe", "SHOW GRANTS FOR jdoe"),
];

pub const INVALID: &[Invalid] = &[
    // ---- not supported: named, at the statement -------------------------------
    ("KILL QUERY 36", "KILL QUERY is not supported", 1, 1),
    (
        "CREATE CONTINUOUS QUERY cq ON db RESAMPLE BEGIN SELECT mean(a) INTO b FROM m GROUP BY time(1m) END",
        "found BEGIN, expected EVERY, FOR",
        1,
        43,
    ),
    (
        "SHOW SUBSCRIPTIONS",
        "SHOW SUBSCRIPTIONS is not supported",
        1,
        1,
    ),
    (
        "CREATE SUBSCRIPTION s ON db.rp DESTINATIONS ALL 'udp://h:9090'",
        "CREATE SUBSCRIPTION is not supported",
        1,
        1,
    ),
    (
        "DROP SUBSCRIPTION s ON db.rp",
        "DROP SUBSCRIPTION is not supported",
        1,
        1,
    ),
    ("SHOW SHARDS", "SHOW SHARDS is not supported", 1, 1),
    (
        "SHOW SHARD GROUPS",
        "SHOW SHARD GROUPS is not supported",
        1,
        1,
    ),
    ("DROP SHARD 1", "DROP SHARD is not supported", 1, 1),
    ("SHOW QUERIES", "SHOW QUERIES is not supported", 1, 1),
    ("SHOW STATS", "SHOW STATS is not supported", 1, 1),
    (
        "SHOW DIAGNOSTICS",
        "SHOW DIAGNOSTICS is not supported",
        1,
        1,
    ),
    (
        "SHOW DATABASES;\n  SHOW SHARDS",
        "SHOW SHARDS is not supported",
        2,
        3,
    ),
    // ---- users: InfluxDB's texts and positions (TestServer_UserCommands) ----
    (
        "CREATE USER 0xBAD WITH PASSWORD pwd1337",
        "found 0xBAD, expected identifier",
        1,
        13,
    ),
    ("CREATE USER jdoe", "found EOF, expected WITH", 1, 18),
    ("SET PASSWORD FOR jdoe x", "found x, expected =", 1, 23),
    ("SET jdoe", "found jdoe, expected PASSWORD", 1, 5),
    (
        "REVOKE READ ON db0 TO jdoe",
        "found TO, expected FROM",
        1,
        20,
    ),
    (
        "CREATE USER jdoe WITH PASSWORD 'x' WITH READ",
        "found READ, expected ALL",
        1,
        41,
    ),
    ("SHOW GRANTS jdoe", "found jdoe, expected FOR", 1, 13),
    // ---- malformed ------------------------------------------------------------------
    (
        "SHOW FOO",
        "found FOO, expected CONTINUOUS, DATABASES, DIAGNOSTICS, FIELD",
        1,
        6,
    ),
    (
        "SHOW TAG FOO",
        "found FOO, expected KEYS, VALUES, KEY",
        1,
        10,
    ),
    (
        "SHOW TAG VALUES FROM cpu",
        "found EOF, expected WITH",
        1,
        26,
    ),
    (
        "SHOW TAG VALUES WITH KEY host",
        "found host, expected =, !=, =~, !~, IN",
        1,
        26,
    ),
    (
        "SHOW TAG VALUES WITH KEY IN (a, b",
        "found EOF, expected )",
        1,
        35,
    ),
    (
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ 'cpu'",
        "found 'cpu', expected regex",
        1,
        39,
    ),
    (
        "SHOW MEASUREMENTS WITH KEY = a",
        "found KEY, expected MEASUREMENT",
        1,
        24,
    ),
    (
        "SHOW MEASUREMENTS LIMIT x",
        "found x, expected integer",
        1,
        25,
    ),
    (
        "SHOW RETENTION POLICIES ON",
        "found EOF, expected identifier",
        1,
        28,
    ),
    ("SHOW RETENTION", "found EOF, expected POLICIES", 1, 16),
    (
        "SHOW SERIES CARDINALITY FROM",
        "found EOF, expected identifier, regex",
        1,
        30,
    ),
    (
        "SHOW FIELD KEYS WHERE a = 1",
        "found WHERE, expected ON, FROM, LIMIT, OFFSET, ;",
        1,
        17,
    ),
    ("CREATE DATABASE", "found EOF, expected identifier", 1, 17),
    (
        "CREATE DATABASE db WITH",
        "found EOF, expected DURATION, REPLICATION, SHARD, NAME",
        1,
        25,
    ),
    (
        "CREATE DATABASE db WITH DURATION 30m",
        "retention policy duration must be at least 1h0m0s",
        1,
        34,
    ),
    (
        "CREATE DATABASE db WITH REPLICATION 0",
        "invalid value 0: must be 1 <= n <= 2147483647",
        1,
        37,
    ),
    (
        "CREATE TABLE t",
        "found TABLE, expected CONTINUOUS, DATABASE, USER, RETENTION, SUBSCRIPTION",
        1,
        8,
    ),
    (
        "CREATE RETENTION POLICY rp ON db DURATION 1h",
        "found EOF, expected REPLICATION",
        1,
        45,
    ),
    (
        "CREATE RETENTION POLICY rp DURATION 1h REPLICATION 1",
        "found DURATION, expected ON",
        1,
        28,
    ),
    (
        "ALTER RETENTION POLICY rp ON db",
        "found EOF, expected DURATION, REPLICATION, SHARD, DEFAULT",
        1,
        33,
    ),
    (
        "ALTER RETENTION POLICY rp ON db DEFAULT DEFAULT",
        "found duplicate DEFAULT option",
        1,
        41,
    ),
    (
        "ALTER DATABASE db",
        "found DATABASE, expected RETENTION",
        1,
        7,
    ),
    ("DROP SERIES", "found EOF, expected FROM, WHERE", 1, 13),
    ("DELETE", "found EOF, expected FROM, WHERE", 1, 8),
    (
        "DELETE FROM",
        "found EOF, expected identifier, regex",
        1,
        13,
    ),
    ("DROP MEASUREMENT", "found EOF, expected identifier", 1, 18),
    (
        "DROP TABLE t",
        "found TABLE, expected CONTINUOUS, DATABASE, MEASUREMENT",
        1,
        6,
    ),
    ("DROP DATABASE db extra", "found extra, expected ;", 1, 18),
];
