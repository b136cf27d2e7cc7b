//! shardhouse-wal
