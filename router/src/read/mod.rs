//! The read path: InfluxQL statements ([`influx`], `/query`), SQL
//! ([`sql`], `/api/v1/sql`) and PromQL's samples ([`promql`]), each planned onto the shards, run there
//! through `cluster::read` and merged here.

pub mod influx;
pub mod promql;
pub mod sql;
