//! HTTP/gRPC behaviour of an in-process router against in-process FAKE
//! node gRPC servers (the node's Write/Query API, scripted per test).
//!
//! The fake node and the harness are in `fake`; the tests are grouped by
//! topic: `write` (status codes of the write path), `coalesce` (shared node
//! writes), `formats` (limits and the other write formats), `names`
//! (unstorable input, issue 12), `endpoints` (ping, health, ready, SQL)
//! and `reads` (how a shard that cannot answer a read is answered).

#[path = "http_fake_node/coalesce.rs"]
mod coalesce;
#[path = "http_fake_node/endpoints.rs"]
mod endpoints;
#[path = "http_fake_node/fake.rs"]
mod fake;
#[path = "http_fake_node/formats.rs"]
mod formats;
#[path = "http_fake_node/names.rs"]
mod names;
#[path = "http_fake_node/reads.rs"]
mod reads;
#[path = "http_fake_node/write.rs"]
mod write;
