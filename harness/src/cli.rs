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

use crate::executors::{self, ExecutorSpec};
use crate::exit;
use crate::matrix::{self, MatrixConfig};
use crate::runner;
use crate::text::quoted;
use crate::verdict::{MatrixResult, RunResult, Verdict};
use scenarios::Scenario;

/// The most operations `bench store` measures: ten million rows of each kind already take
/// minutes and a few GB.
const MAX_BENCH_OPERATIONS: u64 = 10_000_000;

/// replaylab: prove that an agent tool executor turns duplicate delivery into one effect.
///
/// Exit codes: 0 success, 1 a check or row failed, 2 bad usage or input.
#[derive(Debug, Parser)]
#[command(name = "replaylab", version = runner::version::line())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A black-box executor: an MCP server started as processes (`docs/mcp.md`).
#[derive(Debug, clap::Args)]
struct BlackBoxArgs {
    /// Test an MCP server as a black box: the command that starts one worker process (run by
    /// `sh -c`; `{worker}`, `{state}` (a directory per run that survives crashes), `{run}` (a
    /// name of the run: lowercase letters, digits and `_`, e.g. a database schema) and `{port}`
    /// are replaced). Instead of --executor.
    #[arg(long)]
    executor_cmd: Option<String>,
    /// With --executor-cmd: how to talk to the processes: `stdio`, or `http` (streamable HTTP:
    /// the process serves MCP at http://127.0.0.1:{port}/mcp, REPLAYLAB_MCP_LISTEN).
    #[arg(long, default_value = "stdio", requires = "executor_cmd")]
    transport: String,
    /// With --executor-cmd: worker processes per run.
    #[arg(long, default_value_t = 2, requires = "executor_cmd")]
    workers: usize,
    /// With --executor-cmd: also pass the operation's key as this argument
    /// (`idempotency_key`, or SEP-3182's `idempotencyKey`), besides `_meta`.
    #[arg(long, requires = "executor_cmd")]
    key_argument: Option<String>,
    /// With --executor-cmd: how long a worker process may take from its start to the end of
    /// the MCP handshake (`90s`, `2m`; default 120s); a slower start makes the run `crashed`.
    #[arg(long, requires = "executor_cmd")]
    start_timeout: Option<String>,
    /// With --executor-cmd: the tool map that binds the scenarios' roles to the server's own
    /// tools (docs/toolmap.md). Without it, `replaylab.toml` in the working directory, if
    /// there is one.
    #[arg(long, requires = "executor_cmd")]
    config: Option<PathBuf>,
}

/// Seeds per scenario of a matrix unless `--seeds` says.
const MATRIX_SEEDS: u64 = 20;
/// Repeats per scenario of a black-box matrix unless `--repeat` says.
const BLACK_BOX_REPEATS: u64 = 3;

