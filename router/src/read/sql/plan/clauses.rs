//! Reading a statement's shape on ClickHouse's tokens: bracket depths, the
//! clauses of one SELECT at depth 0, comma lists, and the checks that make
//! a statement safe to run per shard (JOINs on `series_id`, shard-local
//! subqueries). Everything here works on token index ranges and returns a
//! message naming the construct and its position when it refuses.

use super::aggregates::aggregate_name;
use super::PlanError;
use crate::sql_check::{at_pos, lex, unquote, Kind, Token};
use std::collections::HashSet;

pub(super) fn text_of<'a>(q: &'a str, t: &Token) -> &'a str {
    &q[t.start..t.end]
}

pub(super) fn is_kw(q: &str, t: &Token, kw: &str) -> bool {
    t.kind == Kind::Word && text_of(q, t).eq_ignore_ascii_case(kw)
}

/// The clauses of one SELECT, as token index ranges.
#[derive(Debug, Default)]
pub(super) struct Clauses {
    pub(super) distinct: bool,
    pub(super) select: (usize, usize),
    pub(super) from: Option<(usize, usize)>,
    pub(super) group_by: Option<(usize, usize)>,
    pub(super) having: Option<(usize, usize)>,
    pub(super) order_by: Option<(usize, usize)>,
    pub(super) limit: Option<(usize, usize)>,
    pub(super) offset: Option<(usize, usize)>,
}

/// Depth of every token (before it), `(`/`[`/`{` opening.
pub(super) fn depths(q: &str, toks: &[Token]) -> Result<Vec<i32>, PlanError> {
    let mut d = 0i32;
    let mut out = Vec::with_capacity(toks.len());
    for t in toks {
        match t.kind {
            Kind::Punct('(' | '[' | '{') => {
                out.push(d);
                d += 1;
            }
            Kind::Punct(')' | ']' | '}') => {
                d -= 1;
                if d < 0 {
                    return Err(PlanError(format!(
                        "unbalanced `{}` at {}",
                        text_of(q, t),
                        at_pos(q, t.start)
                    )));
                }
                out.push(d);
            }
            _ => out.push(d),
        }
    }
    if d != 0 {
        return Err("unbalanced brackets: a `(` or `[` is not closed".into());
    }
    Ok(out)
}

