//! Credentials: `Authorization: Token|Bearer|Basic` (Basic through the
//! `base64` crate) or the v1 `p` query parameter, checked in constant time
//! against the tokens and roles of `crate::auth`.

use crate::auth::{statement, Access, Role};
use crate::error::Result;
use crate::ingest::{Router, WriteOutcome};
use axum::http::{header, HeaderMap};
use base64::Engine as _;
use shardhouse_influxql::Statement;
use std::collections::HashMap;

/// Token from `Authorization: Token <t>` / `Bearer <t>` / `Basic` (the
/// password), or (v1) the `p` query parameter.
pub(crate) fn presented_token(
    headers: &HeaderMap,
    params: Option<&HashMap<String, String>>,
) -> Option<String> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if let Some(t) = v
            .strip_prefix("Token ")
            .or_else(|| v.strip_prefix("Bearer "))
        {
            return Some(t.trim().to_owned());
        }
        if let Some(b) = v.strip_prefix("Basic ") {
            let decoded = BASE64.decode(b.trim()).ok()?;
            let text = String::from_utf8(decoded).ok()?;
            return text.split_once(':').map(|(_, p)| p.to_owned());
        }
        return Some(String::new());
    }
    params.and_then(|p| p.get("p").cloned())
}

/// 401 for a missing or unknown token, 403 naming the role or database the
/// token lacks (`crate::auth` decides; this only adapts the request).
pub(crate) fn authorize(
    r: &Router,
    presented: Option<String>,
    need: Role,
    databases: &[&str],
) -> Result<Access> {
    r.auth.authorize(presented.as_deref(), need, databases)
}

/// Every write endpoint: the `write` role on `db`, then the token's write
/// rate limit (429 with Retry-After).
pub(crate) fn admit_write(r: &Router, presented: Option<&str>, db: &str) -> Result<Access> {
    let access = r.auth.authorize(presented, Role::Write, &[db])?;
    r.auth.admit_write(&access)?;
    Ok(access)
}

/// Charges the points a write stored to its token's point bucket.
pub(crate) fn charge_write(r: &Router, access: Access, res: &Result<WriteOutcome>) {
    if let Ok(outcome) = res {
        r.auth.charge_points(&access, outcome.summary.points as u64);
    }
}

/// `/query` once parsed: the role the statements need (admin for any
/// create, drop or delete) on the request's database and every database
/// the statements name.
pub(crate) fn permit_statements(
    r: &Router,
    who: &Access,
    statements: &[Statement],
    database: &str,
) -> Result<()> {
    let mut databases: Vec<&str> = statements
        .iter()
        .flat_map(statement::named_databases)
        .collect();
    if !database.is_empty() {
        databases.push(database);
    }
    r.auth
        .permit(who, statement::required_role_all(statements), &databases)
}

/// Base64 of Basic credentials: the standard alphabet, padding optional.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn basic_auth_decode() {
        let mut h = HeaderMap::new();
        for (v, want) in [
            ("Basic dXNlcjpzZWNyZXQ=", Some("secret")),
            ("Basic dXNlcjpzZWNyZXQ", Some("secret")),
            ("Basic !!", None),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            assert_eq!(presented_token(&h, None).as_deref(), want, "{v}");
        }
    }
}
