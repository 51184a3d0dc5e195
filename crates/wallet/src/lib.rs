//! Wallet for the UTXO token (not yet implemented).
