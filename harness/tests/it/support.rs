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
