//! Command-line parsing and dispatch. Clap types live here and nowhere else; each command
//! validates its flags into a config before doing anything.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use fake_downstream::{Downstream, DownstreamConfig, SystemClock};

use crate::exit;

/// replaylab: prove that an agent tool executor turns duplicate delivery into one effect.
///
/// Exit codes: 0 success, 1 a check or row failed, 2 bad usage or input.
#[derive(Debug, Parser)]
#[command(name = "replaylab", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the fake downstream on a real TCP port, like WireMock, until interrupted.
    ///
    /// Prints `listening on http://HOST:PORT` as its first line. Fault rules go to
    /// `POST /__admin/faults`; the ledger is at `GET /__admin/ledger`.
    Downstream {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// A JSON file with the service configuration (idempotency and receipts per
        /// service, job duration, webhook).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Runs the command line of this process and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            let code = if error.use_stderr() { exit::BAD_INPUT } else { exit::SUCCESS };
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("replaylab: {failure:#}");
            ExitCode::from(failure.code)
        }
    }
}

/// An error with the exit code it ends the process with.
#[derive(Debug)]
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.error)
        } else {
            write!(f, "{}", self.error)
        }
    }
}

fn bad_input(error: anyhow::Error) -> Failure {
    Failure { code: exit::BAD_INPUT, error }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Downstream { listen, config } => serve_downstream(&listen, config.as_deref()),
    }
}

fn serve_downstream(listen: &str, config_path: Option<&std::path::Path>) -> Result<u8, Failure> {
    let address: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen {listen:?} is not an address like 127.0.0.1:8080"))
        .map_err(bad_input)?;
    let config = match config_path {
        None => DownstreamConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("failed to read {}", path.display()))
                .map_err(bad_input)?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: invalid downstream configuration", path.display()))
                .map_err(bad_input)?
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")
        .map_err(|error| Failure { code: exit::CHECK_FAILED, error })?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("failed to listen on {address}"))
            .map_err(bad_input)?;
        let bound = listener.local_addr().context("failed to read the bound address").map_err(bad_input)?;
        let downstream = Downstream::new(config, Arc::new(SystemClock), Arc::new(wire::TcpConnector));
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "listening on http://{bound}");
        let _ = stdout.flush();
        tokio::select! {
            served = wire::serve(wire::TcpAcceptor(listener), downstream.router()) => {
                served.context("the listener failed").map_err(|error| Failure { code: exit::CHECK_FAILED, error })?;
            }
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(exit::SUCCESS)
    })
}
