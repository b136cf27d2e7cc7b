//! [`plan`]: the entry point that cuts a statement into clauses, checks it
//! is shard-safe, and decides between a rows plan (no aggregates: sort and
//! limit the union) and a groups plan (merge partial states per group,
//! then HAVING, DISTINCT, ORDER BY and LIMIT on the router).

use super::build::{ch_name, has_aggregates, squash, Builder};
use super::clauses::{
    check_from, check_subqueries, clauses, depths, span_text, split_commas, Clauses,
};
use super::expr::{parse_node, Ex, Node};
use super::items::{items, order_items, position, span_text_item, uint_clause, Item};
use super::{GroupsPlan, OutName, Plan, PlanError, RExpr, RowsPlan, SortKey};
use crate::sql_check::{at_pos, lex, Kind, Token};
use std::collections::HashSet;

/// Plans `sql` (a statement [`crate::sql_check::check_select`] accepted),
/// in steps: the statement cut into clauses and checked ([`Stmt::parse`]),
/// LIMIT/OFFSET and ORDER BY read, then a rows plan when nothing
/// aggregates, else a groups plan.
pub fn plan(sql: &str) -> Result<Plan, PlanError> {
    let s = Stmt::parse(sql)?;
    let (limit, offset) = s.limit_offset()?;
    let from =
        s.c.from
            .map_or(String::new(), |f| span_text(s.q, &s.toks, f).to_owned());
    let order =
        s.c.order_by
            .map(|r| order_items(s.q, &s.toks, &s.dep, r))
            .transpose()?
            .unwrap_or_default();
    let having =
        s.c.having
            .map(|r| parse_node(s.q, &s.toks, &s.dep, r))
            .transpose()?;
    let order_nodes = s.order_nodes(&order)?;
    let window = Window {
        from,
        limit,
        offset,
    };
    if !s.aggregating(having.is_some(), &order_nodes) {
        return s.rows_plan(&order, window);
    }
    s.groups_plan(having.as_ref(), &order_nodes, &order, window)
}

/// FROM, LIMIT and OFFSET: the same in both kinds of plan.
struct Window {
    from: String,
    limit: Option<u64>,
    offset: u64,
}

/// A statement cut into tokens and clauses, checked shard-safe.
struct Stmt<'a> {
    q: &'a str,
    toks: Vec<Token>,
    dep: Vec<i32>,
    c: Clauses,
    items: Vec<Item>,
    /// Aliases of items with aggregates (aliases of aliases too).
    agg_aliases: HashSet<String>,
}

impl<'a> Stmt<'a> {
    fn parse(q: &'a str) -> Result<Self, PlanError> {
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
        let agg_aliases = aggregate_aliases(&items);
        Ok(Stmt {
            q,
            toks,
            dep,
            c,
            items,
            agg_aliases,
        })
    }

    /// `LIMIT n`, `LIMIT m, n`, `OFFSET m` (not both forms of offset).
    fn limit_offset(&self) -> Result<(Option<u64>, u64), PlanError> {
        let (q, toks) = (self.q, &self.toks);
        let (limit, offset_in_limit) = match self.c.limit {
            None => (None, None),
            Some(r) => {
                let parts = split_commas(toks, &self.dep, r.0, r.1);
                if parts.len() == 2 {
                    (
                        Some(uint_clause(q, toks, parts[1], "LIMIT")?),
                        Some(uint_clause(q, toks, parts[0], "LIMIT")?),
                    )
                } else {
                    (Some(uint_clause(q, toks, r, "LIMIT")?), None)
                }
            }
        };
        let offset = match (self.c.offset, offset_in_limit) {
            (Some(r), None) => uint_clause(q, toks, r, "OFFSET")?,
            (Some(r), Some(_)) => {
                return Err(PlanError(format!(
                    "OFFSET at {} with LIMIT m, n",
                    at_pos(q, toks[r.0].start)
                )))
            }
            (None, o) => o.unwrap_or(0),
        };
        Ok((limit, offset))
    }

