//! gRPC ingest (`shardhouse.ingest.v1.Ingest`): unary and client-streaming
//! writes of protobuf rows, through the same pipeline as HTTP.

use crate::auth::grpc_token;
use crate::state::Router;
use crate::write::admit::{admit_write, charge_write};
use crate::write::parse;
use shardhouse_common::ingest_proto::ingest_server::{Ingest, IngestServer};
use shardhouse_common::ingest_proto::{WriteRequest, WriteResponse};
use shardhouse_common::lineproto::Precision;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

pub struct IngestService {
    router: Arc<Router>,
}

pub fn server(router: Arc<Router>) -> IngestServer<IngestService> {
    let limit = router.options.max_body_bytes;
    IngestServer::new(IngestService { router }).max_decoding_message_size(limit)
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
        let access = admit_write(&self.router.auth, token, db)?;
        crate::metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(size as u64);
        let res = self
            .router
            .write(
                endpoint,
                db,
                Some(req.retention_policy.as_str()),
                size,
                Precision::Nanosecond,
                |b| parse::add_grpc_points(b, &req),
            )
            .await;
        charge_write(&self.router.auth, access, &res);
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
        let token = grpc_token(request.metadata());
        let req = request.into_inner();
        let size = prost::Message::encoded_len(&req);
        let points_written = self.write_one(req, size, token.as_deref()).await?;
        Ok(Response::new(WriteResponse { points_written }))
    }

    async fn write_stream(
        &self,
        request: Request<Streaming<WriteRequest>>,
    ) -> Result<Response<WriteResponse>, Status> {
        let token = grpc_token(request.metadata());
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
