//! A generated network laid out for Kubernetes (`fabrx network generate --k8s PATTERN`,
//! docs/deploy.md): one namespace per party, one Service per node, every endpoint a
//! service DNS name on a fixed port per role, and the files each party gets.
//!
//! Party `p`'s router is `router.<ns(p)>.svc.<domain>:7050`, where `ns(p)` is the
//! namespace pattern with `{party}` replaced by `p` (`fabrx-party{party}` gives
//! `fabrx-party1`, …). The TLS certificates need no new names: every client checks the
//! name `fabrx-node` (`wire::tls::SERVER_NAME`), whatever host it dials.
//!
//! Layout under the network directory, besides what [`crate::generate`] writes:
//!
//! ```text
//! k8s/shared/network-config.json    the network config (public: give it to every party)
//! k8s/shared/consenter-peer-keys.txt
//! k8s/shared/ca.pem                 the network CA's certificate (public)
//! k8s/party<p>/secret.yaml          party p's Secret `fabrx-keys` (keep it secret; mode 0600)
//! ```

use crate::config::NetworkConfig;
use crate::error::{Error, Node, Result};
use crate::file::NetworkFile;
use crate::generate::{GenerateSpec, Generated, generate_with, key_file_path};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use types::PartyId;

/// The gRPC port of each role's Service: the same in every party's namespace (each node
/// has its own Service, so ports need not differ; they do, to read policies easily).
pub mod ports {
    /// Router (`Router.Submit`).
    pub const ROUTER: u16 = 7050;
    /// Consenter.
    pub const CONSENTER: u16 = 7051;
    /// Assembler (Deliver).
    pub const ASSEMBLER: u16 = 7052;
    /// Every batcher (Service `batcher-<shard>`).
    pub const BATCHER: u16 = 7053;
    /// Sidecar.
    pub const SIDECAR: u16 = 7070;
    /// Signature verifier.
    pub const SIGVERIFIER: u16 = 7071;
    /// Validator-committer.
    pub const VCSERVICE: u16 = 7072;
    /// Query service.
    pub const QUERY: u16 = 7080;
    /// Every endorser (Service `endorser-<index>`).
    pub const ENDORSER: u16 = 7090;
}

/// What the namespace pattern's party number replaces.
pub const PARTY_PLACEHOLDER: &str = "{party}";
/// The cluster domain of most clusters.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// The name of each party's Secret (the chart's `secrets.keys` default).
pub const SECRET_NAME: &str = "fabrx-keys";

/// Where each party's nodes live: the namespace pattern and the cluster domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sLayout {
    namespace_pattern: String,
    cluster_domain: String,
}

fn bad(reason: String) -> Error {
    Error::Generate { reason }
}

