//! Shared by the update tests: proofs of the new node keys an update brings in
//! (`update::prove`), made with the keys a test holds.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use crypto::SigningKey;
use netconfig::NetworkConfig;
use netconfig::update::{self, ConfigUpdate};

/// Proves in `u` every new node key it brings in that one of `keys` holds. Nothing when
/// the update is refused before its keys are looked at (what a refusal test checks).
pub fn prove_with(u: &mut ConfigUpdate, current: &NetworkConfig, keys: &[SigningKey]) {
    let Ok(next) = update::validate_unsigned(current, u) else {
        return;
    };
    let needed = update::new_node_keys(current, &next);
    for key in keys {
        if needed.iter().any(|(_, k)| *k == key.public_key()) {
            update::prove(u, key);
        }
    }
}

/// Every key file (`*.key`) under `dir`, read.
pub fn keys_under(dir: &Path) -> Vec<SigningKey> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "key")
                && let Ok(key) = crypto::read_key_file(&path)
            {
                out.push(key);
            }
        }
    }
    out
}
