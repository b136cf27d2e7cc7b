//! shardhouse-node
