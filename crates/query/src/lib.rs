//! Query service over committed state (not yet implemented).
