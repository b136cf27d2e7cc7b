//! The Prometheus HTTP API's pure parts: request parameters in, JSON
//! answers out, shaped exactly as Prometheus 2.x shapes them. The router
//! does the I/O around these.

mod params;
mod response;

pub use params::{
    match_sets, parse_duration, parse_time, query_params, InstantRequest, Params, RangeRequest,
    MAX_TIME_MS, MIN_TIME_MS,
};
pub use response::{
    buildinfo, error_body, format_float, format_query, format_timestamp, labels_body, series_body,
    status_of, success_body, BUILD_VERSION,
};
