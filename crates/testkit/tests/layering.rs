//! The workspace's dependency rule (docs/ARCHITECTURE.md "Layers"): role crates depend
//! only downwards — on shared crates and engines, and on `testkit` in tests — never on
//! another role crate. Roles talk over the wire. Only composition crates and tools (and
//! the `fabrx` binary) wire several roles together.
//!
//! Every crate under `crates/` must be classified here, so a new crate is placed on
//! purpose. Runs in `bash scripts/test.sh`, and so in CI.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// Nouns, crypto, wire formats, clients, persistence: used by everyone.
    Shared,
    /// Pure state machines used inside one role's process (BFT engine, dependency graph).
    Engine,
    /// Fixtures, simulations, oracles: a dev-dependency of roles.
    Testkit,
    /// One role of the network, a process of its own.
    Role,
    /// Wires several roles into one process, or drives them as a client.
    Composition,
}

fn layer_of(name: &str) -> Option<Layer> {
    use Layer::*;
    Some(match name {
        "types" | "crypto" | "wire" | "policy" | "clients" | "journal" | "ledger" | "token" | "telemetry" => {
            Shared
        }
        "bft" | "coordinator" | "arma" => Engine,
        "testkit" => Testkit,
        "router" | "batcher" | "consenter" | "assembler" | "sidecar" | "sigverifier" | "vcservice"
        | "query" | "endorser" => Role,
        "committer" | "loadgen" | "wallet" | "fabrx" | "netconfig" | "ordersim" | "devnet" => Composition,
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    Dev,
}

/// Whether `from` (in `layer`) may depend on `to` (in `to_layer`) as `kind`.
fn allowed(layer: Layer, kind: Kind, to_layer: Layer) -> bool {
    use Layer::*;
    match (layer, to_layer) {
        (Composition, _) => true,
        (_, Shared) => true,
        (Engine | Role | Testkit, Engine) => true,
        (Shared | Engine | Role, Testkit) => kind == Kind::Dev,
        _ => false,
    }
}

/// Workspace crate name → its workspace dependencies with their kind.
type Graph = BTreeMap<String, Vec<(String, Kind)>>;

fn dep_tables(manifest: &toml::Table) -> Vec<(&toml::Table, Kind)> {
    let mut out = Vec::new();
    for (key, kind) in [
        ("dependencies", Kind::Normal),
        ("build-dependencies", Kind::Normal),
        ("dev-dependencies", Kind::Dev),
    ] {
        if let Some(t) = manifest.get(key).and_then(|v| v.as_table()) {
            out.push((t, kind));
        }
        // Platform-specific tables: [target.'cfg(..)'.dependencies].
        if let Some(targets) = manifest.get("target").and_then(|v| v.as_table()) {
            for t in targets.values().filter_map(|v| v.as_table()) {
                if let Some(d) = t.get(key).and_then(|v| v.as_table()) {
                    out.push((d, kind));
                }
            }
        }
    }
    out
}

fn workspace_graph(root: &Path) -> Graph {
    let mut manifests = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/ is readable") {
        let path = entry.expect("a directory entry").path().join("Cargo.toml");
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable manifest");
        let manifest: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = manifest["package"]["name"]
            .as_str()
            .expect("package.name")
            .to_string();
        manifests.insert(name, manifest);
    }
    let names: Vec<String> = manifests.keys().cloned().collect();
    manifests
        .iter()
        .map(|(name, m)| {
            let mut deps = Vec::new();
            for (table, kind) in dep_tables(m) {
                for (dep, spec) in table {
                    // `package = "…"` renames a dependency; the real name decides.
                    let real = spec
                        .get("package")
                        .and_then(|p| p.as_str())
                        .unwrap_or(dep)
                        .to_string();
                    if names.contains(&real) {
                        deps.push((real, kind));
                    }
                }
            }
            (name.clone(), deps)
        })
        .collect()
}

/// Every violation of the rule, as readable lines.
fn violations(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (name, deps) in graph {
        let Some(layer) = layer_of(name) else {
            out.push(format!(
                "crate `{name}` has no layer: classify it in crates/testkit/tests/layering.rs"
            ));
            continue;
        };
        for (dep, kind) in deps {
            let Some(to) = layer_of(dep) else { continue };
            if !allowed(layer, *kind, to) {
                out.push(format!(
                    "{name} ({layer:?}) -> {dep} ({to:?}) as a {kind:?} dependency"
                ));
            }
        }
    }
    out
}

#[test]
fn role_crates_depend_only_downwards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let graph = workspace_graph(&root);
    assert!(
        graph.contains_key("sidecar") && graph.contains_key("types"),
        "found the workspace"
    );
    for (name, deps) in &graph {
        let list: Vec<&str> = deps.iter().map(|(d, _)| d.as_str()).collect();
        println!("{name:<12} {:?}: {}", layer_of(name), list.join(", "));
    }
    let bad = violations(&graph);
    assert!(bad.is_empty(), "dependency rule broken:\n{}", bad.join("\n"));
}

#[test]
fn the_rule_catches_sideways_dependencies() {
    let g = |edges: &[(&str, &str, Kind)]| -> Graph {
        let mut g = Graph::new();
        for (a, b, k) in edges {
            g.entry(a.to_string()).or_default().push((b.to_string(), *k));
            g.entry(b.to_string()).or_default();
        }
        g
    };
    // What the sidecar used to do: a role on two other roles.
    assert_eq!(
        violations(&g(&[
            ("sidecar", "vcservice", Kind::Normal),
            ("sidecar", "types", Kind::Normal)
        ]))
        .len(),
        1
    );
    // A role on another role even only in tests.
    assert_eq!(violations(&g(&[("sigverifier", "sidecar", Kind::Dev)])).len(), 1);
    // testkit only as a dev-dependency of a role; never on a role.
    assert_eq!(violations(&g(&[("vcservice", "testkit", Kind::Normal)])).len(), 1);
    assert_eq!(violations(&g(&[("testkit", "sidecar", Kind::Normal)])).len(), 1);
    // Shared crates never reach up.
    assert_eq!(violations(&g(&[("wire", "bft", Kind::Normal)])).len(), 1);
    // An unclassified crate is reported.
    assert_eq!(violations(&g(&[("mystery", "types", Kind::Normal)])).len(), 1);
    // What is allowed.
    assert!(
        violations(&g(&[
            ("consenter", "bft", Kind::Normal),
            ("sidecar", "coordinator", Kind::Normal),
            ("sidecar", "testkit", Kind::Dev),
            ("committer", "sidecar", Kind::Normal),
            ("fabrx", "loadgen", Kind::Normal),
        ]))
        .is_empty()
    );
}
