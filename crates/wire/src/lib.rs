//! Protobuf/gRPC messages of fabrx generated from proto/, with conversions to the domain types.
