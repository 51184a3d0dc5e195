//! The `/metrics` addresses `fabrx up` gives its nodes (docs/network.md "Metrics"):
//! node listening on port P serves its metrics on `127.0.0.1:(P + span)`, `span` being
//! the width of the network's port range (highest endpoint port − lowest + 1, over every
//! node the network config names, whether or not this `up` starts it). The metrics ports
//! thus fill the range just above the node ports and never collide with one, and a
//! node's metrics address depends on the network config only (a later `up` with other
//! flags gives a node the same address).

use super::NodeEntry;

/// The port of a `host:port` listen address.
fn port_of(listen: &str) -> Option<u16> {
    listen.rsplit_once(':')?.1.parse().ok()
}

/// The width of the port range of `all` (every node of the network): highest port −
/// lowest + 1; `None` when no node has a port.
pub(super) fn span(all: &[NodeEntry]) -> Option<u16> {
    let ports: Vec<u16> = all.iter().filter_map(|n| port_of(&n.listen)).collect();
    let (min, max) = (ports.iter().min()?, ports.iter().max()?);
    max.checked_sub(*min)?.checked_add(1)
}

/// The metrics address of a node listening on `listen` in a network of port span
/// `span`; `None` past port 65535 (the node then serves no metrics).
pub(super) fn address(listen: &str, span: u16) -> Option<String> {
    let port = port_of(listen)?.checked_add(span)?;
    Some(format!("127.0.0.1:{port}"))
}

/// Gives every node of `nodes` its metrics address (in `metrics` and, except for a
/// validator-committer whose address goes into its config file, as `--metrics ADDR` in
/// its argv).
pub(super) fn assign(nodes: &mut [NodeEntry], span: u16) {
    for node in nodes {
        let Some(addr) = address(&node.listen, span) else {
            continue;
        };
        if node.role != "vcservice" {
            node.argv.extend(["--metrics".into(), addr.clone()]);
        }
        node.metrics = Some(addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: &str, listen: &str) -> NodeEntry {
        NodeEntry {
            name: role.into(),
            role: role.into(),
            party: 1,
            shard: None,
            pid: 0,
            argv: vec!["fabrx".into()],
            cwd: ".".into(),
            listen: listen.into(),
            metrics: None,
            data_dir: ".".into(),
            log: "x.log".into(),
        }
    }

    #[test]
    fn metrics_ports_sit_one_span_above_and_miss_every_node_port() {
        let mut nodes = vec![
            node("router", "127.0.0.1:7050"),
            node("consenter", "127.0.0.1:7051"),
            node("vcservice", "127.0.0.1:7060"),
        ];
        let span = span(&nodes).expect("ports");
        assert_eq!(span, 11);
        assign(&mut nodes, span);
        let metrics: Vec<_> = nodes.iter().map(|n| n.metrics.clone()).collect();
        assert_eq!(
            metrics,
            [
                Some("127.0.0.1:7061".to_owned()),
                Some("127.0.0.1:7062".to_owned()),
                Some("127.0.0.1:7071".to_owned()),
            ]
        );
        assert_eq!(nodes[0].argv, ["fabrx", "--metrics", "127.0.0.1:7061"]);
        assert_eq!(nodes[2].argv, ["fabrx"], "the vcservice reads it from its file");
        assert_eq!(address("127.0.0.1:65530", 11), None);
    }
}
