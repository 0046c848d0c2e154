//! The reference executor (work in progress).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]