/// The most worker processes a black-box run starts: as many as a scenario may name.
const MAX_WORKERS: usize = scenarios::MAX_WORKERS as usize;
/// The longest `--start-timeout`.
const MAX_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every scenario for many seeds against an executor and report each row of the
    /// source document's two tables (C1..C10, F1..F9).
    Matrix {
        /// The executor under test (see `replaylab executors`).
        #[arg(long, default_value = "reference", conflicts_with = "executor_cmd")]
        executor: String,
        /// Seeds per scenario (default 20).
        #[arg(long)]
        seeds: Option<u64>,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        first_seed: u64,
        /// Where to write the reports.
        #[arg(long, default_value = "replaylab-report")]
        out: PathBuf,
        /// Which reports to write: any of json, md, junit, html (comma-separated), or all.
        #[arg(long, default_value = "all")]
        format: String,
        /// Also run these scenario files (repeatable).
        #[arg(long = "scenario-file")]
        scenario_files: Vec<PathBuf>,
        /// Run each seed twice and fail on any history difference.
        #[arg(long)]
        check_determinism: bool,
        /// Run only the seeds of shard I of N (`2/4`: seed % N == I - 1), for one CI machine
        /// of N; `replaylab merge` joins the shards' reports into the whole run's.
        #[arg(long)]
        shard: Option<String>,
        /// Threads (default and most: the machine's cores; with --executor-cmd, two to eight per
        /// core, by how long the server's one process took to start; no more than there are runs).
        #[arg(long)]
        jobs: Option<usize>,
        /// The executor's `tracing` events captured for the failing run each scenario shows
        /// (in the reports' event tables): a level or targets with levels. Default: `RUST_LOG`,
        /// else `debug`. The simulator's and HTTP stacks' events (turmoil, hyper, h2, tokio,
        /// ...) are never captured, and the scenario's argument texts are redacted. Not with
        /// --executor-cmd: a process's own stderr is quoted (redacted) in a failing run's notes.
        #[arg(long, conflicts_with = "executor_cmd")]
        log: Option<String>,
        /// Run only these scenarios (ids or names, comma-separated): `--only S02,S03`.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// With --executor-cmd: runs per scenario (real runs are not seeded; they repeat).
        #[arg(long, requires = "executor_cmd", conflicts_with_all = ["seeds", "first_seed", "check_determinism", "log"])]
        repeat: Option<u64>,
        /// Rows a release gate requires (comma-separated): `C2,C3,F2`, a prose scenario's row
        /// (`S13`), `seed-rows` (the source document's C1..C10 and F1..F9) or `all` (every row of
        /// the run). Exit 1 when one of them is not applicable or did not pass, with a line per
        /// row saying why.
        #[arg(long, value_delimiter = ',')]
        require: Vec<String>,
        /// With --executor-cmd: exit 1 when a tool declares an MCP hint in its tools/list
        /// (`idempotentHint`, `destructiveHint`, `readOnlyHint`) that its results contradict.
        #[arg(long, requires = "executor_cmd")]
        check_annotations: bool,
        #[command(flatten)]
        black_box: BlackBoxArgs,
    },
    /// Run one scenario with one seed and print the verdict (and the history with --trace).
    Run {
        /// The scenario: `S02`, `lost_response_after_commit` or `S02_lost_response_after_commit`.
        #[arg(required_unless_present = "case")]
        scenario: Option<String>,
        /// The seed.
        #[arg(long, required_unless_present = "case")]
        seed: Option<u64>,
        /// A saved case (a scenario file with its `seed`), as `replaylab explore` writes them.
        #[arg(long, conflicts_with_all = ["scenario", "seed"])]
        case: Option<PathBuf>,
        /// The executor under test.
        #[arg(long, default_value = "reference", conflicts_with = "executor_cmd")]
        executor: String,
        /// Print the history as readable lines (with the executor's log, when captured,
        /// each line after the history event it follows).
        #[arg(long)]
        trace: bool,
        /// Capture the executor's `tracing` events on simulated time: a level (`debug`) or
        /// targets with levels (`executor=debug,my_crate=trace`). Default: `RUST_LOG`, else
        /// nothing. The simulator's and HTTP stacks' events (turmoil, hyper, h2, tokio, ...)
        /// are never captured, and the scenario's argument texts are redacted.
        #[arg(long)]
        log: Option<String>,
        /// Look the scenario up in these files too.
        #[arg(long = "scenario-file")]
        scenario_files: Vec<PathBuf>,
        /// Run it twice and fail if the histories differ.
        #[arg(long)]
        check_determinism: bool,
        /// With --executor-cmd: run it this many times and say how many failed (a real run is
        /// not deterministic: a saved case fails at a rate).
        #[arg(long, requires = "executor_cmd", conflicts_with_all = ["check_determinism", "trace", "log"])]
        repeat: Option<u64>,
        #[command(flatten)]
        black_box: BlackBoxArgs,
    },
    /// Random workloads under random faults, checked by every oracle; failing seeds are grouped
    /// by signature, one case of each group shrunk, printed with a reproduce command, and saved
    /// to the regressions file. With --executor-cmd, against real processes: a group counts when
    /// its case fails again, and the saved case states its rate.
    Explore {
        /// How many seeds (at most 10,000,000: days of work on one machine; shard a longer
        /// campaign with --shard or --start).
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Run only the seeds of shard I of N (`2/4`): seed % N == I - 1.
        #[arg(long)]
        shard: Option<String>,
        /// The executor under test.
        #[arg(long, default_value = "reference", conflicts_with = "executor_cmd")]
        executor: String,
        /// Runs side by side (default and most: the machine's cores; with --executor-cmd, two to
        /// eight per core, by how long the server's one process took to start; no more than
        /// there are cases).
        #[arg(long)]
        jobs: Option<usize>,
        /// Saved failing cases: replayed first, new ones appended.
        #[arg(long, default_value = "replaylab-regressions.jsonl")]
        regressions: PathBuf,
        /// Where shrunk cases are written as scenario files, and `explore.json` (what was run,
        /// covered and found; `replaylab merge` joins shards' records).
        #[arg(long, default_value = "replaylab-explore")]
        out: PathBuf,
        /// Stop at the first failing seed.
        #[arg(long)]
        stop_at_first: bool,
        /// Run every case twice and fail on any history difference (the simulation only).
        #[arg(long)]
        check_determinism: bool,
        #[command(flatten)]
        black_box: BlackBoxArgs,
    },
    /// Merge the reports of a run's shards (`matrix --shard I/N`, `explore --shard I/N` on N
    /// machines) into the whole run's: the same bytes the unsharded run writes (with
    /// SOURCE_DATE_EPOCH); an exploration's coverage floor is judged again over the sum.
    Merge {
        /// The shards' directories (each holding a `matrix.json`, an `explore.json`, or both),
        /// or the files.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Where to write the merged reports.
        #[arg(long, default_value = "replaylab-report")]
        out: PathBuf,
        /// Which reports to write: any of json, md, junit, html (comma-separated), or all.
        #[arg(long, default_value = "all")]
        format: String,
    },
    /// Re-derive a matrix report: check every count against the runs it records, that it was
    /// made by this replaylab at this commit, and run a sample of its runs again, comparing
    /// their history digests and verdicts. Exit 0 for a genuine report, 1 for a forged, edited
    /// or stale one.
    Verify {
        /// The report's directory (holding `matrix.json`), or the file.
        report: PathBuf,
        /// How many runs to run again besides the one each scenario shows, drawn at random;
        /// or `all`.
        #[arg(long, default_value = "50")]
        sample: String,
        /// The seed the sample is drawn from (default: drawn from the clock, and printed).
        #[arg(long)]
        sample_seed: Option<u64>,
        /// Threads (default and most: the machine's cores; no more than there are runs).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Run the matrix against the reference and every mutant of the zoo; exit 0 only when the
    /// reference passes every row and every mutant is killed.
    Mutants {
        /// Seeds per scenario.
        #[arg(long, default_value_t = 10)]
        seeds: u64,
        /// Where to write mutants.json and mutants.md.
        #[arg(long, default_value = "replaylab-report")]
        out: PathBuf,
        /// Threads (default and most: the machine's cores; no more than there are runs).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// List the scenarios and the rows they cover.
    Scenarios {
        /// Also list these scenario files.
        #[arg(long = "scenario-file")]
        scenario_files: Vec<PathBuf>,
    },
    /// Start an MCP server once, read its tools/list, and write a starting tool map
    /// (replaylab.toml, docs/toolmap.md): the roles it seems to play, and what to decide.
    Init {
        /// The command that starts one worker process of the server (as for matrix).
        #[arg(long)]
        executor_cmd: String,
        /// How to talk to it: `stdio`, or `http`.
        #[arg(long, default_value = "stdio")]
        transport: String,
        /// Where to write the map.
        #[arg(long, default_value = world::toolmap::FILE_NAME)]
        out: PathBuf,
        /// Overwrite a file that is there.
        #[arg(long)]
        force: bool,
    },
    /// List the executors that can be named with --executor.
    Executors,
    /// Measure: `sim` (harness runs/s against a raw turmoil yardstick) or `store` (executor
    /// claims/s against hand-written SQL).
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
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
    /// Run an executor as a process of its own: `executor serve`.
    Executor {
        #[command(subcommand)]
        what: ExecutorCommand,
    },
    /// Fuzz the scenario and fault-rule parsers, the fake downstream, argument fingerprints
    /// and saved cases with inputs drawn from a seed; every panic and broken property is
    /// printed and its input written to `--out`.
    Fuzz {
        /// One target (scenario, fault_rule, downstream, fingerprint, case) or all.
        #[arg(long, default_value = "all")]
        target: String,
        /// Inputs per target.
        #[arg(long, default_value_t = crate::fuzz::DEFAULT_INPUTS)]
        inputs: u64,
        /// The seed the inputs are drawn from.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Where findings are written (`<target>-<n>.txt`, the exact input).
        #[arg(long, default_value = crate::fuzz::DEFAULT_OUT)]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum ExecutorCommand {
    /// Serve the reference executor as an MCP server (replaylab's conventions, docs/mcp.md),
    /// in the real world: the fake downstream at REPLAYLAB_DOWNSTREAM_URL, real time, the
    /// claim store in a SQLite file or a Postgres database. Reads REPLAYLAB_WORKER, REPLAYLAB_INCARNATION,
    /// REPLAYLAB_STATE_DIR, REPLAYLAB_DOWNSTREAM_URL and, optionally, REPLAYLAB_AUTHZ_URL,
    /// REPLAYLAB_LEASE_MS, REPLAYLAB_RETENTION_MS, REPLAYLAB_DOWNSTREAM_TIMEOUT_MS,
    /// REPLAYLAB_SERVICES (what each service does: keys, receipts) and REPLAYLAB_OPERATORS_URL
    /// (where to hand over what it cannot settle; else a file in the state directory).
    Serve {
        /// How MCP is spoken: stdio, or http (streamable HTTP at REPLAYLAB_MCP_LISTEN).
        #[arg(long, default_value = "stdio")]
        transport: String,
        /// The claim store: sqlite:PATH (a file), or postgres://USER@HOST:PORT/DB (a Postgres
        /// database); either survives the process and is shared by every process that opens it.
        #[arg(long)]
        store: String,
        /// With a postgres:// store: the schema the store's tables live in (created if missing;
        /// lowercase letters, digits and `_`), e.g. `run_{run}` under --executor-cmd.
        #[arg(long)]
        schema: Option<String>,
        /// Serve a mutant of the zoo instead of the reference (`blind_retry`, as `replaylab
        /// mutants` lists them): the same defect, as a process, to check that the black-box
        /// world catches what the simulation does.
        #[arg(long)]
        mutant: Option<String>,
        /// Serve no replaylab.poll and no replaylab.reconcile: a server as most are, which the
        /// agent can only call (the harness then never polls it).
        #[arg(long)]
        no_poll: bool,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Harness runs per second against a raw turmoil program with the same message count and
    /// simulated span, in the same process.
    Sim {
        /// Runs of each (at most 1,000,000).
        #[arg(long, default_value_t = 2000)]
        runs: u64,
        /// Threads (default and most: the machine's cores; no more than there are runs).
        #[arg(long)]
        jobs: Option<usize>,
        /// The scenario run (a typical case).
        #[arg(long, default_value = "S01")]
        scenario: String,
        /// The executor run.
        #[arg(long, default_value = "reference")]
        executor: String,
    },
    /// Executor claims per second (claim + complete through the store API) against plain
    /// INSERT .. ON CONFLICT + UPDATE on the same kind of database: two SQLite files, or two
    /// fresh schemas in a Postgres database with --store.
    Store {
        /// Operations of each.
        #[arg(long, default_value_t = 20_000)]
        operations: u64,
        /// A Postgres database to measure in (postgres://USER@HOST:PORT/DB); default: SQLite
        /// files in the temporary directory.
        #[arg(long)]
        store: Option<String>,
    },
    /// The black-box matrix once (one repeat): its wall time against the target (under 90 s
    /// with 2 workers on 2 cores), and where the real time went. Default command: this
    /// binary's `executor serve` on a SQLite file per run.
    BlackBox {
        /// Threads running runs side by side (default: four per core, at least eight).
        #[arg(long)]
        jobs: Option<usize>,
        #[command(flatten)]
        black_box: BlackBoxArgs,
    },
}

/// What `bench black-box` holds the black-box matrix to: one repeat, two workers, two cores.
const BLACK_BOX_TARGET: std::time::Duration = std::time::Duration::from_secs(90);

/// Runs the command line of this process and returns its exit code.
pub fn main() -> ExitCode {
    main_with(Vec::new())
}

/// The whole `replaylab` command (every subcommand, report format, exit code and progress
/// output) with `extra` executors beside the built-in ones, for a binary of your own:
///
/// ```no_run
/// use std::rc::Rc;
/// use harness::prelude::*;
///
/// # #[derive(Debug, Default)] struct MyFactory;
/// # impl protocol::ExecutorFactory for MyFactory {
/// #     fn start(&self, _env: protocol::WorkerEnv) -> Box<dyn protocol::Executor> { unimplemented!() }
/// # }
/// fn main() -> std::process::ExitCode {
///     let mine = ExecutorSpec::new("mine", |_run: &str| Ok(Rc::new(MyFactory) as Rc<dyn ExecutorFactory>))
///         .capabilities(ExecutorCapabilities::tools(["tickets.create"]));
///     harness::cli::main_with(vec![mine])
/// }
/// ```
///
/// `my-binary matrix --executor mine --seeds 5 --out DIR` then runs the matrix against it.
/// Reproduce commands name the program actually run ([`program_name`]): under `cargo run`,
/// `cargo run [--release] -p PACKAGE --bin BINARY --`; else the binary as it was invoked. An
/// extra executor whose name is empty, has white space, or is taken is refused (exit 2).
pub fn main_with(extra: Vec<ExecutorSpec>) -> ExitCode {
    let program = program_name(
        std::env::args_os().next().map(PathBuf::from),
        std::env::var_os("CARGO").is_some(),
        std::env::var("CARGO_PKG_NAME").ok(),
    );
    let registry = match Registry::new(extra, &program) {
        Ok(registry) => registry,
        Err(failure) => {
            eprintln!("replaylab: {failure:#}");
            return ExitCode::from(failure.code);
        }
    };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            let code = if error.use_stderr() { exit::BAD_INPUT } else { exit::SUCCESS };
            return ExitCode::from(code);
        }
    };
    match run(cli, &registry) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("replaylab: {failure:#}");
            ExitCode::from(failure.code)
        }
    }
}

/// The program a reproduce command names, from how this process was started: `argv0` (its
/// first argument), whether it runs under Cargo (`CARGO` is set) and `package`
/// (`CARGO_PKG_NAME`, which `cargo run` sets).
///
/// - Under `cargo run`: `cargo run -p PACKAGE --bin BINARY --`, with `--release` when the
///   binary lies in a `release` directory (`--profile NAME` for another profile's).
/// - Found on `PATH` (invoked without a directory): its name, `replaylab`.
/// - Else the path it was invoked by, so that the command works from the same directory.
pub fn program_name(argv0: Option<PathBuf>, under_cargo: bool, package: Option<String>) -> String {
    let Some(path) = argv0 else { return executors::DEFAULT_PROGRAM.into() };
    let binary = path.file_stem().map(|stem| stem.to_string_lossy().into_owned());
    if let (true, Some(package), Some(binary)) = (under_cargo, package, binary.as_deref()) {
        let profile = path.parent().and_then(|dir| dir.file_name()).map(|d| d.to_string_lossy().into_owned());
        let profile = match profile.as_deref() {
            Some("release") => " --release".to_owned(),
            Some("debug") | None => String::new(),
            Some(other) => format!(" --profile {}", crate::text::shell_quote(other)),
        };
        return format!(
            "cargo run{profile} -p {} --bin {} --",
            crate::text::shell_quote(&package),
            crate::text::shell_quote(binary)
        );
    }
    let text = path.to_string_lossy();
    if text.is_empty() {
        return executors::DEFAULT_PROGRAM.into();
    }
    crate::text::shell_quote(&text)
}

/// The executors a command can name: the built-in ones and a binary's own, each reproduced
/// with the program that was run.
struct Registry {
    executors: Vec<ExecutorSpec>,
    program: String,
}

impl Registry {
    fn new(extra: Vec<ExecutorSpec>, program: &str) -> Result<Self, Failure> {
        let mut executors = executors::all();
        for spec in extra {
            if spec.name.is_empty() || spec.name.chars().any(char::is_whitespace) {
                return Err(bad_input(anyhow::anyhow!(
                    "executor name {:?}: must be one word, without white space",
                    spec.name
                )));
            }
            if executors.iter().any(|known| known.name == spec.name) {
                return Err(bad_input(anyhow::anyhow!(
                    "executor name {} is taken; give yours another name",
                    quoted(&spec.name)
                )));
            }
            executors.push(spec);
        }
        for spec in &mut executors {
            spec.program = program.to_owned();
        }
        Ok(Self { executors, program: program.to_owned() })
    }

