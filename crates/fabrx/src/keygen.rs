//! `fabrx keygen`: writes a node's signing key to a key file (mode 0600) and prints its
//! public key as `<scheme> <hex>`, one line, so that a peer-keys file is built by
//! appending (`fabrx keygen --out n0.key >> peers.txt`). See `crypto::keyfile`.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `fabrx keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The key file to create (an existing file is never overwritten).
    #[arg(long)]
    out: PathBuf,
    /// Signature scheme: ed25519, ecdsa-p256 or bls12-381.
    #[arg(long, default_value = "ed25519")]
    scheme: crypto::Scheme,
    /// Derive the key from this seed instead of the OS's random source: reproducible
    /// keys for tests and demos only (anyone who knows the seed has the key).
    #[arg(long)]
    seed: Option<String>,
}

/// Writes the key file and prints the public key.
pub fn run(args: KeygenArgs) -> anyhow::Result<()> {
    let key = match &args.seed {
        Some(seed) => crypto::derive_signing_key(args.scheme, seed),
        None => crypto::SigningKey::generate(args.scheme, &mut rand::rngs::OsRng),
    };
    crypto::write_key_file(&args.out, &key).with_context(|| format!("writing {}", args.out.display()))?;
    println!("{} {}", key.scheme().name(), key.public_key().to_hex());
    Ok(())
}
