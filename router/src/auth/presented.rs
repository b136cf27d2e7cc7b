//! The token a request presents: `Authorization: Token|Bearer|Basic`
//! (Basic through the `base64` crate) or the v1 `p` query parameter over
//! HTTP, `authorization` metadata over gRPC. [`super::Authorizer`] checks
//! it in constant time against the tokens and roles. A user name beside
//! the password (Basic `user:password`, v1 `u` and `p`) travels with it
//! ([`super::users::user_credential`]) to be checked against the users.

use axum::http::{header, HeaderMap};
use base64::Engine as _;
use std::collections::HashMap;

/// Token from `Authorization: Token <t>` / `Bearer <t>` / `Basic` (the
/// password, with the user name when there is one), or (v1) the `p` query
/// parameter (with `u`).
pub fn presented_token(
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
            return text.split_once(':').map(|(u, p)| with_user(u, p));
        }
        return Some(String::new());
    }
    let params = params?;
    let password = params.get("p")?;
    Some(with_user(
        params.get("u").map_or("", String::as_str),
        password,
    ))
}

/// A password alone when no user is named (a token), else both.
fn with_user(user: &str, password: &str) -> String {
    if user.is_empty() {
        password.to_owned()
    } else {
        super::users::user_credential(user, password)
    }
}

/// The token in gRPC `authorization` metadata (`Token`/`Bearer` prefix
/// optional).
pub fn grpc_token(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let v = v.trim();
            v.strip_prefix("Token ")
                .or_else(|| v.strip_prefix("Bearer "))
                .unwrap_or(v)
                .trim()
                .to_owned()
        })
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
            ("Basic dXNlcjpzZWNyZXQ=", Some("\0user\0secret")),
            ("Basic dXNlcjpzZWNyZXQ", Some("\0user\0secret")),
            ("Basic OnNlY3JldA==", Some("secret")),
            ("Basic !!", None),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            assert_eq!(presented_token(&h, None).as_deref(), want, "{v}");
        }
    }

    #[test]
    fn v1_u_and_p_name_a_user() {
        let h = HeaderMap::new();
        let params = |kv: &[(&str, &str)]| -> HashMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let got = |kv: &[(&str, &str)]| presented_token(&h, Some(&params(kv)));
        assert_eq!(
            got(&[("u", "jdoe"), ("p", "pw")]).as_deref(),
            Some("\0jdoe\0pw")
        );
        assert_eq!(got(&[("p", "tok")]).as_deref(), Some("tok"));
        assert_eq!(got(&[("u", "jdoe")]), None);
    }
}