    /// The executor a command names: `--executor-cmd` (checked, and started once to read
    /// what it supports, before any run) or `--executor`.
    fn resolve(&self, name: &str, black_box: &BlackBoxArgs) -> Result<ExecutorSpec, Failure> {
        let Some(command) = &black_box.executor_cmd else { return self.find(name) };
        if command.trim().is_empty() {
            return Err(bad_input(anyhow::anyhow!(
                "--executor-cmd is empty: give the command that starts one worker"
            )));
        }
        let transport = match black_box.transport.as_str() {
            "stdio" => world::process::Transport::Stdio,
            "http" => world::process::Transport::Http,
            other => {
                return Err(bad_input(anyhow::anyhow!(
                    "--transport {}: must be stdio or http",
                    quoted(other)
                )))
            }
        };
        if !(1..=MAX_WORKERS).contains(&black_box.workers) {
            return Err(bad_input(anyhow::anyhow!("--workers must be 1 to {MAX_WORKERS}")));
        }
        let key_placement = match &black_box.key_argument {
            None => protocol::mcp::KeyPlacement::Meta,
            Some(argument)
                if !argument.is_empty()
                    && argument.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                protocol::mcp::KeyPlacement::Argument(argument.clone())
            }
            Some(argument) => {
                return Err(bad_input(anyhow::anyhow!(
                    "--key-argument {}: an argument name is letters, digits and _",
                    quoted(argument)
                )))
            }
        };
        let start_patience = match &black_box.start_timeout {
            None => world::process::DEFAULT_START_PATIENCE,
            Some(text) => match humantime::parse_duration(text) {
                Ok(duration) if !duration.is_zero() && duration <= MAX_START_TIMEOUT => duration,
                _ => {
                    return Err(bad_input(anyhow::anyhow!(
                        "--start-timeout {}: a duration from 1ms to 1h, like 90s",
                        quoted(text)
                    )))
                }
            },
        };
        let tool_map = tool_map(black_box.config.as_deref())?;
        let spec = world::process::BlackBoxSpec {
            transport,
            key_placement,
            start_patience,
            tool_map,
            ..world::process::BlackBoxSpec::new(command.clone(), black_box.workers)
        };
        check_run_directories()?;
        let probe = probe(&spec).map_err(|error| {
            bad_input(anyhow::anyhow!(
                "--executor-cmd {}: not an MCP server replaylab can drive: {error}",
                quoted(command)
            ))
        })?;
        let mut executor = ExecutorSpec::black_box(spec, &probe);
        executor.program = self.program.clone();
        Ok(executor)
    }

    fn find(&self, name: &str) -> Result<ExecutorSpec, Failure> {
        self.executors.iter().find(|spec| spec.name == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.executors.iter().map(|spec| spec.name.as_str()).collect();
            bad_input(anyhow::anyhow!("unknown executor {}; known: {}", quoted(name), known.join(", ")))
        })
    }
}

/// The tool map `--config` names, or `replaylab.toml` in the working directory if there is
/// one (said on stderr, since nothing on the command line named it); checked before any
/// process starts.
fn tool_map(named: Option<&std::path::Path>) -> Result<Option<Arc<world::toolmap::ToolMap>>, Failure> {
    let found = std::path::Path::new(world::toolmap::FILE_NAME);
    let path = match named {
        Some(path) => path,
        None if found.exists() => found,
        None => return Ok(None),
    };
    let map = world::toolmap::ToolMap::load(path)
        .map_err(|error| bad_input(anyhow::anyhow!("the tool map {error}")))?;
    if named.is_none() {
        eprintln!("tool map: {} (from the working directory)", map.path.display());
    }
    Ok(Some(Arc::new(map)))
}

/// `replaylab init`: every flag checked before the server starts; then one start, its
/// `tools/list`, the starting file.
fn init(command: &str, transport: &str, out: &std::path::Path, force: bool) -> Result<u8, Failure> {
    if command.trim().is_empty() {
        return Err(bad_input(anyhow::anyhow!(
            "--executor-cmd is empty: give the command that starts the server"
        )));
    }
    let transport = match transport {
        "stdio" => world::process::Transport::Stdio,
        "http" => world::process::Transport::Http,
        other => {
            return Err(bad_input(anyhow::anyhow!("--transport {}: must be stdio or http", quoted(other))))
        }
    };
    if out.exists() && !force {
        return Err(bad_input(anyhow::anyhow!(
            "--out {}: the file is there; --force overwrites it",
            out.display()
        )));
    }
    if out.is_dir() {
        return Err(bad_input(anyhow::anyhow!("--out {}: a directory, not a file", out.display())));
    }
    // A server that reads its vendor's variables as it starts gets them under the names the
    // starting file proposes (`[vendor.stripe]`), pointed at the twin.
    let vendors = crate::init::PROPOSED_VENDORS
        .iter()
        .map(|(name, base, key)| {
            let env = world::toolmap::VendorEnv {
                base_url_env: (*base).to_owned(),
                api_key_env: (*key).to_owned(),
            };
            ((*name).to_owned(), env)
        })
        .collect();
    let provisional = world::toolmap::ToolMap { path: out.to_owned(), roles: Default::default(), vendors };
    let spec = world::process::BlackBoxSpec {
        transport,
        tool_map: Some(Arc::new(provisional)),
        ..world::process::BlackBoxSpec::new(command, 1)
    };
    check_run_directories()?;
    let probe = probe(&spec).map_err(|error| {
        bad_input(anyhow::anyhow!(
            "--executor-cmd {}: not an MCP server replaylab can drive: {error}",
            quoted(command)
        ))
    })?;
    let file = crate::init::starting_file(&probe.listed, command);
    std::fs::write(out, &file).map_err(|error| Failure {
        code: exit::BAD_INPUT,
        error: anyhow::anyhow!("cannot write {}: {error}", out.display()),
    })?;
    let bound = file.lines().filter(|line| line.starts_with("[tools.\"") && line.ends_with("\"]")).count();
    let decide = file.matches("# DECIDE:").count();
    println!(
        "wrote {}: {} tool{} listed, {bound} role{} bound by a guess, {decide} thing{} to decide (the `# DECIDE:` lines)",
        out.display(),
        probe.listed.len(),
        if probe.listed.len() == 1 { "" } else { "s" },
        if bound == 1 { "" } else { "s" },
        if decide == 1 { "" } else { "s" }
    );
    Ok(exit::SUCCESS)
}

/// Every run of a server has a directory of its own under the temporary directory
/// (`TMPDIR`): one that cannot hold them is bad input, said before any server starts (it was
/// blamed on the server: "not an MCP server replaylab can drive").
fn check_run_directories() -> Result<(), Failure> {
    let directory = std::env::temp_dir();
    let trial = directory.join(format!("replaylab-check-{}", std::process::id()));
    std::fs::create_dir_all(&trial).and_then(|()| std::fs::remove_dir(&trial)).map_err(|error| {
        bad_input(anyhow::anyhow!(
            "the temporary directory {} (TMPDIR) cannot hold the runs' directories: {error}; set TMPDIR to a directory you can write to",
            directory.display()
        ))
    })
}

/// Starts `spec`'s command once to read what it supports (`world_process::probe`). From here
/// on this process starts servers: a signal that stops it kills them too.
#[cfg(feature = "process")]
fn probe(spec: &world::process::BlackBoxSpec) -> Result<world::process::Probe, String> {
    world_process::end_processes_on_signals();
    world_process::probe(spec)
}

/// Without the `process` feature there is no process world to probe a command in.
#[cfg(not(feature = "process"))]
fn probe(_spec: &world::process::BlackBoxSpec) -> Result<world::process::Probe, String> {
    Err(NO_PROCESS_WORLD.to_owned())
}

/// What a command that needs the process world says in a build without it.
#[cfg(not(feature = "process"))]
const NO_PROCESS_WORLD: &str =
    "this replaylab was built without the process world (the harness's `process` feature)";

/// `replaylab executor serve`: the reference as an MCP server (`executor_mcp::serve`).
#[cfg(feature = "process")]
fn serve_reference(
    transport: &str,
    store: &str,
    schema: Option<&str>,
    mutant: Option<&str>,
    no_poll: bool,
) -> Result<u8, Failure> {
    let mutant = mutant
        .map(|name| {
            let name = name.strip_prefix("mutant:").unwrap_or(name);
            executor_mcp::serve::servable_mutant(name).map_err(|message| {
                bad_input(anyhow::anyhow!("executor serve --mutant {}: {message}", quoted(name)))
            })
        })
        .transpose()?;
    let mut config = executor_mcp::serve::ServeConfig::from_flags_and_env(transport, store, schema, |name| {
        std::env::var(name).ok()
    })
    .map_err(|message| bad_input(anyhow::anyhow!("executor serve: {message}")))?;
    config.mutant = mutant;
    config.no_poll = no_poll;
    match executor_mcp::serve::run(config) {
        Ok(()) => Ok(exit::SUCCESS),
        Err(error @ executor_mcp::serve::ServeError::Store { .. }) => Err(bad_input(error.into())),
        Err(error) => Err(Failure { code: exit::CHECK_FAILED, error: error.into() }),
    }
}