    /// The ORDER BY keys parsed (`None`: a position in the SELECT list).
    fn order_nodes(
        &self,
        order: &[SortKey<(usize, usize)>],
    ) -> Result<Vec<SortKey<Option<Node>>>, PlanError> {
        order
            .iter()
            .map(|k| {
                let node = match position(self.q, &self.toks, k.expr) {
                    Some(_) => None,
                    None => Some(parse_node(self.q, &self.toks, &self.dep, k.expr)?),
                };
                Ok(SortKey {
                    expr: node,
                    desc: k.desc,
                    nulls_first: k.nulls_first,
                })
            })
            .collect()
    }

    fn has_agg(&self, it: &Item) -> bool {
        it.node
            .as_ref()
            .is_some_and(|n| has_aggregates(n, &self.agg_aliases))
    }

    /// Whether anything aggregates: GROUP BY, DISTINCT, an aggregate in
    /// the items, HAVING or ORDER BY.
    fn aggregating(&self, having: bool, order_nodes: &[SortKey<Option<Node>>]) -> bool {
        self.c.group_by.is_some()
            || self.c.distinct
            || self.items.iter().any(|it| self.has_agg(it))
            || having
            || order_nodes.iter().any(|k| {
                k.expr
                    .as_ref()
                    .is_some_and(|n| has_aggregates(n, &self.agg_aliases))
            })
    }

    /// The item at SELECT-list position `p` (1-based), not a star.
    fn positional(&self, p: usize, what: &str) -> Result<&Item, PlanError> {
        self.items
            .get(p.wrapping_sub(1))
            .filter(|it| !it.star)
            .ok_or_else(|| {
                PlanError(format!(
                    "{what} position {p} is not a column of the SELECT list"
                ))
            })
    }

    /// No aggregates: the shards sort and limit, the router merges.
    fn rows_plan(
        &self,
        order: &[SortKey<(usize, usize)>],
        window: Window,
    ) -> Result<Plan, PlanError> {
        let order = order
            .iter()
            .map(|k| {
                let text = match position(self.q, &self.toks, k.expr) {
                    Some(p) => self.positional(p, "ORDER BY")?.text.clone(),
                    None => span_text(self.q, &self.toks, k.expr).to_owned(),
                };
                Ok(SortKey {
                    expr: text,
                    desc: k.desc,
                    nulls_first: k.nulls_first,
                })
            })
            .collect::<Result<_, PlanError>>()?;
        Ok(Plan::Rows(RowsPlan {
            items: self.items.iter().map(span_text_item).collect(),
            from: window.from,
            order,
            order_text: self
                .c
                .order_by
                .map(|r| span_text(self.q, &self.toks, r).to_owned()),
            limit: window.limit,
            offset: window.offset,
        }))
    }

