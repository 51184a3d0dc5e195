//! Key files: one signing key per node, written by `fabrx keygen` (or by network
//! generation) and read by the node at start. Production nodes load keys from files;
//! seed-derived keys ([`crate::derive_signing_key`]) are for tests and demos.
//!
//! A key file is text, four lines:
//!
//! ```text
//! fabrx-key v1
//! scheme ed25519
//! secret <64 hex digits: SigningKey::to_bytes>
//! public <hex: PublicKey::to_bytes>
//! ```
//!
//! It is created with mode 0600 and refused when group or others may read it; the public
//! line must match the secret (a file edited by hand or cut short is refused).

use crate::{CryptoError, PublicKey, Result, Scheme, SigningKey};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

const HEADER: &str = "fabrx-key v1";

fn err(path: &Path, detail: impl Into<String>) -> CryptoError {
    CryptoError::KeyFile {
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

/// Writes `key` to a new file at `path` (mode 0600); refuses to overwrite one.
pub fn write_key_file(path: &Path, key: &SigningKey) -> Result<()> {
    let text = format!(
        "{HEADER}\nscheme {}\nsecret {}\npublic {}\n",
        key.scheme().name(),
        hex::encode(key.to_bytes()),
        key.public_key().to_hex()
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| err(path, e.to_string()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| err(path, e.to_string()))
}

/// Reads a key file written by [`write_key_file`].
pub fn read_key_file(path: &Path) -> Result<SigningKey> {
    let meta = std::fs::metadata(path).map_err(|e| err(path, e.to_string()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(err(path, "readable by group or others; chmod 600 it"));
    }
    if meta.len() > 4096 {
        return Err(err(path, "larger than a key file"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
    parse_key_file(&text).map_err(|detail| err(path, detail))
}

/// Parses the text of a key file.
fn parse_key_file(text: &str) -> std::result::Result<SigningKey, String> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("first line is not {HEADER:?}"));
    }
    let mut field = |name: &str| -> std::result::Result<String, String> {
        let line = lines.next().ok_or_else(|| format!("missing line {name:?}"))?;
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| format!("expected {name:?}, got {line:?}"))
    };
    let scheme: Scheme = field("scheme")?.parse().map_err(|e: CryptoError| e.to_string())?;
    let secret = hex::decode(field("secret")?).map_err(|e| format!("secret: {e}"))?;
    let public = field("public")?;
    let key = SigningKey::from_bytes(scheme, &secret).map_err(|e| e.to_string())?;
    let stated = PublicKey::from_hex(scheme, &public).map_err(|e| e.to_string())?;
    if stated != key.public_key() {
        return Err("the public key does not match the secret".into());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn round_trip_for_every_scheme_and_refusals() {
        let dir = std::env::temp_dir().join(format!("fabrx-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for scheme in Scheme::ALL {
            let path = dir.join(format!("{}.key", scheme.name()));
            let _ = std::fs::remove_file(&path);
            let key = SigningKey::generate(scheme, &mut rng);
            write_key_file(&path, &key).unwrap();
            let back = read_key_file(&path).unwrap();
            assert_eq!(back.public_key(), key.public_key(), "{scheme:?}");
            // Never overwritten.
            assert!(write_key_file(&path, &key).is_err());
            // Readable by others: refused.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(read_key_file(&path).is_err());
        }
        let good = SigningKey::generate(Scheme::Ed25519, &mut rng);
        let other = SigningKey::generate(Scheme::Ed25519, &mut rng);
        let text = format!(
            "{HEADER}\nscheme ed25519\nsecret {}\npublic {}\n",
            hex::encode(good.to_bytes()),
            other.public_key().to_hex()
        );
        assert!(parse_key_file(&text).unwrap_err().contains("does not match"));
        assert!(parse_key_file("fabrx-key v1\nscheme ed25519\n").is_err());
        assert!(parse_key_file("something else").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