/// Without the `process` feature the reference is not served over MCP.
#[cfg(not(feature = "process"))]
fn serve_reference(
    _transport: &str,
    _store: &str,
    _schema: Option<&str>,
    _mutant: Option<&str>,
    _no_poll: bool,
) -> Result<u8, Failure> {
    Err(bad_input(anyhow::anyhow!("executor serve: {NO_PROCESS_WORLD}")))
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

fn run(cli: Cli, registry: &Registry) -> Result<u8, Failure> {
    match cli.command {
        Command::Downstream { listen, config } => serve_downstream(&listen, config.as_deref()),
        Command::Executor { what: ExecutorCommand::Serve { transport, store, schema, mutant, no_poll } } => {
            serve_reference(&transport, &store, schema.as_deref(), mutant.as_deref(), no_poll)
        }
        Command::Matrix {
            executor,
            seeds,
            first_seed,
            out,
            format,
            scenario_files,
            check_determinism,
            shard,
            jobs,
            log,
            only,
            repeat,
            require,
            check_annotations,
            black_box,
        } => {
            // As `run` and `explore` do: a black-box matrix has no history to compare twice.
            if black_box.executor_cmd.is_some() && check_determinism {
                return Err(bad_input(anyhow::anyhow!(
                    "--check-determinism needs the simulated world: with --executor-cmd the runs are real processes on real time, which are not deterministic (use --repeat to run each scenario again)"
                )));
            }
            // The runs per scenario the user asked for are checked before a black-box command
            // is started to read its manifest; the message names the flag they wrote.
            if let Some(asked) = repeat.or(seeds) {
                // Only a seeded matrix has --first-seed; repeats of real runs are not seeded.
                let (flag, split) = if repeat.is_some() {
                    ("--repeat", "run several matrices and keep each report")
                } else {
                    ("--seeds", "split a longer campaign with --first-seed")
                };
                check_matrix_seeds(asked, flag, split)?;
            }
            // Scenario files and required rows are read before a black-box command is started.
            let all_scenarios = load_scenarios(&scenario_files)?;
            let required = required_rows(&require, &all_scenarios)?;
            // So are the flags a run cannot start without: a server that does not start must
            // not hide their errors.
            let scenarios = only_these(all_scenarios, &only)?;
            if jobs == Some(0) {
                return Err(bad_input(anyhow::anyhow!("--jobs must be at least 1")));
            }
            let formats = reports::Format::parse_list(&format).map_err(|error| bad_input(error.into()))?;
            let render_options =
                reports::RenderOptions::from_env().map_err(|error| bad_input(error.into()))?;
            let files: Vec<&str> = formats.iter().map(|format| format.file_name()).collect();
            check_report_dir(&out, &files)?;
            check_step_summary()?;
            let executor = registry.resolve(&executor, &black_box)?;
            // Black-box runs take real seconds each: three repeats unless told.
            let default = if executor.black_box.is_some() { BLACK_BOX_REPEATS } else { MATRIX_SEEDS };
            let seeds = repeat.or(seeds).unwrap_or(default);
            let shard = shard
                .as_deref()
                .map(parse_shard)
                .transpose()?
                .map(|(index, count)| reports::Shard { index, count });
            let log = crate::log::LogFilter::from_flag_or_env(log.as_deref())
                .map_err(|error| bad_input(anyhow::anyhow!("{error}")))?
                .unwrap_or_else(crate::log::LogFilter::default_for_reports);
            // A process's log is its own (stderr, in the notes); the simulated world's capture
            // re-runs a failing run, which a real run cannot do faithfully.
            let log = executor.black_box.is_none().then_some(log);
            last_seed(first_seed, seeds, "--first-seed and --seeds")?;
            if let Some(shard) = shard.filter(|shard| shard.count > seeds) {
                return Err(bad_input(anyhow::anyhow!(
                    "--shard {shard} splits {seeds} seed(s) {} ways: some shard would run nothing; use at most {seeds} shards",
                    shard.count
                )));
            }
            let seeds_here = shard.map_or(seeds, |shard| {
                (first_seed..first_seed + seeds).filter(|seed| shard.contains(*seed)).count() as u64
            });
            let runs = (scenarios.len() as u64).saturating_mul(seeds_here);
            let requested_jobs = jobs;
            let jobs = if let Some(spec) = &executor.black_box {
                black_box_jobs(jobs, runs, spec)?
            } else {
                jobs_for(jobs, runs)?
            };
            if let Some(spec) = &executor.black_box {
                eprintln!(
                    "{jobs} run(s) side by side: the server's one process started in {} ms{}",
                    spec.measured_start.as_millis(),
                    if requested_jobs.is_some() { " (--jobs)" } else { "; --jobs says otherwise" }
                );
            }
            let commit = source_commit();
            let config = MatrixConfig {
                executor,
                scenarios,
                seeds,
                first_seed,
                shard,
                check_determinism,
                jobs,
                commit,
                log,
                selection: !only.is_empty(),
                progress: true,
            };
            let started = std::time::Instant::now();
            let result = matrix::run(&config);
            let elapsed = started.elapsed();
            print!("{}", render_matrix(&result));
            let ran = result.scenarios.iter().map(|s| s.seeds_run).sum::<u64>();
            let not_run = runs - ran;
            let not_run = if not_run > 0 {
                format!(" ({not_run} more not applicable, not run)")
            } else {
                String::new()
            };
            println!("ran {ran} runs{not_run} in {:.1}s", elapsed.as_secs_f64());
            if result.verdict == Verdict::NotApplicable {
                println!("no scenario applied to executor {}: nothing was checked", result.executor);
            }
            if reports::github_actions() {
                for line in reports::matrix_annotations(&result) {
                    println!("{line}");
                }
            }
            let mut code = write_matrix_reports(&result, &out, &formats, &render_options)?;
            // The hints were printed with the black-box world's lines (render_matrix).
            let hints =
                result.black_box.as_ref().map(|black_box| black_box.hints.as_slice()).unwrap_or_default();
            let contradicted: usize = hints.iter().map(|tool| tool.contradicted.len()).sum();
            if check_annotations && contradicted > 0 {
                println!("--check-annotations: {contradicted} declared hint(s) the results contradict");
                code = exit::CHECK_FAILED;
            }
            let required = match required {
                Some(Required::All) => result.rows.iter().map(|row| row.row.clone()).collect(),
                Some(Required::Rows(rows)) => rows,
                None => return Ok(code),
            };
            let unmet = reports::unmet_requirements(&result, &required);
            if unmet.is_empty() {
                println!("required rows: all {} passed", required.len());
                return Ok(code);
            }
            println!("required rows: {} of {} did not pass:", unmet.len(), required.len());
            for line in &unmet {
                println!("  {line}");
            }
            Ok(exit::CHECK_FAILED)
        }
        Command::Verify { report, sample, sample_seed, jobs } => {
            verify_report(registry, &report, &sample, sample_seed, jobs)
        }
        Command::Merge { shards, out, format } => {
            let formats = reports::Format::parse_list(&format).map_err(|error| bad_input(error.into()))?;
            let render_options =
                reports::RenderOptions::from_env().map_err(|error| bad_input(error.into()))?;
            // Each shard directory holds a matrix.json, an explore.json, or both.
            let mut matrices = Vec::new();
            let mut explorations = Vec::new();
            for path in &shards {
                if !path.exists() {
                    return Err(bad_input(anyhow::anyhow!(
                        "{}: no such file or directory (a shard's report directory, or its matrix.json or {})",
                        path.display(),
                        crate::explore_cli::EXPLORE_RECORD
                    )));
                }
                let (matrix, explore) = if path.is_dir() {
                    (path.join("matrix.json"), path.join(crate::explore_cli::EXPLORE_RECORD))
                } else if path.file_name().is_some_and(|name| name == crate::explore_cli::EXPLORE_RECORD) {
                    (PathBuf::new(), path.clone())
                } else {
                    (path.clone(), PathBuf::new())
                };
                let found = [matrix.is_file(), explore.is_file()];
                if found == [false, false] {
                    return Err(bad_input(anyhow::anyhow!(
                        "{}: holds neither matrix.json nor {}",
                        path.display(),
                        crate::explore_cli::EXPLORE_RECORD
                    )));
                }
                if found[0] {
                    matrices.push(crate::merge::read(&matrix).map_err(|error| bad_input(error.into()))?);
                }
                if found[1] {
                    explorations.push((path.clone(), read_explore_record(&explore)?));
                }
            }
            let matrix = if matrices.is_empty() {
                None
            } else {
                Some(crate::merge::merge(matrices).map_err(|error| bad_input(error.into()))?)
            };
            let exploration = if explorations.is_empty() {
                None
            } else {
                let dirs: Vec<PathBuf> = explorations.iter().map(|(path, _)| path.clone()).collect();
                let records = explorations.into_iter().map(|(_, record)| record).collect();
                let merged = crate::explore_cli::merge_records(records)
                    .map_err(|error| bad_input(anyhow::anyhow!(error)))?;
                Some((dirs, merged))
            };
            let mut files: Vec<&str> = formats.iter().map(|format| format.file_name()).collect();
            if exploration.is_some() {
                files.push(crate::explore_cli::EXPLORE_RECORD);
            }
            check_report_dir(&out, &files)?;
            check_step_summary()?;
            let mut code = exit::SUCCESS;
            if let Some(result) = matrix {
                print!("{}", render_matrix(&result));
                let ran = result.scenarios.iter().map(|s| s.seeds_run).sum::<u64>();
                println!("merged the matrix of {} shard(s): {ran} runs", shards.len());
                if reports::github_actions() {
                    for line in reports::matrix_annotations(&result) {
                        println!("{line}");
                    }
                }
                code = code.max(write_matrix_reports(&result, &out, &formats, &render_options)?);
            }
            if let Some((dirs, record)) = exploration {
                print!("{}", crate::explore_cli::render_record(&record, &out));
                // The shrunk cases the groups name (and the failing saved cases), beside the
                // merged record.
                let files = record
                    .groups
                    .iter()
                    .map(|group| &group.case_file)
                    .chain(record.saved_cases.failing.iter().map(|saved| &saved.case_file));
                for case_file in files {
                    let source = dirs.iter().map(|dir| dir.join(case_file)).find(|path| path.is_file());
                    if let Some(source) = source {
                        std::fs::copy(&source, out.join(case_file))
                            .with_context(|| format!("failed to copy {}", source.display()))
                            .map_err(|error| Failure { code: exit::CHECK_FAILED, error })?;
                    }
                }
                let path = crate::explore_cli::write_record(&out, &record)
                    .map_err(|error| Failure { code: exit::CHECK_FAILED, error })?;
                println!("wrote {}", path.display());
                if reports::github_actions() {
                    for line in crate::explore_cli::record_annotations(&record, &out) {
                        println!("{line}");
                    }
                }
                if record.verdict != Verdict::Pass {
                    code = exit::CHECK_FAILED;
                }
            }
            Ok(code)
        }
        Command::Run {
            scenario,
            seed,
            case,
            executor,
            trace,
            log,
            scenario_files,
            check_determinism,
            repeat,
            black_box,
        } => {
            if repeat == Some(0) {
                return Err(bad_input(anyhow::anyhow!("--repeat must be at least 1")));
            }
            if let Some(repeat) = repeat.filter(|repeat| *repeat > MAX_RUN_REPEATS) {
                return Err(bad_input(anyhow::anyhow!(
                    "--repeat {repeat}: at most {MAX_RUN_REPEATS} (each is a real run of seconds)"
                )));
            }
            // Said before --executor-cmd's command is started (a server that cannot start must
            // not hide the flag's error), and again after, for a black box named otherwise.
            let simulated_only = check_determinism || log.is_some();
            if black_box.executor_cmd.is_some() && simulated_only {
                return Err(bad_input(anyhow::anyhow!(
                    "--check-determinism and --log need the simulated world; a black-box run is real processes on real time"
                )));
            }
            let log = crate::log::LogFilter::from_flag_or_env(log.as_deref())
                .map_err(|error| bad_input(anyhow::anyhow!("{error}")))?;
            let scenarios = load_scenarios(&scenario_files)?;
            let (chosen, seed) = match (case, scenario, seed) {
                (Some(path), _, _) => {
                    let mut scenario =
                        Scenario::from_file(&path).map_err(|error| bad_input(anyhow::anyhow!("{error}")))?;
                    let seed = scenario.seed.ok_or_else(|| {
                        bad_input(anyhow::anyhow!("{}: a case file needs a top-level `seed`", path.display()))
                    })?;
                    scenario.source = path.display().to_string();
                    (scenario, seed)
                }
                (None, Some(scenario), Some(seed)) => {
                    let chosen = scenarios
                        .iter()
                        .find(|s| s.id == scenario || s.name == scenario || s.full_name() == scenario)
                        .ok_or_else(|| {
                            let known: Vec<String> = scenarios.iter().map(|s| s.id.clone()).collect();
                            bad_input(anyhow::anyhow!(
                                "no scenario {}; known: {}",
                                quoted(&scenario),
                                known.join(", ")
                            ))
                        })?;
                    (chosen.clone(), seed)
                }
                _ => return Err(bad_input(anyhow::anyhow!("give a scenario and --seed, or --case FILE"))),
            };
            // The scenario is found before a black-box command is started.
            let executor = registry.resolve(&executor, &black_box)?;
            if executor.black_box.is_some() && simulated_only {
                return Err(bad_input(anyhow::anyhow!(
                    "--check-determinism and --log need the simulated world; a black-box run is real processes on real time"
                )));
            }
            let chosen = &chosen;
            if let Some(repeat) = repeat {
                return Ok(run_repeated(chosen, seed, &executor, repeat));
            }
            let record = runner::run_logged(chosen, seed, &executor, log.as_ref());
            if trace {
                print!("{}", trace_text(&record));
                println!();
            } else if !record.log.is_empty() {
                for line in &record.log {
                    println!("{}", line.to_line());
                }
                println!();
            }
            let mut verdict = record.result.verdict;
            if check_determinism {
                let again = runner::run_logged(chosen, seed, &executor, log.as_ref());
                if again.result.history_digest != record.result.history_digest {
                    println!("NONDETERMINISTIC: two runs of seed {seed} gave different histories");
                    verdict = Verdict::Fail;
                } else if again.log != record.log {
                    println!("NONDETERMINISTIC: two runs of seed {seed} gave different logs");
                    verdict = Verdict::Fail;
                } else {
                    println!("deterministic: both runs gave history {}", record.result.history_digest);
                }
            }
            print!("{}", render_run(&record.result));
            if verdict != Verdict::Pass && reports::github_actions() {
                println!("{}", run_annotation(chosen, &record.result, verdict));
            }
            Ok(if verdict == Verdict::Pass { exit::SUCCESS } else { exit::CHECK_FAILED })
        }
        Command::Explore {
            seeds,
            start,
            shard,
            executor,
            jobs,
            regressions,
            out,
            stop_at_first,
            check_determinism,
            black_box,
        } => {
            // Everything the flags can say wrong is said before a black-box command is started
            // to read its manifest.
            if black_box.executor_cmd.is_some() && check_determinism {
                return Err(bad_input(anyhow::anyhow!(
                    "--check-determinism needs the simulated world: with --executor-cmd the cases run as real processes on real time, which are not deterministic (a finding is confirmed by running it again instead)"
                )));
            }
            if seeds > MAX_EXPLORE_SEEDS {
                return Err(bad_input(anyhow::anyhow!(
                    "--seeds must be at most {MAX_EXPLORE_SEEDS}; split a longer campaign with --shard or --start"
                )));
            }
            last_seed(start, seeds.max(1), "--start and --seeds")?;
            let shard = shard.as_deref().map(parse_shard).transpose()?;
            if jobs == Some(0) {
                return Err(bad_input(anyhow::anyhow!("--jobs must be at least 1")));
            }
            let out = explore_out_dir(out)?;
            check_report_dir(&out, &[crate::explore_cli::EXPLORE_RECORD])?;
            let executor = registry.resolve(&executor, &black_box)?;
            let jobs = match &executor.black_box {
                Some(spec) => {
                    let sized = black_box_jobs(jobs, seeds, spec)?;
                    eprintln!(
                        "{sized} case(s) side by side: the server's one process started in {} ms{}",
                        spec.measured_start.as_millis(),
                        if jobs.is_some() { " (--jobs)" } else { "; --jobs says otherwise" }
                    );
                    sized
                }
                None => jobs_for(jobs, seeds)?,
            };
            let config = crate::explore_cli::ExploreConfig {
                executor,
                seeds,
                start,
                shard,
                jobs,
                regressions,
                out,
                stop_at_first,
                check_determinism,
                commit: source_commit(),
            };
            crate::explore_cli::run(&config).map_err(|error| Failure { code: exit::BAD_INPUT, error })
        }
        Command::Mutants { seeds, out, jobs } => {
            check_matrix_seeds(
                seeds,
                "--seeds",
                "a mutant that survives 100,000 seeds needs a new scenario",
            )?;
            let jobs = jobs_for(jobs, u64::MAX)?;
            check_report_dir(&out, &["mutants.json", "mutants.md"])?;
            let base = MatrixConfig {
                executor: registry.find("reference")?,
                scenarios: load_scenarios(&[])?,
                seeds,
                first_seed: 0,
                shard: None,
                check_determinism: false,
                jobs,
                commit: source_commit(),
                // The zoo's reports show no timelines: nothing to capture.
                log: None,
                selection: false,
                progress: false,
            };
            let started = std::time::Instant::now();
            let result = crate::mutants::run(&base);
            print!("{}", crate::mutants::render_terminal(&result));
            println!("ran in {:.1}s", started.elapsed().as_secs_f64());
            std::fs::create_dir_all(&out)
                .with_context(|| format!("failed to create {}", out.display()))
                .map_err(bad_input)?;
            let json = crate::mutants::render_json(&result);
            for (name, text) in
                [("mutants.json", json), ("mutants.md", crate::mutants::render_markdown(&result))]
            {
                let path = out.join(name);
                std::fs::write(&path, text)
                    .with_context(|| format!("failed to write {}", path.display()))
                    .map_err(|error| Failure { code: exit::CHECK_FAILED, error })?;
                println!("wrote {}", path.display());
            }
            Ok(if result.verdict == Verdict::Pass { exit::SUCCESS } else { exit::CHECK_FAILED })
        }
        Command::Scenarios { scenario_files } => {
            for scenario in load_scenarios(&scenario_files)? {
                let rows: Vec<String> = scenario.rows.iter().map(ToString::to_string).collect();
                println!(
                    "{:<4} {:<34} {:<8} {}",
                    scenario.id,
                    scenario.name,
                    rows.join(","),
                    scenario.summary
                );
            }
            Ok(exit::SUCCESS)
        }
        Command::Bench { what: BenchCommand::Sim { runs, jobs, scenario, executor } } => {
            let executor = registry.find(&executor)?;
            if runs == 0 || runs > MAX_BENCH_SIM_RUNS {
                return Err(bad_input(anyhow::anyhow!(
                    "--runs must be at least 1 and at most {MAX_BENCH_SIM_RUNS} (each is a whole simulated run, and the baseline runs as many)"
                )));
            }
            let scenarios = load_scenarios(&[])?;
            let chosen = scenarios
                .iter()
                .find(|s| s.id == scenario || s.name == scenario || s.full_name() == scenario)
                .ok_or_else(|| bad_input(anyhow::anyhow!("no scenario {}", quoted(&scenario))))?;
            let jobs = jobs_for(jobs, runs)?;
            let result = crate::bench::sim(chosen, &executor, runs, jobs);
            say_build();
            println!(
                "scenario {} with {}: {} HTTP exchanges, {} ms simulated per run ({} ms stepped, the rest idle and skipped); {runs} runs of each on {jobs} thread(s)",
                chosen.full_name(),
                executor.name,
                result.shape.messages,
                result.shape.span.as_millis(),
                result.shape.simulated.as_millis()
            );
            println!(
                "raw turmoil stepping through the whole {} ms: runs/s={:.0} (harness / that = {:.2})",
                result.shape.span.as_millis(),
                result.whole_span_runs_per_second,
                result.harness_runs_per_second / result.whole_span_runs_per_second
            );
            println!(
                "raw turmoil with the world's {} hosts (the extra ones idle), same exchanges and stepped time: runs/s={:.0} (harness / that = {:.2})",
                result.shape.hosts,
                result.same_hosts_runs_per_second,
                result.harness_runs_per_second / result.same_hosts_runs_per_second
            );
            println!(
                "sim: harness runs/s={:.0} turmoil baseline runs/s={:.0} ratio={:.2}",
                result.harness_runs_per_second,
                result.baseline_runs_per_second,
                result.ratio()
            );
            Ok(exit::SUCCESS)
        }
        Command::Bench { what: BenchCommand::BlackBox { jobs, mut black_box } } => {
            if black_box.executor_cmd.is_none() {
                let this = std::env::current_exe()
                    .map_err(|error| bad_input(anyhow::anyhow!("cannot name this program: {error}")))?;
                let this = crate::text::shell_quote(&this.display().to_string());
                black_box.executor_cmd =
                    Some(format!("{this} executor serve --store sqlite:{{state}}/claims.db"));
            }
            let executor = registry.resolve("reference", &black_box)?;
            let scenarios = load_scenarios(&[])?;
            let spec =
                executor.black_box.clone().ok_or_else(|| bad_input(anyhow::anyhow!("not a black box")))?;
            let jobs = black_box_jobs(jobs, scenarios.len() as u64, &spec)?;
            let config = MatrixConfig {
                executor,
                scenarios,
                seeds: 1,
                first_seed: 0,
                shard: None,
                check_determinism: false,
                jobs,
                commit: None,
                log: None,
                selection: false,
                progress: false,
            };
            let result = matrix::run(&config);
            let black_box = result.black_box.as_ref().expect("a black-box matrix says so");
            say_build();
            let time = &black_box.time;
            let ran: u64 = result.scenarios.iter().map(|s| s.seeds_run).sum();
            println!(
                "{ran} runs, {} worker process(es) each, {jobs} side by side; verdict {}",
                black_box.workers, result.verdict
            );
            for line in reports::black_box_text(&result) {
                println!("{line}");
            }
            let seconds = |ms: u64| ms as f64 / 1000.0;
            println!(
                "black-box: matrix wall={:.1}s target<{}s runs={ran} run time={:.1}s starting={:.1}s waiting={:.1}s working={:.1}s",
                seconds(black_box.matrix_wall_ms),
                BLACK_BOX_TARGET.as_secs(),
                seconds(time.wall_ms),
                seconds(time.starting_ms),
                seconds(time.waiting_ms),
                seconds(time.working_ms())
            );
            Ok(exit::SUCCESS)
        }
        Command::Bench { what: BenchCommand::Store { operations, store } } => {
            let on = match store.as_deref() {
                None => executor::bench::BenchStore::SqliteFiles,
                Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                    executor::bench::BenchStore::Postgres(url.to_owned())
                }
                Some(other) => {
                    return Err(bad_input(anyhow::anyhow!(
                        "--store {other:?}: expected postgres://USER@HOST:PORT/DB (without it, SQLite files)"
                    )))
                }
            };
            if operations == 0 {
                return Err(bad_input(anyhow::anyhow!("--operations must be at least 1")));
            }
            if operations > MAX_BENCH_OPERATIONS {
                return Err(bad_input(anyhow::anyhow!(
                    "--operations must be at most {MAX_BENCH_OPERATIONS} (each keeps a row in memory)"
                )));
            }
            // A database that cannot be reached or opened is the caller's input (exit 2); a
            // store that fails while measured is a failed check (exit 1).
            let result = executor::bench::store_bench(operations, &on).map_err(|error| {
                let code = if error.is_bad_location() { exit::BAD_INPUT } else { exit::CHECK_FAILED };
                Failure { code, error: error.into() }
            })?;
            say_build();
            println!(
                "store: executor claims/s={:.0} raw inserts/s={:.0} ratio={:.2}",
                result.claims_per_second, result.raw_inserts_per_second, result.ratio
            );
            Ok(exit::SUCCESS)
        }
        Command::Init { executor_cmd, transport, out, force } => init(&executor_cmd, &transport, &out, force),
        Command::Executors => {
            for spec in &registry.executors {
                println!("{:<28} {}", spec.name, spec.description);
                if spec.capabilities != protocol::ExecutorCapabilities::all() {
                    println!("{:<28} supports: {}", "", spec.capabilities);
                }
            }
            Ok(exit::SUCCESS)
        }
        Command::Fuzz { target, inputs, seed, out } => {
            let config =
                crate::fuzz::FuzzConfig::from_flags(&target, inputs, seed, out).map_err(bad_input)?;
            let reports = crate::fuzz::run(&config);
            Ok(if reports.iter().all(crate::fuzz::TargetReport::passed) {
                exit::SUCCESS
            } else {
                exit::CHECK_FAILED
            })
        }
    }
}