/// Whether `s` is a DNS-1123 label (what a namespace name must be).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl K8sLayout {
    /// A layout: `namespace_pattern` names party p's namespace with `{party}` replaced by
    /// p; `cluster_domain` is the cluster's DNS domain (`cluster.local`). Each party's
    /// namespace is checked when the network is built ([`K8sLayout::rewrite`]).
    pub fn new(namespace_pattern: &str, cluster_domain: &str) -> Result<K8sLayout> {
        if namespace_pattern.is_empty() {
            return Err(bad("the namespace pattern is empty".into()));
        }
        if cluster_domain.is_empty() || !cluster_domain.split('.').all(is_dns_label) {
            return Err(bad(format!(
                "cluster domain {cluster_domain:?} is not a DNS name (lowercase labels joined by '.')"
            )));
        }
        Ok(K8sLayout {
            namespace_pattern: namespace_pattern.to_string(),
            cluster_domain: cluster_domain.to_string(),
        })
    }

    /// Party `party`'s namespace.
    pub fn namespace(&self, party: PartyId) -> String {
        self.namespace_pattern
            .replace(PARTY_PLACEHOLDER, &party.to_string())
    }

    /// The DNS name of Service `service` in party `party`'s namespace.
    pub fn service_host(&self, service: &str, party: PartyId) -> String {
        format!("{service}.{}.svc.{}", self.namespace(party), self.cluster_domain)
    }

    fn endpoint(&self, service: &str, party: PartyId, port: u16) -> String {
        format!("{}:{port}", self.service_host(service, party))
    }

    /// Checks the namespaces of parties 1..=`parties`: DNS labels, one per party.
    fn check_namespaces(&self, parties: u32) -> Result<()> {
        if parties > 1 && !self.namespace_pattern.contains(PARTY_PLACEHOLDER) {
            return Err(bad(format!(
                "namespace pattern {:?} has no {PARTY_PLACEHOLDER}: {parties} parties would share one namespace",
                self.namespace_pattern
            )));
        }
        (1..=parties).try_for_each(|p| self.check_namespace(p))
    }

    /// Replaces every endpoint of `file` with its Service's DNS name and its role's port
    /// ([`ports`]): ordering nodes, committer nodes, query services and endorsers (each in
    /// the namespace of the party that runs it).
    pub fn rewrite(&self, file: &mut NetworkFile) -> Result<()> {
        let n = u32::try_from(file.parties.len()).unwrap_or(u32::MAX);
        self.check_namespaces(n)?;
        for party in &mut file.parties {
            let p = party.id;
            party.router = self.endpoint("router", p, ports::ROUTER);
            party.consenter.endpoint = self.endpoint("consenter", p, ports::CONSENTER);
            party.assembler = Some(self.endpoint("assembler", p, ports::ASSEMBLER));
            for b in &mut party.batchers {
                b.endpoint = self.endpoint(&format!("batcher-{}", b.shard), p, ports::BATCHER);
            }
        }
        if let Some(committer) = &mut file.committer {
            for c in &mut committer.parties {
                c.sidecar = self.endpoint("sidecar", c.party, ports::SIDECAR);
                c.sigverifier = self.endpoint("sigverifier", c.party, ports::SIGVERIFIER);
                c.vcservice = self.endpoint("vcservice", c.party, ports::VCSERVICE);
            }
        }
        if let Some(token) = &mut file.token {
            for e in &mut token.endorsers {
                e.endpoint = self.endpoint(&format!("endorser-{}", e.index), e.party, ports::ENDORSER);
            }
            for q in &mut token.query {
                q.endpoint = self.endpoint("query", q.party, ports::QUERY);
            }
        }
        Ok(())
    }
}

/// One party's namespace and domain, read from its router's endpoint
/// `router.<namespace>.svc.<domain>:7050`.
fn router_location(router: &str) -> Option<(&str, &str)> {
    let host = router.strip_suffix(&format!(":{}", ports::ROUTER))?;
    let rest = host.strip_prefix("router.")?;
    let (ns, domain) = rest.split_once(".svc.")?;
    Some((ns, domain))
}

/// The patterns that give `ns` for party `party`: `ns` with one or more of the places
/// `party`'s number appears replaced by `{party}` (at most 2^8 - 1 of them).
fn candidate_patterns(ns: &str, party: PartyId) -> Vec<String> {
    let number = party.to_string();
    let places: Vec<usize> = ns.match_indices(&number).map(|(i, _)| i).take(8).collect();
    let mut out = Vec::new();
    for mask in 1u32..(1u32 << places.len()) {
        let mut pattern = String::new();
        let mut from = 0;
        for (bit, &at) in places.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                pattern.push_str(&ns[from..at]);
                pattern.push_str(PARTY_PLACEHOLDER);
                from = at + number.len();
            }
        }
        pattern.push_str(&ns[from..]);
        out.push(pattern);
    }
    out
}

