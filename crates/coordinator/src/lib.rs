//! Committer coordinator: cross-block dependency graph (not yet implemented).
