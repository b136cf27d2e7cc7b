//! Users and privileges: `CREATE USER`, `DROP USER`, `SHOW USERS`,
//! `SHOW GRANTS FOR`, `GRANT`, `REVOKE` and `SET PASSWORD`, parsed as
//! InfluxDB 1.8 parses them (same token order, same "expected" lists, so
//! the error texts and positions clients read are the same).

use crate::ast::{Privilege, UserStatement};
use crate::error::Result;
use crate::lexer::Token;
use crate::parser::Parser;

impl Parser<'_> {
    /// After `CREATE USER`.
    pub(crate) fn parse_create_user(&mut self) -> Result<UserStatement> {
        let name = self.parse_ident()?;
        self.expect_keyword("WITH")?;
        self.expect_keyword("PASSWORD")?;
        let password = self.parse_string()?;
        // Only admin can be given at creation, InfluxDB's one option.
        let admin = if self.eat_keyword("WITH")? {
            self.expect_keyword("ALL")?;
            self.expect_keyword("PRIVILEGES")?;
            true
        } else {
            false
        };
        Ok(UserStatement::Create {
            name,
            password,
            admin,
        })
    }

    /// After `SET`: `PASSWORD FOR name = 'x'`.
    pub(crate) fn parse_set_password(&mut self) -> Result<UserStatement> {
        self.expect_keyword("PASSWORD")?;
        self.expect_keyword("FOR")?;
        let name = self.parse_ident()?;
        self.expect(&Token::Eq, "=")?;
        let password = self.parse_string()?;
        Ok(UserStatement::SetPassword { name, password })
    }

    /// After `SHOW GRANTS`: `FOR name`.
    pub(crate) fn parse_show_grants(&mut self) -> Result<UserStatement> {
        self.expect_keyword("FOR")?;
        Ok(UserStatement::ShowGrants {
            name: self.parse_ident()?,
        })
    }

    /// After `GRANT` (`revoke` false, `TO`) or `REVOKE` (`FROM`).
    pub(crate) fn parse_grant_or_revoke(&mut self, revoke: bool) -> Result<UserStatement> {
        let privilege = self.parse_privilege()?;
        let to = if revoke { "FROM" } else { "TO" };
        let tok = self.next()?;
        let database = match tok.token {
            Token::Keyword("ON") => {
                let db = self.parse_ident()?;
                self.expect_keyword(to)?;
                Some(db)
            }
            // Only ALL may be given without a database: admin.
            Token::Keyword(k) if k == to && privilege == Privilege::All => None,
            _ if privilege == Privilege::All => return Err(self.unexpected(&tok, &["ON", to])),
            _ => return Err(self.unexpected(&tok, &["ON"])),
        };
        let user = self.parse_ident()?;
        Ok(if revoke {
            UserStatement::Revoke {
                privilege,
                database,
                user,
            }
        } else {
            UserStatement::Grant {
                privilege,
                database,
                user,
            }
        })
    }

    fn parse_privilege(&mut self) -> Result<Privilege> {
        let tok = self.next()?;
        match tok.token {
            Token::Keyword("READ") => Ok(Privilege::Read),
            Token::Keyword("WRITE") => Ok(Privilege::Write),
            Token::Keyword("ALL") => {
                self.eat_keyword("PRIVILEGES")?;
                Ok(Privilege::All)
            }
            _ => Err(self.unexpected(&tok, &["READ", "WRITE", "ALL [PRIVILEGES]"])),
        }
    }

    /// A single-quoted string (a password).
    fn parse_string(&mut self) -> Result<String> {
        let tok = self.next()?;
        match tok.token {
            Token::Str(s) => Ok(s),
            _ => Err(self.unexpected(&tok, &["string"])),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, parse_statement, Statement};

    use super::*;

    fn user(q: &str) -> UserStatement {
        match parse_statement(q).unwrap() {
            Statement::User(u) => u,
            other => panic!("{q}: {other:?}"),
        }
    }

    fn error(q: &str) -> String {
        parse(q).unwrap_err().to_string()
    }

    #[test]
    fn statements_parse_and_print_back() {
        for q in [
            "CREATE USER jdoe WITH PASSWORD '1337'",
            "CREATE USER jdoe WITH PASSWORD 'it\\'s' WITH ALL PRIVILEGES",
            "DROP USER jdoe",
            "SET PASSWORD FOR jdoe = 'x'",
            "SHOW USERS",
            "SHOW GRANTS FOR jdoe",
            "GRANT ALL PRIVILEGES TO jdoe",
            "GRANT READ ON db0 TO jdoe",
            "GRANT ALL PRIVILEGES ON db0 TO jdoe",
            "REVOKE ALL PRIVILEGES FROM jdoe",
            "REVOKE WRITE ON db0 FROM jdoe",
        ] {
            let parsed = parse_statement(q).unwrap();
            assert_eq!(parse_statement(&parsed.to_string()).unwrap(), parsed, "{q}");
        }
        assert_eq!(
            user("GRANT ALL TO jdoe"),
            UserStatement::Grant {
                privilege: Privilege::All,
                database: None,
                user: "jdoe".into()
            }
        );
        assert_eq!(
            user("create user \"a b\" with password 'p' with all privileges"),
            UserStatement::Create {
                name: "a b".into(),
                password: "p".into(),
                admin: true
            }
        );
    }

    /// The suite's (TestServer_UserCommands) texts and positions.
    #[test]
    fn errors_read_as_influxdb() {
        assert_eq!(
            error("CREATE USER 0xBAD WITH PASSWORD pwd1337"),
            "found 0xBAD, expected identifier at line 1, char 13"
        );
        assert_eq!(
            error("CREATE USER WITH PASSWORD pwd1337"),
            "found WITH, expected identifier at line 1, char 13"
        );
        assert_eq!(
            error("CREATE USER jdoe"),
            "found EOF, expected WITH at line 1, char 18"
        );
        assert_eq!(
            error("CREATE USER jdoe WITH PASSWORD pwd"),
            "found pwd, expected string at line 1, char 32"
        );
        assert_eq!(
            error("GRANT READ TO jdoe"),
            "found TO, expected ON at line 1, char 12"
        );
        assert_eq!(
            error("GRANT ALL FROM jdoe"),
            "found FROM, expected ON, TO at line 1, char 11"
        );
        assert_eq!(
            error("GRANT jdoe"),
            "found jdoe, expected READ, WRITE, ALL [PRIVILEGES] at line 1, char 7"
        );
    }
}
