//! The statement each shard runs for a plan ([`super::Plan::shard_sql`]),
//! and the rewrite that reads a column a shard never received as NULL, so
//! a shard lacking a field answers as one table holding every field would.

use super::clauses::{ident_name, is_kw};
use super::Plan;
use crate::sql_check::{lex, Kind};
use std::collections::HashSet;

/// An identifier, backquoted unless it is a plain word.
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

/// `text` with every reference to a column in `missing` replaced by
/// `NULL` (a shard that never received the field has no such column: its
/// rows read NULL there, as they would in one table holding every field).
pub fn rewrite_missing(text: &str, missing: &HashSet<String>) -> String {
    if missing.is_empty() {
        return text.to_owned();
    }
    let Ok(toks) = lex(text) else {
        return text.to_owned();
    };
    let mut out = String::new();
    let mut copied = 0;
    for (i, t) in toks.iter().enumerate() {
        let Some(name) = ident_name(text, t) else {
            continue;
        };
        if !missing.contains(&name) {
            continue;
        }
        let next = toks.get(i + 1);
        if next.is_some_and(|n| matches!(n.kind, Kind::Punct('(' | '.'))) {
            continue;
        }
        if i > 0 && is_kw(text, &toks[i - 1], "as") {
            continue;
        }
        // `f.usage` -> NULL
        let mut start = t.start;
        if i >= 2 && toks[i - 1].kind == Kind::Punct('.') {
            if ident_name(text, &toks[i - 2]).is_some()
                && !(i >= 3 && toks[i - 3].kind == Kind::Punct('.'))
            {
                start = toks[i - 2].start;
            } else {
                continue;
            }
        }
        if start < copied {
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str("NULL");
        copied = t.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// A projection item for a shard that lacks some columns: a bare column
/// keeps its name (`NULL AS usage`).
pub(super) fn shard_item(item: &str, missing: &HashSet<String>) -> String {
    let rewritten = rewrite_missing(item, missing);
    if rewritten == "NULL" && rewritten != item {
        let toks = lex(item).unwrap_or_default();
        if let Some(name) = toks.last().and_then(|t| ident_name(item, t)) {
            return format!("NULL AS {}", quote_ident(&name));
        }
    }
    rewritten
}

impl Plan {
    /// The statement one shard runs. `missing`: columns other shards have
    /// and this one lacks; `cap`: at most this many rows from a shard.
    pub fn shard_sql(&self, missing: &HashSet<String>, cap: u64) -> String {
        let rw = |s: &str| rewrite_missing(s, missing);
        match self {
            Plan::Rows(p) => {
                let mut cols: Vec<String> =
                    p.items.iter().map(|i| shard_item(i, missing)).collect();
                for (i, k) in p.order.iter().enumerate() {
                    cols.push(format!("{} AS __sh_o{i}", rw(&k.expr)));
                }
                let mut sql = format!("SELECT {}", cols.join(", "));
                if !p.from.is_empty() {
                    sql.push(' ');
                    sql.push_str(&rw(&p.from));
                }
                if let Some(o) = &p.order_text {
                    sql.push_str(" ORDER BY ");
                    sql.push_str(&rw(o));
                }
                let n = p.limit.map_or(cap, |l| l.saturating_add(p.offset).min(cap));
                sql.push_str(&format!(" LIMIT {n}"));
                sql
            }
            Plan::Groups(p) => {
                let cols: Vec<String> = p
                    .keys
                    .iter()
                    .chain(&p.scalars)
                    .chain(&p.partials)
                    .map(|s| rw(s))
                    .collect();
                let mut sql = format!("SELECT {}", cols.join(", "));
                if !p.from.is_empty() {
                    sql.push(' ');
                    sql.push_str(&rw(&p.from));
                }
                if p.group_by {
                    sql.push_str(" GROUP BY ");
                    sql.push_str(&p.keys.iter().map(|k| rw(k)).collect::<Vec<_>>().join(", "));
                }
                sql.push_str(&format!(" LIMIT {cap}"));
                sql
            }
        }
    }
}
