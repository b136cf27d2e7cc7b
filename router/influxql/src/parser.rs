//! The recursive-descent parser's core: token handling, bound parameters,
//! expressions, identifiers and measurement names. Statements are parsed in
//! `select.rs` and `statements.rs` as further `impl Parser` blocks.

use std::collections::HashMap;

use crate::ast::*;
use crate::error::{ErrorKind, ParseError, Result};
use crate::functions;
use crate::lexer::{regex_error, Lexer, Spanned, Token};

/// Values for `$name` bind parameters (InfluxDB's `params` request argument).
pub type Params = HashMap<String, ParamValue>;

/// One bind parameter's value. Where an identifier is expected (a
/// measurement, a tag key) a `String` or `Identifier` value is used as the
/// name; in an expression a `String` is a string literal and an `Identifier`
/// a field or tag reference.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Identifier(String),
    /// Nanoseconds.
    Duration(i64),
    /// A regex pattern, validated when used.
    Regex(String),
}

/// How deep parentheses, calls and subqueries may nest: deeper input is
/// refused instead of overflowing the stack.
const MAX_DEPTH: usize = 64;

pub(crate) struct Parser<'a> {
    pub(crate) text: &'a str,
    lexer: Lexer<'a>,
    peeked: Option<Spanned>,
    params: Option<&'a Params>,
    depth: usize,
    /// Optional clauses looked for since the last consumed token, for the
    /// "expected ..." list when a statement ends on something unknown.
    tried: Vec<&'static str>,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a str, params: Option<&'a Params>) -> Self {
        Parser {
            text,
            lexer: Lexer::new(text),
            peeked: None,
            params,
            depth: 0,
            tried: Vec::new(),
        }
    }

    // ---- tokens -------------------------------------------------------

    pub fn peek(&mut self) -> Result<&Spanned> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lexer.next_token()?);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    pub fn peek_token(&mut self) -> Result<&Token> {
        Ok(&self.peek()?.token)
    }

    pub fn next(&mut self) -> Result<Spanned> {
        self.tried.clear();
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lexer.next_token(),
        }
    }

    /// Start offset of the next token.
    pub fn here(&mut self) -> Result<usize> {
        Ok(self.peek()?.start)
    }

    pub fn error_at(&self, kind: ErrorKind, offset: usize) -> ParseError {
        ParseError::new(kind, self.text, offset)
    }

    /// The source text of a token, as InfluxDB prints it after "found".
    pub fn found(&self, tok: &Spanned) -> String {
        match tok.token {
            Token::Eof => "EOF".to_string(),
            _ => self.text[tok.start..tok.end].to_string(),
        }
    }

    pub fn unexpected(&self, tok: &Spanned, expected: &[&str]) -> ParseError {
        let kind = ErrorKind::Unexpected {
            found: self.found(tok),
            expected: expected.iter().map(|s| s.to_string()).collect(),
        };
        if tok.token != Token::Eof {
            return self.error_at(kind, tok.start);
        }
        // InfluxDB places the end one or two characters past the last
        // token, whatever whitespace or comments follow it (Lexer::ended).
        let mut error = self.error_at(kind, self.lexer.last_end);
        error.position.column += self.lexer.eof_gap.saturating_sub(1);
        error
    }

    /// Errors on the next token, listing the optional clauses that were
    /// looked for just before, then `extra`.
    pub fn unexpected_after_clauses(&mut self, extra: &[&str]) -> ParseError {
        let mut expected: Vec<&str> = Vec::new();
        for e in self.tried.iter().copied().chain(extra.iter().copied()) {
            if !expected.contains(&e) {
                expected.push(e);
            }
        }
        match self.peek() {
            Ok(tok) => {
                let tok = tok.clone();
                self.unexpected(&tok, &expected)
            }
            Err(e) => e,
        }
    }

    pub fn peek_is_keyword(&mut self, kw: &str) -> Result<bool> {
        Ok(matches!(self.peek_token()?, Token::Keyword(k) if *k == kw))
    }

    /// Consumes keyword `kw` if it is next.
    pub fn eat_keyword(&mut self, kw: &'static str) -> Result<bool> {
        if self.peek_is_keyword(kw)? {
            self.next()?;
            Ok(true)
        } else {
            self.tried.push(kw);
            Ok(false)
        }
    }

    pub fn expect_keyword(&mut self, kw: &'static str) -> Result<Spanned> {
        let tok = self.next()?;
        match tok.token {
            Token::Keyword(k) if k == kw => Ok(tok),
            _ => Err(self.unexpected(&tok, &[kw])),
        }
    }

    pub fn eat(&mut self, token: &Token) -> Result<bool> {
        if self.peek_token()? == token {
            self.next()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    pub fn expect(&mut self, token: &Token, name: &str) -> Result<Spanned> {
        let tok = self.next()?;
        if &tok.token == token {
            Ok(tok)
        } else {
            Err(self.unexpected(&tok, &[name]))
        }
    }

    /// Whether the next token is the unquoted word `word` (not a keyword:
    /// `fill`, `tz`, `time`), which callers then consume.
    pub fn peek_is_word(&mut self, word: &'static str) -> Result<bool> {
        let is = matches!(self.peek_token()?, Token::Ident(w) if w.eq_ignore_ascii_case(word));
        if !is {
            self.tried.push(word);
        }
        Ok(is)
    }

    pub fn enter(&mut self, offset: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(
                ErrorKind::Invalid(format!("query nested deeper than {MAX_DEPTH} levels")),
                offset,
            ));
        }
        Ok(())
    }

    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Reads a `/regex/` whose opening slash is the (peeked or consumed)
    /// token starting at `start`.
    pub fn regex_at(&mut self, start: usize) -> Result<Regex> {
        self.peeked = None;
        self.tried.clear();
        match self.lexer.regex(start)?.token {
            Token::Regex(pattern) => Ok(Regex(pattern)),
            _ => unreachable!("Lexer::regex yields a Regex token"),
        }
    }

    // ---- bind parameters ---------------------------------------------

    pub fn param(&self, name: &str, offset: usize) -> Result<ParamValue> {
        self.params
            .and_then(|p| p.get(name))
            .cloned()
            .ok_or_else(|| self.error_at(ErrorKind::MissingParameter(name.to_string()), offset))
    }

    fn param_error(&self, name: &str, message: &str, offset: usize) -> ParseError {
        self.error_at(
            ErrorKind::Parameter {
                name: name.to_string(),
                message: message.to_string(),
            },
            offset,
        )
    }

    fn checked_regex(&self, pattern: String, offset: usize) -> Result<Regex> {
        match regex_error(&pattern) {
            Some(message) => Err(self.error_at(ErrorKind::Regex { pattern, message }, offset)),
            None => Ok(Regex(pattern)),
        }
    }

    // ---- identifiers, numbers, durations --------------------------------

    /// An identifier: bare, double-quoted, or a `$param` naming one.
    pub fn parse_ident(&mut self) -> Result<Ident> {
        let tok = self.next()?;
        match tok.token {
            Token::Ident(name) | Token::QuotedIdent(name) => Ok(name),
            Token::Param(name) => match self.param(&name, tok.start)? {
                ParamValue::String(s) | ParamValue::Identifier(s) => Ok(s),
                _ => Err(self.param_error(&name, "expected an identifier", tok.start)),
            },
            _ => Err(self.unexpected(&tok, &["identifier"])),
        }
    }

    /// A comma-separated list of identifiers.
    pub fn parse_ident_list(&mut self) -> Result<Vec<Ident>> {
        let mut idents = vec![self.parse_ident()?];
        while self.eat(&Token::Comma)? {
            idents.push(self.parse_ident()?);
        }
        Ok(idents)
    }

    /// A non-negative integer (LIMIT, OFFSET, REPLICATION ...).
    pub fn parse_uint(&mut self) -> Result<u64> {
        let tok = self.next()?;
        match tok.token {
            Token::Integer(v) => Ok(v),
            Token::Param(name) => match self.param(&name, tok.start)? {
                ParamValue::Integer(v) if v >= 0 => Ok(v as u64),
                _ => Err(self.param_error(&name, "expected a non-negative integer", tok.start)),
            },
            _ => Err(self.unexpected(&tok, &["integer"])),
        }
    }

    /// A duration literal, with an optional leading `-` when `signed`.
    pub fn parse_duration(&mut self, signed: bool) -> Result<i64> {
        let negative = signed && self.eat(&Token::Minus)?;
        let tok = self.next()?;
        let nanos = match tok.token {
            Token::Duration(d) => d,
            Token::BadDuration(text) => {
                return Err(self.error_at(ErrorKind::Duration(text), tok.start))
            }
            Token::Param(name) => match self.param(&name, tok.start)? {
                ParamValue::Duration(d) => d,
                _ => return Err(self.param_error(&name, "expected a duration", tok.start)),
            },
            _ => return Err(self.unexpected(&tok, &["duration"])),
        };
        Ok(if negative { -nanos } else { nanos })
    }

    // ---- measurements ---------------------------------------------------

    /// `[db.][rp.]name` where the name may be a `/regex/`; `db..name` skips
    /// the retention policy.
    pub fn parse_measurement(&mut self) -> Result<MeasurementName> {
        let mut segments: Vec<Option<Ident>> = Vec::new();
        let name = loop {
            let tok = self.peek()?.clone();
            match tok.token {
                Token::Slash => break MeasurementMatch::Regex(self.regex_at(tok.start)?),
                Token::Dot if segments.len() == 1 => {
                    self.next()?;
                    segments.push(None);
                }
                Token::Ident(_) | Token::QuotedIdent(_) | Token::Param(_) => {
                    let ident = self.parse_ident()?;
                    if segments.len() < 2 && self.eat(&Token::Dot)? {
                        segments.push(Some(ident));
                    } else {
                        break MeasurementMatch::Name(ident);
                    }
                }
                _ => return Err(self.unexpected(&tok, &["identifier", "regex"])),
            }
        };
        let (database, retention_policy) = split_qualifiers(segments);
        Ok(MeasurementName {
            database,
            retention_policy,
            name,
        })
    }

    pub fn parse_measurement_list(&mut self) -> Result<Vec<MeasurementName>> {
        let mut list = vec![self.parse_measurement()?];
        while self.eat(&Token::Comma)? {
            list.push(self.parse_measurement()?);
        }
        Ok(list)
    }

    // ---- expressions ------------------------------------------------------

    pub fn parse_expr(&mut self) -> Result<Expr> {
        self.parse_binary(0)
    }

    /// Precedence climbing; every operator is left-associative.
    fn parse_binary(&mut self, min_precedence: u8) -> Result<Expr> {
        let mut lhs = self.parse_unary()?;
        loop {
            let Some(op) = binary_op(self.peek_token()?) else {
                return Ok(lhs);
            };
            if op.precedence() < min_precedence {
                return Ok(lhs);
            }
            self.next()?;
            let rhs = if matches!(op, BinaryOp::EqRegex | BinaryOp::NotEqRegex) {
                Expr::Regex(self.parse_regex_operand()?)
            } else {
                self.parse_binary(op.precedence() + 1)?
            };
            lhs = Expr::binary(op, lhs, rhs);
        }
    }

    /// The right side of `=~` / `!~`: a regex literal or a `$param` holding
    /// one (a string parameter is read as a pattern too).
    pub fn parse_regex_operand(&mut self) -> Result<Regex> {
        let tok = self.next()?;
        match tok.token {
            Token::Slash => self.regex_at(tok.start),
            Token::Param(name) => match self.param(&name, tok.start)? {
                ParamValue::Regex(p) | ParamValue::String(p) => self.checked_regex(p, tok.start),
                _ => Err(self.param_error(&name, "expected a regex", tok.start)),
            },
            _ => Err(self.unexpected(&tok, &["regex"])),
        }
    }

    fn parse_unary(&mut self) -> Result<Expr> {
        let tok = self.next()?;
        let start = tok.start;
        let expr = match tok.token {
            Token::LParen => {
                self.enter(start)?;
                let inner = self.parse_expr()?;
                self.expect(&Token::RParen, ")")?;
                self.leave();
                inner
            }
            Token::Minus => {
                self.enter(start)?;
                let negated = self.parse_negated(start)?;
                self.leave();
                negated
            }
            Token::Plus => {
                self.enter(start)?;
                let operand = self.parse_unary()?;
                self.leave();
                operand
            }
            Token::Slash => Expr::Regex(self.regex_at(start)?),
            Token::Star => Expr::Wildcard(self.parse_cast()?),
            Token::Integer(v) => Expr::Literal(match i64::try_from(v) {
                Ok(v) => Literal::Integer(v),
                Err(_) => Literal::Unsigned(v),
            }),
            Token::Float(v) => Expr::float(v),
            Token::Duration(d) => Expr::duration(d),
            Token::BadDuration(text) => return Err(self.error_at(ErrorKind::Duration(text), start)),
            Token::Str(s) => Expr::Literal(Literal::String(s)),
            Token::Keyword("TRUE") => Expr::Literal(Literal::Boolean(true)),
            Token::Keyword("FALSE") => Expr::Literal(Literal::Boolean(false)),
            Token::Keyword("DISTINCT") => {
                // `DISTINCT x` is `distinct(x)`.
                let arg = if self.peek_token()? == &Token::LParen {
                    self.parse_unary()?
                } else {
                    Expr::var(&self.parse_ident()?)
                };
                let call = Call {
                    name: "distinct".to_string(),
                    args: vec![arg],
                };
                functions::validate(&call).map_err(|k| self.error_at(k, start))?;
                Expr::Call(call)
            }
            Token::Ident(name) if self.peek_token()? == &Token::LParen => {
                self.parse_call(name, start)?
            }
            Token::Ident(name) | Token::QuotedIdent(name) => Expr::VarRef(VarRef {
                name,
                data_type: self.parse_cast()?,
            }),
            Token::Param(name) => match self.param(&name, start)? {
                ParamValue::String(s) => Expr::string(&s),
                ParamValue::Integer(v) => Expr::int(v),
                ParamValue::Float(v) => Expr::float(v),
                ParamValue::Boolean(b) => Expr::Literal(Literal::Boolean(b)),
                ParamValue::Duration(d) => Expr::duration(d),
                ParamValue::Regex(p) => Expr::Regex(self.checked_regex(p, start)?),
                ParamValue::Identifier(s) => Expr::VarRef(VarRef {
                    name: s,
                    data_type: self.parse_cast()?,
                }),
            },
            _ => {
                return Err(self.unexpected(&tok, &["identifier", "string", "number", "bool"]));
            }
        };
        Ok(expr)
    }

    /// After a unary `-`: a negative literal, else `-1 * operand` (as
    /// InfluxDB represents negation).
    fn parse_negated(&mut self, start: usize) -> Result<Expr> {
        let tok = self.peek()?.clone();
        let literal = match tok.token {
            Token::Integer(v) => Some(match v {
                v if v <= i64::MAX as u64 => Literal::Integer(-(v as i64)),
                v if v == i64::MAX as u64 + 1 => Literal::Integer(i64::MIN),
                _ => {
                    let text = format!("-{v}");
                    return Err(self.error_at(ErrorKind::Number(text), start));
                }
            }),
            Token::Float(v) => Some(Literal::Float(-v)),
            Token::Duration(d) => Some(Literal::Duration(-d)),
            _ => None,
        };
        if let Some(literal) = literal {
            self.next()?;
            return Ok(Expr::Literal(literal));
        }
        let operand = self.parse_unary()?;
        Ok(Expr::binary(BinaryOp::Mul, Expr::int(-1), operand))
    }

    /// An optional `::type` cast.
    fn parse_cast(&mut self) -> Result<Option<DataType>> {
        if !self.eat(&Token::DoubleColon)? {
            return Ok(None);
        }
        let tok = self.next()?;
        let word = match &tok.token {
            Token::Ident(w) => w.to_ascii_lowercase(),
            Token::Keyword(k) => k.to_ascii_lowercase(),
            _ => String::new(),
        };
        let data_type = match word.as_str() {
            "field" => DataType::Field,
            "tag" => DataType::Tag,
            "float" => DataType::Float,
            "integer" => DataType::Integer,
            "unsigned" => DataType::Unsigned,
            "string" => DataType::String,
            "boolean" => DataType::Boolean,
            _ => {
                let expected = [
                    "field", "tag", "float", "integer", "unsigned", "string", "boolean",
                ];
                return Err(self.unexpected(&tok, &expected));
            }
        };
        Ok(Some(data_type))
    }

    /// `name(args...)`, the `(` not yet consumed; validated for arity.
    fn parse_call(&mut self, name: String, start: usize) -> Result<Expr> {
        self.enter(start)?;
        self.expect(&Token::LParen, "(")?;
        let mut args = Vec::new();
        if !self.eat(&Token::RParen)? {
            loop {
                args.push(self.parse_expr()?);
                if self.eat(&Token::Comma)? {
                    continue;
                }
                self.expect(&Token::RParen, ")")?;
                break;
            }
        }
        self.leave();
        let call = Call {
            name: name.to_ascii_lowercase(),
            args,
        };
        functions::validate(&call).map_err(|kind| self.error_at(kind, start))?;
        Ok(Expr::Call(call))
    }
}