/// The scenarios `only` names (by id, name or full name), in their order; all of them when
/// `only` is empty. A name no scenario has is bad input.
fn only_these(scenarios: Vec<Scenario>, only: &[String]) -> Result<Vec<Scenario>, Failure> {
    if only.is_empty() {
        return Ok(scenarios);
    }
    let named = |scenario: &Scenario, name: &str| {
        scenario.id == name || scenario.name == name || scenario.full_name() == name
    };
    if let Some(unknown) = only.iter().find(|name| !scenarios.iter().any(|s| named(s, name))) {
        let known: Vec<&str> = scenarios.iter().map(|s| s.id.as_str()).collect();
        return Err(bad_input(anyhow::anyhow!(
            "--only: no scenario {}; known: {}",
            quoted(unknown),
            known.join(", ")
        )));
    }
    Ok(scenarios.into_iter().filter(|scenario| only.iter().any(|name| named(scenario, name))).collect())
}

/// What `matrix --require` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Required {
    /// Every row of the run (`all`).
    All,
    /// These rows, in the order named, each once.
    Rows(Vec<String>),
}

/// `--require`'s names checked before any work: table rows (`C1`..`C10`, `F1`..`F9`), a prose
/// scenario's row (its id, `S13`), `seed-rows` or `all`; `None` when nothing is required.
fn required_rows(names: &[String], scenarios: &[Scenario]) -> Result<Option<Required>, Failure> {
    if names.is_empty() {
        return Ok(None);
    }
    let prose: Vec<&str> = scenarios
        .iter()
        .filter(|scenario| scenario.rows.contains(&scenarios::Row::Prose))
        .map(|scenario| scenario.id.as_str())
        .collect();
    let mut rows: Vec<String> = Vec::new();
    for name in names {
        let name = name.trim();
        let named: Vec<String> = match name {
            "all" if names.len() == 1 => return Ok(Some(Required::All)),
            "all" => {
                return Err(bad_input(anyhow::anyhow!(
                    "--require all already requires every row: name nothing beside it"
                )))
            }
            "seed-rows" => reports::SEED_ROWS.iter().map(|row| (*row).to_owned()).collect(),
            row if reports::SEED_ROWS.contains(&row) || prose.contains(&row) => vec![row.to_owned()],
            unknown => {
                return Err(bad_input(anyhow::anyhow!(
                "--require: no row {}: name C1..C10, F1..F9, a prose scenario's row ({}), seed-rows or all",
                quoted(unknown),
                prose.join(", ")
            )))
            }
        };
        for row in named {
            if !rows.contains(&row) {
                rows.push(row);
            }
        }
    }
    Ok(Some(Required::Rows(rows)))
}

