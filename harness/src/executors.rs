//! The executors the command line can name: `reference`, and the mutant zoo of MATRIX.md as
//! `mutant:<name>` (`executor::mutants`). Each is plugged in through the public
//! [`protocol::ExecutorFactory`] interface only.

use std::rc::Rc;
use std::sync::Arc;

use protocol::ExecutorFactory;

/// Makes the factory for one run; the argument names the run (unique per scenario and seed),
/// e.g. for an in-memory database. An error (or a panic) makes the run `crashed`, with the
/// error in its notes.
pub type MakeFactory = Arc<dyn Fn(&str) -> Result<Rc<dyn ExecutorFactory>, String> + Send + Sync>;

/// A named executor the harness can run.
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
}

impl std::fmt::Debug for ExecutorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorSpec")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// The reference over an empty store from the thread's warm pool: runs on one thread reuse
/// one database, emptied between runs, instead of creating a schema each time.
fn reference_factory(_run_id: &str) -> Result<Rc<dyn ExecutorFactory>, String> {
    let factory = executor::ReferenceFactory::recycled(
        executor::ReferenceConfig::default(),
        executor::Strategies::reference(),
    )
    .map_err(|error| format!("the reference's claim store did not open: {error}"))?;
    Ok(Rc::new(factory))
}

/// The spec of one mutant of the zoo: `mutant:<name>`, described by its defect.
fn mutant_spec(mutant: executor::mutants::Mutant) -> ExecutorSpec {
    let make = mutant.factory;
    let name = mutant.name;
    ExecutorSpec {
        name: format!("mutant:{name}"),
        version: env!("CARGO_PKG_VERSION").into(),
        description: format!("{} {name}: {}", mutant.id, mutant.defect),
        factory: Arc::new(move |_run_id| {
            let factory =
                make().map_err(|error| format!("mutant {name}: its claim store did not open: {error}"))?;
            let factory: Rc<dyn ExecutorFactory + Send + Sync> = Rc::from(factory);
            Ok(factory as Rc<dyn ExecutorFactory>)
        }),
    }
}

/// Every executor the harness knows, reference first, then the mutants M01..M18.
pub fn all() -> Vec<ExecutorSpec> {
    let reference = ExecutorSpec {
        name: "reference".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        description: "the reference executor: REPLAY over a SQLite claim store".into(),
        factory: Arc::new(reference_factory),
    };
    std::iter::once(reference).chain(executor::mutants::all().into_iter().map(mutant_spec)).collect()
}

/// The executor called `name`.
pub fn find(name: &str) -> Option<ExecutorSpec> {
    all().into_iter().find(|spec| spec.name == name)
}
