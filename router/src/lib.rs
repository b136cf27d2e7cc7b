//! shardhouse-router
