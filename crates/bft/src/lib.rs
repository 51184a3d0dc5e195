//! BFT consensus engine (PBFT family) as a pure state machine (not yet implemented).
