//! Domain model of fabrx: transactions, namespaces, statuses, digests, shard mapping, quorum math and structural checks.
