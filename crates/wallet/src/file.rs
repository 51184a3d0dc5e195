//! The wallet file: JSON, mode 0600, replaced atomically (write a temporary file, fsync,
//! rename, fsync the directory), and held by one command at a time through an exclusive
//! lock on `<file>.lock`.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The format this code writes.
pub const FORMAT: u32 = 1;

/// A token the wallet holds (unspent when last seen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldToken {
    /// Its key in the token namespace.
    pub key: String,
    /// Its type.
    pub token_type: String,
    /// How much.
    pub quantity: u64,
    /// The tx that created it.
    pub tx_id: String,
    /// Who paid it (hex), absent for issued tokens.
    pub sender: Option<String>,
}

/// A payment whose envelope may have reached the network: its inputs are locked until
/// its final status is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingPayment {
    /// The settlement tx id.
    pub tx_id: String,
    /// `issue` or `transfer`.
    pub kind: String,
    /// The payee (hex).
    pub to: String,
    /// How much.
    pub amount: u64,
    /// The type.
    pub token_type: String,
    /// Keys of the tokens it spends (locked).
    pub inputs: Vec<String>,
    /// The endorsed envelope (hex), sent again after a restart until its status is known.
    pub envelope: String,
    /// For a cancellation (`kind` = `cancel`): the pending payment it replaces. It spends
    /// the same inputs back to this wallet, so at most one of the two commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// One line of history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The tx id.
    pub tx_id: String,
    /// `sent`, `received` or `issued` (by this wallet, to someone).
    pub direction: String,
    /// How much.
    pub amount: u64,
    /// The type.
    pub token_type: String,
    /// The other side (hex address; `issuer` for issued tokens received).
    pub counterparty: String,
    /// The final status (`COMMITTED` or the abort's name).
    pub status: String,
    /// The block it was decided in.
    pub block: Option<u64>,
}

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletFile {
    /// Format version.
    pub format: u32,
    /// A name for people.
    pub name: String,
    /// The owner's Ed25519 secret key: hex, or sealed under a passphrase
    /// (`pbkdf2-sha256-chacha20poly1305:…`, see [`seal_key`]).
    pub secret_key: String,
    /// Unspent tokens as last seen.
    pub tokens: Vec<HeldToken>,
    /// Payments whose outcome is not known yet.
    pub pending: Vec<PendingPayment>,
    /// Decided payments, oldest first.
    pub history: Vec<HistoryEntry>,
    /// The secret key (hex) once a sealed one was opened with its passphrase; never
    /// written.
    #[serde(skip)]
    unlocked: Option<String>,
}

/// How a sealed secret key starts.
pub const SEALED_PREFIX: &str = "pbkdf2-sha256-chacha20poly1305:";

/// PBKDF2 iterations of a sealed key.
const SEAL_ITERATIONS: u32 = 600_000;

/// Associated data of a sealed key.
const SEAL_AAD: &[u8] = b"fabrx/wallet-key/v1";

fn seal_cipher(passphrase: &str, salt: &[u8], iterations: u32) -> Result<ring::aead::LessSafeKey> {
    let iterations = std::num::NonZeroU32::new(iterations)
        .ok_or_else(|| Error::Invalid("a sealed key with 0 iterations".into()))?;
    let mut k = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        passphrase.as_bytes(),
        &mut k,
    );
    let unbound = ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &k)
        .map_err(|_| Error::Invalid("sealing key".into()))?;
    Ok(ring::aead::LessSafeKey::new(unbound))
}

/// Seals `secret` under `passphrase`: PBKDF2-HMAC-SHA256 (600,000 iterations, a random
/// 16-byte salt) derives a ChaCha20-Poly1305 key, which encrypts it under a random nonce.
/// Text: `pbkdf2-sha256-chacha20poly1305:<iterations>:<salt>:<nonce>:<ciphertext+tag>`.
pub fn seal_key(secret: &[u8], passphrase: &str) -> Result<String> {
    let salt: [u8; 16] = rand::random();
    let nonce: [u8; 12] = rand::random();
    let cipher = seal_cipher(passphrase, &salt, SEAL_ITERATIONS)?;
    let mut sealed = secret.to_vec();
    cipher
        .seal_in_place_append_tag(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(SEAL_AAD),
            &mut sealed,
        )
        .map_err(|_| Error::Invalid("sealing the key".into()))?;
    Ok(format!(
        "{SEALED_PREFIX}{SEAL_ITERATIONS}:{}:{}:{}",
        hex::encode(salt),
        hex::encode(nonce),
        hex::encode(sealed)
    ))
}

