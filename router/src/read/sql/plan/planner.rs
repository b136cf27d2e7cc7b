//! [`plan`]: the entry point that cuts a statement into clauses, checks it
//! is shard-safe, and decides between a rows plan (no aggregates: sort and
//! limit the union) and a groups plan (merge partial states per group,
//! then HAVING, DISTINCT, ORDER BY and LIMIT on the router).

use super::build::{ch_name, has_aggregates, squash, Builder};
use super::clauses::{check_from, check_subqueries, clauses, depths, span_text, split_commas};
use super::expr::{parse_node, Ex, Node};
use super::items::{items, order_items, position, span_text_item, uint_clause, Item};
use super::{GroupsPlan, OutName, Plan, PlanError, RExpr, RowsPlan, SortKey};
use crate::sql_check::{at_pos, lex, Kind, Token};
use std::collections::HashSet;

/// Plans `sql` (a statement [`crate::sql_check::check_select`] accepted).
pub fn plan(sql: &str) -> Result<Plan, PlanError> {
    let q = sql;
    let toks = lex(q)?;
    if toks.is_empty() {
        return Err("empty query".into());
    }
    let toks: Vec<Token> = match toks.last() {
        Some(t) if t.kind == Kind::Semicolon => toks[..toks.len() - 1].to_vec(),
        _ => toks,
    };
    let dep = depths(q, &toks)?;
    let c = clauses(q, &toks, &dep, 0, toks.len())?;
    if let Some(f) = c.from {
        check_from(q, &toks, &dep, f.0 + 1, f.1)?;
    }
    check_subqueries(q, &toks, &dep, 0, toks.len())?;
    let items = items(q, &toks, &dep, c.select)?;
    let limit = c.limit.map(|r| -> Result<(u64, Option<u64>), PlanError> {
        // LIMIT m, n
        let parts = split_commas(&toks, &dep, r.0, r.1);
        if parts.len() == 2 {
            Ok((
                uint_clause(q, &toks, parts[1], "LIMIT")?,
                Some(uint_clause(q, &toks, parts[0], "LIMIT")?),
            ))
        } else {
            Ok((uint_clause(q, &toks, r, "LIMIT")?, None))
        }
    });
    let (limit, offset_in_limit) = match limit.transpose()? {
        Some((n, off)) => (Some(n), off),
        None => (None, None),
    };
    let offset = match (c.offset, offset_in_limit) {
        (Some(r), None) => uint_clause(q, &toks, r, "OFFSET")?,
        (Some(r), Some(_)) => {
            return Err(format!(
                "OFFSET at {} with LIMIT m, n",
                at_pos(q, toks[r.0].start)
            ))
        }
        (None, o) => o.unwrap_or(0),
    };
    let from = c
        .from
        .map_or(String::new(), |f| span_text(q, &toks, f).to_owned());
    let order = c
        .order_by
        .map(|r| order_items(q, &toks, &dep, r))
        .transpose()?
        .unwrap_or_default();
    // Aliases of items with aggregates (to a fixpoint: aliases of aliases).
    let mut agg_aliases = HashSet::new();
    loop {
        let before = agg_aliases.len();
        for it in &items {
            if let (Some(a), Some(n)) = (&it.alias, &it.node) {
                if has_aggregates(n, &agg_aliases) {
                    agg_aliases.insert(a.clone());
                }
            }
        }
        if agg_aliases.len() == before {
            break;
        }
    }
    let item_has_agg = |it: &Item| {
        it.node
            .as_ref()
            .is_some_and(|n| has_aggregates(n, &agg_aliases))
    };
    let having_node = c
        .having
        .map(|r| parse_node(q, &toks, &dep, r))
        .transpose()?;
    let order_nodes: Vec<SortKey<Option<Node>>> = order
        .iter()
        .map(|k| {
            let node = match position(q, &toks, k.expr) {
                Some(_) => None,
                None => Some(parse_node(q, &toks, &dep, k.expr)?),
            };
            Ok(SortKey {
                expr: node,
                desc: k.desc,
                nulls_first: k.nulls_first,
            })
        })
        .collect::<Result<_, PlanError>>()?;
    let aggregating = c.group_by.is_some()
        || c.distinct
        || items.iter().any(item_has_agg)
        || having_node.is_some()
        || order_nodes.iter().any(|k| {
            k.expr
                .as_ref()
                .is_some_and(|n| has_aggregates(n, &agg_aliases))
        });
    let positional = |p: usize, what: &str| -> Result<&Item, PlanError> {
        items
            .get(p.wrapping_sub(1))
            .filter(|it| !it.star)
            .ok_or_else(|| format!("{what} position {p} is not a column of the SELECT list"))
    };
    if !aggregating {
        let order = order
            .iter()
            .map(|k| {
                let text = match position(q, &toks, k.expr) {
                    Some(p) => positional(p, "ORDER BY")?.text.clone(),
                    None => span_text(q, &toks, k.expr).to_owned(),
                };
                Ok(SortKey {
                    expr: text,
                    desc: k.desc,
                    nulls_first: k.nulls_first,
                })
            })
            .collect::<Result<_, PlanError>>()?;
        return Ok(Plan::Rows(RowsPlan {
            items: items.iter().map(span_text_item).collect(),
            from,
            order,
            order_text: c.order_by.map(|r| span_text(q, &toks, r).to_owned()),
            limit,
            offset,
        }));
    }
    if let Some(it) = items.iter().find(|it| it.star) {
        return Err(format!(
            "`{}` with GROUP BY, DISTINCT or aggregates is not supported; name the columns",
            it.text
        ));
    }
    let mut keys = Vec::new();
    if let Some(g) = c.group_by {
        for r in split_commas(&toks, &dep, g.0, g.1) {
            if r.0 >= r.1 {
                return Err("an empty GROUP BY item".into());
            }
            let text = match position(q, &toks, r) {
                Some(p) => {
                    let it = positional(p, "GROUP BY")?;
                    if item_has_agg(it) {
                        return Err(format!("GROUP BY position {p} is an aggregate"));
                    }
                    it.text.clone()
                }
                None => span_text(q, &toks, r).to_owned(),
            };
            keys.push(text);
        }
    } else if c.distinct && !items.iter().any(item_has_agg) {
        // SELECT DISTINCT a, b: GROUP BY a, b.
        keys = items.iter().map(|it| it.text.clone()).collect();
    }
    let mut b = Builder {
        q,
        keys,
        scalars: Vec::new(),
        partials: Vec::new(),
        aggs: Vec::new(),
        agg_items: items
            .iter()
            .filter_map(|it| Some((it.alias.clone()?, it.node.clone()?)))
            .filter(|(a, _)| agg_aliases.contains(a))
            .collect(),
        agg_aliases: agg_aliases.clone(),
        depth: 0,
    };
    // Non-aggregate items go to the shards as written (aliases included, so
    // GROUP BY and WHERE can name them).
    let mut outputs = Vec::new();
    for it in &items {
        let node = it.node.as_ref().expect("not a star");
        if item_has_agg(it) {
            let e = b.build(node)?;
            let name = it.alias.clone().unwrap_or_else(|| ch_name(q, node));
            outputs.push((OutName::Fixed(name), e));
        } else {
            let text = span_text_item(it);
            let col = match b.keys.iter().position(|k| squash(k) == squash(&text)) {
                Some(k) if it.alias.is_none() => k,
                _ => b.scalar(&text),
            };
            let fallback = it.alias.clone().unwrap_or_else(|| ch_name(q, node));
            outputs.push((OutName::Shard(col, fallback), RExpr::Col(col)));
        }
    }
    let resolve_item = |n: &Node| -> Option<usize> {
        match &n.ex {
            Ex::Ident(name) => items
                .iter()
                .position(|it| it.alias.as_deref() == Some(name.as_str())),
            _ => None,
        }
    };
    let having = having_node.as_ref().map(|n| b.build(n)).transpose()?;
    let mut sort = Vec::new();
    for (k, raw) in order_nodes.iter().zip(&order) {
        let expr = match &k.expr {
            None => {
                let p = position(q, &toks, raw.expr).expect("positional");
                positional(p, "ORDER BY")?;
                outputs[p - 1].1.clone()
            }
            Some(n) => match resolve_item(n) {
                Some(i) => outputs[i].1.clone(),
                None => b.build(n)?,
            },
        };
        sort.push(SortKey {
            expr,
            desc: k.desc,
            nulls_first: k.nulls_first,
        });
    }
    let (keys, scalars, partials) = (b.keys, b.scalars, b.partials);
    let mut aggs = b.aggs;
    // Partials come after keys and scalars in the shard row.
    for a in &mut aggs {
        for c in &mut a.cols {
            *c += keys.len() + scalars.len();
        }
    }
    Ok(Plan::Groups(GroupsPlan {
        keys,
        scalars,
        partials,
        from,
        group_by: c.group_by.is_some() || (c.distinct && !items.iter().any(item_has_agg)),
        aggs,
        outputs,
        having,
        distinct: c.distinct,
        order: sort,
        limit,
        offset,
    }))
}
