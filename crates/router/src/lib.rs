//! Arma router: validates client requests and forwards them to the batcher of their shard (not yet implemented).