    /// Aggregates: the shards send partial states per group, the router
    /// merges them and evaluates the outputs, HAVING and ORDER BY.
    fn groups_plan(
        &self,
        having: Option<&Node>,
        order_nodes: &[SortKey<Option<Node>>],
        order: &[SortKey<(usize, usize)>],
        window: Window,
    ) -> Result<Plan, PlanError> {
        if let Some(it) = self.items.iter().find(|it| it.star) {
            return Err(PlanError(format!(
                "`{}` with GROUP BY, DISTINCT or aggregates is not supported; name the columns",
                it.text
            )));
        }
        let mut b = Builder {
            q: self.q,
            keys: self.group_keys()?,
            scalars: Vec::new(),
            partials: Vec::new(),
            aggs: Vec::new(),
            agg_items: self
                .items
                .iter()
                .filter_map(|it| Some((it.alias.clone()?, it.node.clone()?)))
                .filter(|(a, _)| self.agg_aliases.contains(a))
                .collect(),
            agg_aliases: self.agg_aliases.clone(),
            depth: 0,
        };
        let outputs = self.outputs(&mut b)?;
        let having = having.map(|n| b.build(n)).transpose()?;
        let sort = self.sort_keys(&mut b, order_nodes, order, &outputs)?;
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
            from: window.from,
            group_by: self.c.group_by.is_some() || self.distinct_keys(),
            aggs,
            outputs,
            having,
            distinct: self.c.distinct,
            order: sort,
            limit: window.limit,
            offset: window.offset,
        }))
    }

    /// `SELECT DISTINCT a, b` without aggregates: GROUP BY a, b.
    fn distinct_keys(&self) -> bool {
        self.c.distinct && !self.items.iter().any(|it| self.has_agg(it))
    }

    /// The group keys: GROUP BY's items (a position names a SELECT item,
    /// not an aggregate), or DISTINCT's columns.
    fn group_keys(&self) -> Result<Vec<String>, PlanError> {
        let Some(g) = self.c.group_by else {
            if self.distinct_keys() {
                return Ok(self.items.iter().map(|it| it.text.clone()).collect());
            }
            return Ok(Vec::new());
        };
        let mut keys = Vec::new();
        for r in split_commas(&self.toks, &self.dep, g.0, g.1) {
            if r.0 >= r.1 {
                return Err("an empty GROUP BY item".into());
            }
            let text = match position(self.q, &self.toks, r) {
                Some(p) => {
                    let it = self.positional(p, "GROUP BY")?;
                    if self.has_agg(it) {
                        return Err(PlanError(format!("GROUP BY position {p} is an aggregate")));
                    }
                    it.text.clone()
                }
                None => span_text(self.q, &self.toks, r).to_owned(),
            };
            keys.push(text);
        }
        Ok(keys)
    }

    /// Each item's output: an expression over merged aggregates, or a
    /// shard column (non-aggregate items go to the shards as written,
    /// aliases included, so GROUP BY and WHERE can name them).
    fn outputs(&self, b: &mut Builder) -> Result<Vec<(OutName, RExpr)>, PlanError> {
        let mut outputs = Vec::new();
        for it in &self.items {
            let node = it.node.as_ref().expect("not a star");
            if self.has_agg(it) {
                let e = b.build(node)?;
                let name = it.alias.clone().unwrap_or_else(|| ch_name(self.q, node));
                outputs.push((OutName::Fixed(name), e));
            } else {
                let text = span_text_item(it);
                let col = match b.keys.iter().position(|k| squash(k) == squash(&text)) {
                    Some(k) if it.alias.is_none() => k,
                    _ => b.scalar(&text),
                };
                let fallback = it.alias.clone().unwrap_or_else(|| ch_name(self.q, node));
                outputs.push((OutName::Shard(col, fallback), RExpr::Col(col)));
            }
        }
        Ok(outputs)
    }

    /// ORDER BY over the outputs: a position or an item's alias is that
    /// output, anything else an expression of its own.
    fn sort_keys(
        &self,
        b: &mut Builder,
        order_nodes: &[SortKey<Option<Node>>],
        order: &[SortKey<(usize, usize)>],
        outputs: &[(OutName, RExpr)],
    ) -> Result<Vec<SortKey<RExpr>>, PlanError> {
        let resolve_item = |n: &Node| -> Option<usize> {
            match &n.ex {
                Ex::Ident(name) => self
                    .items
                    .iter()
                    .position(|it| it.alias.as_deref() == Some(name.as_str())),
                _ => None,
            }
        };
        let mut sort = Vec::new();
        for (k, raw) in order_nodes.iter().zip(order) {
            let expr = match &k.expr {
                None => {
                    let p = position(self.q, &self.toks, raw.expr).expect("positional");
                    self.positional(p, "ORDER BY")?;
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
        Ok(sort)
    }
}

/// Aliases of items with aggregates, to a fixpoint (aliases of aliases).
fn aggregate_aliases(items: &[Item]) -> HashSet<String> {
    let mut agg_aliases = HashSet::new();
    loop {
        let before = agg_aliases.len();
        for it in items {
            if let (Some(a), Some(n)) = (&it.alias, &it.node) {
                if has_aggregates(n, &agg_aliases) {
                    agg_aliases.insert(a.clone());
                }
            }
        }
        if agg_aliases.len() == before {
            return agg_aliases;
        }
    }
}
