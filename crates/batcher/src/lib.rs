//! Arma batcher: cuts batches per shard and emits batch attestation fragments (not yet implemented).
