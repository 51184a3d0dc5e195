//! Arma consenter: orders batch attestations with the BFT engine (not yet implemented).
