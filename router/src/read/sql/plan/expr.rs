//! The expression parser for the parts the router evaluates itself: the
//! items of SELECT, HAVING and ORDER BY, down to their aggregate calls.
//! Whatever it cannot read and holds no aggregate becomes opaque text sent
//! to the shards as written, so ClickHouse syntax the router does not know
//! still runs; over aggregates it refuses with the position.

use super::aggregates::aggregate_name;
use super::clauses::{
    has_aggregate_call, ident_name, is_kw, matching, span_text, split_commas, text_of,
};
use super::{BinOp, PlanError, ROUTER_FUNCTIONS};
use crate::read::sql::value::Value;
use crate::sql_check::{at_pos, Kind, Token};

/// A parsed expression (of SELECT, HAVING, ORDER BY), with its byte span.
#[derive(Debug, Clone)]
pub(super) enum Ex {
    Lit(Value, String),
    Ident(String),
    Call(String, Vec<Node>),
    Agg(AggCall),
    Bin(BinOp, Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Not(Box<Node>),
    /// Text the router does not evaluate (no aggregate inside).
    Opaque,
}

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) ex: Ex,
    pub(super) span: (usize, usize),
}

#[derive(Debug, Clone)]
pub(super) struct AggCall {
    pub(super) name: String,
    pub(super) params: Vec<String>,
    pub(super) args: Vec<String>,
    pub(super) distinct: bool,
}

pub(super) struct Parser<'a> {
    pub(super) q: &'a str,
    pub(super) toks: &'a [Token],
    pub(super) dep: &'a [i32],
    pub(super) i: usize,
    pub(super) hi: usize,
}

/// Where the parser stopped and what it expected there.
pub(super) struct Unparsed {
    at: usize,
    what: String,
}