/// Opens a key sealed by [`seal_key`].
pub fn open_key(text: &str, passphrase: &str) -> Result<Vec<u8>> {
    let bad = || Error::Invalid("the sealed wallet key is damaged".into());
    let rest = text.strip_prefix(SEALED_PREFIX).ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let [iterations, salt, nonce, sealed] = parts.as_slice() else {
        return Err(bad());
    };
    let iterations: u32 = iterations.parse().map_err(|_| bad())?;
    if iterations > 100 * SEAL_ITERATIONS {
        return Err(bad());
    }
    let salt = hex::decode(salt).map_err(|_| bad())?;
    let nonce: [u8; 12] = hex::decode(nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(bad)?;
    let mut sealed = hex::decode(sealed).map_err(|_| bad())?;
    let cipher = seal_cipher(passphrase, &salt, iterations)?;
    let plain = cipher
        .open_in_place(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(SEAL_AAD),
            &mut sealed,
        )
        .map_err(|_| Error::Invalid("wrong passphrase for the wallet key".into()))?;
    Ok(plain.to_vec())
}

impl WalletFile {
    /// A new wallet for `key`.
    pub fn new(name: String, key: &crypto::SigningKey) -> WalletFile {
        WalletFile {
            format: FORMAT,
            name,
            secret_key: hex::encode(key.to_bytes()),
            tokens: Vec::new(),
            pending: Vec::new(),
            history: Vec::new(),
            unlocked: None,
        }
    }

    /// Whether the secret key is sealed under a passphrase.
    pub fn is_sealed(&self) -> bool {
        self.secret_key.starts_with(SEALED_PREFIX)
    }

    /// Seals the secret key under `passphrase` (it stays usable in this process).
    pub fn seal(&mut self, passphrase: &str) -> Result<()> {
        if self.is_sealed() {
            return Err(Error::Invalid("the wallet key is sealed already".into()));
        }
        let secret = hex::decode(&self.secret_key).map_err(|e| Error::Invalid(format!("secret key: {e}")))?;
        self.unlocked = Some(self.secret_key.clone());
        self.secret_key = seal_key(&secret, passphrase)?;
        Ok(())
    }

    /// Opens a sealed secret key with `passphrase` for this process.
    pub fn unlock(&mut self, passphrase: &str) -> Result<()> {
        if self.is_sealed() {
            self.unlocked = Some(hex::encode(open_key(&self.secret_key, passphrase)?));
        }
        Ok(())
    }

    /// The owner's key.
    pub fn key(&self) -> Result<crypto::SigningKey> {
        let text = match (&self.unlocked, self.is_sealed()) {
            (Some(k), _) => k,
            (None, true) => {
                return Err(Error::Invalid(
                    "the wallet key is sealed: give its passphrase (`fabrx wallet --passphrase-env VAR …`)"
                        .into(),
                ));
            }
            (None, false) => &self.secret_key,
        };
        let bytes = hex::decode(text).map_err(|e| Error::Invalid(format!("secret key: {e}")))?;
        crypto::SigningKey::from_bytes(crypto::Scheme::Ed25519, &bytes)
            .map_err(|e| Error::Invalid(format!("secret key: {e}")))
    }

    /// The owner's address.
    pub fn address(&self) -> Result<token::Address> {
        address_of(&self.key()?)
    }

    /// Keys locked by pending payments.
    pub fn locked(&self) -> std::collections::HashSet<&str> {
        self.pending
            .iter()
            .flat_map(|p| p.inputs.iter().map(String::as_str))
            .collect()
    }
}

/// The address of an Ed25519 key.
pub fn address_of(key: &crypto::SigningKey) -> Result<token::Address> {
    key.public_key()
        .as_bytes()
        .try_into()
        .map_err(|_| Error::Invalid("the wallet key is not an Ed25519 key".into()))
}

/// An open wallet: its file's content and the lock that makes this command its only user.
#[derive(Debug)]
pub struct Wallet {
    path: PathBuf,
    _lock: File,
    /// The content.
    pub data: WalletFile,
}

fn file_err(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.display().to_string(),
        detail: detail.to_string(),
    }
}

/// `O_NOFOLLOW`.
const fn libc_nofollow() -> i32 {
    libc::O_NOFOLLOW
}

fn lock_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

fn lock(path: &Path) -> Result<File> {
    let lp = lock_path(path);
    // O_NOFOLLOW: a symbolic link planted at the lock's path is refused, not followed (it
    // could point the wallet at a file of the attacker's choosing).
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(&lp)
        .map_err(|e| file_err(&lp, format!("{e} (a lock file must not be a symbolic link)")))?;
    if f.try_lock().is_err() {
        eprintln!("waiting for another wallet command on {}", path.display());
        f.lock().map_err(|e| file_err(&lp, e))?;
    }
    Ok(f)
}

impl Wallet {
    /// Creates a new wallet file (refuses to overwrite one) with a fresh key.
    pub fn create(path: &Path, name: String) -> Result<Wallet> {
        let key = crypto::SigningKey::generate(crypto::Scheme::Ed25519, &mut rand::rngs::OsRng);
        Wallet::create_with_key(path, name, &key)
    }

    /// Creates a new wallet file for `key` (refuses to overwrite one).
    pub fn create_with_key(path: &Path, name: String, key: &crypto::SigningKey) -> Result<Wallet> {
        Wallet::create_with_data(path, WalletFile::new(name, key))
    }

