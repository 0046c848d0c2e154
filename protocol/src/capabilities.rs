//! What an executor declares it supports, and what a scenario needs of it.
//!
//! A scenario (or a random case) that needs something the executor under test does not
//! declare is not run: it is reported `not applicable`, never `pass`. Only the parts of the
//! executor's surface the harness drives can be left out: the tools it serves, the queue
//! consumer, the completion-webhook receiver, delayed jobs and the agent's `reconcile`. How
//! an executor stays correct (receipt lookups, keys, leases) is never a capability: an
//! executor that cannot look a receipt up must still not duplicate an effect, it answers
//! `unknown`, and a scenario that shows otherwise fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What an executor supports. [`ExecutorCapabilities::all`] is the whole protocol (the
/// reference); a narrower executor starts from [`ExecutorCapabilities::tools`].
///
/// ```
/// use protocol::ExecutorCapabilities;
///
/// // Serves tickets.create only, called directly: no queue, no webhooks, no reconcile.
/// let tiny = ExecutorCapabilities::tools(["tickets.create"]);
/// assert!(!tiny.queue_consumer && !tiny.webhooks && !tiny.reconcile);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorCapabilities {
    /// The tools it serves, by name (every version the harness sends); `None`: every tool.
    pub tools: Option<BTreeSet<String>>,
    /// It consumes the envelopes a queued tool (`messages.send`) writes to the outbox.
    pub queue_consumer: bool,
    /// It settles delayed jobs (`jobs.submit`) by polling them.
    pub delayed_jobs: bool,
    /// It receives the downstream's completion webhooks.
    pub webhooks: bool,
    /// It answers the agent's `reconcile` of an operation.
    pub reconcile: bool,
    /// It answers the agent's poll of an operation (every executor in the simulation does; an
    /// MCP server serves `replaylab.poll`, or not).
    pub poll: bool,
    /// The versions it serves of the tools named here; a tool not named here is served at
    /// every version the harness sends.
    pub versions: BTreeMap<String, BTreeSet<String>>,
}

impl ExecutorCapabilities {
    /// Everything: every tool at every version, the queue consumer, delayed jobs, webhooks,
    /// reconcile and poll.
    pub fn all() -> Self {
        Self {
            tools: None,
            queue_consumer: true,
            delayed_jobs: true,
            webhooks: true,
            reconcile: true,
            poll: true,
            versions: BTreeMap::new(),
        }
    }

    /// Only these tools, called directly; add the rest with the builder methods.
    pub fn tools<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tools: Some(tools.into_iter().map(Into::into).collect()),
            queue_consumer: false,
            delayed_jobs: false,
            webhooks: false,
            reconcile: false,
            poll: true,
            versions: BTreeMap::new(),
        }
    }

    /// With (or without) a queue consumer.
    pub fn with_queue_consumer(mut self, yes: bool) -> Self {
        self.queue_consumer = yes;
        self
    }

    /// With (or without) delayed jobs.
    pub fn with_delayed_jobs(mut self, yes: bool) -> Self {
        self.delayed_jobs = yes;
        self
    }

    /// With (or without) a webhook receiver.
    pub fn with_webhooks(mut self, yes: bool) -> Self {
        self.webhooks = yes;
        self
    }

    /// With (or without) `reconcile`.
    pub fn with_reconcile(mut self, yes: bool) -> Self {
        self.reconcile = yes;
        self
    }

    /// With (or without) the agent's poll.
    pub fn with_poll(mut self, yes: bool) -> Self {
        self.poll = yes;
        self
    }

    /// Serving `tool` at these versions only.
    pub fn with_versions<I, S>(mut self, tool: impl Into<String>, versions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.versions.insert(tool.into(), versions.into_iter().map(Into::into).collect());
        self
    }

    /// What of `needs` this executor lacks, one plain phrase each (`tool messages.send`, `a
    /// queue consumer`); empty when it supports everything needed.
    pub fn lacks(&self, needs: &Needs) -> Vec<String> {
        let mut missing: Vec<String> = needs
            .tools
            .iter()
            .filter(|tool| self.tools.as_ref().is_some_and(|served| !served.contains(*tool)))
            .map(|tool| format!("tool {tool}"))
            .collect();
        for (tool, version) in &needs.versions {
            let served = self.versions.get(tool).is_none_or(|versions| versions.contains(version));
            if !served && !missing.contains(&format!("tool {tool}")) {
                missing.push(format!("tool {tool} at version {version}"));
            }
        }
        for (needed, supported, what) in [
            (needs.queue_consumer, self.queue_consumer, "a queue consumer"),
            (needs.delayed_jobs, self.delayed_jobs, "delayed jobs"),
            (needs.webhooks, self.webhooks, "a webhook receiver"),
            (needs.reconcile, self.reconcile, "reconcile"),
            (needs.poll, self.poll, "poll"),
        ] {
            if needed && !supported {
                missing.push(what.to_owned());
            }
        }
        missing
    }
}

