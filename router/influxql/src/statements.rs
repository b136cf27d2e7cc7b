//! The statement list and every statement but SELECT: SHOW ..., CREATE /
//! DROP DATABASE, DROP MEASUREMENT / SERIES, DELETE, retention policies, and
//! the statements refused as not supported (continuous queries,
//! subscriptions, shards, KILL QUERY). Users and grants are in `users.rs`.

use crate::ast::*;
use crate::error::{ErrorKind, Result};
use crate::lexer::Token;
use crate::parser::Parser;

/// What may start a statement, in InfluxDB's order.
const STATEMENT_STARTS: &[&str] = &[
    "SELECT", "DELETE", "SHOW", "CREATE", "DROP", "EXPLAIN", "GRANT", "REVOKE", "ALTER", "SET",
    "KILL",
];

const HOUR: i64 = 3_600_000_000_000;

impl Parser<'_> {
    /// `statement { ";" statement }`; empty statements are skipped, but the
    /// query must hold at least one.
    pub(crate) fn parse_query(&mut self) -> Result<Query> {
        let mut statements = Vec::new();
        loop {
            while self.eat(&Token::Semicolon)? {}
            if self.peek_token()? == &Token::Eof {
                break;
            }
            statements.push(self.parse_statement()?);
            if !matches!(self.peek_token()?, Token::Semicolon | Token::Eof) {
                return Err(self.unexpected_after_clauses(&[";"]));
            }
        }
        if statements.is_empty() {
            let tok = self.next()?;
            return Err(self.unexpected(&tok, STATEMENT_STARTS));
        }
        Ok(Query { statements })
    }

    fn parse_statement(&mut self) -> Result<Statement> {
        let tok = self.next()?;
        let start = tok.start;
        match tok.token {
            Token::Keyword("SELECT") => Ok(Statement::Select(Box::new(self.parse_select()?))),
            Token::Keyword("SHOW") => self.parse_show(start),
            Token::Keyword("CREATE") => self.parse_create(start),
            Token::Keyword("DROP") => self.parse_drop(start),
            Token::Keyword("DELETE") => Ok(Statement::Delete(self.parse_series_filter()?)),
            Token::Keyword("ALTER") => {
                self.expect_keyword("RETENTION")?;
                self.expect_keyword("POLICY")?;
                self.parse_alter_retention_policy()
            }
            Token::Keyword("EXPLAIN") => {
                let analyze = self.eat_keyword("ANALYZE")?;
                self.expect_keyword("SELECT")?;
                Ok(Statement::Explain {
                    analyze,
                    statement: Box::new(self.parse_select()?),
                })
            }
            Token::Keyword("GRANT") => Ok(Statement::User(self.parse_grant_or_revoke(false)?)),
            Token::Keyword("REVOKE") => Ok(Statement::User(self.parse_grant_or_revoke(true)?)),
            Token::Keyword("SET") => Ok(Statement::User(self.parse_set_password()?)),
            Token::Keyword("KILL") => Err(self.unsupported("KILL QUERY", start)),
            _ => Err(self.unexpected(&tok, STATEMENT_STARTS)),
        }
    }

    fn unsupported(&self, what: &str, offset: usize) -> crate::error::ParseError {
        self.error_at(
            ErrorKind::Unsupported {
                what: what.to_string(),
            },
            offset,
        )
    }

    fn parse_on(&mut self) -> Result<Option<Ident>> {
        if self.eat_keyword("ON")? {
            Ok(Some(self.parse_ident()?))
        } else {
            Ok(None)
        }
    }

    fn parse_from(&mut self) -> Result<Vec<MeasurementName>> {
        if self.eat_keyword("FROM")? {
            self.parse_measurement_list()
        } else {
            Ok(Vec::new())
        }
    }

    fn parse_where(&mut self) -> Result<Option<Expr>> {
        if self.eat_keyword("WHERE")? {
            Ok(Some(self.parse_expr()?))
        } else {
            Ok(None)
        }
    }

    fn parse_limit_offset(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        let limit = if self.eat_keyword("LIMIT")? {
            Some(self.parse_uint()?)
        } else {
            None
        };
        let offset = if self.eat_keyword("OFFSET")? {
            Some(self.parse_uint()?)
        } else {
            None
        };
        Ok((limit, offset))
    }

    fn parse_show(&mut self, start: usize) -> Result<Statement> {
        let tok = self.next()?;
        let Token::Keyword(what) = tok.token else {
            return Err(self.unexpected(&tok, SHOW_EXPECTED));
        };
        match what {
            "DATABASES" => Ok(Statement::ShowDatabases),
            "MEASUREMENTS" => self.parse_show_measurements(),
            "MEASUREMENT" => self.parse_cardinality(Some(CardinalityOf::Measurements)),
            "SERIES"
                if self.peek_is_keyword("EXACT")? || self.peek_is_keyword("CARDINALITY")? =>
            {
                self.parse_cardinality(Some(CardinalityOf::Series))
            }
            "SERIES" => {
                let database = self.parse_on()?;
                let from = self.parse_from()?;
                let condition = self.parse_where()?;
                let (limit, offset) = self.parse_limit_offset()?;
                Ok(Statement::ShowSeries(ShowSeries {
                    database,
                    from,
                    condition,
                    limit,
                    offset,
                }))
            }
            "TAG" => {
                let tok = self.next()?;
                match tok.token {
                    Token::Keyword("KEYS") => {
                        let database = self.parse_on()?;
                        let from = self.parse_from()?;
                        let condition = self.parse_where()?;
                        let (limit, offset) = self.parse_limit_offset()?;
                        Ok(Statement::ShowTagKeys(ShowTagKeys {
                            database,
                            from,
                            condition,
                            limit,
                            offset,
                        }))
                    }
                    Token::Keyword("KEY") => self.parse_cardinality(Some(CardinalityOf::TagKeys)),
                    Token::Keyword("VALUES")
                        if self.peek_is_keyword("EXACT")?
                            || self.peek_is_keyword("CARDINALITY")? =>
                    {
                        self.parse_cardinality(None)
                    }
                    Token::Keyword("VALUES") => self.parse_show_tag_values(),
                    _ => Err(self.unexpected(&tok, &["KEYS", "VALUES", "KEY"])),
                }
            }
            "FIELD" => {
                let tok = self.next()?;
                match tok.token {
                    Token::Keyword("KEYS") => {
                        let database = self.parse_on()?;
                        let from = self.parse_from()?;
                        let (limit, offset) = self.parse_limit_offset()?;
                        Ok(Statement::ShowFieldKeys(ShowFieldKeys {
                            database,
                            from,
                            limit,
                            offset,
                        }))
                    }
                    Token::Keyword("KEY") => self.parse_cardinality(Some(CardinalityOf::FieldKeys)),
                    _ => Err(self.unexpected(&tok, &["KEYS", "KEY"])),
                }
            }
            "RETENTION" => {
                self.expect_keyword("POLICIES")?;
                Ok(Statement::ShowRetentionPolicies {
                    database: self.parse_on()?,
                })
            }
            "USERS" => Ok(Statement::User(UserStatement::ShowUsers)),
            "GRANTS" => Ok(Statement::User(self.parse_show_grants()?)),
            "CONTINUOUS" => {
                self.expect_keyword("QUERIES")?;
                Ok(Statement::ShowContinuousQueries)
            }
            "SUBSCRIPTIONS" => Err(self.unsupported("SHOW SUBSCRIPTIONS", start)),
            "SHARDS" => Err(self.unsupported("SHOW SHARDS", start)),
            "SHARD" => Err(self.unsupported("SHOW SHARD GROUPS", start)),
            "QUERIES" => Err(self.unsupported("SHOW QUERIES", start)),
            "STATS" => Err(self.unsupported("SHOW STATS", start)),
            "DIAGNOSTICS" => Err(self.unsupported("SHOW DIAGNOSTICS", start)),
            _ => Err(self.unexpected(&tok, SHOW_EXPECTED)),
        }
    }

    fn parse_show_measurements(&mut self) -> Result<Statement> {
        let database = self.parse_on()?;
        let with_measurement = if self.eat_keyword("WITH")? {
            self.expect_keyword("MEASUREMENT")?;
            let tok = self.next()?;
            match tok.token {
                Token::Eq => Some(MeasurementMatch::Name(self.parse_ident()?)),
                Token::EqRegex => Some(MeasurementMatch::Regex(self.parse_regex_operand()?)),
                _ => return Err(self.unexpected(&tok, &["=", "=~"])),
            }
        } else {
            None
        };
        let condition = self.parse_where()?;
        let (limit, offset) = self.parse_limit_offset()?;
        Ok(Statement::ShowMeasurements(ShowMeasurements {
            database,
            with_measurement,
            condition,
            limit,
            offset,
        }))
    }

    fn parse_show_tag_values(&mut self) -> Result<Statement> {
        let database = self.parse_on()?;
        let from = self.parse_from()?;
        let key = self.parse_with_key()?;
        let condition = self.parse_where()?;
        let (limit, offset) = self.parse_limit_offset()?;
        Ok(Statement::ShowTagValues(ShowTagValues {
            database,
            from,
            key,
            condition,
            limit,
            offset,
        }))
    }

    /// `WITH KEY (= k | != k | =~ /re/ | !~ /re/ | IN (a, b))`.
    fn parse_with_key(&mut self) -> Result<TagKeyMatch> {
        self.expect_keyword("WITH")?;
        self.expect_keyword("KEY")?;
        let tok = self.next()?;
        Ok(match tok.token {
            Token::Eq => TagKeyMatch::Eq(self.parse_ident()?),
            Token::NotEq => TagKeyMatch::NotEq(self.parse_ident()?),
            Token::EqRegex => TagKeyMatch::Regex(self.parse_regex_operand()?),
            Token::NotEqRegex => TagKeyMatch::NotRegex(self.parse_regex_operand()?),
            Token::Keyword("IN") => {
                self.expect(&Token::LParen, "(")?;
                let keys = self.parse_ident_list()?;
                self.expect(&Token::RParen, ")")?;
                TagKeyMatch::In(keys)
            }
            _ => return Err(self.unexpected(&tok, &["=", "!=", "=~", "!~", "IN"])),
        })
    }

    /// After `SHOW <what>`: `[EXACT] CARDINALITY [ON db] [FROM ...]
    /// [WITH KEY ...] [WHERE ...] [LIMIT n] [OFFSET n]`. `of` is `None` for
    /// tag values, whose key is read after FROM.
    fn parse_cardinality(&mut self, of: Option<CardinalityOf>) -> Result<Statement> {
        let exact = self.eat_keyword("EXACT")?;
        self.expect_keyword("CARDINALITY")?;
        let database = self.parse_on()?;
        let from = self.parse_from()?;
        let of = match of {
            Some(of) => of,
            None => CardinalityOf::TagValues(self.parse_with_key()?),
        };
        let condition = self.parse_where()?;
        let (limit, offset) = self.parse_limit_offset()?;
        Ok(Statement::ShowCardinality(ShowCardinality {
            of,
            exact,
            database,
            from,
            condition,
            limit,
            offset,
        }))
    }

    /// After `CREATE CONTINUOUS`: `QUERY name ON db [RESAMPLE [EVERY d]
    /// [FOR d]] BEGIN select END`. The select must write somewhere (INTO)
    /// and group by time, as InfluxDB requires.
    fn parse_create_continuous_query(&mut self) -> Result<Statement> {
        self.expect_keyword("QUERY")?;
        let name = self.parse_ident()?;
        self.expect_keyword("ON")?;
        let database = self.parse_ident()?;
        let (mut resample_every, mut resample_for) = (None, None);
        if self.eat_keyword("RESAMPLE")? {
            if self.eat_keyword("EVERY")? {
                resample_every = Some(self.parse_duration(false)?);
            }
            if self.eat_keyword("FOR")? {
                resample_for = Some(self.parse_duration(false)?);
            }
            if resample_every.is_none() && resample_for.is_none() {
                let tok = self.next()?;
                return Err(self.unexpected(&tok, &["EVERY", "FOR"]));
            }
        }
        self.expect_keyword("BEGIN")?;
        self.expect_keyword("SELECT")?;
        let select = self.parse_select()?;
        self.expect_keyword("END")?;
        Ok(Statement::CreateContinuousQuery(CreateContinuousQuery {
            name,
            database,
            resample_every,
            resample_for,
            select: Box::new(select),
        }))
    }

    fn parse_create(&mut self, start: usize) -> Result<Statement> {
        let tok = self.next()?;
        match tok.token {
            Token::Keyword("DATABASE") => {
                let name = self.parse_ident()?;
                let retention_policy = if self.eat_keyword("WITH")? {
                    Some(self.parse_database_rp_options()?)
                } else {
                    None
                };
                Ok(Statement::CreateDatabase(CreateDatabase {
                    name,
                    retention_policy,
                }))
            }
            Token::Keyword("RETENTION") => {
                self.expect_keyword("POLICY")?;
                let name = self.parse_ident()?;
                self.expect_keyword("ON")?;
                let database = self.parse_ident()?;
                self.expect_keyword("DURATION")?;
                let duration = self.parse_rp_duration()?;
                self.expect_keyword("REPLICATION")?;
                let replication = self.parse_replication()?;
                let shard_duration = if self.eat_keyword("SHARD")? {
                    self.expect_keyword("DURATION")?;
                    Some(self.parse_duration(false)?)
                } else {
                    None
                };
                let default = self.eat_keyword("DEFAULT")?;
                Ok(Statement::CreateRetentionPolicy(CreateRetentionPolicy {
                    name,
                    database,
                    duration,
                    replication,
                    shard_duration,
                    default,
                }))
            }
            Token::Keyword("USER") => Ok(Statement::User(self.parse_create_user()?)),
            Token::Keyword("CONTINUOUS") => self.parse_create_continuous_query(),
            Token::Keyword("SUBSCRIPTION") => Err(self.unsupported("CREATE SUBSCRIPTION", start)),
            _ => Err(self.unexpected(
                &tok,
                &[
                    "CONTINUOUS",
                    "DATABASE",
                    "USER",
                    "RETENTION",
                    "SUBSCRIPTION",
                ],
            )),
        }
    }

    /// After `CREATE DATABASE name WITH`: the options in their fixed order,
    /// at least one.
    fn parse_database_rp_options(&mut self) -> Result<RetentionPolicyOptions> {
        let mut options = RetentionPolicyOptions::default();
        if self.eat_keyword("DURATION")? {
            options.duration = Some(self.parse_rp_duration()?);
        }
        if self.eat_keyword("REPLICATION")? {
            options.replication = Some(self.parse_replication()?);
        }
        if self.eat_keyword("SHARD")? {
            self.expect_keyword("DURATION")?;
            options.shard_duration = Some(self.parse_duration(false)?);
        }
        if self.eat_keyword("NAME")? {
            options.name = Some(self.parse_ident()?);
        }
        if options == RetentionPolicyOptions::default() {
            let tok = self.next()?;
            return Err(self.unexpected(&tok, &["DURATION", "REPLICATION", "SHARD", "NAME"]));
        }
        Ok(options)
    }

    /// A retention duration: `INF`, or at least one hour (InfluxDB's rule).
    fn parse_rp_duration(&mut self) -> Result<RetentionDuration> {
        if self.eat_keyword("INF")? {
            return Ok(RetentionDuration::Infinite);
        }
        let at = self.here()?;
        let nanos = self.parse_duration(false)?;
        if nanos != 0 && nanos < HOUR {
            return Err(self.error_at(
                ErrorKind::Invalid("retention policy duration must be at least 1h0m0s".into()),
                at,
            ));
        }
        Ok(RetentionDuration::Nanos(nanos))
    }

    fn parse_replication(&mut self) -> Result<u64> {
        let at = self.here()?;
        let n = self.parse_uint()?;
        if n == 0 || n > i32::MAX as u64 {
            return Err(self.error_at(
                ErrorKind::Invalid(format!("invalid value {n}: must be 1 <= n <= 2147483647")),
                at,
            ));
        }
        Ok(n)
    }

    /// After `ALTER RETENTION POLICY`: name, ON db, then options in any
    /// order, each at most once, at least one.
    fn parse_alter_retention_policy(&mut self) -> Result<Statement> {
        let name = self.parse_ident()?;
        self.expect_keyword("ON")?;
        let database = self.parse_ident()?;
        let mut alter = AlterRetentionPolicy {
            name,
            database,
            duration: None,
            replication: None,
            shard_duration: None,
            default: false,
        };
        let mut seen_any = false;
        loop {
            let tok = self.peek()?.clone();
            let option = match tok.token {
                Token::Keyword(k @ ("DURATION" | "REPLICATION" | "SHARD" | "DEFAULT")) => k,
                _ if seen_any => break,
                _ => {
                    let expected = ["DURATION", "REPLICATION", "SHARD", "DEFAULT"];
                    return Err(self.unexpected(&tok, &expected));
                }
            };
            self.next()?;
            let repeated = match option {
                "DURATION" => alter.duration.replace(self.parse_rp_duration()?).is_some(),
                "REPLICATION" => alter
                    .replication
                    .replace(self.parse_replication()?)
                    .is_some(),
                "SHARD" => {
                    self.expect_keyword("DURATION")?;
                    let d = self.parse_duration(false)?;
                    alter.shard_duration.replace(d).is_some()
                }
                _ => std::mem::replace(&mut alter.default, true),
            };
            if repeated {
                return Err(self.error_at(
                    ErrorKind::Invalid(format!("found duplicate {option} option")),
                    tok.start,
                ));
            }
            seen_any = true;
        }
        Ok(Statement::AlterRetentionPolicy(alter))
    }

    fn parse_drop(&mut self, start: usize) -> Result<Statement> {
        let tok = self.next()?;
        match tok.token {
            Token::Keyword("DATABASE") => Ok(Statement::DropDatabase {
                name: self.parse_ident()?,
            }),
            Token::Keyword("MEASUREMENT") => Ok(Statement::DropMeasurement {
                name: self.parse_ident()?,
            }),
            Token::Keyword("SERIES") => Ok(Statement::DropSeries(self.parse_series_filter()?)),
            Token::Keyword("RETENTION") => {
                self.expect_keyword("POLICY")?;
                let name = self.parse_ident()?;
                self.expect_keyword("ON")?;
                let database = self.parse_ident()?;
                Ok(Statement::DropRetentionPolicy { name, database })
            }
            Token::Keyword("USER") => Ok(Statement::User(UserStatement::Drop {
                name: self.parse_ident()?,
            })),
            Token::Keyword("CONTINUOUS") => {
                self.expect_keyword("QUERY")?;
                let name = self.parse_ident()?;
                self.expect_keyword("ON")?;
                let database = self.parse_ident()?;
                Ok(Statement::DropContinuousQuery { name, database })
            }
            Token::Keyword("SUBSCRIPTION") => Err(self.unsupported("DROP SUBSCRIPTION", start)),
            Token::Keyword("SHARD") => Err(self.unsupported("DROP SHARD", start)),
            _ => Err(self.unexpected(
                &tok,
                &[
                    "CONTINUOUS",
                    "DATABASE",
                    "MEASUREMENT",
                    "RETENTION",
                    "SERIES",
                    "SHARD",
                    "SUBSCRIPTION",
                    "USER",
                ],
            )),
        }
    }

    /// `[FROM ...] [WHERE ...]`, at least one (DROP SERIES, DELETE).
    fn parse_series_filter(&mut self) -> Result<SeriesFilter> {
        let from = self.parse_from()?;
        let condition = self.parse_where()?;
        if from.is_empty() && condition.is_none() {
            let tok = self.next()?;
            return Err(self.unexpected(&tok, &["FROM", "WHERE"]));
        }
        Ok(SeriesFilter { from, condition })
    }
}

const SHOW_EXPECTED: &[&str] = &[
    "CONTINUOUS",
    "DATABASES",
    "DIAGNOSTICS",
    "FIELD",
    "GRANTS",
    "MEASUREMENT",
    "MEASUREMENTS",
    "QUERIES",
    "RETENTION",
    "SERIES",
    "SHARD",
    "SHARDS",
    "STATS",
    "SUBSCRIPTIONS",
    "TAG",
    "USERS",
];