type PResult<T> = Result<T, Unparsed>;

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Token> {
        (self.i < self.hi).then(|| &self.toks[self.i])
    }
    fn kw(&self, k: &str) -> bool {
        self.peek().is_some_and(|t| is_kw(self.q, t, k))
    }
    fn punct(&self, c: char) -> bool {
        self.peek().is_some_and(|t| t.kind == Kind::Punct(c))
    }
    fn pos(&self) -> usize {
        self.peek()
            .map_or_else(|| self.toks[self.hi - 1].end, |t| t.start)
    }
    fn err<T>(&self, what: &str) -> PResult<T> {
        let found = self.peek().map_or("the end".to_owned(), |t| {
            format!("`{}`", text_of(self.q, t))
        });
        Err(Unparsed {
            at: self.pos(),
            what: format!("{what}, found {found}"),
        })
    }
    fn node(&self, ex: Ex, start: usize) -> Node {
        Node {
            ex,
            span: (start, self.toks[self.i - 1].end),
        }
    }

    pub(super) fn expr(&mut self) -> PResult<Node> {
        self.binary(0)
    }

    fn binary(&mut self, level: u8) -> PResult<Node> {
        if level == 2 && self.kw("not") {
            let start = self.pos();
            self.i += 1;
            let e = self.binary(2)?;
            return Ok(self.node(Ex::Not(Box::new(e)), start));
        }
        if level > 5 {
            return self.unary();
        }
        let start = self.pos();
        let mut l = self.binary(level + 1)?;
        while let Some(op) = self.op(level) {
            let r = self.binary(level + 1)?;
            l = self.node(Ex::Bin(op, Box::new(l), Box::new(r)), start);
            if level == 3 {
                break; // comparisons do not chain
            }
        }
        Ok(l)
    }

    /// The operator of `level` at the cursor, consumed.
    fn op(&mut self, level: u8) -> Option<BinOp> {
        let t = self.peek()?;
        let next = self.toks.get(self.i + 1).filter(|_| self.i + 1 < self.hi);
        let adjacent = |c: char| next.is_some_and(|n| n.kind == Kind::Punct(c) && n.start == t.end);
        let (op, n) = match (level, t.kind) {
            (0, Kind::Word) if is_kw(self.q, t, "or") => (BinOp::Or, 1),
            (1, Kind::Word) if is_kw(self.q, t, "and") => (BinOp::And, 1),
            (3, Kind::Punct('=')) => (BinOp::Eq, if adjacent('=') { 2 } else { 1 }),
            (3, Kind::Punct('!')) if adjacent('=') => (BinOp::Ne, 2),
            (3, Kind::Punct('<')) if adjacent('>') => (BinOp::Ne, 2),
            (3, Kind::Punct('<')) if adjacent('=') => (BinOp::Le, 2),
            (3, Kind::Punct('>')) if adjacent('=') => (BinOp::Ge, 2),
            (3, Kind::Punct('<')) => (BinOp::Lt, 1),
            (3, Kind::Punct('>')) => (BinOp::Gt, 1),
            (4, Kind::Punct('+')) => (BinOp::Add, 1),
            (4, Kind::Punct('-')) => (BinOp::Sub, 1),
            (5, Kind::Punct('*')) => (BinOp::Mul, 1),
            (5, Kind::Punct('/')) => (BinOp::Div, 1),
            (5, Kind::Punct('%')) => (BinOp::Mod, 1),
            _ => return None,
        };
        self.i += n;
        Some(op)
    }

    fn unary(&mut self) -> PResult<Node> {
        let start = self.pos();
        if self.punct('-') {
            self.i += 1;
            let e = self.unary()?;
            if let Ex::Lit(v, s) = &e.ex {
                let neg = match v {
                    Value::Int(i) => Some(Value::Int(-i)),
                    Value::UInt(u) if *u <= i64::MAX as u64 + 1 => {
                        Some(Value::Int((*u as i64).wrapping_neg()))
                    }
                    Value::Float(f) => Some(Value::Float(-f)),
                    _ => None,
                };
                if let Some(n) = neg {
                    return Ok(self.node(Ex::Lit(n, format!("-{s}")), start));
                }
            }
            return Ok(self.node(Ex::Neg(Box::new(e)), start));
        }
        if self.punct('+') {
            self.i += 1;
            return self.unary();
        }
        self.primary()
    }

    fn primary(&mut self) -> PResult<Node> {
        let start = self.pos();
        let Some(t) = self.peek() else {
            return self.err("expected an expression");
        };
        let text = text_of(self.q, t);
        match t.kind {
            Kind::Punct('(') => self.parenthesised(start),
            Kind::Str => {
                self.i += 1;
                Ok(self.string(text, start))
            }
            Kind::Word if text.starts_with(|c: char| c.is_ascii_digit()) => {
                self.number_literal(text, start)
            }
            Kind::Word if is_kw(self.q, t, "null") => {
                self.i += 1;
                Ok(self.node(Ex::Lit(Value::Null, "NULL".into()), start))
            }
            Kind::Word if is_kw(self.q, t, "true") || is_kw(self.q, t, "false") => {
                self.i += 1;
                Ok(self.node(
                    Ex::Lit(
                        Value::Bool(is_kw(self.q, t, "true")),
                        text.to_ascii_lowercase(),
                    ),
                    start,
                ))
            }
            Kind::Word | Kind::QuotedIdent => self.name(t, start),
            _ => self.err("expected an expression"),
        }
    }

    /// `( expr )` (a subquery is refused).
    fn parenthesised(&mut self, start: usize) -> PResult<Node> {
        if self
            .toks
            .get(self.i + 1)
            .is_some_and(|n| is_kw(self.q, n, "select"))
        {
            return self.err("a subquery here is not supported");
        }
        self.i += 1;
        let e = self.expr()?;
        if !self.punct(')') {
            return self.err("expected `)`");
        }
        self.i += 1;
        Ok(Node {
            ex: e.ex,
            span: (start, self.toks[self.i - 1].end),
        })
    }

    /// A string literal (the token is consumed); one in double quotes or
    /// with escapes the router does not read is opaque.
    fn string(&self, text: &str, start: usize) -> Node {
        let lit = if text.starts_with('\'') {
            unescape_string(text)
        } else {
            None
        };
        match lit {
            Some(s) => {
                let shown = format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
                self.node(Ex::Lit(Value::Str(s), shown), start)
            }
            None => self.node(Ex::Opaque, start),
        }
    }

    /// 1, 1.5, 1e3, 1.5e-3: the lexer cuts at `.` and `-`.
    fn number_literal(&mut self, text: &str, start: usize) -> PResult<Node> {
        let mut end = self.i + 1;
        let mut s = text.to_owned();
        while end < self.hi {
            let n = &self.toks[end];
            let joined = n.start == self.toks[end - 1].end;
            let last = s.chars().last().unwrap_or(' ');
            if joined
                && (n.kind == Kind::Punct('.')
                    || (matches!(n.kind, Kind::Punct('-' | '+')) && matches!(last, 'e' | 'E'))
                    || (n.kind == Kind::Word && matches!(last, '.' | '-' | '+')))
            {
                s.push_str(text_of(self.q, n));
                end += 1;
            } else {
                break;
            }
        }
        self.i = end;
        let (v, shown) = number(&s).ok_or_else(|| Unparsed {
            at: start,
            what: format!("cannot read the number `{s}`"),
        })?;
        Ok(self.node(Ex::Lit(v, shown), start))
    }

    /// A name: a column (`t.c` is `c`) or a call; the keywords of
    /// constructs the router does not evaluate are refused.
    fn name(&mut self, t: &'a Token, start: usize) -> PResult<Node> {
        let text = text_of(self.q, t);
        if [
            "case", "cast", "interval", "not", "distinct", "exists", "array",
        ]
        .iter()
        .any(|k| is_kw(self.q, t, k))
            && t.kind == Kind::Word
            && !self
                .toks
                .get(self.i + 1)
                .is_some_and(|n| n.kind == Kind::Punct('(') && n.start == t.end)
        {
            return self.err("this construct is not evaluated by the router");
        }
        let name = ident_name(self.q, t).ok_or_else(|| Unparsed {
            at: start,
            what: format!("cannot read `{text}`"),
        })?;
        self.i += 1;
        if self.punct('(') {
            return self.call(name, start);
        }
        let mut last = name;
        while self.punct('.') {
            self.i += 1;
            let Some(n) = self.peek().and_then(|n| ident_name(self.q, n)) else {
                return self.err("expected a name after `.`");
            };
            self.i += 1;
            last = n;
        }
        if self.punct('[') || self.punct(':') {
            return self.err("this construct is not evaluated by the router");
        }
        Ok(self.node(Ex::Ident(last), start))
    }

    /// `name(` at the cursor: an aggregate (`name(params)(args)` too) or a
    /// function the router may evaluate.
    fn call(&mut self, name: String, start: usize) -> PResult<Node> {
        if aggregate_name(&name).is_some() {
            return self.aggregate_call(name, start);
        }
        self.i += 1;
        let mut args = Vec::new();
        if !self.punct(')') {
            loop {
                args.push(self.expr()?);
                if self.punct(',') {
                    self.i += 1;
                    continue;
                }
                break;
            }
        }
        if !self.punct(')') {
            return self.err("expected `,` or `)`");
        }
        self.i += 1;
        if self.punct('(') || self.kw("over") {
            return self.err("this construct is not evaluated by the router");
        }
        Ok(self.node(Ex::Call(name, args), start))
    }

    /// An aggregate call, kept as text for the shards: its parameters,
    /// its arguments (`DISTINCT` and `*` read off them).
    fn aggregate_call(&mut self, name: String, start: usize) -> PResult<Node> {
        let open = self.i;
        let close = matching(self.toks, self.dep, open);
        let mut groups = vec![(open, close)];
        if self
            .toks
            .get(close + 1)
            .is_some_and(|t| t.kind == Kind::Punct('('))
            && close + 1 < self.hi
        {
            let c2 = matching(self.toks, self.dep, close + 1);
            groups.push((close + 1, c2));
        }
        let (args_r, params_r) = if groups.len() == 2 {
            (groups[1], Some(groups[0]))
        } else {
            (groups[0], None)
        };
        self.i = args_r.1 + 1;
        if self.kw("over") {
            return self.err("window functions (OVER) are not supported across shards");
        }
        let texts = |r: (usize, usize)| -> Vec<String> {
            if r.1 == r.0 + 1 {
                return vec![];
            }
            split_commas(self.toks, self.dep, r.0 + 1, r.1)
                .into_iter()
                .map(|s| span_text(self.q, self.toks, s).to_owned())
                .collect()
        };
        let mut args = texts(args_r);
        let mut distinct = false;
        if let Some(first) = args.first_mut() {
            let lower = first.to_ascii_lowercase();
            if lower.starts_with("distinct ") || lower.starts_with("distinct\n") {
                distinct = true;
                *first = first[8..].trim().to_owned();
            }
        }
        if args.len() == 1 && args[0] == "*" {
            args.clear();
        }
        let call = AggCall {
            name,
            params: params_r.map(texts).unwrap_or_default(),
            args,
            distinct,
        };
        Ok(self.node(Ex::Agg(call), start))
    }
}

