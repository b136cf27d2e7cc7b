//! Sending one prepared request to the server under test.

use crate::encode::{Body, Prepared};
use crate::{Error, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use shardhouse_common::ingest_proto::{ingest_client::IngestClient, WriteRequest};
use std::time::Duration;
use tonic::transport::Channel;

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx / gRPC OK: the points are acknowledged.
    Acked,
    /// Answered with an error status; the label names it (`429`, `grpc_unavailable`).
    Rejected(String),
    /// No answer within the request timeout.
    Timeout,
    /// Connection refused/reset and the like.
    Transport,
}

impl Outcome {
    pub fn error_label(&self) -> Option<String> {
        match self {
            Outcome::Acked => None,
            Outcome::Rejected(s) => Some(s.clone()),
            Outcome::Timeout => Some("timeout".into()),
            Outcome::Transport => Some("conn_error".into()),
        }
    }
}

#[derive(Clone)]
pub struct Target {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
    grpc: Option<IngestClient<Channel>>,
    timeout: Duration,
    auth: Option<String>,
}

#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// `http://host:port` of the HTTP API.
    pub url: String,
    /// `http://host:port` of the gRPC API, when gRPC protocols are used.
    pub grpc_url: Option<String>,
    pub timeout: Duration,
    pub auth_token: Option<String>,
    /// Connections kept per host: at least the number of requests in flight.
    pub max_connections: usize,
}

impl Target {
    pub async fn connect(opts: &TargetOptions) -> Result<Target> {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        conn.set_connect_timeout(Some(Duration::from_secs(2)));
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(opts.max_connections)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(conn);
        let grpc = match &opts.grpc_url {
            Some(u) => {
                let ch = Channel::from_shared(u.clone())
                    .map_err(|e| Error::InvalidArgument(format!("grpc url {u}: {e}")))?
                    .connect_timeout(Duration::from_secs(2))
                    .tcp_nodelay(true)
                    // A lazy channel reconnects by itself after a router restart.
                    .connect_lazy();
                Some(IngestClient::new(ch).max_decoding_message_size(64 << 20))
            }
            None => None,
        };
        Ok(Target {
            base: opts.url.trim_end_matches('/').to_string(),
            http,
            grpc,
            timeout: opts.timeout,
            auth: opts.auth_token.clone(),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub async fn send(&self, req: &Prepared) -> Outcome {
        match tokio::time::timeout(self.timeout, self.send_inner(req)).await {
            Ok(o) => o,
            Err(_) => Outcome::Timeout,
        }
    }

    async fn send_inner(&self, req: &Prepared) -> Outcome {
        match &req.body {
            Body::Http {
                path,
                content_type,
                content_encoding,
                body,
            } => {
                let mut b = http::Request::post(format!("{}{}", self.base, path))
                    .header(http::header::CONTENT_TYPE, *content_type);
                if let Some(enc) = content_encoding {
                    b = b.header(http::header::CONTENT_ENCODING, *enc);
                    if *enc == "snappy" {
                        b = b.header("X-Prometheus-Remote-Write-Version", "0.1.0");
                    }
                }
                if let Some(t) = &self.auth {
                    b = b.header(http::header::AUTHORIZATION, format!("Token {t}"));
                }
                let Ok(r) = b.body(Full::new(body.clone())) else {
                    return Outcome::Rejected("bad_request_built".into());
                };
                match self.http.request(r).await {
                    Ok(resp) => {
                        let status = resp.status();
                        // Drain the body so the connection goes back to the pool.
                        let _ = resp.into_body().collect().await;
                        if status.is_success() {
                            Outcome::Acked
                        } else {
                            Outcome::Rejected(status.as_u16().to_string())
                        }
                    }
                    Err(_) => Outcome::Transport,
                }
            }
            Body::Grpc(msg) => match self.grpc_write(msg.clone()).await {
                Ok(()) => Outcome::Acked,
                Err(o) => o,
            },
        }
    }

    fn grpc_client(&self) -> std::result::Result<IngestClient<Channel>, Outcome> {
        self.grpc
            .clone()
            .ok_or_else(|| Outcome::Rejected("no_grpc_url".into()))
    }

    fn grpc_req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(t) = &self.auth {
            if let Ok(v) = format!("Token {t}").parse() {
                r.metadata_mut().insert("authorization", v);
            }
        }
        r
    }

    async fn grpc_write(&self, msg: WriteRequest) -> std::result::Result<(), Outcome> {
        let mut c = self.grpc_client()?;
        c.write(self.grpc_req(msg))
            .await
            .map(|_| ())
            .map_err(grpc_outcome)
    }

    /// Sends `msgs` on one client stream; one answer for all of them.
    pub async fn grpc_write_stream(&self, msgs: Vec<WriteRequest>) -> Outcome {
        let Ok(mut c) = self.grpc_client() else {
            return Outcome::Rejected("no_grpc_url".into());
        };
        let fut = c.write_stream(self.grpc_req(futures::stream::iter(msgs)));
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(_)) => Outcome::Acked,
            Ok(Err(s)) => grpc_outcome(s),
            Err(_) => Outcome::Timeout,
        }
    }

    /// GET `path` (with query) and return (status, body).
    pub async fn get(&self, path_and_query: &str) -> Result<(u16, Bytes)> {
        let url = format!("{}{}", self.base, path_and_query);
        let mut b = http::Request::get(&url);
        if let Some(t) = &self.auth {
            b = b.header(http::header::AUTHORIZATION, format!("Token {t}"));
        }
        let req = b
            .body(Full::new(Bytes::new()))
            .map_err(|e| Error::InvalidArgument(format!("{url}: {e}")))?;
        let resp = tokio::time::timeout(self.timeout, self.http.request(req))
            .await
            .map_err(|_| Error::Unreachable {
                url: url.clone(),
                reason: "timed out".into(),
            })?
            .map_err(|e| Error::Unreachable {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| Error::Unreachable {
                url,
                reason: e.to_string(),
            })?
            .to_bytes();
        Ok((status, body))
    }
}

fn grpc_outcome(s: tonic::Status) -> Outcome {
    match s.code() {
        tonic::Code::Unavailable if s.message().contains("transport") => Outcome::Transport,
        tonic::Code::DeadlineExceeded => Outcome::Timeout,
        c => Outcome::Rejected(format!("grpc_{}", format!("{c:?}").to_lowercase())),
    }
}
