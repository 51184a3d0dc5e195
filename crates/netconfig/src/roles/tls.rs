//! The TLS identity each node and client installs from the network config (docs/tls.md).

use crate::error::{Error, Result};
use crate::tls::{cert_name, network_dir, tls_paths};
use std::path::Path;
use wire::tls::{NodeTls, Peer, Role};

impl crate::NetworkConfig {
    /// Whether the network's links use mutual TLS (the config has a `tls` section).
    pub fn tls_enabled(&self) -> bool {
        self.file.tls.is_some()
    }

    /// Whether the network has TLS and a certificate for `role` (networks generated
    /// before wallets had their own certificate have none for [`Role::Wallet`]).
    pub fn has_tls_role(&self, role: Role) -> Option<bool> {
        let tls = self.file.tls.as_ref()?;
        Some(tls.certificates.iter().any(|c| c.role == role.name()))
    }

    /// The TLS identity of `me` in the network whose config file is `config_path`, or
    /// `None` for a network without TLS. The certificate is the last one the config
    /// lists for `me` whose files (`<dir>/tls/<name>.pem` and `.key`) hold it (ADR 0019:
    /// after a rotation, the newer); when none does, `<dir>/tls/<role>-<party>.pem`.
    pub fn node_tls(&self, config_path: &Path, me: Peer) -> Result<Option<NodeTls>> {
        let Some(tls) = &self.file.tls else {
            return Ok(None);
        };
        let dir = network_dir(config_path);
        let listed = crate::tls::follow::listed_for(tls, me);
        let chosen =
            crate::tls::follow::choose(&listed, |name| crate::tls::follow::read_identity(&dir, name));
        let (cert_pem, key_pem) = match chosen {
            Some((_, cert, key)) => (cert, key),
            None => {
                let (cert_path, key_path) = tls_paths(&dir, &cert_name(me));
                let read = |p: &Path| {
                    std::fs::read(p).map_err(|e| Error::Read {
                        path: p.to_path_buf(),
                        reason: e.to_string(),
                    })
                };
                (read(&cert_path)?, read(&key_path)?)
            }
        };
        Ok(Some(NodeTls {
            ca_pem: tls.ca.clone().into_bytes(),
            cert_pem,
            key_pem,
            me,
            peers: self.tls_peers.clone(),
        }))
    }

    /// Installs this process's TLS identity, `role` of `party` (and `shard`), in the
    /// network whose config file is `config_path` (`wire::tls::install`; docs/tls.md):
    /// nodes at start, clients before they connect. Returns whether TLS is on (a network
    /// generated with `--insecure` has no `tls` section and nothing is installed).
    pub fn install_tls(
        &self,
        config_path: &Path,
        role: Role,
        party: u32,
        shard: Option<u32>,
    ) -> Result<bool> {
        // Clients and wallets are party 0; every node is one of the network's parties.
        if party != 0 && !self.has_party(party) {
            return Err(Error::NotInNetwork {
                what: format!("party {party}"),
                range: format!("{:?}", self.party_list()),
            });
        }
        // A batcher's `shard` is its shard (an endorser's is its share index).
        if let Some(s) = shard
            && role == Role::Batcher
            && s >= self.shards().get()
        {
            return Err(Error::NotInNetwork {
                what: format!("shard {s}"),
                range: format!("0..{}", self.shards().get()),
            });
        }
        let me = Peer { role, party, shard };
        let Some(tls) = self.node_tls(config_path, me)? else {
            return Ok(false);
        };
        let dir = network_dir(config_path);
        let (chosen_cert, chosen_key) = (tls.cert_pem.clone(), tls.key_pem.clone());
        wire::tls::install(tls).map_err(|e| Error::Tls {
            reason: format!("installing the TLS identity of {me}: {e}"),
        })?;
        // The node's other certificate file, if it holds one (a rotation made it), is its
        // fallback until the config in force is known: a node started from a config older
        // than a rotation still connects (ADR 0019).
        let other = [cert_name(me), format!("{}.next", cert_name(me))]
            .into_iter()
            .filter_map(|name| crate::tls::follow::read_identity(&dir, &name))
            .find(|(_, cert, _)| *cert != chosen_cert);
        if let Some((_, cert, key)) = other {
            match wire::tls::present(&cert, &key) {
                Ok(_) => {
                    wire::tls::present(&chosen_cert, &chosen_key).map_err(|e| Error::Tls {
                        reason: format!("installing the TLS identity of {me}: {e}"),
                    })?;
                }
                Err(e) => tracing::warn!(error = %e, "the node's other certificate file is not usable"),
            }
        }
        crate::tls::follow::remember_dir(&dir);
        Ok(true)
    }

    /// Installs the wallets' identity (`tls/wallet.*`) of the network in `dir`; a network
    /// generated before wallets had their own uses the clients' (which may also read
    /// blocks). Returns whether TLS is on and whether the clients' identity stood in.
    pub fn install_wallet_tls(&self, dir: &Path) -> Result<(bool, bool)> {
        let path = crate::config_path(dir);
        if self.has_tls_role(Role::Wallet) == Some(false) {
            return Ok((self.install_tls(&path, Role::Client, 0, None)?, true));
        }
        Ok((self.install_tls(&path, Role::Wallet, 0, None)?, false))
    }

    /// Installs the clients' identity (`tls/client.*`) of the network in `dir`.
    pub fn install_client_tls(&self, dir: &Path) -> Result<bool> {
        self.install_tls(&crate::config_path(dir), Role::Client, 0, None)
    }
}