fn unescape_string(raw: &str) -> Option<String> {
    let inner = &raw[1..raw.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                c @ ('\\' | '\'' | '"') => out.push(c),
                _ => return None,
            },
            '\'' => {
                chars.next()?;
                out.push('\'');
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// A numeric literal and its ClickHouse column-name rendering.
fn number(s: &str) -> Option<(Value, String)> {
    if let Ok(u) = s.parse::<u64>() {
        return Some((Value::UInt(u), u.to_string()));
    }
    let f: f64 = s.parse().ok()?;
    let shown = if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{f}.")
    } else {
        format!("{f}")
    };
    Some((Value::Float(f), shown))
}

pub(super) fn parse_node(
    q: &str,
    toks: &[Token],
    dep: &[i32],
    r: (usize, usize),
) -> Result<Node, PlanError> {
    let mut p = Parser {
        q,
        toks,
        dep,
        i: r.0,
        hi: r.1,
    };
    let res = p.expr().and_then(|n| {
        if p.i < r.1 {
            p.err("unexpected text").map(|()| n)
        } else {
            Ok(n)
        }
    });
    match res {
        Ok(n) => Ok(n),
        Err(_) if !has_aggregate_call(q, toks, dep, r.0, r.1) => Ok(Node {
            ex: Ex::Opaque,
            span: (toks[r.0].start, toks[r.1 - 1].end),
        }),
        Err(Unparsed { at, what: msg }) => Err(PlanError(format!(
            "{msg} at {}: over aggregates the router evaluates only + - * / %, comparisons, AND/OR/NOT, literals and {} (compute the rest inside the aggregate's argument, or use per_shard=true)",
            at_pos(q, at),
            ROUTER_FUNCTIONS.join(", ")
        ))),
    }
}