impl K8sLayout {
    /// The layout of a network generated with `--k8s`, read from its parties' router
    /// endpoints: the cluster domain they share and the one namespace pattern (with
    /// `{party}`) that gives every party's namespace and a single namespace for party
    /// N + 1. Errors name what cannot be read or what is ambiguous (then give the pattern:
    /// [`K8sLayout::new`] and [`K8sLayout::check_network`]).
    pub fn of_network(file: &NetworkFile) -> std::result::Result<K8sLayout, String> {
        let mut parties = Vec::new();
        let mut domain: Option<&str> = None;
        for p in &file.parties {
            let Some((ns, d)) = router_location(&p.router) else {
                return Err(format!(
                    "party {}'s router {:?} is not a Service name router.<namespace>.svc.<domain>:{}",
                    p.id,
                    p.router,
                    ports::ROUTER
                ));
            };
            match domain {
                Some(first) if first != d => {
                    return Err(format!(
                        "the parties' routers name two cluster domains, {first:?} and {d:?}"
                    ));
                }
                _ => domain = Some(d),
            }
            parties.push((p.id, ns));
        }
        let (Some(domain), Some(&(last, last_ns))) = (domain, parties.last()) else {
            return Err("the network has no party".into());
        };
        let next = last.saturating_add(1);
        let mut found: Vec<(String, String)> = Vec::new();
        for pattern in candidate_patterns(last_ns, last) {
            let of = |p: PartyId| pattern.replace(PARTY_PLACEHOLDER, &p.to_string());
            if parties.iter().all(|(p, ns)| of(*p) == *ns) && !found.iter().any(|(_, n)| *n == of(next)) {
                found.push((of(next), pattern.clone()));
            }
        }
        match found.as_slice() {
            [(_, pattern)] => K8sLayout::new(pattern, domain).map_err(|e| e.to_string()),
            [] => Err(format!(
                "the parties' namespaces ({}) follow no pattern with {PARTY_PLACEHOLDER}",
                parties.iter().map(|(_, ns)| *ns).collect::<Vec<_>>().join(", ")
            )),
            several => Err(format!(
                "the parties' namespaces fit several patterns, which name party {next}'s namespace {}",
                several
                    .iter()
                    .map(|(ns, pattern)| format!("{ns} ({pattern})"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )),
        }
    }

    /// Whether every endpoint of `file` is the one this layout gives it (ordering nodes,
    /// committer nodes, query services, endorsers): `Err` names the first that is not.
    pub fn check_network(&self, file: &NetworkFile) -> std::result::Result<(), String> {
        let mut laid_out = file.clone();
        self.rewrite(&mut laid_out).map_err(|e| e.to_string())?;
        let have = crate::update::endpoints_in_use(file);
        let want = crate::update::endpoints_in_use(&laid_out);
        for ((what, e), (_, w)) in have.iter().zip(&want) {
            if e != w {
                return Err(format!("{what} is at {e}, where the layout puts {w}"));
            }
        }
        Ok(())
    }

    /// Party `party`'s ordering endpoints: router, consenter, assembler, then one batcher
    /// per shard in shard order.
    pub fn ordering_endpoints(&self, party: PartyId, shards: u32) -> (String, String, String, Vec<String>) {
        (
            self.endpoint("router", party, ports::ROUTER),
            self.endpoint("consenter", party, ports::CONSENTER),
            self.endpoint("assembler", party, ports::ASSEMBLER),
            (0..shards)
                .map(|s| self.endpoint(&format!("batcher-{s}"), party, ports::BATCHER))
                .collect(),
        )
    }

    /// The namespace pattern (`fabrx-party{party}`).
    pub fn namespace_pattern(&self) -> &str {
        &self.namespace_pattern
    }

    /// The cluster domain (`cluster.local`).
    pub fn cluster_domain(&self) -> &str {
        &self.cluster_domain
    }

    /// Checks party `party`'s namespace: a DNS label.
    pub fn check_namespace(&self, party: PartyId) -> Result<()> {
        let ns = self.namespace(party);
        if is_dns_label(&ns) {
            Ok(())
        } else {
            Err(bad(format!(
                "party {party}'s namespace {ns:?} is not a DNS label (a-z, 0-9, '-', at most 63)"
            )))
        }
    }
}

/// What [`generate_k8s`] wrote.
#[derive(Debug, Clone)]
pub struct K8sGenerated {
    /// The network as [`crate::generate`] reports it.
    pub network: Generated,
    /// `<dir>/k8s/shared`: the public files every party gets.
    pub shared_dir: PathBuf,
    /// Each party's Secret manifest (`<dir>/k8s/party<p>/secret.yaml`).
    pub secrets: Vec<(PartyId, PathBuf)>,
}

/// One file of a party's Secret: its key in the Secret and the file it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    /// The Secret's data key (`consenter.key`, `tls-router-1.pem`, …).
    pub key: String,
    /// The file under the network directory.
    pub path: PathBuf,
}

/// `<dir>/k8s/shared`.
pub fn shared_dir(dir: &Path) -> PathBuf {
    dir.join("k8s").join("shared")
}

/// `<dir>/k8s/party<p>/secret.yaml`.
pub fn secret_path(dir: &Path, party: PartyId) -> PathBuf {
    dir.join("k8s").join(format!("party{party}")).join("secret.yaml")
}

/// The files of party `party`'s Secret, for a network generated in `dir`: its consenter's
/// and batchers' keys, the shares of the endorsers it runs, the administrator's and the
/// issuer's keys for party 1 (whoever runs the network's administration; move them if
/// another party does), and with TLS its nodes' certificates and keys and the clients'
/// (one clients' certificate per network, docs/tls.md). Never the CA's key.
pub fn secret_files(dir: &Path, config: &NetworkConfig, party: PartyId) -> Vec<SecretFile> {
    let mut out = Vec::new();
    let mut add = |key: String, path: PathBuf| out.push(SecretFile { key, path });
    if let Some(path) = key_file_path(dir, Node::Consenter(party)) {
        add("consenter.key".into(), path);
    }
    for shard in 0..config.shards().get() {
        if let Some(path) = key_file_path(dir, Node::Batcher { party, shard }) {
            add(format!("batcher-{shard}.key"), path);
        }
    }
    if let Ok(app) = config.token() {
        for e in app.endorsers.iter().filter(|e| e.party == party) {
            add(
                format!("endorser-{}.key", e.index),
                crate::token::endorser_key_path(dir, e.index),
            );
        }
    }
    if party == 1 {
        add("meta.key".into(), crate::committer::meta_key_path(dir));
        add("issuer.key".into(), crate::token::issuer_key_path(dir));
    }
    if let Some(tls) = &config.file.tls {
        for c in &tls.certificates {
            if c.party != party && c.role != "client" && c.role != "wallet" {
                continue;
            }
            let (cert, key) = crate::tls::tls_paths(dir, &c.name);
            add(format!("tls-{}.pem", c.name), cert);
            add(format!("tls-{}.key", c.name), key);
        }
    }
    out
}

/// A Secret manifest holding `entries` (key, file text) as `stringData`; each value is a
/// JSON string, which YAML reads as the same string.
fn secret_yaml(namespace: &str, party: PartyId, entries: &[(String, String)]) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut y = format!(
        "# Party {party}'s keys and TLS material, written by `fabrx network generate --k8s`\n\
         # or `fabrx network party add`.\n\
         # Give it to party {party} only; `kubectl apply -f` it into namespace {namespace}.\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET_NAME}\n  namespace: {namespace}\n\
         \x20 labels:\n    app.kubernetes.io/part-of: fabrx\n    fabrx.io/party: \"{party}\"\n\
         type: Opaque\nstringData:\n"
    );
    for (key, text) in entries {
        y.push_str(&format!("  {}: {}\n", q(key), q(text)));
    }
    y
}

