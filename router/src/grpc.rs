//! gRPC ingest (`shardhouse.ingest.v1.Ingest`): unary and client-streaming
//! writes of protobuf rows, through the same pipeline as HTTP.

use crate::batch::RejectReason;
use crate::ingest::Router;
use shardhouse_common::ingest_proto::ingest_server::{Ingest, IngestServer};
use shardhouse_common::ingest_proto::{field, WriteRequest, WriteResponse};
use shardhouse_common::lineproto::{FieldValue, Precision};
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

pub struct IngestService {
    router: Arc<Router>,
}

pub fn server(router: Arc<Router>) -> IngestServer<IngestService> {
    let limit = router.options.max_body_bytes;
    IngestServer::new(IngestService { router }).max_decoding_message_size(limit)
}

/// The token in the `authorization` metadata (`Token`/`Bearer` prefix
/// optional); checked per message, as each names its database.
fn presented<T>(req: &Request<T>) -> Option<String> {
    req.metadata()
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

impl IngestService {
    async fn write_one(
        &self,
        req: WriteRequest,
        size: usize,
        token: Option<&str>,
    ) -> Result<u64, Status> {
        let endpoint = "grpc";
        let db = if req.database.is_empty() {
            "default"
        } else {
            req.database.as_str()
        };
        let access = crate::http::admit_write(&self.router, token, db)?;
        crate::metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(size as u64);
        let res = self
            .router
            .write(endpoint, db, size, Precision::Nanosecond, |b| {
                let mut tags: Vec<(&str, &str)> = Vec::new();
                let mut fields: Vec<(&[u8], FieldValue<'_>)> = Vec::new();
                for (i, p) in req.points.iter().enumerate() {
                    tags.clear();
                    tags.extend(p.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    fields.clear();
                    let mut missing = None;
                    for f in &p.fields {
                        let v = match &f.value {
                            Some(field::Value::FloatValue(x)) => FieldValue::Float(*x),
                            Some(field::Value::IntValue(x)) => FieldValue::Integer(*x),
                            Some(field::Value::UintValue(x)) => FieldValue::Unsigned(*x),
                            Some(field::Value::StringValue(x)) => FieldValue::String(x.as_str()),
                            Some(field::Value::BoolValue(x)) => FieldValue::Boolean(*x),
                            None => {
                                missing = Some(f.key.clone());
                                break;
                            }
                        };
                        fields.push((f.key.as_bytes(), v));
                    }
                    if let Some(k) = missing {
                        b.reject(
                            i,
                            RejectReason::BadPoint,
                            format!(
                                "field {:?} has no value",
                                shardhouse_common::names::excerpt(k.as_bytes())
                            ),
                        );
                        continue;
                    }
                    if let Err((reason, msg)) = b.add_point(
                        &p.measurement,
                        &tags,
                        fields.iter().copied(),
                        p.timestamp_ns,
                    ) {
                        b.reject(i, reason, msg);
                    }
                }
            })
            .await;
        crate::http::charge_write(&self.router, access, &res);
        let code = |s: &Status| match s.code() {
            tonic::Code::Ok => "200",
            tonic::Code::InvalidArgument => "400",
            tonic::Code::ResourceExhausted => "429",
            tonic::Code::Unauthenticated => "401",
            tonic::Code::PermissionDenied => "403",
            tonic::Code::Unavailable => "503",
            _ => "500",
        };
        let out = match res {
            Ok(o) => match o.partial_error("point") {
                None => Ok(o.summary.points as u64),
                Some(e) => Err(Status::from(e)),
            },
            Err(e) => {
                if let Some(reason) = e.reject_reason() {
                    crate::metrics::REJECTED.with_label_values(&[reason]).inc();
                }
                Err(Status::from(e))
            }
        };
        let status = match &out {
            Ok(_) => "200",
            Err(s) => code(s),
        };
        crate::metrics::REQUESTS
            .with_label_values(&[endpoint, status])
            .inc();
        out
    }
}

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn write(
        &self,
        request: Request<WriteRequest>,
    ) -> Result<Response<WriteResponse>, Status> {
        let token = presented(&request);
        let req = request.into_inner();
        let size = prost::Message::encoded_len(&req);
        let points_written = self.write_one(req, size, token.as_deref()).await?;
        Ok(Response::new(WriteResponse { points_written }))
    }

    async fn write_stream(
        &self,
        request: Request<Streaming<WriteRequest>>,
    ) -> Result<Response<WriteResponse>, Status> {
        let token = presented(&request);
        // Refuse a bad token before reading the stream.
        self.router
            .auth
            .authenticate(token.as_deref())
            .map_err(Status::from)?;
        let mut stream = request.into_inner();
        let mut total = 0u64;
        while let Some(msg) = stream.message().await? {
            let size = prost::Message::encoded_len(&msg);
            // On error, points of earlier messages stay written (documented).
            total += self.write_one(msg, size, token.as_deref()).await?;
        }
        Ok(Response::new(WriteResponse {
            points_written: total,
        }))
    }
}
