//! Every role's node module has the one public shape of `wire::node`: a `Config`, a
//! `Deps`, `spawn(Config, Deps)` resolving to `Result<Handle, Error>` and a `Handle`
//! that is a `wire::node::Node` (its address, `failed`, `stop`). The first test checks
//! it at compile time, so a role that drifts from it fails to build this test; the
//! second keeps the list of checked roles equal to the crates that have a node module.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::future::Future;

/// Compiles only when `spawn` takes `(C, D)` and resolves to `Result<H, E>` with `H` a
/// node and `E` an error type.
fn node_shape<C, D, H, E, F, S>(_spawn: S) -> &'static str
where
    S: FnOnce(C, D) -> F,
    F: Future<Output = Result<H, E>>,
    H: wire::node::Node<Error = E>,
    E: std::error::Error + Send + Sync + 'static,
{
    std::any::type_name::<H>()
}

/// Asserts the shape of `<role>::node` and names the role.
macro_rules! role {
    ($role:ident) => {{
        let handle = node_shape::<$role::node::Config, $role::node::Deps, $role::node::Handle, _, _, _>(
            $role::node::spawn,
        );
        // The role's own handle, or the server-only handle over the role's error.
        assert!(
            handle.starts_with(concat!(stringify!($role), "::"))
                || handle.starts_with(concat!("wire::node::Server<", stringify!($role), "::")),
            "{handle}"
        );
        stringify!($role)
    }};
}

fn checked_roles() -> BTreeSet<&'static str> {
    [
        role!(router),
        role!(batcher),
        role!(consenter),
        role!(assembler),
        role!(sidecar),
        role!(sigverifier),
        role!(vcservice),
        role!(query),
        role!(endorser),
    ]
    .into_iter()
    .collect()
}

#[test]
fn every_role_node_has_the_one_shape() {
    assert_eq!(checked_roles().len(), 9);
}

#[test]
fn every_crate_with_a_node_module_is_checked() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut with_node = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        // The binary's runners (`fabrx node <role>`) and the contract itself.
        if name == "fabrx" || name == "wire" {
            continue;
        }
        if dir.join("src/node.rs").exists() || dir.join("src/node/mod.rs").exists() {
            with_node.insert(name);
        }
    }
    let checked: BTreeSet<String> = checked_roles().into_iter().map(String::from).collect();
    assert_eq!(
        with_node, checked,
        "a crate with a node module must follow the node contract and be listed here"
    );
}
