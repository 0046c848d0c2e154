//! Executors for the harness's tests, each defined by what a call does: polls and
//! reconciliations answer what the test says, deliveries are acknowledged, webhooks unmatched.

use std::rc::Rc;

use harness::executors::ExecutorSpec;
use protocol::{
    Consumed, Envelope, Executor, ExecutorFactory, LocalBoxFuture, OperationRef, Outcome, ToolCall,
    WebhookAck, WebhookEvent, WorkerEnv,
};

/// What a call does, with the worker's environment.
pub type CallFn = fn(WorkerEnv, ToolCall) -> LocalBoxFuture<'static, Outcome>;

/// What a poll or a reconciliation answers.
pub type PollFn = fn() -> Outcome;

struct Scripted {
    env: WorkerEnv,
    call: CallFn,
    poll: PollFn,
}

impl Executor for Scripted {
    fn call(&self, call: ToolCall) -> LocalBoxFuture<'_, Outcome> {
        (self.call)(self.env.clone(), call)
    }
    fn poll(&self, _operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        let outcome = (self.poll)();
        Box::pin(async move { outcome })
    }
    fn reconcile(&self, _operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        let outcome = (self.poll)();
        Box::pin(async move { outcome })
    }
    fn consume(&self, _envelope: Envelope) -> LocalBoxFuture<'_, Consumed> {
        Box::pin(async { Consumed::Ack })
    }
    fn webhook(&self, _event: WebhookEvent) -> LocalBoxFuture<'_, WebhookAck> {
        Box::pin(async { WebhookAck::Unmatched })
    }
}

struct ScriptedFactory {
    call: CallFn,
    poll: PollFn,
}

impl ExecutorFactory for ScriptedFactory {
    fn start(&self, env: WorkerEnv) -> Box<dyn Executor> {
        Box::new(Scripted { env, call: self.call, poll: self.poll })
    }
}

/// An executor called `name` whose calls run `call` and whose polls answer `poll()`.
pub fn scripted(name: &str, call: CallFn, poll: PollFn) -> ExecutorSpec {
    ExecutorSpec::new(name, move |_run: &str| {
        Ok(Rc::new(ScriptedFactory { call, poll }) as Rc<dyn ExecutorFactory>)
    })
    .description(name)
}

/// Checks that the schema file at `path` (relative to the harness crate) holds `generated`, the
/// schema the types generate; with `UPDATE_SCHEMA=1`, writes it first. `test` names the test
/// that regenerates it, `version` the constant to bump on an incompatible change. Returns the
/// generated schema, parsed.
pub fn assert_schema_current(path: &str, generated: &str, test: &str, version: &str) -> serde_json::Value {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("UPDATE_SCHEMA").is_some_and(|value| value == "1") {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("created");
        std::fs::write(&path, generated).expect("written");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: the types changed. Regenerate it with \
         `UPDATE_SCHEMA=1 cargo test -p harness --test it {test}`, review the diff, and bump \
         {version} on an incompatible change.",
        path.display()
    );
    serde_json::from_str(generated).expect("the schema is JSON")
}
