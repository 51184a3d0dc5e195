#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! `netconfig::update::diff`: a table of edits, each with the exact lines it gives, and
//! the properties every edit and pair of edits keeps (no lines for equal files, some for
//! different ones, and each change undone by the reverse diff).

use netconfig::file::{NetworkFile, UpdatePolicyFile};
use netconfig::update::diff;
use netconfig::{GenerateSpec, generate};

fn base() -> NetworkFile {
    let dir = tempfile::tempdir().unwrap();
    generate(&GenerateSpec {
        seed: Some(3),
        ..GenerateSpec::new(2, 1, dir.path())
    })
    .unwrap()
    .config
    .file()
    .clone()
}

type Edit = fn(&mut NetworkFile);
/// The lines expected, given the base file.
type Expected = fn(&NetworkFile) -> Vec<String>;

fn table() -> Vec<(&'static str, Edit, Expected)> {
    vec![
        (
            "a parameter",
            |f| {
                f.sequence = 1;
                f.batching.batch_timeout_ms = 50;
            },
            |_| {
                vec![
                    "sequence: 0 → 1".into(),
                    "batching.batch_timeout_ms: 200 → 50".into(),
                ]
            },
        ),
        (
            "two parameters of two blocks",
            |f| {
                f.consensus.request_timeout_ms = 4000;
                f.router.stream_max_in_flight = 8;
            },
            |_| {
                vec![
                    "consensus.request_timeout_ms: 3000 → 4000".into(),
                    "router.stream_max_in_flight: 256 → 8".into(),
                ]
            },
        ),
        (
            "an endpoint",
            |f| f.parties[1].router = "10.0.0.2:7050".into(),
            |b| vec![format!("party 2 router: {} → 10.0.0.2:7050", b.parties[1].router)],
        ),
        (
            "a consenter key",
            |f| f.parties[0].consenter.public_key = "ed25519:00".into(),
            |b| {
                vec![format!(
                    "party 1 consenter key: {} → ed25519:00",
                    b.parties[0].consenter.public_key
                )]
            },
        ),
        (
            "a batcher endpoint",
            |f| f.parties[0].batchers[0].endpoint = "h:1".into(),
            |b| {
                vec![format!(
                    "party 1 batcher of shard 0 endpoint: {} → h:1",
                    b.parties[0].batchers[0].endpoint
                )]
            },
        ),
        (
            "an admin key removed",
            |f| f.parties[1].admin_key = None,
            |b| {
                vec![format!(
                    "party 2 admin key: {} → (none)",
                    b.parties[1].admin_key.clone().unwrap()
                )]
            },
        ),
        (
            "a party removed",
            |f| {
                f.parties.pop();
            },
            |_| vec!["party 2 removed".into()],
        ),
        (
            "a party added",
            |f| {
                let mut p = f.parties[0].clone();
                p.id = u32::try_from(f.parties.len()).unwrap() + 1;
                p.router = "r3:1".into();
                p.assembler = None;
                f.parties.push(p);
            },
            |b| {
                let p = &b.parties[0];
                // In the order of a party's nodes: router, consenter, assembler,
                // batchers, admin.
                vec![
                    "party 3 added".into(),
                    "party 3 router: r3:1".into(),
                    format!("party 3 consenter endpoint: {}", p.consenter.endpoint),
                    format!("party 3 consenter key: {}", p.consenter.public_key),
                    "party 3 assembler: (none)".into(),
                    format!("party 3 batcher of shard 0 endpoint: {}", p.batchers[0].endpoint),
                    format!("party 3 batcher of shard 0 key: {}", p.batchers[0].public_key),
                    format!("party 3 admin key: {}", p.admin_key.clone().unwrap()),
                ]
            },
        ),
        (
            "a certificate rotated",
            |f| f.tls.as_mut().unwrap().certificates[0].sha256 = "ab".repeat(32),
            |b| {
                let c = &b.tls.as_ref().unwrap().certificates[0];
                vec![format!(
                    "tls certificate {}: {} of party {}, sha256 {} → {} of party {}, sha256 {}",
                    c.name,
                    c.role,
                    c.party,
                    c.sha256,
                    c.role,
                    c.party,
                    "ab".repeat(32)
                )]
            },
        ),
        (
            "a certificate given to another holder",
            |f| f.tls.as_mut().unwrap().certificates[0].role = "batcher".into(),
            |b| {
                let c = &b.tls.as_ref().unwrap().certificates[0];
                vec![format!(
                    "tls certificate {}: {} of party {}, sha256 {} → batcher of party {}, sha256 {}",
                    c.name, c.role, c.party, c.sha256, c.party, c.sha256
                )]
            },
        ),
        (
            "a certificate removed",
            |f| {
                f.tls.as_mut().unwrap().certificates.remove(0);
            },
            |b| {
                let c = &b.tls.as_ref().unwrap().certificates[0];
                vec![format!(
                    "tls certificate {} removed ({} of party {}, sha256 {})",
                    c.name, c.role, c.party, c.sha256
                )]
            },
        ),
        (
            "an update policy",
            |f| f.update_policy = Some(UpdatePolicyFile { signatures: 2 }),
            |_| vec!["update_policy: (absent) → {\"signatures\":2}".into()],
        ),
        (
            "a long text",
            |f| f.fabric.as_mut().unwrap().orgs[0].ca = "x".repeat(150),
            |b| {
                let ca = &b.fabric.as_ref().unwrap().orgs[0].ca;
                let line = format!("fabric.orgs[0].ca: ({} characters, sha256 ", ca.chars().count());
                vec![line]
            },
        ),
        (
            "the client list",
            |f| {
                f.router.client_auth = netconfig::file::ClientAuthFile::Signed { clients: vec![] };
            },
            |_| {
                vec![
                    "router.client_auth.clients: (absent) → []".into(),
                    "router.client_auth.mode: \"open\" → \"signed\"".into(),
                ]
            },
        ),
    ]
}