/// `[db.][rp.]` qualifiers read before a name: one is the retention
/// policy, two are the database and the policy (`None` for `db..m`).
pub(crate) fn split_qualifiers(mut segments: Vec<Option<Ident>>) -> (Option<Ident>, Option<Ident>) {
    let retention_policy = segments.pop().flatten();
    let database = segments.pop().flatten();
    (database, retention_policy)
}

fn binary_op(token: &Token) -> Option<BinaryOp> {
    Some(match token {
        Token::Plus => BinaryOp::Add,
        Token::Minus => BinaryOp::Sub,
        Token::Star => BinaryOp::Mul,
        Token::Slash => BinaryOp::Div,
        Token::Percent => BinaryOp::Mod,
        Token::Amp => BinaryOp::BitAnd,
        Token::Pipe => BinaryOp::BitOr,
        Token::Caret => BinaryOp::BitXor,
        Token::Eq => BinaryOp::Eq,
        Token::NotEq => BinaryOp::NotEq,
        Token::Lt => BinaryOp::Lt,
        Token::LtEq => BinaryOp::LtEq,
        Token::Gt => BinaryOp::Gt,
        Token::GtEq => BinaryOp::GtEq,
        Token::EqRegex => BinaryOp::EqRegex,
        Token::NotEqRegex => BinaryOp::NotEqRegex,
        Token::Keyword("AND") => BinaryOp::And,
        Token::Keyword("OR") => BinaryOp::Or,
        _ => return None,
    })
}
