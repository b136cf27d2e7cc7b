//! The read path: InfluxQL statements ([`influx`], `/query`) and SQL
//! ([`sql`], `/api/v1/sql`), each planned onto the shards, run there
//! through `cluster::read` and merged here.

pub mod influx;
pub mod sql;
