//! shardhouse-loadtest
