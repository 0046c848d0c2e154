//! The executors the command line can name: `reference`, and (later) the mutant zoo.
//! Each is plugged in through the public [`protocol::ExecutorFactory`] interface only.

use std::rc::Rc;

use protocol::ExecutorFactory;

/// A named executor the harness can run.
#[derive(Debug, Clone)]
pub struct ExecutorSpec {
    /// The name on the command line (`reference`, `mutant:blind_retry`).
    pub name: String,
    /// Its version, for reports.
    pub version: String,
    /// One line: what it is.
    pub description: String,
    /// Makes the factory for one run; the argument names the run (unique per scenario and
    /// seed), e.g. for an in-memory database.
    pub factory: fn(&str) -> Rc<dyn ExecutorFactory>,
}

fn reference_factory(run_id: &str) -> Rc<dyn ExecutorFactory> {
    let location = executor::StoreLocation::fresh_shared_memory(run_id);
    let factory = executor::ReferenceFactory::new(location, executor::ReferenceConfig::default())
        .expect("an in-memory SQLite database always opens");
    Rc::new(factory)
}

/// Every executor the harness knows, reference first.
pub fn all() -> Vec<ExecutorSpec> {
    vec![ExecutorSpec {
        name: "reference".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        description: "the reference executor: REPLAY over a SQLite claim store".into(),
        factory: reference_factory,
    }]
}

/// The executor called `name`.
pub fn find(name: &str) -> Option<ExecutorSpec> {
    all().into_iter().find(|spec| spec.name == name)
}