/// `explore --out`: a directory, where the shrunk cases and `explore.json` go. A path ending in
/// `explore.json` (`--out DIR/explore.json`) names the record itself: its directory is `DIR`.
/// Any other `.json` path is refused, for the record is always named `explore.json` (which
/// `merge` looks for).
fn explore_out_dir(out: PathBuf) -> Result<PathBuf, Failure> {
    let record = crate::explore_cli::EXPLORE_RECORD;
    if out.file_name().is_some_and(|name| name == record) {
        let parent = out.parent().filter(|parent| !parent.as_os_str().is_empty());
        return Ok(parent.map_or_else(|| PathBuf::from("."), PathBuf::from));
    }
    if out.extension().is_some_and(|extension| extension.eq_ignore_ascii_case("json")) {
        return Err(bad_input(anyhow::anyhow!(
            "--out {}: explore takes a directory (it writes {record} and the shrunk cases into it); \
             name the directory, or DIR/{record}",
            out.display()
        )));
    }
    Ok(out)
}

/// The GitHub annotation of a failing `run`: at the scenario file as given and the failing
/// `expect`'s line (else its `id` line), or at no file for a built-in scenario.
fn run_annotation(scenario: &Scenario, result: &RunResult, verdict: Verdict) -> String {
    let builtin = scenario.source.starts_with(scenarios::BUILTIN_SOURCE_PREFIX);
    let line = reports::annotation_line(&result.violations, scenario.line as u64);
    let location = (!builtin).then_some((scenario.source.as_str(), Some(line)));
    let reason = result
        .violations
        .first()
        .map(ToString::to_string)
        .or_else(|| result.notes.first().cloned())
        .unwrap_or_else(|| verdict.label().to_owned());
    reports::error_annotation(
        location,
        &format!("replaylab: {}_{} seed {}: {verdict}", result.scenario, result.scenario_name, result.seed),
        &format!("{reason}\nreproduce: {}", result.reproduce),
    )
}

/// A benchmark first says what it runs on: the figures of a build whose own crates are not
/// optimised (the dev profile, as the tests and CI build) do not compare with a release build's;
/// the ratios between two paths of one build still do.
fn say_build() {
    if cfg!(debug_assertions) {
        println!(
            "build: the dev profile (replaylab's crates unoptimised): compare ratios, not rates; for rates, cargo run --release"
        );
    }
}

/// The most times `run --repeat` runs a black-box scenario.
const MAX_RUN_REPEATS: u64 = 1_000;

/// `run --repeat N` of a black box: the scenario run `repeat` times one after another, a line
/// per run, then how many failed and the first failing run whole (else the last run); exit 1
/// unless every run passed.
fn run_repeated(scenario: &Scenario, seed: u64, executor: &ExecutorSpec, repeat: u64) -> u8 {
    let mut counts: std::collections::BTreeMap<Verdict, u64> = std::collections::BTreeMap::new();
    let mut shown: Option<RunResult> = None;
    for run in 1..=repeat {
        let record = runner::run(scenario, seed, executor);
        let result = record.result;
        let oracles: Vec<&str> =
            result.violations.iter().map(|violation| violation.oracle.as_str()).collect();
        let oracles = if oracles.is_empty() { String::new() } else { format!(" ({})", oracles.join(", ")) };
        println!("run {run} of {repeat}: {}{oracles}", result.verdict);
        *counts.entry(result.verdict).or_insert(0) += 1;
        let failed = matches!(result.verdict, Verdict::Fail | Verdict::Crashed);
        if shown
            .as_ref()
            .is_none_or(|kept| failed && !matches!(kept.verdict, Verdict::Fail | Verdict::Crashed))
        {
            shown = Some(result);
        }
    }
    let count = |verdict| counts.get(&verdict).copied().unwrap_or(0);
    let failed = count(Verdict::Fail) + count(Verdict::Crashed);
    println!();
    if let Some(result) = &shown {
        print!("{}", render_run(result));
    }
    println!(
        "failed {failed} of {repeat} runs ({} pass, {} fail, {} unknown, {} crashed)",
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Unknown),
        count(Verdict::Crashed)
    );
    if let Some(result) = shown.as_ref().filter(|result| result.verdict != Verdict::Pass) {
        if reports::github_actions() {
            println!("{}", run_annotation(scenario, result, result.verdict));
        }
    }
    if count(Verdict::Pass) == repeat {
        exit::SUCCESS
    } else {
        exit::CHECK_FAILED
    }
}

