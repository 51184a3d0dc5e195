//! Connection-level limits shared by every `fabrx node` server (docs/limits.md).

use clap::Args;
use std::num::NonZeroUsize;
use std::time::Duration;
use wire::server::ServerLimits;

/// A flag that must be a positive whole number: parsed, not clamped (a 0 is refused with
/// the flag's name instead of silently becoming 1).
pub fn positive_usize(text: &str) -> Result<NonZeroUsize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) => NonZeroUsize::new(n).ok_or_else(|| "must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// [`positive_usize`] for `u64` flags (timeouts, ticks).
pub fn positive_u64(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--network` of a node: the network config file, or a network directory (its
/// `config/network-config.json`), so both forms an operator has at hand work.
pub fn network_file(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    Ok(if path.is_dir() {
        netconfig::config_path(&path)
    } else {
        path
    })
}

/// `--network` of a client command (`wallet`, `blocks`): a network directory, or its
/// config file (the directory it belongs to).
pub fn network_dir(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    Ok(if path.is_file() {
        netconfig::tls::network_dir(&path)
    } else {
        path
    })
}

/// Flags of a node's gRPC server.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Most client connections open at once; at the bound a new connection evicts a
    /// silent or the longest-idle one.
    #[arg(long, default_value_t = NonZeroUsize::new(ServerLimits::default().max_connections).unwrap_or(NonZeroUsize::MIN), value_parser = positive_usize)]
    pub max_connections: NonZeroUsize,
    /// A connection without traffic for this many milliseconds is closed.
    #[arg(long, default_value_t = 120_000, value_parser = positive_u64)]
    pub idle_timeout_ms: u64,
}

impl ServerArgs {
    /// The limits these flags select.
    pub fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: self.max_connections.get(),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            ..ServerLimits::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_refused_not_clamped() {
        assert_eq!(positive_usize("3").map(NonZeroUsize::get), Ok(3));
        assert_eq!(positive_u64(" 7 "), Ok(7));
        assert!(positive_usize("0").unwrap_err().contains("at least 1"));
        assert!(positive_u64("0").unwrap_err().contains("at least 1"));
        assert!(positive_usize("-1").is_err());
        assert!(positive_u64("many").is_err());
    }

    #[test]
    fn network_takes_the_directory_or_its_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = netconfig::config_path(dir.path());
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "{}").unwrap();
        let text = |p: &std::path::Path| p.display().to_string();
        // A node wants the file.
        assert_eq!(network_file(&text(dir.path())).unwrap(), file);
        assert_eq!(network_file(&text(&file)).unwrap(), file);
        // A client command wants the directory.
        assert_eq!(network_dir(&text(&file)).unwrap(), dir.path());
        assert_eq!(network_dir(&text(dir.path())).unwrap(), dir.path());
        // A path that does not exist stays as given (loading it names it).
        assert_eq!(
            network_file("/nowhere/x.json").unwrap(),
            std::path::PathBuf::from("/nowhere/x.json")
        );
    }
}