#[test]
fn each_edit_gives_its_lines() {
    let base = base();
    assert!(diff(&base, &base).is_empty());
    for (name, edit, expected) in table() {
        let mut next = base.clone();
        edit(&mut next);
        let got = diff(&base, &next);
        let want = expected(&base);
        if name == "a long text" {
            // Its digest is not spelt out here: the start of the line, and one line.
            assert_eq!(got.len(), 1, "{name}: {got:?}");
            assert!(got[0].starts_with(&want[0]), "{name}: {got:?}");
            assert!(got[0].ends_with("…)"), "{name}: {got:?}");
            continue;
        }
        assert_eq!(got, want, "{name}");
    }
}

/// The line the reverse diff gives for a line of the forward one: `x: a → b` becomes
/// `x: b → a`, `party p removed` becomes `party p added` and the reverse; the entries
/// listed under an added party have none.
fn reversed(line: &str) -> Option<String> {
    if let Some((what, change)) = line.split_once(": ") {
        let (from, to) = change.split_once(" → ")?;
        return Some(format!("{what}: {to} → {from}"));
    }
    if let Some(party) = line.strip_suffix(" removed") {
        return Some(format!("{party} added"));
    }
    line.strip_suffix(" added")
        .map(|party| format!("{party} removed"))
}

#[test]
fn every_edit_is_undone_by_its_reverse_and_equal_files_give_none() {
    let base = base();
    let edits = table();
    // Every edit alone, and every pair of edits together.
    for (i, (a, edit_a, _)) in edits.iter().enumerate() {
        for (b, edit_b, _) in edits.iter().skip(i) {
            let mut next = base.clone();
            edit_a(&mut next);
            edit_b(&mut next);
            let forward = diff(&base, &next);
            let back = diff(&next, &base);
            assert!(!forward.is_empty(), "{a} + {b}");
            assert!(diff(&next, &next).is_empty(), "{a} + {b}");
            for line in &forward {
                if let Some(undo) = reversed(line) {
                    assert!(back.contains(&undo), "{a} + {b}: {undo:?} not in {back:?}");
                }
            }
            for line in &back {
                if let Some(undo) = reversed(line) {
                    assert!(forward.contains(&undo), "{a} + {b}: {undo:?} not in {forward:?}");
                }
            }
        }
    }
}
