//! The serial oracle lives with the committer (`sidecar::oracle`), so that the pipeline's
//! tests, the recovery check and `--verify-serial` check against one implementation.

pub use sidecar::oracle::{Rows, SerialOracle};
