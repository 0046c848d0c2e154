//! The reference executor against the real fake downstream (served on a loopback port) and a
//! real SQLite claim store. Every test asserts on the downstream's effect ledger, the ground
//! truth, not only on what the executor answered.

mod calls;
mod faults;
mod jobs;
mod leases;
mod mutants;
mod queue;
mod reconcile;
mod reference_gate;
mod retention;
mod store_conformance;
mod store_file;
mod support;
