//! shardhouse-operator
