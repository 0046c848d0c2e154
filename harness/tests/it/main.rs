//! The harness's integration tests, as one binary: one link instead of one per file (each
//! links the whole harness: turmoil, the MCP SDK, both claim stores). Each module is one area;
//! `support` and `installed` are helpers they share. `log_capture` stays a binary of its own:
//! it needs a process in which no other test has registered a dispatcher.

mod installed;
mod support;

mod allowed;
mod black_box;
mod cli;
mod corpus;
mod evidence;
mod explore;
mod fuzz;
mod idle;
mod merge;
mod mutants;
mod oracles;
mod plain_text;
mod postgres;
mod premises;
mod python_examples;
mod reading;
mod real_env;
mod report_browser;
mod reports_privacy;
mod runs;
mod serve;
mod slow_machine;
mod stripe_examples;
mod typescript_examples;
mod unusual;
mod vendor_sdk;
