//! Purpose-named signing and verification: Ed25519, ECDSA P-256, BLS12-381 and t-of-n threshold BLS.
