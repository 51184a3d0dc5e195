//! Load generator (not yet implemented).
