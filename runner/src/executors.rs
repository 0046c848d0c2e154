//! The executors the command line can name: `reference`, and the mutant zoo of MATRIX.md as
//! `mutant:<name>` (`executor::mutants`), plus any a user's binary adds
//! (the command's `main_with`). Each is plugged in through the public
//! [`protocol::ExecutorFactory`] interface only.

use std::rc::Rc;
use std::sync::Arc;

use protocol::{ExecutorCapabilities, ExecutorFactory};

/// The program named in reproduce commands unless a binary says otherwise
/// (the command's `main_with` names the binary actually run).
pub const DEFAULT_PROGRAM: &str = "replaylab";

/// Makes the factory for one run; the argument names the run (unique per scenario and seed),
/// e.g. for an in-memory database. An error (or a panic) makes the run `crashed`, with the
/// error in its notes.
pub type MakeFactory = Arc<dyn Fn(&str) -> Result<Rc<dyn ExecutorFactory>, String> + Send + Sync>;

/// A named executor the harness can run.
///
/// ```
/// use std::rc::Rc;
/// use protocol::{ExecutorCapabilities, ExecutorFactory};
/// use runner::executors::ExecutorSpec;
///
/// # #[derive(Debug, Default)] struct MyFactory;
/// # impl protocol::ExecutorFactory for MyFactory {
/// #     fn start(&self, _env: protocol::WorkerEnv) -> Box<dyn protocol::Executor> { unimplemented!() }
/// # }
/// let mine = ExecutorSpec::new("mine", |_run: &str| Ok(Rc::new(MyFactory) as Rc<dyn ExecutorFactory>))
///     .version("1.2.0")
///     .description("my executor, over Postgres")
///     .capabilities(ExecutorCapabilities::tools(["tickets.create"]));
/// assert_eq!(mine.name, "mine");
/// ```
#[derive(Clone)]
pub struct ExecutorSpec {
    /// The name on the command line (`reference`, `mutant:blind_retry`).
    pub name: String,
    /// Its version, for reports.
    pub version: String,
    /// One line: what it is.
    pub description: String,
    /// Makes the factory for one run.
    pub factory: MakeFactory,
    /// What it supports: a scenario that needs more is `not applicable` for it.
    pub capabilities: ExecutorCapabilities,
    /// The command that runs it, as reproduce commands name it (`replaylab`, `cargo run
    /// --release -p my-crate --bin my-replaylab --`).
    pub program: String,
    /// For a black-box executor (`--executor-cmd`): the command its worker processes run, and
    /// how; its runs happen in the process world (`world-process`), and `factory` is
    /// never called.
    pub black_box: Option<Arc<world::process::BlackBoxSpec>>,
}

impl ExecutorSpec {
    /// An executor called `name`, made by `factory` for each run; version `0.0.0`, no
    /// description, every capability, reproduced with `replaylab` (the builder methods and
    /// the command's `main_with` change these).
    pub fn new<F>(name: impl Into<String>, factory: F) -> Self
    where
        F: Fn(&str) -> Result<Rc<dyn ExecutorFactory>, String> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            version: "0.0.0".into(),
            description: String::new(),
            factory: Arc::new(factory),
            capabilities: ExecutorCapabilities::all(),
            program: DEFAULT_PROGRAM.into(),
            black_box: None,
        }
    }

    /// A black-box executor: `spec`'s command, run as worker processes and driven over MCP,
    /// with what `probe` learnt of it (its capabilities from its manifest or its tool list;
    /// its name and version from its MCP handshake).
    pub fn black_box(mut spec: world::process::BlackBoxSpec, probe: &world::process::Probe) -> Self {
        spec.server = probe.server.clone();
        spec.capabilities_from = if probe.manifest.is_some() { "manifest" } else { "tools/list" }.to_owned();
        spec.polls = probe.tools.contains(protocol::mcp::POLL_TOOL);
        spec.consumes = probe.capabilities.queue_consumer;
        spec.webhook_path = probe
            .manifest
            .as_ref()
            .and_then(|manifest| manifest.capabilities.webhook_path.clone())
            .unwrap_or_else(|| protocol::mcp::DEFAULT_WEBHOOK_PATH.to_owned());
        spec.measured_start = probe.start;
        spec.listed = probe.listed.clone();
        let (name, version) = probe.server.split_once(' ').unwrap_or((probe.server.as_str(), ""));
        let name = if name.is_empty() { spec.command.clone() } else { format!("{name} ({})", spec.command) };
        let mut executor = Self::new(name, |_run: &str| {
            Err("a black-box executor runs as processes, not in the simulation".to_owned())
        })
        .version(if version.is_empty() { "unknown" } else { version })
        .description(format!("a black-box MCP server: {}", spec.command))
        .capabilities(probe.capabilities.clone());
        executor.black_box = Some(Arc::new(spec));
        executor
    }

    /// With this version.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// With this description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// With these capabilities.
    pub fn capabilities(mut self, capabilities: ExecutorCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Reproduced with this program.
    pub fn program(mut self, program: impl Into<String>) -> Self {
        self.program = program.into();
        self
    }
}

impl std::fmt::Debug for ExecutorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorSpec")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("description", &self.description)
            .field("capabilities", &self.capabilities)
            .field("program", &self.program)
            .field("black_box", &self.black_box)
            .finish_non_exhaustive()
    }
}

/// The reference over an empty store from the thread's warm pool: runs on one thread reuse
/// one database, emptied between runs, instead of creating a schema each time.
fn reference_factory(_run_id: &str) -> Result<Rc<dyn ExecutorFactory>, String> {
    let factory = executor::ReferenceFactory::recycled(
        executor::ReferenceConfig::default(),
        |_: &protocol::WorkerEnv| executor::Strategies::reference(),
    )
    .map_err(|error| format!("the reference's claim store did not open: {error}"))?;
    Ok(Rc::new(factory))
}

/// The reference executor: REPLAY over a SQLite claim store, every capability.
pub fn reference() -> ExecutorSpec {
    ExecutorSpec::new("reference", reference_factory)
        .version(env!("CARGO_PKG_VERSION"))
        .description("the reference executor: REPLAY over a SQLite claim store")
}

/// The spec of one mutant of the zoo: `mutant:<name>`, described by its defect.
fn mutant_spec(mutant: executor::mutants::Mutant) -> ExecutorSpec {
    let make = mutant.factory;
    let name = mutant.name;
    ExecutorSpec::new(format!("mutant:{name}"), move |_run_id: &str| {
        let factory =
            make().map_err(|error| format!("mutant {name}: its claim store did not open: {error}"))?;
        let factory: Rc<dyn ExecutorFactory + Send + Sync> = Rc::from(factory);
        Ok(factory as Rc<dyn ExecutorFactory>)
    })
    .version(env!("CARGO_PKG_VERSION"))
    .description(format!("{} {name}: {}", mutant.id, mutant.defect))
}

/// Every executor the harness knows, reference first, then the mutants M01..M18.
pub fn all() -> Vec<ExecutorSpec> {
    std::iter::once(reference()).chain(executor::mutants::all().into_iter().map(mutant_spec)).collect()
}

/// The executor called `name`.
pub fn find(name: &str) -> Option<ExecutorSpec> {
    all().into_iter().find(|spec| spec.name == name)
}
