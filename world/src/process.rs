//! What the process world is asked to run, as data: a process executor's spec (the command,
//! the workers, the transport, where the key goes, how long a start may take), what probing it
//! found, and what that world cannot run. The process world itself (`world-process`: real
//! processes, the MCP client) is built on it; the runner and the command name it without
//! compiling that world.

use std::collections::BTreeSet;
use std::time::Duration;

use judge::text::shell_quote;
use protocol::mcp::{KeyPlacement, Manifest};
use protocol::ExecutorCapabilities;
use scenarios::{PausePoint, Scenario, StepKind};

/// How long a process may take from its start to the end of the MCP handshake, unless
/// `--start-timeout` says: long enough for a server that imports heavy libraries on a machine
/// busy with other runs.
pub const DEFAULT_START_PATIENCE: Duration = Duration::from_secs(120);
/// How the harness talks to the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// MCP over the process's stdin and stdout.
    Stdio,
    /// MCP over streamable HTTP: the process serves it at `http://127.0.0.1:{port}/mcp`
    /// ([`env::MCP_LISTEN`]).
    Http,
}

impl Transport {
    /// `stdio`, `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// A black-box executor: the command that starts one worker process, and how to drive it.
#[derive(Debug, Clone)]
pub struct BlackBoxSpec {
    /// The command, run by `sh -c`, with `{worker}`, `{state}`, `{run}`, `{port}` and
    /// `{webhook_port}` replaced.
    pub command: String,
    /// Worker processes per run, at least: a scenario that names more workers gets one process
    /// for each.
    pub workers: usize,
    /// The transport.
    pub transport: Transport,
    /// Where the agent puts the operation's key besides `_meta`.
    pub key_placement: KeyPlacement,
    /// What the MCP handshake named (set from the [`Probe`]).
    pub server: String,
    /// Where the capabilities came from: `manifest` or `tools/list` (set from the [`Probe`]).
    pub capabilities_from: String,
    /// Whether it serves [`protocol::mcp::POLL_TOOL`] (set from the [`Probe`]): without it, the harness
    /// cannot ask at the end how each operation stands, and the oracles that read that final
    /// poll cannot judge.
    pub polls: bool,
    /// Whether it consumes queued envelopes (set from the [`Probe`]: its manifest declares
    /// `queue_consumer` and it serves [`protocol::mcp::CONSUME_TOOL`]): the harness's queue
    /// delivers to its workers.
    pub consumes: bool,
    /// Where on its webhook port it receives webhooks (set from the [`Probe`]: the manifest's
    /// `webhook_path`, else [`protocol::mcp::DEFAULT_WEBHOOK_PATH`]).
    pub webhook_path: String,
    /// How long a process may take from its start to the end of the MCP handshake.
    pub start_patience: Duration,
    /// How long the probe's one process took to start and shake hands (set from the
    /// [`Probe`]): what the default number of runs side by side is sized by.
    pub measured_start: Duration,
    /// The user's tool map (`replaylab.toml`): the roles bound to the server's own tools.
    pub tool_map: Option<std::sync::Arc<crate::toolmap::ToolMap>>,
    /// What its `tools/list` said of each tool (set from the [`Probe`]): the hints it declares.
    pub listed: Vec<ListedTool>,
}

impl BlackBoxSpec {
    /// `command` run as `workers` worker processes, over stdio, the key in `_meta`, the default
    /// start patience; what probing learns (server, capabilities, poll, start time) is empty
    /// until [`Probe`] fills it.
    pub fn new(command: impl Into<String>, workers: usize) -> Self {
        Self {
            command: command.into(),
            workers,
            transport: Transport::Stdio,
            key_placement: KeyPlacement::Meta,
            server: String::new(),
            capabilities_from: String::new(),
            polls: false,
            consumes: false,
            webhook_path: protocol::mcp::DEFAULT_WEBHOOK_PATH.to_owned(),
            start_patience: DEFAULT_START_PATIENCE,
            measured_start: Duration::ZERO,
            tool_map: None,
            listed: Vec::new(),
        }
    }

    /// The server's tool that plays `role`: the tool map's binding, else the role's own name.
    pub fn tool_of(&self, role: &str) -> String {
        self.tool_map
            .as_ref()
            .and_then(|map| map.binding(role))
            .map_or_else(|| role.to_owned(), |binding| binding.tool.clone())
    }

