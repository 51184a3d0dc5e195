//! What a Fabric client needs to use a fabrx network (docs/fabric.md): each party's
//! organization (an MSP: an identity CA, the network's TLS CA, a client's signing
//! certificate and key), the genesis config block, and a ready-to-use user config for
//! Arma's `armageddon` tool.
//!
//! Layout under the network directory:
//!
//! ```text
//! fabric/genesis.block                                   the genesis config block (protobuf)
//! fabric/party<P>/user_config.yaml                       armageddon's user config of party P
//! fabric/crypto/ordererOrganizations/party<P>/ca/        the organization's CA (cert, key)
//! fabric/crypto/ordererOrganizations/party<P>/msp/       its MSP: cacerts, tlscacerts
//! fabric/crypto/ordererOrganizations/party<P>/users/client@party<P>/msp/
//!                                                        the client's MSP: keystore/priv_sk,
//!                                                        signcerts, cacerts, tlscacerts
//! ```
//!
//! The `fabric` section of the config lists each organization's CA certificates and the
//! client certificates whose signatures the network accepts when `router.client_auth` is
//! `signed`. Keys are ECDSA P-256 (PKCS#8), always random.

use crate::config::NetworkConfig;
use crate::error::{Error, Result};
use crate::file::{FabricClientFile, FabricFile, FabricOrgFile, NetworkFile};
use std::path::{Path, PathBuf};
use types::PartyId;

/// `<dir>/fabric`.
pub fn fabric_dir(dir: &Path) -> PathBuf {
    dir.join("fabric")
}

/// The MSP id of party `party`'s organization.
pub fn msp_id(party: PartyId) -> String {
    format!("party{party}")
}

/// `<dir>/fabric/crypto/ordererOrganizations/party<P>`.
pub fn org_dir(dir: &Path, party: PartyId) -> PathBuf {
    fabric_dir(dir)
        .join("crypto")
        .join("ordererOrganizations")
        .join(msp_id(party))
}

/// The client's MSP directory of party `party` (what `MSPDir` of its user config names).
pub fn client_msp_dir(dir: &Path, party: PartyId) -> PathBuf {
    org_dir(dir, party)
        .join("users")
        .join(format!("client@{}", msp_id(party)))
        .join("msp")
}

/// `<dir>/fabric/party<P>/user_config.yaml`.
pub fn user_config_path(dir: &Path, party: PartyId) -> PathBuf {
    fabric_dir(dir)
        .join(format!("party{party}"))
        .join("user_config.yaml")
}

/// `<dir>/fabric/genesis.block`.
pub fn genesis_path(dir: &Path) -> PathBuf {
    fabric_dir(dir).join("genesis.block")
}

fn bad(reason: String) -> Error {
    Error::Generate { reason }
}

fn write(path: &Path, bytes: &[u8], secret: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e: std::io::Error| Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if secret {
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(err)
}

/// One organization as generated: its section entry and its client's certificate.
struct Org {
    file: FabricOrgFile,
    client: FabricClientFile,
}

/// Writes party `party`'s organization under `dir` (CA, MSP, client) with the network's
/// TLS CA `tls_ca` (PEM; none in a network without TLS).
fn write_org(dir: &Path, party: PartyId, tls_ca: Option<&str>) -> Result<Org> {
    let err = |e: rcgen::Error| bad(format!("party {party}'s Fabric organization: {e}"));
    let msp = msp_id(party);
    let ca_key = rcgen::KeyPair::generate().map_err(err)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, msp.clone());
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("ca.{msp}"));
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let org = org_dir(dir, party);
    let ca_pem = ca_cert.pem();
    write(&org.join("ca").join("ca-cert.pem"), ca_pem.as_bytes(), false)?;
    write(
        &org.join("ca").join("priv_sk"),
        issuer.key().serialize_pem().as_bytes(),
        true,
    )?;
    let client_name = format!("client@{msp}");
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, msp.clone());
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, client_name.clone());
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    let cert_pem = cert.pem();
    let client_msp = client_msp_dir(dir, party);
    for msp_dir in [org.join("msp"), client_msp.clone()] {
        write(
            &msp_dir.join("cacerts").join("ca-cert.pem"),
            ca_pem.as_bytes(),
            false,
        )?;
        if let Some(tls) = tls_ca {
            write(
                &msp_dir.join("tlscacerts").join("tlsca-cert.pem"),
                tls.as_bytes(),
                false,
            )?;
        }
    }
    write(
        &client_msp.join("keystore").join("priv_sk"),
        key.serialize_pem().as_bytes(),
        true,
    )?;
    write(
        &client_msp
            .join("signcerts")
            .join(format!("{client_name}-cert.pem")),
        cert_pem.as_bytes(),
        false,
    )?;
    Ok(Org {
        file: FabricOrgFile {
            party,
            msp_id: msp.clone(),
            ca: ca_pem,
        },
        client: FabricClientFile {
            msp_id: msp,
            certificate: cert_pem,
        },
    })
}

/// Generates every party's organization under `dir` and returns the `fabric` section.
pub(crate) fn generate(dir: &Path, file: &NetworkFile) -> Result<FabricFile> {
    let tls_ca = file.tls.as_ref().map(|t| t.ca.as_str());
    let mut orgs = Vec::with_capacity(file.parties.len());
    let mut clients = Vec::with_capacity(file.parties.len());
    for p in &file.parties {
        let org = write_org(dir, p.id, tls_ca)?;
        orgs.push(org.file);
        clients.push(org.client);
    }
    Ok(FabricFile {
        channel: arma::fabric::CHANNEL.into(),
        orgs,
        clients,
    })
}

