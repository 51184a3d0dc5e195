//! Committer signature verifier: checks namespace endorsements against policies (not yet implemented).