impl Default for ExecutorCapabilities {
    /// [`ExecutorCapabilities::all`].
    fn default() -> Self {
        Self::all()
    }
}

impl fmt::Display for ExecutorCapabilities {
    /// `tools tickets.create; queue consumer no; delayed jobs no; webhooks no; reconcile no`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tools = match &self.tools {
            None => "all".to_owned(),
            Some(tools) if tools.is_empty() => "none".to_owned(),
            Some(tools) => tools.iter().cloned().collect::<Vec<_>>().join(","),
        };
        let yes_no = |yes: bool| if yes { "yes" } else { "no" };
        write!(
            f,
            "tools {tools}; queue consumer {}; delayed jobs {}; webhooks {}; reconcile {}",
            yes_no(self.queue_consumer),
            yes_no(self.delayed_jobs),
            yes_no(self.webhooks),
            yes_no(self.reconcile)
        )?;
        // Said only when narrower than every executor in the simulation.
        if !self.poll {
            f.write_str("; poll no")?;
        }
        for (tool, versions) in &self.versions {
            let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
            write!(f, "; {tool} at {}", versions.join(","))?;
        }
        Ok(())
    }
}

/// What a scenario needs of the executor under test (`scenarios::Scenario::needs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The tools it calls.
    pub tools: BTreeSet<String>,
    /// It calls a queued tool.
    pub queue_consumer: bool,
    /// It calls a delayed-job tool.
    pub delayed_jobs: bool,
    /// Its downstream sends completion webhooks.
    pub webhooks: bool,
    /// The agent reconciles an operation.
    pub reconcile: bool,
    /// The agent polls an operation (a `poll` step; the harness's own final poll is not one).
    pub poll: bool,
    /// The (tool, version) of every call.
    pub versions: BTreeSet<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(tools: &[&str]) -> Needs {
        Needs { tools: tools.iter().map(|t| (*t).to_owned()).collect(), ..Needs::default() }
    }

    #[test]
    fn all_lacks_nothing() {
        let everything = Needs {
            queue_consumer: true,
            delayed_jobs: true,
            webhooks: true,
            reconcile: true,
            ..needs(&["tickets.create", "messages.send"])
        };
        assert_eq!(ExecutorCapabilities::all().lacks(&everything), Vec::<String>::new());
    }

    #[test]
    fn a_narrow_executor_lacks_each_missing_part_by_name() {
        let tiny = ExecutorCapabilities::tools(["tickets.create"]).with_reconcile(true);
        assert!(tiny.lacks(&needs(&["tickets.create"])).is_empty());
        let wanted = Needs {
            queue_consumer: true,
            webhooks: true,
            reconcile: true,
            ..needs(&["tickets.create", "messages.send"])
        };
        assert_eq!(tiny.lacks(&wanted), ["tool messages.send", "a queue consumer", "a webhook receiver"]);
        let jobs = Needs { delayed_jobs: true, ..needs(&[]) };
        assert_eq!(tiny.lacks(&jobs), ["delayed jobs"]);
    }

    #[test]
    fn display_lists_every_part() {
        let tiny = ExecutorCapabilities::tools(["tickets.create"]);
        assert_eq!(
            tiny.to_string(),
            "tools tickets.create; queue consumer no; delayed jobs no; webhooks no; reconcile no"
        );
        assert!(ExecutorCapabilities::all().to_string().starts_with("tools all; queue consumer yes"));
        let narrow = tiny.with_poll(false).with_versions("tickets.create", ["2026-08-18"]);
        assert!(
            narrow.to_string().ends_with("reconcile no; poll no; tickets.create at 2026-08-18"),
            "{narrow}"
        );
    }

    #[test]
    fn a_server_without_poll_or_a_version_lacks_them() {
        let one_version = ExecutorCapabilities::tools(["tickets.create"])
            .with_poll(false)
            .with_versions("tickets.create", ["2026-08-18"]);
        let mut wanted = needs(&["tickets.create"]);
        wanted.versions.insert(("tickets.create".into(), "2026-08-18".into()));
        assert!(one_version.lacks(&wanted).is_empty());
        wanted.versions.insert(("tickets.create".into(), "2026-11-01".into()));
        wanted.poll = true;
        assert_eq!(one_version.lacks(&wanted), ["tool tickets.create at version 2026-11-01", "poll"]);
        assert!(ExecutorCapabilities::all().lacks(&wanted).is_empty());
    }
}
