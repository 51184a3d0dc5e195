//! `network.json`: what `fabrx up` started in a network directory — the network's size
//! and, per node, its process, command line, addresses and files (docs/contracts.md).
//! `fabrx down` and `fabrx status`, the bench suites and the wallet read it through
//! these types; it is written whole, to a temporary file renamed over the old one.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name in a network directory.
pub const FILE_NAME: &str = "network.json";

/// One node `fabrx up` started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Its name in tables and log files (`router-1`, `batcher-1-0`).
    pub name: String,
    /// Its role (`router`, `batcher`, …, `query`, `endorser`).
    pub role: String,
    /// Its party (an endorser: the party the network config gives its share).
    pub party: u32,
    /// Its shard, for a batcher.
    pub shard: Option<u32>,
    /// The process id.
    pub pid: u32,
    /// The command line it was started with (its `/proc` command line while it runs).
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// The address it serves on.
    pub listen: String,
    /// Its Prometheus `/metrics` address.
    pub metrics: Option<String>,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its log file (stdout and stderr).
    pub log: PathBuf,
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkFile {
    /// Parties of the network.
    pub parties: u32,
    /// Shards of the network.
    pub shards: u32,
    /// Every node started, in start order.
    pub nodes: Vec<NodeEntry>,
}

/// The file's path in network directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

impl NetworkFile {
    /// Reads the file of `dir`; `None` when there is none (no network started there).
    pub fn load(dir: &Path) -> Result<Option<NetworkFile>> {
        let path = path(dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| Error::Parse {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    /// Writes the file of `dir`: to a temporary file, renamed over the old one.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::Parse {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&tmp, text).map_err(|e| Error::Io {
            path: tmp.clone(),
            source: e,
        })?;
        std::fs::rename(&tmp, path(dir)).map_err(|e| Error::Io {
            path: path(dir),
            source: e,
        })
    }

    /// The parties whose query service was started.
    pub fn query_parties(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.role == "query")
            .map(|n| n.party)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node(name: &str, role: &str, party: u32) -> NodeEntry {
        NodeEntry {
            name: name.into(),
            role: role.into(),
            party,
            shard: None,
            pid: 7,
            argv: vec!["fabrx".into(), "node".into(), role.into()],
            cwd: "/".into(),
            listen: "127.0.0.1:1".into(),
            metrics: None,
            data_dir: "/d".into(),
            log: "/l".into(),
        }
    }

    #[test]
    fn written_then_loaded_is_the_same_and_names_its_query_parties() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(NetworkFile::load(dir.path()).unwrap(), None);
        let file = NetworkFile {
            parties: 4,
            shards: 1,
            nodes: vec![
                node("router-1", "router", 1),
                node("query-3", "query", 3),
                node("query-1", "query", 1),
            ],
        };
        file.write(dir.path()).unwrap();
        assert_eq!(NetworkFile::load(dir.path()).unwrap(), Some(file.clone()));
        assert_eq!(file.query_parties(), vec![3, 1]);
        std::fs::write(path(dir.path()), "{").unwrap();
        assert!(matches!(NetworkFile::load(dir.path()), Err(Error::Parse { .. })));
    }
}
