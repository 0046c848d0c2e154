//! The fake downstream's integration tests: in simulation (deterministic) and on a real
//! loopback port. Every test asserts on the effect ledger, the ground truth.

mod api_doc;
mod github;
mod layout;
mod real_port;
mod sim;
mod slack;
mod strict;
mod stripe;
