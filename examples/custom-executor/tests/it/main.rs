//! The example's tests, as one binary (one link of the harness instead of three): the command
//! as a user runs it, a property test of the executor, and the two variants against the matrix.

mod command;
mod property;
mod variants;