/// A YAML flow sequence of the bytes of `text` (how Arma's tools read `[]byte` fields).
fn yaml_bytes(text: &[u8]) -> String {
    let items: Vec<String> = text.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// A YAML flow sequence of quoted strings.
fn yaml_strings(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The `armageddon` user config of party `party`: every router and assembler endpoint,
/// the clients' TLS certificate and key and the network CA (mutual TLS), or none
/// (`none` without TLS), and the party's client MSP directory (absolute).
fn user_config(dir: &Path, config: &NetworkConfig, party: PartyId) -> Result<String> {
    let file = config.file();
    let routers: Vec<String> = file.parties.iter().map(|p| p.router.clone()).collect();
    let assemblers: Vec<String> = file.parties.iter().filter_map(|p| p.assembler.clone()).collect();
    let msp_dir = client_msp_dir(dir, party);
    let msp_dir = std::fs::canonicalize(&msp_dir).map_err(|e| Error::Write {
        path: msp_dir.clone(),
        reason: e.to_string(),
    })?;
    let mut out = String::new();
    let mode = if let Some(tls) = &file.tls {
        let (cert, key) = crate::tls::tls_paths(dir, "client");
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| Error::Write {
                path: p.to_path_buf(),
                reason: e.to_string(),
            })
        };
        out.push_str(&format!("TLSPrivateKey: {}\n", yaml_bytes(&read(&key)?)));
        out.push_str(&format!("TLSCertificate: {}\n", yaml_bytes(&read(&cert)?)));
        out.push_str(&format!("TLSCACerts: [{}]\n", yaml_bytes(tls.ca.as_bytes())));
        "mTLS"
    } else {
        "none"
    };
    out.push_str(&format!("RouterEndpoints: {}\n", yaml_strings(&routers)));
    out.push_str(&format!("AssemblerEndpoints: {}\n", yaml_strings(&assemblers)));
    out.push_str(&format!("UseTLSRouter: {mode}\nUseTLSAssembler: {mode}\n"));
    out.push_str(&format!("MSPDir: {:?}\n", msp_dir.display().to_string()));
    Ok(out)
}

/// Writes the genesis block and every party's user config of a validated network.
pub(crate) fn write_client_files(dir: &Path, config: &NetworkConfig) -> Result<()> {
    let Some(genesis) = config.fabric_genesis() else {
        return Ok(());
    };
    use prost::Message;
    write(&genesis_path(dir), &genesis.encode_to_vec(), false)?;
    for p in config.parties() {
        let text = user_config(dir, config, p.id)?;
        write(&user_config_path(dir, p.id), text.as_bytes(), true)?;
    }
    Ok(())
}

/// The `fabric` section, parsed: the genesis block's organizations and the Fabric client
/// policy. Every listed organization must be a party of the network, once; every client
/// certificate an ECDSA P-256 x509 certificate of a listed organization.
pub(crate) fn parse(fabric: &FabricFile, file: &NetworkFile) -> Result<arma::fabric::FabricClients> {
    let invalid = |reason: String| Error::Fabric { reason };
    let mut seen = std::collections::BTreeSet::new();
    for org in &fabric.orgs {
        // An organization may name a party that left (an update does not change this
        // section).
        if !file.parties.iter().any(|p| p.id == org.party) && !file.left_parties.contains(&org.party) {
            return Err(invalid(format!(
                "organization {} names party {}, not in the network",
                org.msp_id, org.party
            )));
        }
        if !seen.insert(org.msp_id.clone()) {
            return Err(invalid(format!("organization {} is listed twice", org.msp_id)));
        }
    }
    let mut clients = arma::fabric::FabricClients::new();
    for (i, c) in fabric.clients.iter().enumerate() {
        if !seen.contains(&c.msp_id) {
            return Err(invalid(format!(
                "client {i} names MSP {}, not an organization",
                c.msp_id
            )));
        }
        clients
            .insert_pem(&c.msp_id, c.certificate.as_bytes())
            .map_err(|e| invalid(format!("client {i}: {e}")))?;
    }
    Ok(clients)
}

impl NetworkConfig {
    /// The genesis config block a party's assembler serves as Fabric block 0 (`None`
    /// without a `fabric` section): the organizations with their CA and the network's
    /// TLS CA, each party's router and assembler endpoints, the batch size, and this
    /// config file as the consensus metadata.
    pub fn fabric_genesis(&self) -> Option<wire::fabric::common::Block> {
        let file = self.file();
        let fabric = file.fabric.as_ref()?;
        let tls_ca: Vec<Vec<u8>> = file.tls.iter().map(|t| t.ca.clone().into_bytes()).collect();
        let orgs = fabric
            .orgs
            .iter()
            .map(|o| {
                let party = file.parties.iter().find(|p| p.id == o.party);
                let endpoints = party
                    .map(|p| {
                        std::iter::once(p.router.clone())
                            .chain(p.assembler.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                arma::fabric::GenesisOrg {
                    msp_id: o.msp_id.clone(),
                    root_certs: vec![o.ca.clone().into_bytes()],
                    tls_root_certs: tls_ca.clone(),
                    endpoints,
                }
            })
            .collect();
        let batching = &file.batching;
        Some(arma::fabric::genesis_block(&arma::fabric::Genesis {
            channel: fabric.channel.clone(),
            orgs,
            consensus_metadata: serde_json::to_vec(file).unwrap_or_default(),
            max_message_count: batching.max_batch_requests,
            absolute_max_bytes: u32::try_from(batching.max_batch_bytes).unwrap_or(u32::MAX),
        }))
    }
}
