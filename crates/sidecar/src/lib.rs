//! Committer sidecar: pulls blocks, runs structural checks, aggregates statuses (not yet implemented).
