//! Token chaincode and threshold endorsement (not yet implemented).
