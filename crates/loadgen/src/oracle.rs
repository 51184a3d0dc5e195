//! The serial oracle lives in `testkit::oracle`, so that the pipeline's tests, the
//! recovery check and `--verify-serial` check against one implementation.

pub use testkit::oracle::{Rows, SerialOracle};
