//! Request bodies: `Content-Encoding` checks, size limits, gunzip.

use crate::error::{Error, Result};
use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use shardhouse_common::names::excerpt;
use std::io::Read;

/// The body's `Content-Encoding`, lower case, if it is one of `allowed`
/// (absent counts as `identity`); any other is 415 naming it.
pub(crate) fn content_encoding(
    headers: &HeaderMap,
    allowed: &[&'static str],
) -> Result<&'static str> {
    let mut values = headers.get_all(header::CONTENT_ENCODING).iter();
    let (Some(v), None) = (values.next(), values.next()) else {
        if headers.contains_key(header::CONTENT_ENCODING) {
            return Err(Error::UnsupportedMediaType(
                "send one Content-Encoding header".into(),
            ));
        }
        return Ok("identity");
    };
    let text = String::from_utf8_lossy(v.as_bytes());
    let name = text.trim();
    let name = if name.eq_ignore_ascii_case("x-gzip") {
        "gzip"
    } else {
        name
    };
    allowed
        .iter()
        .find(|a| a.eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| {
            Error::UnsupportedMediaType(format!(
                "Content-Encoding {:?} is not supported here; send {}",
                excerpt(name.as_bytes()),
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        })
}

/// Reads the body up to `limit` bytes (413 beyond), then gunzips it when
/// `Content-Encoding: gzip` (decompressed size bounded by the same limit).
/// Encodings other than gzip and identity are 415.
pub(crate) async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes> {
    let encoding = content_encoding(headers, &["gzip", "identity"])?;
    let raw = read_raw_body(headers, body, limit).await?;
    if encoding != "gzip" {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 4);
    flate2::read::MultiGzDecoder::new(&raw[..])
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::BadRequest(format!("body is not valid gzip: {e}")))?;
    if out.len() > limit {
        return Err(Error::BodyTooLarge { limit });
    }
    Ok(Bytes::from(out))
}

/// Reads the body as sent, up to `limit` bytes (413 beyond).
pub(crate) async fn read_raw_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(Error::BodyTooLarge { limit });
        }
    }
    let raw = Limited::new(body, limit)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                Error::BodyTooLarge { limit }
            } else {
                Error::BadRequest(format!("reading the request body failed: {e}"))
            }
        })?
        .to_bytes();
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    #[test]
    fn content_encodings_other_than_gzip_and_identity_are_415() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(v));
            h
        };
        let allowed = &["gzip", "identity"];
        assert_eq!(
            content_encoding(&HeaderMap::new(), allowed).unwrap(),
            "identity"
        );
        assert_eq!(content_encoding(&with("GZIP"), allowed).unwrap(), "gzip");
        assert_eq!(content_encoding(&with("x-gzip"), allowed).unwrap(), "gzip");
        assert_eq!(
            content_encoding(&with("identity"), allowed).unwrap(),
            "identity"
        );
        for v in ["br", "deflate", "zstd", "gzip, br"] {
            let e = content_encoding(&with(v), allowed).unwrap_err();
            assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert!(e.to_string().contains(v), "{e}");
        }
    }
}
