//! HTTP plumbing shared by every replaylab crate that talks over a socket.
//!
//! The same code runs inside a turmoil simulation (feature `turmoil`) and on real loopback
//! ports: the only difference is how a byte stream is obtained ([`Connect`], [`Accept`]).
//!
//! - [`HttpClient`] sends one HTTP/1.1 request on a fresh connection and reads the whole
//!   answer. One connection per request keeps failure modes explicit: a connection closed
//!   before the answer is [`TransportError::ClosedWithoutResponse`], never a silent retry.
//! - [`serve`] serves an axum `Router` on any [`Accept`]or. Every request carries a
//!   [`ConnectionControl`] extension with which a handler can close its own connection
//!   without answering (the fake downstream's `commit_then_drop`).
//! - [`Problem`] is an `application/problem+json` answer (RFC 9457).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod client;
mod clock;
mod percent;
mod problem;
mod server;
#[cfg(feature = "turmoil")]
mod sim;

pub use client::{Connect, HttpClient, HttpRequest, HttpResponse, Io, TcpConnector, TransportError};
pub use clock::{until_clock_reads, Clock, SystemClock};
pub use percent::{percent_decode, percent_encode};
pub use problem::Problem;
pub use server::{serve, serve_connection, Accept, ConnectionControl, TcpAcceptor};
#[cfg(feature = "turmoil")]
pub use sim::{SimAcceptor, SimConnector};

/// The largest request or response body any replaylab endpoint reads, in bytes.
/// Bigger bodies are refused (413 on a server, [`TransportError::BodyTooLarge`] on a client):
/// nothing in the protocols needs more, and an unbounded read is a memory hazard.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