/// Black-box runs mostly wait on real time (leases, settling), so they run more at once than
/// there are cores, as many as the server's start-up leaves room for: a run starts a process
/// per worker at once, and starting them is CPU work. By default, per core, one run per share of
/// [`START_BUDGET`] the probe's measured start takes (two to eight); `--jobs` says otherwise.
/// No more than there are runs.
fn black_box_jobs(
    requested: Option<usize>,
    work: u64,
    spec: &world::process::BlackBoxSpec,
) -> Result<usize, Failure> {
    if requested == Some(0) {
        return Err(bad_input(anyhow::anyhow!("--jobs must be at least 1")));
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let work = usize::try_from(work).unwrap_or(usize::MAX).max(1);
    Ok(requested.unwrap_or_else(|| cores * runs_per_core(spec.measured_start)).min(work))
}

/// How much start-up one core's share of runs may take at once: a server whose one process
/// starts in a quarter of it gets four runs per core. Runs wait most of their time (a run
/// lasts seconds; its processes start in a fraction of one), so a core has room for several.
const START_BUDGET: std::time::Duration = std::time::Duration::from_millis(4_000);

/// Runs per core for a server whose one process took `start` to start and shake hands.
fn runs_per_core(start: std::time::Duration) -> usize {
    let per_run = start.as_millis().max(1);
    usize::try_from(START_BUDGET.as_millis() / per_run).unwrap_or(usize::MAX).clamp(2, 8)
}

/// The threads a command uses: `--jobs` (default: the machine's cores), at least 1, and no more
/// than can help: the cores, and the `work` items there are to share.
fn jobs_for(requested: Option<usize>, work: u64) -> Result<usize, Failure> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if requested == Some(0) {
        return Err(bad_input(anyhow::anyhow!("--jobs must be at least 1")));
    }
    let work = usize::try_from(work).unwrap_or(usize::MAX).max(1);
    Ok(requested.unwrap_or(cores).min(cores).min(work))
}

/// The most seeds per scenario a matrix runs: with the built-in scenarios that is three million
/// runs, most of a day on a laptop; a longer campaign is split with `--first-seed`.
const MAX_MATRIX_SEEDS: u64 = 100_000;

/// The most cases one `explore` draws: at a few hundred cases a second, days on one machine.
const MAX_EXPLORE_SEEDS: u64 = 10_000_000;

/// The most runs `bench sim` makes of each side (the harness and the turmoil baseline).
const MAX_BENCH_SIM_RUNS: u64 = 1_000_000;

/// Checks a matrix's `--seeds`: at least 1, at most [`MAX_MATRIX_SEEDS`].
/// Checks a matrix's runs per scenario, given by `flag` (`--seeds`, or `--repeat` for a
/// black-box matrix): the message names the flag the user wrote.
/// `split` says how to run more, with the flags this command has.
fn check_matrix_seeds(seeds: u64, flag: &str, split: &str) -> Result<(), Failure> {
    if seeds == 0 {
        return Err(bad_input(anyhow::anyhow!("{flag} must be at least 1")));
    }
    if seeds > MAX_MATRIX_SEEDS {
        return Err(bad_input(anyhow::anyhow!(
            "{flag} must be at most {MAX_MATRIX_SEEDS} per scenario; {split}"
        )));
    }
    Ok(())
}

/// The last of `count` seeds from `first`, or an error naming `flags` when the range would run
/// past the largest seed.
fn last_seed(first: u64, count: u64, flags: &str) -> Result<u64, Failure> {
    first.checked_add(count - 1).ok_or_else(|| {
        bad_input(anyhow::anyhow!(
            "{flags}: {count} seeds from {first} run past the largest seed ({})",
            u64::MAX
        ))
    })
}

/// Checks, before any work, that the reports can be written to `out`: it is a directory (or
/// can be made one) that accepts a file. The run's hours are not spent for a report that
/// cannot be kept.
fn check_report_dir(out: &std::path::Path, files: &[&str]) -> Result<(), Failure> {
    if out.exists() && !out.is_dir() {
        return Err(bad_input(anyhow::anyhow!("--out {}: is a file, not a directory", out.display())));
    }
    std::fs::create_dir_all(out)
        .with_context(|| format!("--out {}: cannot create the directory", out.display()))
        .map_err(bad_input)?;
    let probe = out.join(".replaylab-write-check");
    std::fs::write(&probe, b"")
        .with_context(|| format!("--out {}: cannot write into the directory", out.display()))
        .map_err(bad_input)?;
    let _ = std::fs::remove_file(probe);
    // A report file that is there already must be a file that can be written over: a
    // directory or a read-only file in its place would fail only after the whole run.
    for name in files {
        let path = out.join(name);
        if path.exists() {
            if !path.is_file() {
                return Err(bad_input(anyhow::anyhow!(
                    "--out {}: {name} is there and is not a file, so the report cannot be written",
                    out.display()
                )));
            }
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .with_context(|| format!("--out {}: cannot write over {name}", out.display()))
                .map_err(bad_input)?;
        }
    }
    Ok(())
}

/// Checks, before any work, that `GITHUB_STEP_SUMMARY` (when set) names a file the summary can
/// be appended to.
fn check_step_summary() -> Result<(), Failure> {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|value| !value.is_empty()) else {
        return Ok(());
    };
    let path = PathBuf::from(path);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("GITHUB_STEP_SUMMARY={}: cannot append to it", path.display()))
        .map_err(bad_input)?;
    Ok(())
}

/// Parses `I/N` (1-based shard I of N).
fn parse_shard(text: &str) -> Result<(u64, u64), Failure> {
    let invalid = || bad_input(anyhow::anyhow!("--shard {} must look like 2/4 (shard 2 of 4)", quoted(text)));
    let (index, count) = text.split_once('/').ok_or_else(invalid)?;
    let (index, count): (u64, u64) =
        (index.parse().map_err(|_| invalid())?, count.parse().map_err(|_| invalid())?);
    if count == 0 || index == 0 || index > count {
        return Err(invalid());
    }
    Ok((index, count))
}

/// `replaylab verify`: see [`crate::verify`]. Bad input (no report, an executor or scenario
/// this binary does not have) exits 2 before any run.
fn verify_report(
    registry: &Registry,
    report: &std::path::Path,
    sample: &str,
    sample_seed: Option<u64>,
    jobs: Option<usize>,
) -> Result<u8, Failure> {
    use crate::verify;
    let sample = verify::Sample::parse(sample).map_err(|error| bad_input(anyhow::anyhow!(error)))?;
    let result = crate::merge::read_unchecked(report).map_err(|error| bad_input(error.into()))?;
    let file = if report.is_dir() { report.join("matrix.json") } else { report.to_path_buf() };
    println!(
        "verifying {}: {} of {}, {} scenario(s), {} run(s)",
        file.display(),
        result.executor,
        result.commit.as_deref().map_or("an unknown commit".to_owned(), |commit| format!("commit {commit}")),
        result.scenarios.len(),
        result.scenarios.iter().map(|s| s.runs.len()).sum::<usize>()
    );
    let contradictions = runner::evidence::contradictions(&result);
    if !contradictions.is_empty() {
        println!(
            "FORGED OR EDITED: the report contradicts its own runs ({} problem(s)):",
            contradictions.len()
        );
        for problem in &contradictions {
            println!("  {problem}");
        }
        return Ok(exit::CHECK_FAILED);
    }
    println!("consistent: every count, failure, row and the runs shown agree with the recorded runs");
    if let Some(black_box) = &result.black_box {
        println!(
            "black-box report ({}): real processes on real time are not deterministic, so its runs cannot be re-derived; checked its consistency only",
            black_box.command
        );
        return Ok(exit::SUCCESS);
    }
    let executor = registry.find(&result.executor).map_err(|failure| Failure {
        code: exit::BAD_INPUT,
        error: failure.error.context("the report's executor: verify with the binary that ran the matrix"),
    })?;
    let stale = verify::provenance_mismatches(
        &result,
        (runner::version::VERSION, runner::version::commit()),
        source_commit().as_deref(),
        &executor,
    );
    if !stale.is_empty() {
        println!("STALE: the report is not of this code, so its runs cannot be re-derived here:");
        for line in &stale {
            println!("  {line}");
        }
        return Ok(exit::CHECK_FAILED);
    }
    let scenarios = verify::scenarios_of(&result).map_err(|error| bad_input(anyhow::anyhow!(error)))?;
    let seed = sample_seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id())
    });
    let planned = verify::plan(&result, sample, seed);
    let jobs = jobs_for(jobs, planned.len() as u64)?;
    println!(
        "running {} of {} run(s) again ({}; sample seed {seed}: --sample-seed {seed} draws the same)",
        planned.len(),
        result.scenarios.iter().map(|s| s.runs.len()).sum::<usize>(),
        match sample {
            verify::Sample::All => "all".to_owned(),
            verify::Sample::Count(count) => format!("each scenario's shown run and {count} drawn at random"),
        }
    );
    let mismatches = verify::rerun(&planned, &scenarios, &executor, jobs, result.determinism_checked);
    if mismatches.is_empty() {
        println!(
            "VERIFIED: {} run(s) of {} scenario(s) gave the recorded history digests and verdicts again",
            planned.len(),
            result.scenarios.len()
        );
        return Ok(exit::SUCCESS);
    }
    println!(
        "NOT RE-DERIVED: {} of {} run(s) run again differ from the report:",
        mismatches.len(),
        planned.len()
    );
    for mismatch in &mismatches {
        println!("  {mismatch}");
    }
    Ok(exit::CHECK_FAILED)
}

