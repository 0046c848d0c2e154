//! The `agent` client: plays the model and the workflow. It takes commands from the runner
//! (call, poll, reconcile), sends them to workers over the tool-call protocol, and records
//! what came back.

use std::rc::Rc;
use std::sync::Arc;

use protocol::Outcome;
use wire::{HttpClient, HttpRequest, SimConnector, TransportError};

use judge::history::{EventKind, RequestKind};
use world::boundary::REQUEST_LABEL_HEADER;
use world::{AgentCommand, AgentResult, Shared, AGENT_TIMEOUT, PORT};

/// The agent's main loop: runs until the simulation is dropped.
pub async fn run(shared: Rc<Shared>) -> turmoil::Result {
    loop {
        let next = shared.agent.inbox.borrow_mut().pop_front();
        match next {
            Some(command) => {
                tokio::task::spawn_local(execute(shared.clone(), command));
            }
            None => shared.agent.wake.notified().await,
        }
    }
}

/// Waits until the world clock reads `deadline_ms`: sleeps in simulated time, and re-checks
/// whenever the runner skipped idle time (a skip moves the world clock, not tokio's).
async fn until_world_time(shared: &Shared, deadline_ms: u64) {
    wire::until_clock_reads(|| shared.now_ms(), &shared.agent.clock_moved, deadline_ms).await;
}

async fn execute(shared: Rc<Shared>, command: AgentCommand) {
    let (label, worker, request, lose_answer) = match command {
        AgentCommand::Call { label, worker, call, lose_answer } => {
            let request = HttpRequest::json(http::Method::POST, "/v1/tool-calls", &call);
            (label, worker, request, lose_answer)
        }
        AgentCommand::Query { label, kind, worker, operation } => {
            let path = match kind {
                RequestKind::Reconcile => "/v1/operations/reconcile",
                RequestKind::Poll | RequestKind::Call => "/v1/operations/poll",
            };
            (label, worker, HttpRequest::json(http::Method::POST, path, &operation), false)
        }
    };
    // Percent-encoded: a label holds the scenario's names, in any script.
    let request = request.header(REQUEST_LABEL_HEADER, wire::percent_encode(&label));
    let client = HttpClient::new(Arc::new(SimConnector), worker, PORT);
    let deadline_ms = shared.now_ms() + AGENT_TIMEOUT.as_millis() as u64;
    shared.agent.deadlines.borrow_mut().insert(label.clone(), deadline_ms);
    let answer = tokio::select! {
        biased;
        answer = client.send(request) => Ok(answer),
        () = until_world_time(&shared, deadline_ms) => Err(()),
    };
    shared.agent.deadlines.borrow_mut().remove(&label);
    let result = match answer {
        Err(()) => AgentResult::NoAnswer("timeout".into()),
        Ok(Err(TransportError::ClosedWithoutResponse(_))) => {
            AgentResult::NoAnswer("connection_closed".into())
        }
        Ok(Err(TransportError::Connect { .. })) => AgentResult::NoAnswer("connection_refused".into()),
        Ok(Err(other)) => AgentResult::NoAnswer(format!("transport: {other}")),
        Ok(Ok(response)) if response.status != 200 => {
            AgentResult::NoAnswer(format!("worker answered {}", response.status))
        }
        Ok(Ok(response)) => match response.json::<Outcome>() {
            Ok(outcome) => AgentResult::Answered(outcome),
            Err(_) => AgentResult::NoAnswer("malformed_answer".into()),
        },
    };
    let result = match result {
        AgentResult::Answered(_) if lose_answer => AgentResult::NoAnswer("lost_by_scenario".into()),
        other => other,
    };
    match &result {
        AgentResult::Answered(_) => shared.history.push(EventKind::AgentReceived { label: label.clone() }),
        AgentResult::NoAnswer(reason) => {
            shared.history.push(EventKind::AgentGotNoAnswer { label: label.clone(), reason: reason.clone() })
        }
    }
    shared.agent.outstanding.borrow_mut().remove(&label);
    shared.agent.results.borrow_mut().insert(label, result);
}