/// Cuts tokens `lo..hi` (one SELECT) into clauses, in steps: the SELECT
/// head (DISTINCT, ALL), the clause keywords at the SELECT's own depth,
/// each clause's range, then their order.
pub(super) fn clauses(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Result<Clauses, PlanError> {
    let mut c = Clauses::default();
    let i = select_head(q, toks, lo, hi, &mut c)?;
    // (clause name, its keyword's token, start token of its body)
    let mut marks: Vec<Mark> = vec![("select", lo, i)];
    marks.extend(clause_marks(q, toks, dep, dep[lo], i, hi)?);
    let mut seen = HashSet::new();
    for (k, (name, at, body)) in marks.iter().enumerate() {
        let end = marks.get(k + 1).map_or(hi, |m| m.1);
        if !seen.insert(*name) {
            return Err(PlanError(format!(
                "a second {} clause at {}",
                name.to_uppercase(),
                at_pos(q, toks[*at].start)
            )));
        }
        let r = (*body, end);
        match *name {
            "select" => c.select = r,
            // FROM keeps its keyword, and takes PREWHERE / WHERE along.
            "from" => c.from = Some((*at, end)),
            "group" => c.group_by = Some(r),
            "having" => c.having = Some(r),
            "order" => c.order_by = Some(r),
            "limit" => c.limit = Some(r),
            _ => c.offset = Some(r),
        }
    }
    check_clause_order(q, toks, &marks)?;
    if c.select.0 >= c.select.1 {
        return Err(PlanError(format!(
            "SELECT at {} has no columns",
            at_pos(q, toks[lo].start)
        )));
    }
    Ok(c)
}

/// A clause: its name, its keyword's token, the start token of its body.
type Mark = (&'static str, usize, usize);

fn unsupported(q: &str, t: &Token, what: &str) -> String {
    format!(
        "{what} (at {}) is not supported by /api/v1/sql across shards",
        at_pos(q, t.start)
    )
}

/// `SELECT [DISTINCT | ALL]`: sets `c.distinct`, returns the first token
/// of the SELECT list.
fn select_head(
    q: &str,
    toks: &[Token],
    lo: usize,
    hi: usize,
    c: &mut Clauses,
) -> Result<usize, PlanError> {
    if lo >= hi || !is_kw(q, &toks[lo], "select") {
        let t = &toks[lo.min(toks.len() - 1)];
        if is_kw(q, t, "with") {
            let what = "WITH (common table expressions and expression aliases)";
            return Err((unsupported(q, t, what)
                + "; write the expression or a subquery in place")
                .into());
        }
        if t.kind == Kind::Punct('(') {
            return Err((unsupported(q, t, "a parenthesised statement")
                + "; send the SELECT alone")
                .into());
        }
        return Err(PlanError(format!(
            "expected SELECT at {}",
            at_pos(q, t.start)
        )));
    }
    let mut i = lo + 1;
    if i < hi && is_kw(q, &toks[i], "distinct") {
        if toks.get(i + 1).is_some_and(|t| is_kw(q, t, "on")) {
            return Err(unsupported(q, &toks[i], "SELECT DISTINCT ON").into());
        }
        c.distinct = true;
        i += 1;
    } else if i < hi && is_kw(q, &toks[i], "all") {
        i += 1;
    }
    if i < hi && is_kw(q, &toks[i], "top") {
        return Err((unsupported(q, &toks[i], "SELECT TOP") + "; use LIMIT").into());
    }
    Ok(i)
}

/// The clause keywords among tokens `from..hi` at the SELECT's own depth
/// `base`, refusing the clauses that cannot be merged across shards.
fn clause_marks(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    base: i32,
    from: usize,
    hi: usize,
) -> Result<Vec<Mark>, PlanError> {
    let mut marks = Vec::new();
    let mut j = from;
    while j < hi {
        let t = &toks[j];
        if dep[j] != base || t.kind != Kind::Word {
            j += 1;
            continue;
        }
        let next_by = toks.get(j + 1).is_some_and(|n| is_kw(q, n, "by")) && j + 1 < hi;
        let word = text_of(q, t).to_ascii_lowercase();
        let (name, body) = match word.as_str() {
            "from" => ("from", j + 1),
            "group" if next_by => ("group", j + 2),
            "having" => ("having", j + 1),
            "order" if next_by => ("order", j + 2),
            "limit" => ("limit", j + 1),
            "offset" => ("offset", j + 1),
            other => {
                refuse_clause(q, toks, j, other)?;
                j += 1;
                continue;
            }
        };
        marks.push((name, j, body));
        j = body;
    }
    Ok(marks)
}

/// The error of a keyword that starts a clause /api/v1/sql does not
/// merge; Ok for any other word.
fn refuse_clause(q: &str, toks: &[Token], j: usize, word: &str) -> Result<(), PlanError> {
    let t = &toks[j];
    match word {
        "union" | "except" | "intersect" => {
            Err(unsupported(q, t, &format!("{} of SELECTs", word.to_uppercase())).into())
        }
        "window" | "qualify" | "fetch" | "format" | "settings" | "into" => {
            Err(unsupported(q, t, &format!("the {} clause", word.to_uppercase())).into())
        }
        "with" => {
            let what = toks
                .get(j + 1)
                .map(|n| text_of(q, n).to_ascii_uppercase())
                .unwrap_or_default();
            Err(unsupported(q, t, &format!("WITH {what}")).into())
        }
        "over" => Err(unsupported(q, t, "a window function (OVER)").into()),
        _ => Ok(()),
    }
}

/// The clauses in SQL's order.
fn check_clause_order(q: &str, toks: &[Token], marks: &[Mark]) -> Result<(), PlanError> {
    let order = [
        "select", "from", "group", "having", "order", "limit", "offset",
    ];
    let pos: Vec<usize> = marks
        .iter()
        .map(|m| order.iter().position(|o| *o == m.0).unwrap_or(0))
        .collect();
    if let Some(k) = pos.windows(2).position(|w| w[0] > w[1]) {
        let m = &marks[k + 1];
        return Err(PlanError(format!(
            "{} at {} is out of place",
            m.0.to_uppercase(),
            at_pos(q, toks[m.1].start)
        )));
    }
    Ok(())
}

/// Splits `lo..hi` at the commas of depth `dep[lo]`.
pub(super) fn split_commas(
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = lo;
    for j in lo..hi {
        if toks[j].kind == Kind::Punct(',') && dep[j] == dep[lo] {
            out.push((s, j));
            s = j + 1;
        }
    }
    out.push((s, hi));
    out
}

pub(super) fn span_text<'a>(q: &'a str, toks: &[Token], r: (usize, usize)) -> &'a str {
    if r.0 >= r.1 {
        return "";
    }
    &q[toks[r.0].start..toks[r.1 - 1].end]
}