fn write_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn create_dir(path: &Path, mode: u32) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(write_error(path))
}

/// Writes a file that only its owner may read (mode 0600).
fn write_secret(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(write_error(path))?;
    f.write_all(text.as_bytes()).map_err(write_error(path))
}

/// Generates a network whose endpoints are Kubernetes Service names (`layout`; the
/// spec's `host` and `base_port` are not used for endpoints), then writes the shared
/// files and one Secret manifest per party under `<dir>/k8s` (module docs).
pub fn generate_k8s(spec: &GenerateSpec, layout: &K8sLayout) -> Result<K8sGenerated> {
    layout.check_namespaces(spec.parties)?;
    let network = generate_with(spec, &|file| layout.rewrite(file))?;
    let shared = shared_dir(&spec.dir);
    create_dir(&shared, 0o755)?;
    let copy = |from: &Path, name: &str| {
        let to = shared.join(name);
        std::fs::copy(from, &to).map(|_| ()).map_err(write_error(&to))
    };
    copy(&network.config_path, "network-config.json")?;
    copy(&network.peer_keys_path, "consenter-peer-keys.txt")?;
    if let Some(tls) = &network.config.file.tls {
        let ca = shared.join("ca.pem");
        std::fs::write(&ca, &tls.ca).map_err(write_error(&ca))?;
    }
    let mut secrets = Vec::new();
    for party in 1..=spec.parties {
        let path = write_party_secret(&spec.dir, &network.config, layout, party)?;
        secrets.push((party, path));
    }
    Ok(K8sGenerated {
        network,
        shared_dir: shared,
        secrets,
    })
}

/// Writes party `party`'s Secret manifest (`<dir>/k8s/party<p>/secret.yaml`, mode 0600,
/// in a directory of mode 0700) from the files [`secret_files`] lists for it in
/// `config`; an existing manifest is refused. Gives its path.
pub fn write_party_secret(
    dir: &Path,
    config: &NetworkConfig,
    layout: &K8sLayout,
    party: PartyId,
) -> Result<PathBuf> {
    let mut entries = Vec::new();
    for f in secret_files(dir, config, party) {
        let text = std::fs::read_to_string(&f.path).map_err(|e| Error::Read {
            path: f.path.clone(),
            reason: e.to_string(),
        })?;
        entries.push((f.key, text));
    }
    let path = secret_path(dir, party);
    if let Some(parent) = path.parent() {
        create_dir(parent, 0o700)?;
    }
    write_secret(&path, &secret_yaml(&layout.namespace(party), party, &entries))?;
    Ok(path)
}
