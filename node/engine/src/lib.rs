//! shardhouse-engine
