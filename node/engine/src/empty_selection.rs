//! Whether a planned statement whose series selection selects no series
//! has nothing to read, so the shard answers "no rows here" without an
//! engine statement.
//!
//! A single-series panel selects one series, which lives on one shard;
//! every other shard used to run the whole statement over `IN ()` (about
//! 2 ms of chDB each, bench-query's raw_one_host). The statement reads
//! nothing when the selection is a conjunct of a `WHERE` (an `AND` chain
//! with no `OR`, `NOT`, `BETWEEN`, ternary or lambda beside it) and every
//! statement around it reads that one from its `FROM` (no join, union or
//! `WITH FILL`/`TOTALS` that could add rows). That is the shape routers
//! generate (`sqlgen::fact_sql`, the pushed-down aggregates wrapped around
//! it, PromQL's samples). Anything else, or anything this cannot be sure
//! of, runs as before.
//!
//! One difference is accepted: an aggregate without `GROUP BY` over no rows
//! answers one row of zeros in the engine and none here. Routers already
//! read both as "no points" (a shard without the database answers none).

use shardhouse_common::sql_check::{lex, Kind, Token};

/// Words beside the selection that can make rows without it.
const NOT_A_CONJUNCTION: &[&str] = &["OR", "NOT", "BETWEEN", "XOR"];

/// Words in any statement of the chain that can add rows to an empty read.
const ADDS_ROWS: &[&str] = &[
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "FILL",
    "TOTALS",
    "ROLLUP",
    "CUBE",
];

/// Words that start a clause of a `SELECT`.
const CLAUSES: &[&str] = &[
    "SELECT", "FROM", "JOIN", "ON", "USING", "PREWHERE", "WHERE", "GROUP", "HAVING", "ORDER",
    "LIMIT", "SETTINGS", "WINDOW", "QUALIFY", "WITH",
];

/// Whether `sql` answers no rows (see the module docs) when the series
/// selection whose `(` is at byte `open` selects no series.
pub fn answers_no_rows(sql: &str, open: usize) -> bool {
    let Ok(toks) = lex(sql) else {
        return false;
    };
    let shape = Shape::of(&toks);
    let Some(sel) = toks.iter().position(|t| t.start == open) else {
        return false;
    };
    let word = |i: usize| word(sql, &toks, i);
    let is = |i: usize, w: &str| word(i).is_some_and(|x| x.eq_ignore_ascii_case(w));
    // `WHERE|AND series_id IN (`.
    if sel < 3
        || !is(sel - 1, "IN")
        || !is(sel - 2, "series_id")
        || !["WHERE", "PREWHERE", "AND"].iter().any(|w| is(sel - 3, w))
    {
        return false;
    }
    // Nothing after it but the next conjunct, a clause or the end.
    let Some(close) = shape.pair[sel] else {
        return false;
    };
    let after_ok = match toks.get(close + 1) {
        None => true,
        Some(t) if matches!(t.kind, Kind::Semicolon | Kind::Punct(')')) => true,
        Some(_) => [
            "AND", "GROUP", "ORDER", "LIMIT", "HAVING", "SETTINGS", "FORMAT",
        ]
        .iter()
        .any(|w| is(close + 1, w)),
    };
    if !after_ok {
        return false;
    }
    let (lo, hi) = shape.level_of(sel, toks.len());
    let depth = shape.depth[sel];
    let level: Vec<usize> = (lo..hi).filter(|&i| shape.depth[i] == depth).collect();
    let in_where = level
        .iter()
        .rfind(|&&i| i < sel && CLAUSES.iter().any(|w| is(i, w)))
        .is_some_and(|&i| is(i, "WHERE") || is(i, "PREWHERE"));
    let breaks_the_chain = |i: usize| {
        let lambda = matches!(toks[i].kind, Kind::Punct('-'))
            && matches!(toks.get(i + 1).map(|t| t.kind), Some(Kind::Punct('>')));
        lambda
            || matches!(toks[i].kind, Kind::Punct('?'))
            || NOT_A_CONJUNCTION.iter().any(|w| is(i, w))
    };
    let conjunction = !level.iter().any(|&i| breaks_the_chain(i));
    if !in_where || !conjunction || level.iter().any(|&i| ADDS_ROWS.iter().any(|w| is(i, w))) {
        return false;
    }
    // Each statement around it reads it from its FROM, alone.
    let mut inner_open = lo.checked_sub(1);
    while let Some(o) = inner_open {
        if o == 0 || !is(o - 1, "FROM") {
            return false;
        }
        let (lo, hi) = shape.level_of(o, toks.len());
        let depth = shape.depth[o];
        let adds = (lo..hi)
            .filter(|&i| shape.depth[i] == depth)
            .any(|i| is(i, "JOIN") || ADDS_ROWS.iter().any(|w| is(i, w)));
        if adds {
            return false;
        }
        inner_open = lo.checked_sub(1);
    }
    true
}

