//! `SELECT`: fields, INTO, FROM (with subqueries), WHERE, GROUP BY, fill,
//! ORDER BY, LIMIT/OFFSET/SLIMIT/SOFFSET and tz().

use crate::ast::*;
use crate::error::{ErrorKind, Result};
use crate::lexer::Token;
use crate::parser::{split_qualifiers, ParamValue, Parser};

impl Parser<'_> {
    /// Parses a SELECT whose `SELECT` keyword was consumed. A subquery's
    /// caller consumes its closing parenthesis.
    pub(crate) fn parse_select(&mut self) -> Result<SelectStatement> {
        let mut select = SelectStatement {
            fields: self.parse_fields()?,
            ..SelectStatement::default()
        };
        if self.eat_keyword("INTO")? {
            select.into = Some(self.parse_into()?);
        }
        self.expect_keyword("FROM")?;
        select.from = self.parse_sources()?;
        if self.eat_keyword("WHERE")? {
            select.condition = Some(self.parse_expr()?);
        }
        if self.eat_keyword("GROUP")? {
            self.expect_keyword("BY")?;
            select.group_by = self.parse_dimensions()?;
        }
        if self.peek_is_word("fill")? {
            select.fill = Some(self.parse_fill()?);
        }
        if self.eat_keyword("ORDER")? {
            self.expect_keyword("BY")?;
            select.order_by = Some(self.parse_order()?);
        }
        if self.eat_keyword("LIMIT")? {
            select.limit = Some(self.parse_uint()?);
        }
        if self.eat_keyword("OFFSET")? {
            select.offset = Some(self.parse_uint()?);
        }
        if self.eat_keyword("SLIMIT")? {
            select.slimit = Some(self.parse_uint()?);
        }
        if self.eat_keyword("SOFFSET")? {
            select.soffset = Some(self.parse_uint()?);
        }
        if self.peek_is_word("tz")? {
            select.timezone = Some(self.parse_timezone()?);
        }
        Ok(select)
    }

    fn parse_fields(&mut self) -> Result<Vec<Field>> {
        let mut fields = Vec::new();
        loop {
            let expr = self.parse_expr()?;
            let alias = if self.eat_keyword("AS")? {
                Some(self.parse_ident()?)
            } else {
                None
            };
            fields.push(Field { expr, alias });
            if !self.eat(&Token::Comma)? {
                return Ok(fields);
            }
        }
    }

    /// `INTO [db.][rp.](measurement | :MEASUREMENT)`.
    fn parse_into(&mut self) -> Result<IntoClause> {
        let mut segments: Vec<Option<Ident>> = Vec::new();
        let measurement = loop {
            let tok = self.peek()?.clone();
            match tok.token {
                Token::Colon => {
                    self.next()?;
                    self.expect_keyword("MEASUREMENT")?;
                    break None;
                }
                Token::Dot if segments.len() == 1 => {
                    self.next()?;
                    segments.push(None);
                }
                Token::Ident(_) | Token::QuotedIdent(_) | Token::Param(_) => {
                    let ident = self.parse_ident()?;
                    if segments.len() < 2 && self.eat(&Token::Dot)? {
                        segments.push(Some(ident));
                    } else {
                        break Some(ident);
                    }
                }
                _ => return Err(self.unexpected(&tok, &["identifier", ":MEASUREMENT"])),
            }
        };
        let (database, retention_policy) = split_qualifiers(segments);
        Ok(IntoClause {
            database,
            retention_policy,
            measurement,
        })
    }

    fn parse_sources(&mut self) -> Result<Vec<Source>> {
        let mut sources = Vec::new();
        loop {
            let tok = self.peek()?.clone();
            if tok.token == Token::LParen {
                self.next()?;
                self.enter(tok.start)?;
                self.expect_keyword("SELECT")?;
                let inner = self.parse_select()?;
                if !self.eat(&Token::RParen)? {
                    return Err(self.unexpected_after_clauses(&[")"]));
                }
                self.leave();
                sources.push(Source::Subquery(Box::new(inner)));
            } else {
                sources.push(Source::Measurement(self.parse_measurement()?));
            }
            if !self.eat(&Token::Comma)? {
                return Ok(sources);
            }
        }
    }

    fn parse_dimensions(&mut self) -> Result<Vec<Dimension>> {
        let mut dimensions = Vec::new();
        loop {
            dimensions.push(self.parse_dimension()?);
            if !self.eat(&Token::Comma)? {
                return Ok(dimensions);
            }
        }
    }

    fn parse_dimension(&mut self) -> Result<Dimension> {
        let tok = self.peek()?.clone();
        match &tok.token {
            Token::Star => {
                self.next()?;
                Ok(Dimension::Wildcard)
            }
            Token::Slash => Ok(Dimension::Regex(self.regex_at(tok.start)?)),
            Token::Ident(w) if w.eq_ignore_ascii_case("time") => {
                self.next()?;
                if self.peek_token()? == &Token::LParen {
                    self.parse_time_dimension()
                } else {
                    Ok(Dimension::Tag(w.clone()))
                }
            }
            Token::Ident(_) | Token::QuotedIdent(_) | Token::Param(_) => {
                let tag = self.parse_ident()?;
                // `"host"::tag` is accepted (Grafana writes it); other casts
                // make no sense for a grouping key.
                if self.eat(&Token::DoubleColon)? {
                    let cast = self.next()?;
                    if cast.token != Token::Keyword("TAG") {
                        return Err(self.unexpected(&cast, &["tag"]));
                    }
                }
                Ok(Dimension::Tag(tag))
            }
            _ => Err(self.unexpected(&tok, &["time()", "identifier", "*", "regex"])),
        }
    }

    /// `time(interval[, offset])`, after the word `time`.
    fn parse_time_dimension(&mut self) -> Result<Dimension> {
        self.expect(&Token::LParen, "(")?;
        let at = self.here()?;
        let interval = self.parse_duration(false)?;
        if interval <= 0 {
            return Err(self.error_at(
                ErrorKind::Invalid("time dimension must have a positive duration".into()),
                at,
            ));
        }
        let offset = if self.eat(&Token::Comma)? {
            let tok = self.peek()?.clone();
            match tok.token {
                Token::Ident(w) if w.eq_ignore_ascii_case("now") => {
                    self.next()?;
                    self.expect(&Token::LParen, "(")?;
                    self.expect(&Token::RParen, ")")?;
                    Some(TimeOffset::Now)
                }
                Token::Duration(_) | Token::Minus | Token::Param(_) => {
                    Some(TimeOffset::Duration(self.parse_duration(true)?))
                }
                _ => return Err(self.unexpected(&tok, &["duration", "now()"])),
            }
        } else {
            None
        };
        self.expect(&Token::RParen, ")")?;
        Ok(Dimension::Time { interval, offset })
    }

    /// `fill(null | none | previous | linear | <number>)`.
    fn parse_fill(&mut self) -> Result<Fill> {
        self.next()?; // `fill`
        self.expect(&Token::LParen, "(")?;
        let negative = self.eat(&Token::Minus)?;
        let tok = self.next()?;
        let sign = if negative { -1 } else { 1 };
        let fill = match &tok.token {
            Token::Ident(w) if !negative => match w.to_ascii_lowercase().as_str() {
                "null" => Some(Fill::Null),
                "none" => Some(Fill::None),
                "previous" => Some(Fill::Previous),
                "linear" => Some(Fill::Linear),
                _ => None,
            },
            Token::Integer(v) => i64::try_from(*v).ok().map(|v| Fill::Integer(sign * v)),
            Token::Float(v) => Some(Fill::Float(sign as f64 * v)),
            Token::Param(name) => match self.param(name, tok.start)? {
                ParamValue::Integer(v) => Some(Fill::Integer(sign * v)),
                ParamValue::Float(v) => Some(Fill::Float(sign as f64 * v)),
                _ => None,
            },
            _ => None,
        };
        let Some(fill) = fill else {
            return Err(self.unexpected(&tok, &["null", "none", "previous", "linear", "number"]));
        };
        self.expect(&Token::RParen, ")")?;
        Ok(fill)
    }

    /// `ORDER BY` already read: `time [ASC|DESC]` or just `ASC|DESC`.
    fn parse_order(&mut self) -> Result<SortOrder> {
        let tok = self.peek()?.clone();
        match &tok.token {
            Token::Ident(w) | Token::QuotedIdent(w) if w.eq_ignore_ascii_case("time") => {
                self.next()?;
            }
            Token::Keyword("ASC") | Token::Keyword("DESC") => {}
            Token::Ident(_) | Token::QuotedIdent(_) => {
                return Err(self.error_at(
                    ErrorKind::Invalid("only ORDER BY time supported at this time".into()),
                    tok.start,
                ));
            }
            _ => return Err(self.unexpected(&tok, &["time", "ASC", "DESC"])),
        }
        if self.eat_keyword("DESC")? {
            Ok(SortOrder::Descending)
        } else {
            self.eat_keyword("ASC")?;
            Ok(SortOrder::Ascending)
        }
    }

    /// `tz('Area/City')`.
    fn parse_timezone(&mut self) -> Result<String> {
        self.next()?; // `tz`
        self.expect(&Token::LParen, "(")?;
        let tok = self.next()?;
        let name = match tok.token {
            Token::Str(s) if !s.is_empty() => s,
            Token::Param(ref name) => match self.param(name, tok.start)? {
                ParamValue::String(s) if !s.is_empty() => s,
                _ => return Err(self.unexpected(&tok, &["string"])),
            },
            _ => return Err(self.unexpected(&tok, &["string"])),
        };
        self.expect(&Token::RParen, ")")?;
        Ok(name)
    }
}
