//! What a config update changes, as lines for the people who sign it
//! (`fabrx network update show`): parties added and removed, each node's endpoint and key,
//! admin keys, TLS certificates by fingerprint, and every other field by its path
//! (`batching.batch_timeout_ms: 200 → 50`).

use crate::file::{NetworkFile, PartyFile, TlsFile};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Text values longer than this are shown by their length only (PEM certificates).
const LONG: usize = 100;

/// The changes from `current` to `next`, one line each; empty when they are equal. Parties
/// and TLS certificates are compared by id and name, the rest field by field.
pub fn diff(current: &NetworkFile, next: &NetworkFile) -> Vec<String> {
    let mut out = Vec::new();
    if current.sequence != next.sequence {
        out.push(format!("sequence: {} → {}", current.sequence, next.sequence));
    }
    parties(&current.parties, &next.parties, &mut out);
    tls(current.tls.as_ref(), next.tls.as_ref(), &mut out);
    values("", &rest(current), &rest(next), &mut out);
    out
}

/// The file as JSON without the fields compared on their own.
fn rest(file: &NetworkFile) -> Value {
    let mut value = serde_json::to_value(file).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        for field in ["sequence", "parties", "tls"] {
            map.remove(field);
        }
    }
    value
}

/// A party's entries as (label, value), in the order a party's nodes are laid out
/// (router, consenter, assembler, batchers by shard, admin).
fn entries(p: &PartyFile) -> Vec<(String, String)> {
    let none = || "(none)".to_string();
    let mut out = vec![
        ("router".to_string(), p.router.clone()),
        ("consenter endpoint".into(), p.consenter.endpoint.clone()),
        ("consenter key".into(), p.consenter.public_key.clone()),
        ("assembler".into(), p.assembler.clone().unwrap_or_else(none)),
    ];
    for b in &p.batchers {
        out.push((
            format!("batcher of shard {} endpoint", b.shard),
            b.endpoint.clone(),
        ));
        out.push((format!("batcher of shard {} key", b.shard), b.public_key.clone()));
    }
    out.push(("admin key".into(), p.admin_key.clone().unwrap_or_else(none)));
    out
}

/// The value of `label` among `entries`.
fn entry<'a>(entries: &'a [(String, String)], label: &str) -> Option<&'a String> {
    entries.iter().find(|(l, _)| l == label).map(|(_, v)| v)
}

fn parties(current: &[PartyFile], next: &[PartyFile], out: &mut Vec<String>) {
    let by_id = |list: &[PartyFile]| {
        list.iter()
            .map(|p| (p.id, entries(p)))
            .collect::<BTreeMap<_, _>>()
    };
    let (old, new) = (by_id(current), by_id(next));
    for id in old.keys().filter(|id| !new.contains_key(id)) {
        out.push(format!("party {id} removed"));
    }
    for (id, entries) in &new {
        let Some(before) = old.get(id) else {
            // A party added: a header, then each of its entries as the party has it.
            out.push(format!("party {id} added"));
            out.extend(
                entries
                    .iter()
                    .map(|(label, v)| format!("party {id} {label}: {v}")),
            );
            continue;
        };
        for (label, v) in entries {
            match entry(before, label) {
                Some(was) if was == v => {}
                Some(was) => out.push(format!("party {id} {label}: {was} → {v}")),
                None => out.push(format!("party {id} {label}: (none) → {v}")),
            }
        }
        for (label, was) in before.iter().filter(|(l, _)| entry(entries, l).is_none()) {
            out.push(format!("party {id} {label}: {was} → (none)"));
        }
    }
}

fn tls(current: Option<&TlsFile>, next: Option<&TlsFile>, out: &mut Vec<String>) {
    let before = out.len();
    // Each certificate by name with its holder and fingerprint, so that relabelling a
    // certificate (another role, party or shard) shows; a name listed twice shows as
    // listed twice (a valid config has none).
    let certs = |t: Option<&TlsFile>| {
        let mut map = BTreeMap::new();
        for c in t.map(|t| t.certificates.as_slice()).unwrap_or_default() {
            let holder = match c.shard {
                Some(s) => format!("{} of party {} shard {}", c.role, c.party, s),
                None => format!("{} of party {}", c.role, c.party),
            };
            let entry = format!("{holder}, sha256 {}", c.sha256);
            map.entry(c.name.clone())
                .and_modify(|e: &mut String| *e = format!("{e}; listed twice: {entry}"))
                .or_insert(entry);
        }
        map
    };
    match (current, next) {
        (None, Some(_)) => out.push("tls: added (mutual TLS on every link)".into()),
        (Some(_), None) => out.push("tls: removed (plain TCP on every link)".into()),
        (Some(a), Some(b)) if a.ca != b.ca => out.push("tls.ca: another CA certificate".into()),
        _ => {}
    }
    let (old, new) = (certs(current), certs(next));
    for (name, was) in &old {
        match new.get(name) {
            None => out.push(format!("tls certificate {name} removed ({was})")),
            Some(now) if now != was => out.push(format!("tls certificate {name}: {was} → {now}")),
            Some(_) => {}
        }
    }
    for (name, now) in new.iter().filter(|(n, _)| !old.contains_key(*n)) {
        out.push(format!("tls certificate {name} added ({now})"));
    }
    // Same certificates in another order: the lines above show nothing.
    if out.len() == before
        && let (Some(a), Some(b)) = (current, next)
        && a.certificates != b.certificates
    {
        out.push("tls certificates: listed in another order".into());
    }
}

/// Field-by-field differences of two JSON values under `path`.
fn values(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let absent = Value::Null;
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let (va, vb) = (x.get(key), y.get(key));
                if va.is_none() || vb.is_none() {
                    out.push(format!("{}: {} → {}", at(key), shown(va), shown(vb)));
                } else {
                    values(&at(key), va.unwrap_or(&absent), vb.unwrap_or(&absent), out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                out.push(format!("{path}: {} → {} entries", x.len(), y.len()));
            }
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                values(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ => out.push(format!("{path}: {} → {}", shown(Some(a)), shown(Some(b)))),
    }
}

/// A value as a diff line shows it: JSON text; long text (a certificate, a section) by
/// its length and the start of its SHA-256, so that two long values can be told apart.
fn shown(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(absent)".into();
    };
    let text = match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let chars = text.chars().count();
    if chars <= LONG {
        return v.to_string();
    }
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    format!(
        "({chars} characters, sha256 {}…)",
        digest.get(..16).unwrap_or_default()
    )
}