/// The bracket structure of a token list.
struct Shape {
    /// Brackets open before each token (a `(` counts outside itself).
    depth: Vec<usize>,
    /// For each `(`, the index of its `)`.
    pair: Vec<Option<usize>>,
    /// For each token, the index of the `(` it is inside, if any.
    enclosing: Vec<Option<usize>>,
}

impl Shape {
    fn of(toks: &[Token]) -> Shape {
        let n = toks.len();
        let (mut depth, mut pair, mut enclosing) = (vec![0; n], vec![None; n], vec![None; n]);
        let mut stack: Vec<usize> = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            if matches!(t.kind, Kind::Punct(')')) {
                if let Some(o) = stack.pop() {
                    pair[o] = Some(i);
                }
            }
            depth[i] = stack.len();
            enclosing[i] = stack.last().copied();
            if matches!(t.kind, Kind::Punct('(')) {
                stack.push(i);
            }
        }
        Shape {
            depth,
            pair,
            enclosing,
        }
    }

    /// The token range of the level token `i` is on: inside its enclosing
    /// brackets, or the whole statement.
    fn level_of(&self, i: usize, n: usize) -> (usize, usize) {
        match self.enclosing[i] {
            Some(o) => (o + 1, self.pair[o].unwrap_or(n)),
            None => (0, n),
        }
    }
}

fn word<'a>(sql: &'a str, toks: &[Token], i: usize) -> Option<&'a str> {
    toks.get(i)
        .filter(|t| t.kind == Kind::Word)
        .map(|t| &sql[t.start..t.end])
}

#[cfg(test)]
mod tests {
    use super::answers_no_rows;

    const SEL: &str = "series_id IN (SELECT series_id FROM _series WHERE measurement = 'cpu' AND ((tags['host'] = 'a')))";

    fn empty(sql: &str) -> bool {
        let open = sql.find(SEL).expect("a selection") + "series_id IN ".len();
        answers_no_rows(sql, open)
    }

    #[test]
    fn conjuncts_of_the_read_and_of_the_statements_around_it_read_nothing() {
        let facts = format!(
            "SELECT toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid`, `usage` AS `f0` FROM `cpu` FINAL \
             WHERE time >= fromUnixTimestamp64Nano(toInt64(10)) AND {SEL} AND ((`usage` > 1 OR `usage` < 0)) LIMIT 101"
        );
        assert!(empty(&facts));
        assert!(empty(&format!("SELECT count() FROM cpu WHERE {SEL}")));
        assert!(empty(&format!(
            "SELECT t, avg(f0) FROM (SELECT time AS t, v AS f0 FROM cpu FINAL WHERE {SEL}) GROUP BY t ORDER BY t LIMIT 5"
        )));
        assert!(empty(&format!("SELECT min(`__t`), count() FROM ({facts})")));
        // A pushed-down aggregate naming the facts' columns in a WITH.
        assert!(empty(&format!(
            "WITH toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid`, `usage` AS `s0` \
             SELECT toInt64(0) AS `__b`, toUInt64(0) AS `__gsid`, count(`s0`) AS `agg_c0` FROM `cpu` FINAL \
             WHERE time >= fromUnixTimestamp64Nano(toInt64(10)) AND {SEL} GROUP BY `__b` LIMIT 11"
        )));
        // A join feeding the read keeps it empty: the WHERE filters after it.
        assert!(empty(&format!(
            "SELECT * FROM cpu ANY LEFT JOIN (SELECT series_id, tags FROM _series WHERE measurement = 'cpu') AS s USING (series_id) WHERE {SEL}"
        )));
    }

    #[test]
    fn anything_that_can_make_rows_without_the_selection_runs() {
        for sql in [
            format!("SELECT * FROM cpu WHERE v > 1 OR {SEL}"),
            format!("SELECT * FROM cpu WHERE {SEL} OR v > 1"),
            format!("SELECT * FROM cpu WHERE NOT {SEL}"),
            format!("SELECT * FROM cpu WHERE {SEL} = 0"),
            format!("SELECT * FROM cpu WHERE v BETWEEN 1 AND {SEL}"),
            format!("SELECT * FROM cpu WHERE v > 1 ? 1 : 0 AND {SEL}"),
            format!("SELECT {SEL} AND 1 AS x FROM cpu"),
            format!("SELECT * FROM cpu WHERE {SEL} UNION ALL SELECT * FROM mem"),
            format!("SELECT * FROM (SELECT * FROM cpu WHERE {SEL}) FULL JOIN mem USING (t)"),
            format!("SELECT * FROM mem WHERE t IN (SELECT t FROM cpu WHERE {SEL})"),
            format!("SELECT (SELECT count() FROM cpu WHERE {SEL}) AS c"),
            format!("WITH x AS (SELECT * FROM cpu WHERE {SEL}) SELECT * FROM x"),
            format!("SELECT t FROM (SELECT t FROM cpu WHERE {SEL}) ORDER BY t WITH FILL"),
            format!("SELECT * FROM cpu WHERE v IN (1, 2) AND (a OR {SEL})"),
        ] {
            assert!(!empty(&sql), "{sql}");
        }
    }
}
