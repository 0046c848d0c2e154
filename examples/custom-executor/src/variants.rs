//! Two of the zoo's defects rewritten on the reference executor's public parts: each is "the
//! reference with one decision changed", in a few lines, with no file copied. The matrix kills
//! them like their zoo twins (`tests/it/variants.rs`).

use std::rc::Rc;

use executor::{AmbiguityVerdict, ReferenceConfig, ReferenceFactory, RetentionVerdict, Strategies};
use harness::prelude::{ExecutorFactory, ExecutorSpec, WorkerEnv};

/// Wraps a variant of the reference, made per worker by `strategies`, as an executor.
fn variant(name: &str, strategies: fn(&WorkerEnv) -> Strategies) -> ExecutorSpec {
    ExecutorSpec::new(name, move |_run: &str| {
        let factory = ReferenceFactory::recycled(ReferenceConfig::default(), strategies);
        Ok(Rc::new(factory.map_err(|error| error.to_string())?) as Rc<dyn ExecutorFactory>)
    })
}

/// The zoo's M06: an ambiguous answer (a timeout, a dropped connection) is taken as done.
pub fn timeout_is_success() -> ExecutorSpec {
    variant("reference-timeout-is-success", |_env| Strategies {
        ambiguity: Rc::new(|_contract, _requests_sent| AmbiguityVerdict::Applied),
        ..Strategies::reference()
    })
}

/// The zoo's M08: a record past its retention is deleted instead of kept as a tombstone.
pub fn short_ttl_delete() -> ExecutorSpec {
    variant("reference-short-ttl-delete", |_env| Strategies {
        retention: Rc::new(|record, now_ms| match executor::reference_retention(record, now_ms) {
            RetentionVerdict::Tombstone => RetentionVerdict::Forget,
            keep => keep,
        }),
        ..Strategies::reference()
    })
}
