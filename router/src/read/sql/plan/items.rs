//! The list-shaped clauses: projection items with their aliases, ORDER BY
//! items with direction and NULLS placement, positional references, and
//! the plain integers of LIMIT and OFFSET. The planner turns these token
//! ranges into a rows plan or a groups plan.

use super::clauses::{call_name, ident_name, is_call, is_kw, span_text, split_commas, text_of};
use super::expr::{parse_node, Node};
use super::shard_sql::quote_ident;
use super::{PlanError, SortKey};
use crate::sql_check::{at_pos, Kind, Token};

/// A projection item.
pub(super) struct Item {
    pub(super) node: Option<Node>,
    /// The expression's text (without the alias).
    pub(super) text: String,
    pub(super) alias: Option<String>,
    /// Whether it is `*` or `t.*` (or `COLUMNS(...)`).
    pub(super) star: bool,
}

const NOT_ALIASES: &[&str] = &[
    "end", "null", "true", "false", "second", "minute", "hour", "day", "week", "month", "quarter",
    "year", "desc", "asc",
];

pub(super) fn items(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    r: (usize, usize),
) -> Result<Vec<Item>, PlanError> {
    let mut out = Vec::new();
    for (lo, hi) in split_commas(toks, dep, r.0, r.1) {
        if lo >= hi {
            return Err(PlanError(format!(
                "an empty column in SELECT near {}",
                at_pos(q, toks[lo.min(toks.len() - 1)].start)
            )));
        }
        let mut end = hi;
        let mut alias = None;
        let last = &toks[hi - 1];
        if hi - lo >= 2 && matches!(last.kind, Kind::Word | Kind::QuotedIdent) {
            let prev = &toks[hi - 2];
            if is_kw(q, prev, "as") {
                alias = ident_name(q, last);
                end = hi - 2;
            } else if dep[hi - 1] == dep[lo]
                && !NOT_ALIASES.iter().any(|w| is_kw(q, last, w))
                && ident_name(q, last).is_some()
                && (matches!(prev.kind, Kind::Punct(')') | Kind::Str | Kind::QuotedIdent)
                    || (prev.kind == Kind::Word
                        && !is_kw(q, prev, "as")
                        && (hi - lo == 2 || toks[hi - 3].kind != Kind::Punct('.'))))
                && prev.kind != Kind::Punct('.')
                && !(prev.kind == Kind::Word
                    && [
                        "distinct", "not", "and", "or", "is", "case", "when", "then", "else",
                        "interval",
                    ]
                    .iter()
                    .any(|w| is_kw(q, prev, w)))
            {
                alias = ident_name(q, last);
                end = hi - 1;
            }
        }
        let text = span_text(q, toks, (lo, end)).to_owned();
        let star = toks[end - 1].kind == Kind::Punct('*')
            && (end - lo == 1 || toks[end - 2].kind == Kind::Punct('.'))
            || (is_call(q, toks, lo) && call_name(q, &toks[lo]).eq_ignore_ascii_case("columns"));
        let node = if star {
            None
        } else {
            Some(parse_node(q, toks, dep, (lo, end))?)
        };
        out.push(Item {
            node,
            text,
            alias,
            star,
        });
    }
    Ok(out)
}

pub(super) fn uint_clause(
    q: &str,
    toks: &[Token],
    r: (usize, usize),
    what: &str,
) -> Result<u64, PlanError> {
    let mut hi = r.1;
    if what == "OFFSET"
        && hi > r.0 + 1
        && (is_kw(q, &toks[hi - 1], "rows") || is_kw(q, &toks[hi - 1], "row"))
    {
        hi -= 1;
    }
    if hi == r.0 + 1 && toks[r.0].kind == Kind::Word {
        if let Ok(n) = text_of(q, &toks[r.0]).parse::<u64>() {
            return Ok(n);
        }
    }
    let at = toks
        .get(r.0)
        .map_or(String::new(), |t| format!(" at {}", at_pos(q, t.start)));
    Err(PlanError(format!("{what}{at} must be a plain non-negative integer here (LIMIT n, LIMIT m, n, LIMIT n OFFSET m; LIMIT ... BY and WITH TIES are not supported)")))
}

/// One ORDER BY item: the expression's token range, direction, NULLS.
pub(super) fn order_items(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    r: (usize, usize),
) -> Result<Vec<SortKey<(usize, usize)>>, PlanError> {
    let mut out = Vec::new();
    for (lo, mut hi) in split_commas(toks, dep, r.0, r.1) {
        let mut desc = false;
        let mut nulls_first = None;
        if hi >= lo + 3 && is_kw(q, &toks[hi - 2], "nulls") {
            nulls_first = Some(is_kw(q, &toks[hi - 1], "first"));
            hi -= 2;
        }
        if hi > lo + 1 {
            let t = &toks[hi - 1];
            if is_kw(q, t, "desc") || is_kw(q, t, "descending") {
                desc = true;
                hi -= 1;
            } else if is_kw(q, t, "asc") || is_kw(q, t, "ascending") {
                hi -= 1;
            }
        }
        if let Some(c) = (lo..hi).find(|&k| dep[k] == dep[lo] && is_kw(q, &toks[k], "collate")) {
            return Err(PlanError(format!(
                "COLLATE (at {}) is not supported across shards",
                at_pos(q, toks[c].start)
            )));
        }
        if lo >= hi {
            return Err("an empty ORDER BY item".into());
        }
        out.push(SortKey {
            expr: (lo, hi),
            desc,
            nulls_first: nulls_first.unwrap_or(false),
        });
    }
    Ok(out)
}

pub(super) fn position(q: &str, toks: &[Token], r: (usize, usize)) -> Option<usize> {
    (r.1 == r.0 + 1)
        .then(|| text_of(q, &toks[r.0]).parse::<usize>().ok())
        .flatten()
}

pub(super) fn span_text_item(it: &Item) -> String {
    match &it.alias {
        Some(a) => format!("{} AS {}", it.text, quote_ident(a)),
        None => it.text.clone(),
    }
}
