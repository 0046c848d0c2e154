//! The reference executor as an MCP server (`replaylab executor serve`): an executor, not the
//! harness. It is what the process world tests when it tests the reference, and what a user's
//! own MCP server can be compared with.
//!
//! - [`serve`]: the server over stdio or streamable HTTP, speaking `docs/mcp.md`'s
//!   conventions (`protocol::mcp`).
//! - [`real_env`]: the real world's `WorkerEnv` it runs the reference in (the downstream over
//!   TCP, the system clock, the authorizer over HTTP, reconciliations to a file).
//!
//! Invariants: it may import `executor`, `protocol`, `wire` and `fake-downstream` (its service
//! names, to check `REPLAYLAB_SERVICES`); never the judge, a world, the
//! runner or the command (a process under test knows nothing of the harness).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod real_env;
pub mod serve;