/// The source commit: `REPLAYLAB_COMMIT`, else `GITHUB_SHA`, else `git rev-parse HEAD` in the
/// current directory, else unknown.
fn source_commit() -> Option<String> {
    for variable in ["REPLAYLAB_COMMIT", "GITHUB_SHA"] {
        if let Ok(value) = std::env::var(variable) {
            if !value.trim().is_empty() {
                return Some(value.trim().to_owned());
            }
        }
    }
    let output = std::process::Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The built-in scenarios plus `files`, refusing duplicate ids.
fn load_scenarios(files: &[PathBuf]) -> Result<Vec<Scenario>, Failure> {
    let mut scenarios = scenarios::builtin();
    for path in files {
        let scenario = Scenario::from_file(path).map_err(|error| bad_input(anyhow::anyhow!("{error}")))?;
        if scenarios.iter().any(|known| known.id == scenario.id) {
            return Err(bad_input(anyhow::anyhow!(
                "{}: scenario id {} is already taken; give the file another id",
                path.display(),
                scenario.id
            )));
        }
        scenarios.push(scenario);
    }
    Ok(scenarios)
}

/// The history as lines, each followed by the log lines emitted after it (those emitted before
/// the first event come first), indented.
pub fn trace_text(record: &runner::RunRecord) -> String {
    let mut text = String::new();
    let mut log = record.log.iter().peekable();
    let mut logged_until = |text: &mut String, seq: u64| {
        while let Some(line) = log.next_if(|line| line.after_seq <= seq) {
            text.push_str(&format!("    {}\n", line.to_line()));
        }
    };
    logged_until(&mut text, 0);
    for event in &record.history {
        text.push_str(&event.to_line());
        text.push('\n');
        logged_until(&mut text, event.seq);
    }
    logged_until(&mut text, u64::MAX);
    text
}

fn render_run(result: &RunResult) -> String {
    // Only a black-box run takes real time; its number counts repeats, not seeds.
    let unit = if result.real_time.is_some() { "repeat" } else { "seed" };
    let mut text = format!(
        "{}_{} {unit} {} executor {}: {}\n",
        result.scenario, result.scenario_name, result.seed, result.executor, result.verdict
    );
    for violation in &result.violations {
        text.push_str(&format!("  violation: {violation}\n"));
    }
    for note in &result.notes {
        text.push_str(&format!("  note: {note}\n"));
    }
    let references = if result.effect_references.is_empty() {
        String::new()
    } else {
        format!(" ({})", result.effect_references.join(", "))
    };
    text.push_str(&format!("  effects in the ledger: {}{references}\n", result.effects));
    text.push_str(&format!("  history: {}\n", result.history_digest));
    if result.verdict != Verdict::Pass {
        text.push_str(&format!("  reproduce: {}\n", result.reproduce));
    }
    text
}

fn render_matrix(result: &MatrixResult) -> String {
    let mut text = format!(
        "matrix: executor {} {}, {} {} per scenario{}\n\n",
        result.executor,
        result.executor_version,
        result.seeds,
        if result.black_box.is_some() { "repeats" } else { "seeds" },
        result.shard.map(|shard| format!(", shard {shard} only")).unwrap_or_default()
    );
    for line in reports::black_box_text(result) {
        text.push_str(&line);
        text.push('\n');
    }
    if result.black_box.is_some() {
        text.push('\n');
    }
    text.push_str(&format!("{:<5} {:<14} {:<12} {}\n", "row", "verdict", "scenarios", "runs"));
    for row in &result.rows {
        text.push_str(&format!(
            "{:<5} {:<14} {:<12} {}\n",
            row.row,
            row.verdict,
            row.scenarios.join(","),
            row.seeds_run
        ));
    }
    text.push('\n');
    text.push_str(&format!(
        "{:<4} {:<34} {:<8} {:<14} {}\n",
        "id", "scenario", "rows", "verdict", "runs pass/fail/unknown/crashed"
    ));
    for scenario in &result.scenarios {
        let count = |verdict| scenario.counts.get(&verdict).copied().unwrap_or(0);
        text.push_str(&format!(
            "{:<4} {:<34} {:<8} {:<14} {}/{}/{}/{}\n",
            scenario.id,
            scenario.name,
            scenario.rows.join(","),
            scenario.verdict,
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::Unknown),
            count(Verdict::Crashed)
        ));
    }
    let skipped: Vec<&reports::ScenarioSummary> =
        result.scenarios.iter().filter(|s| s.verdict == Verdict::NotApplicable).collect();
    if !skipped.is_empty() {
        text.push_str(&format!("\nnot applicable to {} (not run):\n", result.executor));
        for scenario in skipped {
            let why = scenario.shown.notes.first().map_or("not applicable", String::as_str);
            text.push_str(&format!("  {}_{}: {why}\n", scenario.id, scenario.name));
        }
    }
    // A black-box run is not seeded: its number counts repeats (`run --seed` takes it back).
    let unit = if result.black_box.is_some() { "repeat" } else { "seed" };
    for scenario in &result.scenarios {
        if let Some(failure) = scenario.failures.first() {
            text.push_str(&format!(
                "\n{}_{} first {} at {unit} {} ({} of {} {unit}s did not pass: {}):\n",
                scenario.id,
                scenario.name,
                failure.verdict,
                failure.seed,
                scenario.failures.len(),
                scenario.seeds_run,
                failing_seeds_summary(&scenario.failures, unit)
            ));
            if !scenario.oracle_counts.is_empty() {
                let counts: Vec<String> =
                    scenario.oracle_counts.iter().map(|(oracle, runs)| format!("{oracle} x{runs}")).collect();
                text.push_str(&format!("  oracles over all {unit}s: {}\n", counts.join(", ")));
            }
            for violation in &failure.violations {
                text.push_str(&format!("  violation: {violation}\n"));
            }
            for note in &failure.notes {
                text.push_str(&format!("  note: {note}\n"));
            }
            text.push_str(&format!("  reproduce: {}\n", failure.reproduce));
        }
    }
    text.push_str(&format!("\n{}\n", reports::rows_applied_text(result)));
    text.push_str(&format!("verdict: {}\n", result.verdict));
    text
}

/// The largest report (`explore.json`, `matrix.json`) replaylab reads back: far above any a
/// run writes (a 100-seed matrix's is a few megabytes), far below what would exhaust memory.
pub(crate) const MAX_REPORT_BYTES: u64 = 256 << 20;

/// Reads an `explore.json`, refusing another format version.
fn read_explore_record(path: &std::path::Path) -> Result<crate::explore_cli::ExploreRecord, Failure> {
    let text = world::read_regular_file(path, MAX_REPORT_BYTES)
        .map_err(|error| bad_input(anyhow::anyhow!("failed to read {error}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not JSON", path.display()))
        .map_err(bad_input)?;
    let version = value.get("schema_version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(crate::explore_cli::EXPLORE_SCHEMA_VERSION)) {
        return Err(bad_input(anyhow::anyhow!(
            "{}: schema version {}; this replaylab reads explore.json version {}",
            path.display(),
            version.map_or("missing".to_owned(), |v| v.to_string()),
            crate::explore_cli::EXPLORE_SCHEMA_VERSION
        )));
    }
    let record: crate::explore_cli::ExploreRecord = serde_json::from_value(value)
        .with_context(|| format!("{}: not a valid explore.json", path.display()))
        .map_err(bad_input)?;
    crate::explore::record::check_record(&record)
        .map_err(|error| bad_input(anyhow::anyhow!("{}: {error}", path.display())))?;
    Ok(record)
}

/// Writes a matrix result's reports, appends the Markdown to `$GITHUB_STEP_SUMMARY` when set,
/// and gives the exit code its verdict calls for.
fn write_matrix_reports(
    result: &MatrixResult,
    out: &std::path::Path,
    formats: &[reports::Format],
    render_options: &reports::RenderOptions,
) -> Result<u8, Failure> {
    let written = reports::write_reports_with(result, out, formats, render_options)
        .map_err(|error| Failure { code: exit::CHECK_FAILED, error: error.into() })?;
    for path in &written {
        println!("wrote {}", path.display());
    }
    if let Some(path) = reports::append_matrix_step_summary(result, render_options)
        .map_err(|error| Failure { code: exit::CHECK_FAILED, error: error.into() })?
    {
        println!("appended the matrix to {}", path.display());
    }
    Ok(if result.verdict == Verdict::Pass { exit::SUCCESS } else { exit::CHECK_FAILED })
}

/// The failing seeds (or repeats) as every report lists them: `0-3, 7, 9-998 (995 seeds)`.
fn failing_seeds_summary(failures: &[reports::FailedRun], unit: &str) -> String {
    let seeds: Vec<u64> = failures.iter().map(|failure| failure.seed).collect();
    reports::seed_list(&seeds, unit)
}

fn serve_downstream(listen: &str, config_path: Option<&std::path::Path>) -> Result<u8, Failure> {
    let address: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen {} is not an address like 127.0.0.1:8080", quoted(listen)))
        .map_err(bad_input)?;
    let config = match config_path {
        None => DownstreamConfig::default(),
        Some(path) => {
            let text = world::read_regular_file(path, world::toolmap::MAX_FILE_BYTES)
                .map_err(|error| bad_input(anyhow::anyhow!("failed to read {error}")))?;
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

#[cfg(test)]
mod tests {

    #[test]
    fn black_box_runs_per_core_follow_the_servers_start() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(runs_per_core(ms(0)), 8);
        assert_eq!(runs_per_core(ms(500)), 8);
        assert_eq!(runs_per_core(ms(600)), 6);
        assert_eq!(runs_per_core(ms(2_100)), 2);
        assert_eq!(runs_per_core(ms(60_000)), 2);
    }
    use super::*;

    /// clap checks its definitions only when a command is parsed in a debug build: every
    /// subcommand is checked here, so that no release build ships a broken one.
    #[test]
    fn the_command_line_definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    fn program(argv0: &str, under_cargo: bool, package: Option<&str>) -> String {
        program_name(Some(PathBuf::from(argv0)), under_cargo, package.map(str::to_owned))
    }

    #[test]
    fn reproduce_commands_name_the_program_as_it_was_run() {
        let release = "/src/my-crate/target/release/my-replaylab";
        assert_eq!(
            program(release, true, Some("my-crate")),
            "cargo run --release -p my-crate --bin my-replaylab --"
        );
        assert_eq!(
            program("/src/target/debug/replaylab", true, Some("harness")),
            "cargo run -p harness --bin replaylab --"
        );
        assert_eq!(
            program("/t/bench/my-replaylab", true, Some("my-crate")),
            "cargo run --profile bench -p my-crate --bin my-replaylab --"
        );
        assert_eq!(program("replaylab", false, None), "replaylab");
        assert_eq!(program("./target/release/replaylab", false, None), "./target/release/replaylab");
        assert_eq!(program("/opt/my tools/replaylab", false, None), "'/opt/my tools/replaylab'");
        // Under Cargo, but without a package name (not `cargo run`): the path as invoked.
        assert_eq!(program(release, true, None), release);
        assert_eq!(program_name(None, false, None), "replaylab");
    }

    #[test]
    fn a_binarys_executors_must_have_free_one_word_names() {
        let mine = |name: &str| ExecutorSpec::new(name, |_run: &str| Err("unused".to_owned()));
        let registry = Registry::new(vec![mine("mine")], "my-replaylab").expect("a free name is taken");
        let found = registry.find("mine").expect("the extra executor is found");
        assert_eq!(found.program, "my-replaylab");
        assert_eq!(registry.find("reference").expect("built-ins stay").program, "my-replaylab");
        for bad in ["reference", "mutant:blind_retry", "", "my executor"] {
            let error = Registry::new(vec![mine(bad)], "x").err().expect("refused");
            assert_eq!(error.code, exit::BAD_INPUT, "{bad:?}");
        }
        assert_eq!(registry.find("nobody").expect_err("unknown").code, exit::BAD_INPUT);
    }
}
