//! Arma assembler: joins ordered headers with batches into blocks (not yet implemented).