/// Index of the `)` matching the `(` at `open`.
pub(super) fn matching(toks: &[Token], dep: &[i32], open: usize) -> usize {
    (open + 1..toks.len())
        .find(|&j| matches!(toks[j].kind, Kind::Punct(')' | ']' | '}')) && dep[j] == dep[open])
        .unwrap_or(toks.len() - 1)
}

/// Checks that JOINs in FROM are on `series_id` and that every subquery is
/// shard-local.
pub(super) fn check_from(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Result<(), PlanError> {
    let base = dep[lo];
    let mut j = lo;
    while j < hi {
        let t = &toks[j];
        if dep[j] == base && t.kind == Kind::Punct(',') {
            return Err(PlanError(format!(
                "a comma join (at {}) is not supported across shards; join on series_id with JOIN ... USING series_id",
                at_pos(q, t.start)
            )));
        }
        if dep[j] == base && is_kw(q, t, "cross") {
            return Err(PlanError(format!(
                "CROSS JOIN (at {}) is not supported across shards",
                at_pos(q, t.start)
            )));
        }
        if dep[j] == base && is_kw(q, t, "join") && !(j > lo && is_kw(q, &toks[j - 1], "array")) {
            // The join's constraint runs to the next JOIN keyword or the end.
            let end = (j + 1..hi)
                .find(|&k| dep[k] == base && is_kw(q, &toks[k], "join"))
                .map(|k| {
                    // back over LEFT / INNER / ANY / GLOBAL ...
                    let mut s = k;
                    while s > j + 1
                        && toks[s - 1].kind == Kind::Word
                        && JOIN_WORDS.iter().any(|w| is_kw(q, &toks[s - 1], w))
                    {
                        s -= 1;
                    }
                    s
                })
                .unwrap_or(hi);
            let cons = (j + 1..end).find(|&k| {
                dep[k] == base && (is_kw(q, &toks[k], "using") || is_kw(q, &toks[k], "on"))
            });
            let ok = cons.is_some_and(|k| {
                let n = (k + 1..end)
                    .filter(|&m| ident_name(q, &toks[m]).as_deref() == Some("series_id"))
                    .count();
                if is_kw(q, &toks[k], "using") {
                    n >= 1
                } else {
                    n >= 2 && (k + 1..end).any(|m| toks[m].kind == Kind::Punct('='))
                }
            });
            if !ok {
                return Err(PlanError(format!(
                    "the JOIN at {} must be on series_id (USING series_id, or ON a.series_id = b.series_id): only then is each shard's join complete",
                    at_pos(q, t.start)
                )));
            }
        }
        j += 1;
    }
    Ok(())
}

const JOIN_WORDS: &[&str] = &[
    "left", "right", "inner", "outer", "full", "any", "all", "semi", "anti", "asof", "global",
    "paste",
];

/// Every `(SELECT ...)` in `lo..hi` is shard-local: no aggregate, GROUP BY,
/// DISTINCT, LIMIT or window, unless it groups by `series_id` (then each
/// group is whole on its shard) and has no LIMIT.
pub(super) fn check_subqueries(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> Result<(), PlanError> {
    let mut j = lo;
    while j < hi {
        if toks[j].kind == Kind::Punct('(')
            && toks
                .get(j + 1)
                .is_some_and(|t| is_kw(q, t, "select") || is_kw(q, t, "with"))
        {
            let close = matching(toks, dep, j);
            let c = clauses(q, toks, dep, j + 1, close)?;
            let at = at_pos(q, toks[j + 1].start);
            let by_series = c.group_by.is_some_and(|g| {
                split_commas(toks, dep, g.0, g.1).iter().any(|r| {
                    r.1 > r.0
                        && ident_name(q, &toks[r.1 - 1]).as_deref() == Some("series_id")
                        && (r.1 - r.0 == 1 || toks[r.1 - 2].kind == Kind::Punct('.'))
                })
            });
            let aggregates = has_aggregate_call(q, toks, dep, c.select.0, close);
            if c.limit.is_some() || c.offset.is_some() {
                return Err(PlanError(format!(
                    "LIMIT/OFFSET in the subquery at {at} would apply per shard; not supported"
                )));
            }
            if (aggregates || c.group_by.is_some() || c.distinct) && !by_series {
                return Err(PlanError(format!(
                    "the subquery at {at} aggregates (or uses GROUP BY / DISTINCT) and would run per shard: not supported unless it groups by series_id"
                )));
            }
            check_from(
                q,
                toks,
                dep,
                c.from.map_or(close, |f| f.0),
                c.from.map_or(close, |f| f.1),
            )?;
            check_subqueries(q, toks, dep, j + 1, close)?;
            j = close + 1;
            continue;
        }
        j += 1;
    }
    Ok(())
}

pub(super) fn is_call(q: &str, toks: &[Token], k: usize) -> bool {
    matches!(toks[k].kind, Kind::Word | Kind::QuotedIdent)
        && toks.get(k + 1).is_some_and(|n| n.kind == Kind::Punct('('))
        && !(k > 0 && toks[k - 1].kind == Kind::Punct('.'))
        && !is_kw(q, &toks[k], "in")
}

pub(super) fn call_name(q: &str, t: &Token) -> String {
    ident_name(q, t).unwrap_or_default()
}

/// The name an identifier token stands for (unquoted), if it is one.
pub(super) fn ident_name(q: &str, t: &Token) -> Option<String> {
    match t.kind {
        Kind::Word if !text_of(q, t).starts_with(|c: char| c.is_ascii_digit()) => {
            Some(text_of(q, t).to_owned())
        }
        Kind::QuotedIdent => unquote(text_of(q, t)),
        _ => None,
    }
}

/// Whether tokens `lo..hi` call an aggregate outside subqueries.
pub(super) fn has_aggregate_call(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    lo: usize,
    hi: usize,
) -> bool {
    let mut j = lo;
    while j < hi {
        if toks[j].kind == Kind::Punct('(')
            && toks.get(j + 1).is_some_and(|t| is_kw(q, t, "select"))
        {
            j = matching(toks, dep, j) + 1;
            continue;
        }
        if is_call(q, toks, j) && aggregate_name(&call_name(q, &toks[j])).is_some() {
            return true;
        }
        j += 1;
    }
    false
}

/// Whether `sql` reads no shard's table: no FROM, or FROM a table function
/// (`numbers(10)`). Every shard would give the same answer; one is kept.
pub fn reads_no_table(sql: &str) -> bool {
    let Ok(toks) = lex(sql) else { return false };
    let Ok(dep) = depths(sql, &toks) else {
        return false;
    };
    match (0..toks.len()).find(|&k| dep[k] == 0 && is_kw(sql, &toks[k], "from")) {
        None => true,
        Some(k) => k + 1 < toks.len() && is_call(sql, &toks, k + 1),
    }
}
