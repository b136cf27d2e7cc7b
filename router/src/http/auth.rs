//! Credentials: `Authorization: Token|Bearer|Basic` (Basic through the
//! `base64` crate) or the v1 `p` query parameter, checked in constant time.

use crate::error::{Error, Result};
use axum::http::{header, HeaderMap};
use base64::Engine as _;
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

/// 401 when no credentials were presented, 403 when they are wrong.
pub fn check_token(tokens: &[String], presented: Option<String>) -> Result<()> {
    if tokens.is_empty() {
        return Ok(());
    }
    match presented {
        None => Err(Error::Unauthorized(
            "send `Authorization: Token <token>` (v1 also accepts u/p query or Basic auth)".into(),
        )),
        Some(t)
            if tokens
                .iter()
                .any(|k| constant_time_eq(k.as_bytes(), t.as_bytes())) =>
        {
            Ok(())
        }
        Some(_) => Err(Error::Forbidden(
            "the token is not valid for this router".into(),
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    use axum::http::{HeaderValue, StatusCode};

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

    #[test]
    fn missing_token_is_401_wrong_token_is_403() {
        let tokens = vec!["t1".to_string()];
        assert!(check_token(&[], None).is_ok());
        assert_eq!(
            check_token(&tokens, None).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            check_token(&tokens, Some("nope".into()))
                .unwrap_err()
                .status(),
            StatusCode::FORBIDDEN
        );
        assert!(check_token(&tokens, Some("t1".into())).is_ok());
    }
}