    /// The command line's arguments that name this executor, for reproduce commands:
    /// `--executor-cmd '...' --workers 2`.
    pub fn reproduce_arguments(&self) -> String {
        let mut arguments =
            format!("--executor-cmd {} --workers {}", shell_quote(&self.command), self.workers);
        if self.transport != Transport::Stdio {
            arguments.push_str(&format!(" --transport {}", self.transport.as_str()));
        }
        if let KeyPlacement::Argument(name) = &self.key_placement {
            arguments.push_str(&format!(" --key-argument {}", shell_quote(name)));
        }
        if let Some(map) = &self.tool_map {
            arguments.push_str(&format!(" --config {}", shell_quote(&map.path.display().to_string())));
        }
        if self.start_patience != DEFAULT_START_PATIENCE {
            arguments.push_str(&format!(" --start-timeout {}ms", self.start_patience.as_millis()));
        }
        arguments
    }
}

/// What the black-box world cannot do: the reasons a scenario is `not applicable` here,
/// whatever the executor declares. It cannot see inside a process's store, so it has no store
/// pause points; the queue and webhooks are the harness's, so it has those.
pub fn lacks(scenario: &Scenario) -> Vec<String> {
    let mut lacks = BTreeSet::new();
    for step in &scenario.steps {
        if let StepKind::Pause { point: PausePoint::BeforeStore(_) | PausePoint::AfterStore(_), .. } =
            &step.kind
        {
            lacks.insert("store pause points (the harness cannot see inside a process's store)".to_owned());
        }
    }
    lacks.into_iter().collect()
}

/// What starting the command once (the process world's `probe`) says of the executor: its manifest (or none), the tools
/// `tools/list` names, and the capabilities that follow.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The manifest, when the server has one.
    pub manifest: Option<Manifest>,
    /// The tools it lists.
    pub tools: BTreeSet<String>,
    /// What `tools/list` says of each tool: its description, `inputSchema` and annotations
    /// (`replaylab init` guesses the roles from them).
    pub listed: Vec<ListedTool>,
    /// What it supports.
    pub capabilities: ExecutorCapabilities,
    /// The server's name and version, from its MCP handshake.
    pub server: String,
    /// How long its one process took from its start to the end of the MCP handshake.
    pub start: Duration,
}

/// One tool as `tools/list` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// Its name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Its `inputSchema` (a JSON Schema object).
    pub input_schema: serde_json::Value,
    /// Its annotations (`idempotentHint`, `destructiveHint`, ...), if any.
    pub annotations: Option<serde_json::Value>,
}

/// What a command stopped by a signal leaves behind for its user (an exploration's findings so
/// far), said by the process world's signal handler in place of "no report was written".
static LEFT_BEHIND: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Says what a signal that stops the command now leaves behind (`None`: nothing).
pub fn leave_behind(note: Option<String>) {
    *LEFT_BEHIND.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = note;
}

/// What [`leave_behind`] last said.
pub fn left_behind() -> Option<String> {
    LEFT_BEHIND.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(id: &str) -> Scenario {
        scenarios::builtin_by_id(id).expect("a built-in scenario")
    }

    #[test]
    fn what_the_black_box_world_cannot_do_makes_a_scenario_not_applicable() {
        assert_eq!(lacks(&builtin("S02")), Vec::<String>::new(), "a lost answer needs nothing more");
        assert_eq!(lacks(&builtin("S03")), Vec::<String>::new(), "a held answer and a kill");
        // The queue (a pause before the ack included) and webhooks are the harness's.
        for id in ["S16", "S17", "S31", "S10"] {
            assert_eq!(lacks(&builtin(id)), Vec::<String>::new(), "{id}");
        }
        // S26 pauses at a store call.
        assert_eq!(
            lacks(&builtin("S26")),
            ["store pause points (the harness cannot see inside a process's store)"]
        );
    }

    #[test]
    fn reproduce_arguments_name_what_the_run_needs() {
        let mut spec = BlackBoxSpec::new("python3 server.py", 2);
        assert_eq!(spec.reproduce_arguments(), "--executor-cmd 'python3 server.py' --workers 2");
        spec.transport = Transport::Http;
        spec.key_placement = KeyPlacement::Argument("idempotencyKey".into());
        assert_eq!(
            spec.reproduce_arguments(),
            "--executor-cmd 'python3 server.py' --workers 2 --transport http --key-argument idempotencyKey"
        );
    }
}
