//! The HTTP doors, thin handlers only: read the request (`body`, `params`,
//! the token), call the write path (`write`, via `state::Router::write`),
//! the read path (`read`) or the cluster (`cluster::storage`), and answer
//! (`answer`, the one place error answers are built). One module per API:
//! [`v1`] (InfluxDB 1.x `/write` and `/query`), [`v2`] (`/api/v2/write`),
//! [`prom`] (Prometheus), [`otlp`] (OpenTelemetry metrics), [`msgpack`],
//! [`sql`] (`/api/v1/sql`), [`admin`] (databases, retention, deletes) and
//! [`health`]. `crate::routes` maps paths to them.

pub(crate) mod admin;
mod answer;
mod body;
pub(crate) mod health;
pub(crate) mod lenient;
pub(crate) mod msgpack;
pub(crate) mod otlp;
mod params;
pub(crate) mod prom;
pub(crate) mod prom_chunks;
pub(crate) mod prom_read;
pub(crate) mod promql;
pub(crate) mod sql;
pub(crate) mod v1;
pub(crate) mod v2;

pub use answer::{
    bounded, error_header, json_error, MAX_ERROR_HEADER_BYTES, MAX_ERROR_MESSAGE_BYTES,
};
pub(crate) use answer::{error_response, write_response};
pub(crate) use body::{content_encoding, read_body, read_raw_body};
pub use health::{go_duration, health_body};
pub use params::{parse_params, Params};
