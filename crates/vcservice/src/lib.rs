//! Validator-committer: validates reads and commits writes on a state backend (not yet implemented).