    fn create_with_data(path: &Path, data: WalletFile) -> Result<Wallet> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
        }
        let lock = lock(path)?;
        if path.exists() {
            return Err(file_err(path, "exists already (a wallet is never overwritten)"));
        }
        let w = Wallet {
            path: path.to_path_buf(),
            _lock: lock,
            data,
        };
        w.save()?;
        Ok(w)
    }

    /// Opens and locks an existing wallet file (a sealed key needs [`Wallet::open_with`]).
    pub fn open(path: &Path) -> Result<Wallet> {
        Wallet::open_with(path, None)
    }

    /// Creates a new wallet file whose key is sealed under `passphrase`.
    pub fn create_sealed(path: &Path, name: String, passphrase: &str) -> Result<Wallet> {
        let key = crypto::SigningKey::generate(crypto::Scheme::Ed25519, &mut rand::rngs::OsRng);
        let mut data = WalletFile::new(name, &key);
        data.seal(passphrase)?;
        Wallet::create_with_data(path, data)
    }

    /// Opens and locks an existing wallet file, unsealing its key with `passphrase` when
    /// it is sealed.
    pub fn open_with(path: &Path, passphrase: Option<&str>) -> Result<Wallet> {
        // A wallet that does not exist gets no lock file beside it (a mistyped path would
        // leave one behind).
        std::fs::symlink_metadata(path).map_err(|e| file_err(path, e))?;
        let lock = lock(path)?;
        let meta = std::fs::metadata(path).map_err(|e| file_err(path, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(file_err(
                path,
                "is readable by others than its owner: `chmod 600` it (it holds a secret key)",
            ));
        }
        let text = std::fs::read(path).map_err(|e| file_err(path, e))?;
        let data: WalletFile =
            serde_json::from_slice(&text).map_err(|e| file_err(path, format!("not a wallet: {e}")))?;
        if data.format != FORMAT {
            return Err(file_err(
                path,
                format!("format {} (this wallet reads {FORMAT})", data.format),
            ));
        }
        let mut data = data;
        if let Some(p) = passphrase {
            data.unlock(p)?;
        }
        if !data.is_sealed() || data.unlocked.is_some() {
            data.key()?;
        }
        Ok(Wallet {
            path: path.to_path_buf(),
            _lock: lock,
            data,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with the current content, atomically and durably.
    pub fn save(&self) -> Result<()> {
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let text = serde_json::to_vec_pretty(&self.data).map_err(|e| file_err(&self.path, e))?;
        {
            let _ = std::fs::remove_file(&tmp);
            let mut f = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| file_err(&tmp, e))?;
            f.write_all(&text).map_err(|e| file_err(&tmp, e))?;
            f.sync_all().map_err(|e| file_err(&tmp, e))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| file_err(&self.path, e))?;
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| file_err(dir, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_a_wallet_that_does_not_exist_leaves_no_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("typo");
        let Err(e) = Wallet::open(&path) else {
            panic!("opened a wallet that does not exist");
        };
        assert!(e.to_string().contains("typo"), "{e}");
        assert!(!lock_path(&path).exists());
    }

    #[test]
    fn a_wallet_is_created_once_private_and_reopened_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w/alice");
        let w = Wallet::create(&path, "alice".into()).unwrap();
        let addr = w.data.address().unwrap();
        drop(w);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            Wallet::create(&path, "again".into()).is_err(),
            "never overwritten"
        );
        let w = Wallet::open(&path).unwrap();
        assert_eq!(w.data.address().unwrap(), addr);
        assert_eq!(w.data.name, "alice");
        drop(w);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Wallet::open(&path).is_err(), "a readable wallet is refused");
    }

    #[test]
    fn a_sealed_key_needs_its_passphrase_and_is_not_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dora");
        let w = Wallet::create_sealed(&path, "dora".into(), "correct horse").unwrap();
        let addr = w.data.address().unwrap();
        let secret = hex::encode(w.data.key().unwrap().to_bytes());
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&secret), "the secret key is not in the file");
        assert!(text.contains(SEALED_PREFIX));
        let w = Wallet::open(&path).unwrap();
        let e = w.data.key().unwrap_err();
        assert!(e.to_string().contains("passphrase"), "{e}");
        drop(w);
        let e = Wallet::open_with(&path, Some("wrong horse")).unwrap_err();
        assert!(e.to_string().contains("wrong passphrase"), "{e}");
        let w = Wallet::open_with(&path, Some("correct horse")).unwrap();
        assert_eq!(w.data.address().unwrap(), addr);
        // Saving keeps it sealed.
        w.save().unwrap();
        drop(w);
        assert!(!std::fs::read_to_string(&path).unwrap().contains(&secret));
    }

    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("carol");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("carol.lock")).unwrap();
        let e = Wallet::create(&path, "carol".into()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    }

    #[test]
    fn a_save_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bob");
        let mut w = Wallet::create(&path, "bob".into()).unwrap();
        w.data.tokens.push(HeldToken {
            key: "k".into(),
            token_type: "EUR".into(),
            quantity: 5,
            tx_id: "t".into(),
            sender: None,
        });
        w.save().unwrap();
        drop(w);
        assert_eq!(Wallet::open(&path).unwrap().data.tokens.len(), 1);
        assert!(!dir.path().join("bob.tmp").exists());
    }
}
