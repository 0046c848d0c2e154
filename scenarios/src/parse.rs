//! The file form of a scenario and its validation into [`Scenario`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use fake_downstream::{EffectKind, FaultAction, FaultRule, IdempotencyMode, Service};
use protocol::{OutcomeStatus, ReasonCode};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::model::{
    CallStep, DownstreamSpec, ExpectOutcome, OperationSpec, PausePoint, QueueSpec, RequestFilter, Row,
    Scenario, ServiceSpec, Step, StepKind, TimingSpec, WebhookSpec, WorkerRef, DEFAULT_SETTLE,
    DEFAULT_TOOL_VERSION,
};

/// The most workers a scenario may ask for: each is a simulated host, or a real process per run
/// in the process world, where `--workers` has the same bound. Sixteen cover every race a
/// scenario can stage (a claim contended by all of them, sweeps beside them) while a black-box
/// run of them still starts in seconds.
pub const MAX_WORKERS: u32 = 16;
/// The longest duration a scenario may name (an advance, a settle time, a lease, ...): a day of
/// simulated time is more than any case needs, and keeps every clock sum far from overflow.
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a scenario duration (`"5s"`, `"1500ms"`), at most [`MAX_DURATION`].
fn parse_duration(key: &str, text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|error| format!("`{key}` = {} is not a duration like \"5s\": {error}", quoted(text)))?;
    if duration > MAX_DURATION {
        return Err(format!("`{key}` = {} is longer than a scenario may run (at most 24h)", quoted(text)));
    }
    Ok(duration)
}

/// Why a scenario file was refused: the file, the line and column, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}:{column}: {message}")]
pub struct ScenarioError {
    /// The file.
    pub source_name: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, naming the field.
    pub message: String,
}

// ----------------------------------------------------------------------- file form

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm {
    id: String,
    name: String,
    rows: Vec<String>,
    summary: String,
    expected: String,
    #[serde(default = "one")]
    workers: u32,
    operations: BTreeMap<String, OperationForm>,
    #[serde(default)]
    downstream: DownstreamForm,
    #[serde(default)]
    queue: QueueForm,
    #[serde(default)]
    timing: TimingForm,
    #[serde(default)]
    settle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(rename = "step")]
    steps: Vec<Spanned<StepForm>>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OperationForm {
    tenant: String,
    #[serde(default = "production")]
    environment: String,
    workflow: String,
    step: String,
    #[serde(default = "default_actor")]
    actor: String,
}

fn production() -> String {
    "production".into()
}

fn default_actor() -> String {
    "agent".into()
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DownstreamForm {
    #[serde(default)]
    tickets: Option<ServiceForm>,
    #[serde(default)]
    charges: Option<ServiceForm>,
    #[serde(default)]
    messages: Option<ServiceForm>,
    #[serde(default)]
    jobs: Option<ServiceForm>,
    #[serde(default)]
    job_duration: Option<String>,
    #[serde(default)]
    webhook: Option<WebhookForm>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceForm {
    idempotency: IdempotencyMode,
    receipts: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookForm {
    #[serde(default)]
    repeat_same_event: u32,
    #[serde(default)]
    extra_event_ids: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueForm {
    #[serde(default)]
    duplicate_deliveries: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delivery_delay: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimingForm {
    #[serde(default)]
    lease: Option<String>,
    #[serde(default)]
    retention: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    downstream_timeout: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallForm {
    id: String,
    worker: String,
    operation: String,
    tool: String,
    #[serde(default)]
    version: Option<String>,
    arguments: ArgumentsForm,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    lose_answer: bool,
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum ArgumentsForm {
    Text(String),
    Table(toml::Table),
}

/// A TOML value as JSON: datetimes as their text; `nan` and `inf`, which JSON cannot hold, are
/// refused (serde would have made them `null` without a word).
fn toml_to_json(value: &toml::Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        toml::Value::String(text) => serde_json::Value::String(text.clone()),
        toml::Value::Integer(number) => serde_json::Value::from(*number),
        toml::Value::Float(number) => serde_json::Number::from_f64(*number)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("{number} is not a number JSON can hold"))?,
        toml::Value::Boolean(flag) => serde_json::Value::Bool(*flag),
        toml::Value::Datetime(datetime) => serde_json::Value::String(datetime.to_string()),
        toml::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        // Keys in sorted order, whatever order the TOML map keeps.
        toml::Value::Table(table) => serde_json::Value::Object(
            table
                .iter()
                .map(|(key, value)| Ok((key.clone(), toml_to_json(value)?)))
                .collect::<Result<BTreeMap<_, _>, String>>()?
                .into_iter()
                .collect(),
        ),
    })
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged, expecting = "a status (\"applied\") or a list of statuses ([\"replayed\", \"unknown\"])")]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
enum StepForm {
    Call {
        #[serde(flatten)]
        call: CallForm,
    },
    Concurrent {
        calls: Vec<CallForm>,
    },
    Await {
        call: String,
    },
    Poll {
        id: String,
        operation: String,
        worker: String,
    },
    Reconcile {
        id: String,
        operation: String,
        worker: String,
    },
    Fault {
        #[serde(default)]
        name: Option<String>,
        rule: FaultRule,
    },
    ReleaseHold {
        name: String,
    },
    Pause {
        name: String,
        worker: String,
        point: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operation: Option<String>,
    },
    WaitPaused {
        name: String,
    },
    Release {
        name: String,
    },
    Crash {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paused: Option<String>,
    },
    Restart {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paused: Option<String>,
    },
    Advance {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_request_of: Option<String>,
    },
    Revoke {
        actor: String,
        #[serde(default)]
        tool: Option<String>,
    },
    HumanEdit {
        ticket_of: String,
    },
    Expect {
        call: String,
        status: OneOrMany,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        same_reference_as: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        while_outstanding: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        told: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        alone: bool,
    },
    ExpectEffects {
        #[serde(default)]
        operation: Option<String>,
        #[serde(default)]
        kind: Option<String>,
        count: u32,
    },
}

// ----------------------------------------------------------------------- validation

/// The largest scenario file read: 4 MiB holds thousands of operations and steps (a scenario of
/// 1,000 operations is about 150 kB), and bounds what a device or an endless pipe can make us read.
pub const MAX_SCENARIO_BYTES: u64 = 4 * 1024 * 1024;

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        use std::io::Read;
        let name = path.display().to_string();
        let refused =
            |message: String| ScenarioError { source_name: name.clone(), line: 1, column: 1, message };
        // Read at most one byte past the limit: a device or a pipe that never ends (`/dev/zero`)
        // is refused, not read forever.
        // And only a regular file: opening a FIFO would block until a writer came.
        let metadata =
            std::fs::metadata(path).map_err(|error| refused(format!("failed to read the file: {error}")))?;
        if !metadata.is_file() {
            return Err(refused("not a regular file (a FIFO, a device or a directory is refused)".into()));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_SCENARIO_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|error| refused(format!("failed to read the file: {error}")))?;
        if bytes.len() as u64 > MAX_SCENARIO_BYTES {
            return Err(refused(format!(
                "the file is larger than {MAX_SCENARIO_BYTES} bytes, the most a scenario file may hold"
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|error| refused(format!("failed to read the file: not UTF-8 text ({error})")))?;
        Scenario::from_toml(&text, &name)
    }

    /// Parses and validates a scenario from TOML text; `source_name` names it in errors.
    pub fn from_toml(text: &str, source_name: &str) -> Result<Scenario, ScenarioError> {
        let lines = Lines::new(text);
        let at = |offset: usize, message: String| {
            let (line, column) = lines.line_and_column(offset);
            ScenarioError { source_name: source_name.to_owned(), line, column, message }
        };
        let form: FileForm = toml::from_str(text).map_err(|error| {
            // A step's own error: serde reads a tagged step whole, so toml's span is the first
            // `[[step]]`'s; find the step (and its key) that is wrong instead.
            let (offset, message) = failing_step(text).unwrap_or_else(|| {
                (error.span().map_or(0, |span| span.start), error.message().trim().to_owned())
            });
            at(offset, message)
        })?;
        let key = |name: &str| offset_of_key(text, name);
        Validator { lines: &lines, source_name, at: &at, key: &key }.scenario(form)
    }
}

struct Validator<'a> {
    lines: &'a Lines<'a>,
    source_name: &'a str,
    at: &'a dyn Fn(usize, String) -> ScenarioError,
    key: &'a dyn Fn(&str) -> usize,
}

impl Validator<'_> {
    fn scenario(&self, form: FileForm) -> Result<Scenario, ScenarioError> {
        let err = |key: &str, message: String| Err((self.at)((self.key)(key), message));
        if !is_scenario_id(&form.id) {
            return err(
                "id",
                format!(
                    "`id` must look like S01 (a capital letter and two or more digits), not {}",
                    quoted(&form.id)
                ),
            );
        }
        if form.name.is_empty()
            || !form.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return err("name", format!("`name` must be snake_case, not {}", quoted(&form.name)));
        }
        let mut rows = Vec::new();
        for row in &form.rows {
            match Row::parse(row) {
                Some(parsed) if !rows.contains(&parsed) => rows.push(parsed),
                Some(_) => return err("rows", format!("`rows` names {row} twice")),
                None => {
                    return err(
                        "rows",
                        format!("`rows` has {}: use C1..C10, F1..F9 or \"prose\"", quoted(row)),
                    )
                }
            }
        }
        if rows.is_empty() {
            return err("rows", "`rows` must name at least one row".into());
        }
        if form.workers == 0 || form.workers > MAX_WORKERS {
            return err(
                "workers",
                format!(
                    "`workers` must be 1..={MAX_WORKERS} (each a simulated host, or a process per run), not {}",
                    form.workers
                ),
            );
        }
        if form.operations.is_empty() {
            return err("operations", "`[operations]` must define at least one operation".into());
        }
        let mut operations = BTreeMap::new();
        for (name, op) in form.operations {
            for (field, value) in [
                ("tenant", &op.tenant),
                ("environment", &op.environment),
                ("workflow", &op.workflow),
                ("step", &op.step),
                ("actor", &op.actor),
            ] {
                // The executor's own rules for identifiers (non-empty, at most 255 characters,
                // no control characters): an operation it must refuse could test nothing.
                if let Err(error) = protocol::check_identifier(field, value) {
                    return err(&name, format!("operation `{name}`: {error}"));
                }
            }
            let spec = OperationSpec {
                tenant: op.tenant,
                environment: op.environment,
                workflow_id: op.workflow,
                step_id: op.step,
                actor: op.actor,
            };
            operations.insert(name, spec);
        }
        let downstream = self.downstream(form.downstream)?;
        let timing = TimingSpec {
            lease: form.timing.lease.as_deref().map(|t| self.duration("lease", t)).transpose()?,
            retention: form.timing.retention.as_deref().map(|t| self.duration("retention", t)).transpose()?,
            downstream_timeout: form
                .timing
                .downstream_timeout
                .as_deref()
                .map(|t| match self.duration("downstream_timeout", t)? {
                    zero if zero.is_zero() => Err((self.at)(
                        (self.key)("downstream_timeout"),
                        "`downstream_timeout` must be longer than 0".to_owned(),
                    )),
                    timeout => Ok(timeout),
                })
                .transpose()?,
        };
        let settle =
            form.settle.as_deref().map(|t| self.duration("settle", t)).transpose()?.unwrap_or(DEFAULT_SETTLE);
        let workers: Vec<String> = (1..=form.workers).map(|n| format!("worker-{n}")).collect();
        let mut context = StepContext::default();
        let mut steps = Vec::new();
        for spanned in form.steps {
            let offset = spanned.span().start;
            let line = self.lines.line_and_column(offset).0;
            let kind = self
                .step(spanned.into_inner(), &operations, &workers, &mut context)
                .map_err(|message| (self.at)(offset, message))?;
            steps.push(Step { line, kind });
        }
        if steps.is_empty() {
            return err("step", "a scenario needs at least one `[[step]]`".into());
        }
        Ok(Scenario {
            id: form.id,
            name: form.name,
            rows,
            summary: form.summary,
            expected: form.expected,
            workers: form.workers,
            operations,
            downstream,
            queue: QueueSpec {
                duplicate_deliveries: form.queue.duplicate_deliveries,
                delivery_delay: form
                    .queue
                    .delivery_delay
                    .as_deref()
                    .map(|t| self.duration("delivery_delay", t))
                    .transpose()?,
            },
            timing,
            settle,
            seed: form.seed,
            steps,
            source: self.source_name.to_owned(),
            line: self.lines.line_and_column((self.key)("id")).0,
        })
    }

    fn duration(&self, key: &str, text: &str) -> Result<Duration, ScenarioError> {
        parse_duration(key, text).map_err(|message| (self.at)((self.key)(key), message))
    }

    fn downstream(&self, form: DownstreamForm) -> Result<DownstreamSpec, ScenarioError> {
        let mut services = BTreeMap::new();
        for (service, spec) in [
            (Service::Tickets, form.tickets),
            (Service::Charges, form.charges),
            (Service::Messages, form.messages),
            (Service::Jobs, form.jobs),
        ] {
            if let Some(spec) = spec {
                services.insert(
                    service.as_str().to_owned(),
                    ServiceSpec { idempotency: spec.idempotency, receipts: spec.receipts },
                );
            }
        }
        Ok(DownstreamSpec {
            services,
            job_duration: form
                .job_duration
                .as_deref()
                .map(|t| self.duration("job_duration", t))
                .transpose()?,
            webhook: form
                .webhook
                .map(|w| {
                    for (name, count) in
                        [("repeat_same_event", w.repeat_same_event), ("extra_event_ids", w.extra_event_ids)]
                    {
                        if count > fake_downstream::MAX_WEBHOOK_REPEATS {
                            // The field's own line (under `[downstream.webhook]`), else the
                            // inline table's (`webhook = { ... }` under `[downstream]`).
                            let offset = [(self.key)(name), (self.key)("webhook")]
                                .into_iter()
                                .find(|&offset| offset > 0)
                                .unwrap_or(0);
                            return Err((self.at)(
                                offset,
                                format!(
                                    "`webhook.{name}` must be at most {}, not {count}",
                                    fake_downstream::MAX_WEBHOOK_REPEATS
                                ),
                            ));
                        }
                    }
                    Ok(WebhookSpec {
                        repeat_same_event: w.repeat_same_event,
                        extra_event_ids: w.extra_event_ids,
                    })
                })
                .transpose()?,
        })
    }

    fn step(
        &self,
        form: StepForm,
        operations: &BTreeMap<String, OperationSpec>,
        workers: &[String],
        context: &mut StepContext,
    ) -> Result<StepKind, String> {
        let worker = |name: &str| -> Result<String, String> {
            if workers.iter().any(|w| w == name) {
                Ok(name.to_owned())
            } else {
                Err(format!("`worker` = {} is not one of {}", quoted(name), workers.join(", ")))
            }
        };
        let operation = |name: &str| -> Result<String, String> {
            if operations.contains_key(name) {
                Ok(name.to_owned())
            } else {
                Err(format!("`operation` = {} is not defined in [operations]", quoted(name)))
            }
        };
        Ok(match form {
            StepForm::Call { call } => StepKind::Call(self.call(call, &worker, &operation, context)?),
            StepForm::Concurrent { calls } => {
                if calls.len() < 2 {
                    return Err("`concurrent` needs at least two calls".into());
                }
                let mut checked = Vec::new();
                for call in calls {
                    let call = self.call(call, &worker, &operation, context)?;
                    if !call.wait {
                        return Err(format!(
                            "call {}: calls in `concurrent` are always awaited; drop `wait`",
                            quoted(&call.id)
                        ));
                    }
                    checked.push(call);
                }
                StepKind::Concurrent(checked)
            }
            StepForm::Await { call } => {
                if !context.unawaited.remove(&call) {
                    return Err(format!(
                        "`await` names {}, which is not an earlier call with wait = false",
                        quoted(&call)
                    ));
                }
                StepKind::Await { call }
            }
            StepForm::Poll { id, operation: op, worker: w } => {
                context.new_id(&id)?;
                StepKind::Poll { id, operation: operation(&op)?, worker: worker(&w)? }
            }
            StepForm::Reconcile { id, operation: op, worker: w } => {
                context.new_id(&id)?;
                StepKind::Reconcile { id, operation: operation(&op)?, worker: worker(&w)? }
            }
            StepForm::Fault { name, rule } => {
                rule.check_path()?;
                if let Some(name) = &name {
                    if context.faults.insert(name.clone(), rule.action == FaultAction::Hold).is_some() {
                        return Err(format!("fault name {} is used twice", quoted(name)));
                    }
                }
                StepKind::Fault { name, rule }
            }
            StepForm::ReleaseHold { name } => match context.faults.get(&name) {
                Some(true) => StepKind::ReleaseHold { name },
                Some(false) => return Err(format!("fault {} is not a `hold` rule", quoted(&name))),
                None => {
                    return Err(format!(
                        "`release_hold` names {}, which is not an earlier named fault",
                        quoted(&name)
                    ))
                }
            },
            StepForm::Pause { name, worker: w, point, request, tool, operation: op } => {
                let mut point = PausePoint::parse(&point).ok_or_else(|| {
                    format!(
                        "`point` = {}: use downstream:before, downstream:before:effect, downstream:after, downstream:after:committed, store:before:NAME, store:after:NAME or queue:before_ack",
                        quoted(&point)
                    )
                })?;
                if let PausePoint::Downstream { filter, .. } = &mut point {
                    if let Some(request) = request {
                        (filter.method, filter.path) = request_filter(&request)?;
                    }
                    filter.tool = tool;
                    filter.operation = op.as_deref().map(operation).transpose()?;
                } else if request.is_some() || tool.is_some() || op.is_some() {
                    return Err("`request`, `tool` and `operation` narrow downstream points only".into());
                }
                if !context.pauses.insert(name.clone()) {
                    return Err(format!("pause name {} is used twice", quoted(&name)));
                }
                let worker = if w == ANY_WORKER { None } else { Some(worker(&w)?) };
                StepKind::Pause { name, worker, point }
            }
            StepForm::WaitPaused { name } => StepKind::WaitPaused { name: context.known_pause(name)? },
            StepForm::Release { name } => StepKind::Release { name: context.known_pause(name)? },
            StepForm::Crash { worker: w, paused } => {
                let crashed = worker_ref(w, paused, &worker, context)?;
                if context.down.contains(&crashed) {
                    return Err(format!(
                        "`crash` of {crashed}, which an earlier step crashed and none restarted"
                    ));
                }
                context.down.push(crashed.clone());
                StepKind::Crash { worker: crashed }
            }
            StepForm::Restart { worker: w, paused } => {
                let restarted = worker_ref(w, paused, &worker, context)?;
                context.restart(&restarted)?;
                StepKind::Restart { worker: restarted }
            }
            StepForm::Advance { by, since_request_of } => {
                if let Some(call) = &since_request_of {
                    context.known_id(call)?;
                }
                StepKind::Advance { by: parse_duration("by", &by)?, since_request_of }
            }
            StepForm::Revoke { actor, tool } => StepKind::Revoke { actor, tool },
            StepForm::HumanEdit { ticket_of } => StepKind::HumanEdit { ticket_of: operation(&ticket_of)? },
            StepForm::Expect { call, status, reason, same_reference_as, while_outstanding, told, alone } => {
                context.known_id(&call)?;
                for other in same_reference_as.iter().chain(&while_outstanding) {
                    context.known_id(other)?;
                }
                let names = match status {
                    OneOrMany::One(one) => vec![one],
                    OneOrMany::Many(many) => many,
                };
                if names.is_empty() {
                    return Err("`status` must name at least one status".into());
                }
                let status = names
                    .iter()
                    .map(|name| {
                        serde_json::from_value::<OutcomeStatus>(serde_json::Value::String(name.clone())).map_err(|_| {
                            format!("`status` = {}: use applied, replayed, in_flight, rejected, unknown or expired", quoted(name))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let reason = reason
                    .map(|name| {
                        serde_json::from_value::<ReasonCode>(serde_json::Value::String(name.clone()))
                            .map_err(|_| format!("`reason` = {} is not a reason code", quoted(&name)))
                    })
                    .transpose()?;
                StepKind::Expect(ExpectOutcome {
                    call,
                    status,
                    reason,
                    same_reference_as,
                    while_outstanding,
                    told,
                    alone,
                })
            }
            StepForm::ExpectEffects { operation: op, kind, count } => {
                if let Some(kind) = &kind {
                    serde_json::from_value::<EffectKind>(serde_json::Value::String(kind.clone())).map_err(
                        |_| {
                            format!(
                                "`kind` = {} is not an effect kind (ticket_created, message_sent, ...)",
                                quoted(kind)
                            )
                        },
                    )?;
                }
                StepKind::ExpectEffects { operation: op.as_deref().map(operation).transpose()?, kind, count }
            }
        })
    }

    fn call(
        &self,
        form: CallForm,
        worker: &dyn Fn(&str) -> Result<String, String>,
        operation: &dyn Fn(&str) -> Result<String, String>,
        context: &mut StepContext,
    ) -> Result<CallStep, String> {
        context.new_id(&form.id)?;
        if form.tool.is_empty() {
            return Err(format!("call {}: `tool` must not be empty", quoted(&form.id)));
        }
        let arguments = match form.arguments {
            ArgumentsForm::Text(text) => {
                serde_json::from_str::<serde_json::Value>(&text).map_err(|error| {
                    format!("call {}: `arguments` is not JSON: {error}", quoted(&form.id))
                })?;
                text
            }
            ArgumentsForm::Table(table) => {
                let json = toml_to_json(&toml::Value::Table(table))
                    .map_err(|error| format!("call {}: `arguments`: {error}", quoted(&form.id)))?;
                serde_json::to_string(&json).map_err(|error| error.to_string())?
            }
        };
        for name in crate::model::ticket_placeholders(&arguments) {
            operation(&name).map_err(|_| {
                format!(
                    "call {}: `${{ticket_of:{name}}}` names no operation of [operations]",
                    quoted(&form.id)
                )
            })?;
        }
        if !form.wait {
            context.unawaited.insert(form.id.clone());
        }
        Ok(CallStep {
            worker: worker(&form.worker)?,
            operation: operation(&form.operation)?,
            tool: form.tool,
            version: form.version.unwrap_or_else(|| DEFAULT_TOOL_VERSION.to_owned()),
            arguments,
            actor: form.actor,
            lose_answer: form.lose_answer,
            wait: form.wait,
            id: form.id,
        })
    }
}

/// What `worker` says in a `pause` step that may stop any worker.
const ANY_WORKER: &str = "any";

/// `POST /v1/charges`, `POST` or `/v1/charges` -> (method, path).
fn request_filter(text: &str) -> Result<(Option<String>, Option<String>), String> {
    let mut parts = text.split_whitespace();
    let (first, second) = (parts.next(), parts.next());
    let bad =
        || format!("`request` = {}: write a method and a path, e.g. \"POST /v1/charges\"", quoted(text));
    if parts.next().is_some() {
        return Err(bad());
    }
    let is_path = |part: &str| part.starts_with('/');
    let is_method = |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphabetic());
    match (first, second) {
        (Some(method), Some(path)) if is_method(method) && is_path(path) => {
            Ok((Some(method.to_ascii_uppercase()), Some(path.to_owned())))
        }
        (Some(path), None) if is_path(path) => Ok((None, Some(path.to_owned()))),
        (Some(method), None) if is_method(method) => Ok((Some(method.to_ascii_uppercase()), None)),
        _ => Err(bad()),
    }
}

/// A crash or restart target: `worker = NAME` or `paused = PAUSE`, exactly one.
fn worker_ref(
    worker: Option<String>,
    paused: Option<String>,
    check_worker: &dyn Fn(&str) -> Result<String, String>,
    context: &StepContext,
) -> Result<WorkerRef, String> {
    match (worker, paused) {
        (Some(worker), None) => Ok(WorkerRef::Named(check_worker(&worker)?)),
        (None, Some(pause)) => Ok(WorkerRef::PausedAt(context.known_pause(pause)?)),
        _ => Err("name the worker with `worker`, or the pause it reached with `paused` (one of them)".into()),
    }
}

#[derive(Debug, Default)]
struct StepContext {
    ids: BTreeSet<String>,
    unawaited: BTreeSet<String>,
    faults: BTreeMap<String, bool>,
    pauses: BTreeSet<String>,
    /// The workers crashed by an earlier step and not restarted since.
    down: Vec<WorkerRef>,
}

impl StepContext {
    /// A restart needs an earlier crash of that worker (a restart of a running worker would do
    /// nothing, and the scenario would test less than it says). Which worker reached a pause
    /// is known only when the run gets there: a crash named by its pause may be any worker's.
    fn restart(&mut self, worker: &WorkerRef) -> Result<(), String> {
        let index = self.down.iter().position(|down| down == worker).or_else(|| {
            self.down.iter().position(|down| {
                matches!((down, worker), (WorkerRef::PausedAt(_), _) | (_, WorkerRef::PausedAt(_)))
            })
        });
        match index {
            Some(index) => {
                self.down.remove(index);
                Ok(())
            }
            None => Err(format!(
                "`restart` of {worker}, which no earlier step crashed (a restart needs a `crash` of that worker before it)"
            )),
        }
    }

    fn new_id(&mut self, id: &str) -> Result<(), String> {
        if id.is_empty() {
            return Err("`id` must not be empty".into());
        }
        if !self.ids.insert(id.to_owned()) {
            return Err(format!("`id` = {} is used twice", quoted(id)));
        }
        Ok(())
    }

    fn known_pause(&self, name: String) -> Result<String, String> {
        if self.pauses.contains(&name) {
            Ok(name)
        } else {
            Err(format!("no earlier `pause` is named {}", quoted(&name)))
        }
    }

    fn known_id(&self, id: &str) -> Result<(), String> {
        if self.ids.contains(id) {
            Ok(())
        } else {
            Err(format!("{} is not an earlier call, poll or reconcile id", quoted(id)))
        }
    }
}

/// `text` in plain double quotes, for messages: `"first"` (nothing escaped, as the file has it).
fn quoted(text: &str) -> String {
    format!("\"{text}\"")
}

fn is_scenario_id(id: &str) -> bool {
    id.len() >= 3
        && id.starts_with(|c: char| c.is_ascii_uppercase())
        && id[1..].chars().all(|c| c.is_ascii_digit())
}

/// A text's line starts, found once, so that every step's line is a binary search rather
/// than a scan from the top (loading stays linear in the file's size).
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(at, _)| at + 1)).collect();
        Self { text, starts }
    }

    /// The 1-based line and column (in characters) of byte `offset`.
    fn line_and_column(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&start| start <= offset);
        let column = self.text[self.starts[line - 1]..offset].chars().count() + 1;
        (line, column)
    }
}

/// Where `key` is first written at the start of a line (for errors about top-level fields), or
/// else the first table header whose last name it is (`[operations.KEY]`, for errors about one
/// operation).
/// The first `[[step]]` that does not read as a step on its own, as the offset of its wrong
/// key (the field an `unknown field`, `invalid type` or `unknown variant` error names, where the
/// step's text has it) or else of its header, with the error's message. `None` when every
/// step reads (the file's error is elsewhere) or the file does not parse as TOML.
fn failing_step(text: &str) -> Option<(usize, String)> {
    #[derive(Deserialize)]
    struct StepsOnly {
        #[serde(default)]
        step: Vec<Spanned<toml::Table>>,
    }
    let steps: StepsOnly = toml::from_str(text).ok()?;
    steps.step.into_iter().find_map(|spanned| {
        let span = spanned.span();
        // Read from its own text, as the whole file's steps are: a value read from a `Value`
        // (a date as a string) can pass where the same text fails.
        let alone = toml::to_string(spanned.get_ref()).ok()?;
        let error = toml::from_str::<StepForm>(&alone).err()?;
        let message = error.message().trim().to_owned();
        // The span is the step's header: its keys run to the next header.
        let after_header = text[span.start..].find('\n').map_or(text.len(), |n| span.start + n + 1);
        let body_end = text[after_header..]
            .split_inclusive('\n')
            .scan(after_header, |at, line| {
                let start = *at;
                *at += line.len();
                Some((start, line))
            })
            .find(|(_, line)| line.trim_start().starts_with('['))
            .map_or(text.len(), |(start, _)| start);
        let step_text = &text[span.start..body_end];
        let field = message.split('`').nth(1).filter(|_| message.starts_with("unknown field"));
        let offset = field
            .and_then(|field| key_line_in(step_text, field))
            .map_or(span.start, |within| span.start + within);
        Some((offset, message))
    })
}

/// The offset in `text` of the line that sets `key` (`key = ...`), if one does.
fn key_line_in(text: &str, key: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return Some(offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}

fn offset_of_key(text: &str, key: &str) -> usize {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key) {
            if rest.trim_start().starts_with('=') || rest.starts_with(']') || rest.starts_with('.') {
                return offset + (line.len() - trimmed.len());
            }
        }
        offset += line.len();
    }
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(header) = trimmed.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            if let Some(end) = header.find(']') {
                let last = header[..end].rsplit('.').next().unwrap_or_default().trim().trim_matches('"');
                if last == key {
                    return offset + (line.len() - trimmed.len());
                }
            }
        }
        offset += line.len();
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
id = "S90"
name = "minimal"
rows = ["C1"]
summary = "s"
expected = "e"

[operations.op1]
tenant = "acme"
workflow = "run_1"
step = "step_1"

[[step]]
action = "call"
id = "first"
worker = "worker-1"
operation = "op1"
tool = "tickets.create"
arguments = '{"subject": "s", "body": "b"}'

[[step]]
action = "expect"
call = "first"
status = "applied"
"#;

    fn error_of(text: &str) -> ScenarioError {
        Scenario::from_toml(text, "test.toml").expect_err("should be refused")
    }

    /// A bad value in a later step names that step's line and says what the field takes, for a
    /// value of any TOML type (a date too: "expected any value" and the first step's line were
    /// said before).
    #[test]
    fn a_bad_status_in_a_later_step_names_its_line_and_what_it_takes() {
        for value in ["1979-05-27", "3", "{ a = 1 }"] {
            let text =
                format!("{MINIMAL}\n[[step]]\naction = \"expect\"\ncall = \"first\"\nstatus = {value}\n");
            let error = error_of(&text);
            let line =
                text.lines().position(|l| l.starts_with("status = ") && l.contains(value)).unwrap() + 1;
            let header = (1..line).rev().find(|&n| text.lines().nth(n - 1) == Some("[[step]]")).unwrap();
            assert!(
                error.line == header || error.line == line,
                "{value}: line {} ({})",
                error.line,
                error.message
            );
            assert!(
                error.message.contains("a status (\"applied\") or a list of statuses"),
                "{value}: {}",
                error.message
            );
        }
    }

    /// Up to 16 workers (issue 45: the limit was 8, stated nowhere); 0 and 17 are refused,
    /// naming the bound.
    #[test]
    fn a_scenario_has_1_to_16_workers() {
        let with = |workers: u32| {
            MINIMAL.replace("expected = \"e\"\n", &format!("expected = \"e\"\nworkers = {workers}\n"))
        };
        assert_eq!(Scenario::from_toml(&with(16), "test.toml").unwrap().workers, 16);
        for workers in [0, 17] {
            let error = error_of(&with(workers));
            assert!(error.message.contains("`workers` must be 1..=16"), "{workers}: {}", error.message);
        }
    }

    #[test]
    fn a_minimal_scenario_parses_with_defaults() {
        let scenario = Scenario::from_toml(MINIMAL, "test.toml").unwrap();
        assert_eq!(scenario.rows, [Row::Checklist(1)]);
        assert_eq!(scenario.workers, 1);
        assert_eq!(scenario.operations["op1"].environment, "production");
        assert_eq!(scenario.steps.len(), 2);
        assert_eq!(scenario.steps[0].line, 13);
        let StepKind::Call(call) = &scenario.steps[0].kind else { panic!("not a call") };
        assert_eq!(call.version, DEFAULT_TOOL_VERSION);
        assert!(call.wait);
        assert_eq!(scenario.settle, DEFAULT_SETTLE);
    }

    #[test]
    fn a_downstream_timeout_is_read_and_zero_is_refused() {
        let with = |timeout: &str| {
            MINIMAL.replace(
                "[operations.op1]",
                &format!("[timing]\ndownstream_timeout = \"{timeout}\"\n\n[operations.op1]"),
            )
        };
        let scenario = Scenario::from_toml(&with("4s"), "t.toml").expect("valid");
        assert_eq!(scenario.timing.downstream_timeout, Some(Duration::from_secs(4)));
        assert_eq!(Scenario::from_toml(MINIMAL, "t.toml").unwrap().timing.downstream_timeout, None);
        let error = error_of(&with("0s"));
        assert!(error.message.contains("`downstream_timeout` must be longer than 0"), "{error}");
        assert_eq!(error.line, 9, "the key's line: {error}");
        let error = error_of(&with("soon"));
        assert!(error.message.contains("`downstream_timeout` = \"soon\" is not a duration"), "{error}");
    }

    #[test]
    fn an_unknown_field_names_the_line_and_the_field() {
        let error = error_of(
            &MINIMAL.replace("tool = \"tickets.create\"", "tool = \"tickets.create\"\ncolour = \"red\""),
        );
        assert_eq!(error.source_name, "test.toml");
        assert!(error.message.contains("colour"), "{error}");
        assert!((13..=20).contains(&error.line), "{error}");
    }

    #[test]
    fn identifiers_the_executor_must_refuse_are_refused_at_load() {
        let long = "w".repeat(protocol::MAX_ID_CHARS + 1);
        let error = error_of(&MINIMAL.replace("workflow = \"run_1\"", &format!("workflow = \"{long}\"")));
        assert!(error.message.contains("`workflow` is longer than 255 characters"), "{error}");
        assert_eq!(error.line, 8, "the operation's line: {error}");
        let error = error_of(&MINIMAL.replace("step = \"step_1\"", "step = \"a\\u0007b\""));
        assert!(error.message.contains("`step` contains control characters"), "{error}");
        // 255 characters, and any Unicode, are accepted.
        let longest = "é".repeat(protocol::MAX_ID_CHARS);
        Scenario::from_toml(
            &MINIMAL.replace("tenant = \"acme\"", &format!("tenant = \"{longest}\"")),
            "t.toml",
        )
        .expect("255 characters are allowed");
    }

    #[test]
    fn table_form_arguments_become_json_and_refuse_what_json_cannot_hold() {
        let table = MINIMAL.replace(
            "arguments = '{\"subject\": \"s\", \"body\": \"b\"}'",
            "arguments = { subject = \"s\", body = \"b\", priority = 2.5, tags = [\"x\"] }",
        );
        let scenario = Scenario::from_toml(&table, "t.toml").expect("valid");
        let StepKind::Call(call) = &scenario.steps[0].kind else { panic!("not a call") };
        assert_eq!(call.arguments, r#"{"body":"b","priority":2.5,"subject":"s","tags":["x"]}"#);
        for bad in ["nan", "inf", "-inf"] {
            let error = error_of(&table.replace("priority = 2.5", &format!("priority = {bad}")));
            assert!(error.message.contains("is not a number JSON can hold"), "{bad}: {error}");
        }
    }

    #[test]
    fn an_endless_file_is_refused_not_read_forever() {
        let error = Scenario::from_file(Path::new("/dev/zero")).expect_err("refused");
        assert!(error.message.contains("not a regular file"), "{error}");
        // A regular file past the limit is refused by its size.
        let path = std::env::temp_dir().join(format!("replaylab-large-{}.toml", std::process::id()));
        std::fs::write(&path, vec![b'#'; MAX_SCENARIO_BYTES as usize + 1]).expect("written");
        let error = Scenario::from_file(&path).expect_err("refused");
        std::fs::remove_file(&path).ok();
        assert!(error.message.contains("larger than 4194304 bytes"), "{error}");
    }

    #[test]
    fn a_webhook_error_names_the_field_line_in_either_form() {
        // Under a `[downstream.webhook]` table: the field's own line (line 27 of the text).
        let table =
            format!("{MINIMAL}\n[downstream.webhook]\nrepeat_same_event = 1\nextra_event_ids = 999\n");
        let error = error_of(&table);
        assert!(error.message.contains("webhook.extra_event_ids"), "{error}");
        assert_eq!(error.line, 28, "{error}");
        // As an inline table under `[downstream]`: that line.
        let inline = format!("{MINIMAL}\n[downstream]\nwebhook = {{ repeat_same_event = 999 }}\n");
        let error = error_of(&inline);
        assert!(error.message.contains("webhook.repeat_same_event"), "{error}");
        assert_eq!(error.line, 27, "{error}");
    }

    #[test]
    fn a_wrong_type_names_the_line() {
        let error = error_of(&MINIMAL.replace("rows = [\"C1\"]", "rows = 7"));
        assert_eq!(error.line, 4, "{error}");
        assert!(error.message.contains("invalid type"), "{error}");
    }

    #[test]
    fn an_unknown_step_names_its_line() {
        let error = error_of(&MINIMAL.replace("action = \"expect\"", "action = \"explode\""));
        assert!(error.message.contains("explode"), "{error}");
        assert!(error.line >= 20, "{error}");
    }

    /// MINIMAL with `steps` instead of its steps.
    fn with_steps(steps: &str) -> String {
        let head = &MINIMAL[..MINIMAL.find("[[step]]").expect("steps")];
        format!("workers = 2\n{head}{steps}")
    }

    #[test]
    fn a_restart_needs_an_earlier_crash_of_that_worker() {
        let step = |action: &str, worker: &str| {
            format!("\n[[step]]\naction = \"{action}\"\nworker = \"{worker}\"\n")
        };
        let never = error_of(&with_steps(&step("restart", "worker-2")));
        assert!(never.message.contains("`restart` of worker-2, which no earlier step crashed"), "{never}");
        let other = error_of(&with_steps(&(step("crash", "worker-1") + &step("restart", "worker-2"))));
        assert!(other.message.contains("which no earlier step crashed"), "{other}");
        let twice = error_of(&with_steps(&(step("crash", "worker-1") + &step("crash", "worker-1"))));
        assert!(twice.message.contains("which an earlier step crashed and none restarted"), "{twice}");
        let again = error_of(&with_steps(
            &(step("crash", "worker-1") + &step("restart", "worker-1") + &step("restart", "worker-1")),
        ));
        assert!(again.message.contains("which no earlier step crashed"), "{again}");
        // A crash loop, and a crash left for the settle phase to restart, are fine.
        let looped =
            [("crash", "worker-1"), ("restart", "worker-1"), ("crash", "worker-1"), ("crash", "worker-2")]
                .map(|(action, worker)| step(action, worker))
                .concat();
        Scenario::from_toml(&with_steps(&looped), "test.toml").expect("a crash loop loads");
    }

    #[test]
    fn pause_points_take_qualifiers_filters_and_any_worker() {
        let scenario = Scenario::from_toml(
            &with_steps(
                r#"
[[step]]
action = "pause"
name = "p"
worker = "any"
point = "downstream:after:committed"
request = "post /v1/charges"
tool = "payments.charge"
operation = "op1"

[[step]]
action = "wait_paused"
name = "p"

[[step]]
action = "crash"
paused = "p"

[[step]]
action = "restart"
paused = "p"
"#,
            ),
            "test.toml",
        )
        .unwrap();
        let StepKind::Pause { worker, point, .. } = &scenario.steps[0].kind else { panic!("a pause") };
        assert_eq!(*worker, None);
        let expected = RequestFilter {
            effect: true,
            method: Some("POST".into()),
            path: Some("/v1/charges".into()),
            tool: Some("payments.charge".into()),
            operation: Some("op1".into()),
        };
        assert_eq!(point, &PausePoint::Downstream { moment: crate::Moment::After, filter: expected });
        assert_eq!(
            point.describe(),
            "downstream:after:committed POST /v1/charges for payments.charge of operation op1"
        );
        assert_eq!(scenario.steps[2].kind, StepKind::Crash { worker: WorkerRef::PausedAt("p".into()) });
        let again = Scenario::from_toml(&scenario.to_toml(), "again.toml").unwrap();
        assert_eq!(again.steps[0].kind, scenario.steps[0].kind, "{}", scenario.to_toml());
        assert_eq!(
            PausePoint::parse("downstream:before:effect"),
            Some(PausePoint::downstream(crate::Moment::Before, true))
        );
    }

    #[test]
    fn bad_pause_points_crash_targets_and_placeholders_are_refused_with_a_reason() {
        let check = |steps: &str, expected: &str| {
            let error = error_of(&with_steps(steps));
            assert!(error.message.contains(expected), "{steps}: {error}");
        };
        check(
            "[[step]]\naction = \"pause\"\nname = \"p\"\nworker = \"worker-1\"\npoint = \"downstream:after:effect\"\n",
            "downstream:after:committed",
        );
        check(
            "[[step]]\naction = \"pause\"\nname = \"p\"\nworker = \"worker-1\"\npoint = \"downstream:before\"\nrequest = \"POST charges now\"\n",
            "write a method and a path",
        );
        check(
            "[[step]]\naction = \"pause\"\nname = \"p\"\nworker = \"worker-1\"\npoint = \"queue:before_ack\"\ntool = \"messages.send\"\n",
            "narrow downstream points only",
        );
        check(
            "[[step]]\naction = \"pause\"\nname = \"p\"\nworker = \"worker-1\"\npoint = \"downstream:before\"\noperation = \"op9\"\n",
            "not defined in [operations]",
        );
        check("[[step]]\naction = \"crash\"\n", "one of them");
        check("[[step]]\naction = \"crash\"\nworker = \"worker-1\"\npaused = \"p\"\n", "one of them");
        check("[[step]]\naction = \"restart\"\npaused = \"nowhere\"\n", "no earlier `pause`");
        check(
            "[[step]]\naction = \"call\"\nid = \"c\"\nworker = \"worker-1\"\noperation = \"op1\"\ntool = \"tickets.set_status\"\narguments = '{\"ticket_id\": \"${ticket_of:op9}\"}'\n",
            "names no operation",
        );
    }

    #[test]
    fn ticket_placeholders_are_found_in_order() {
        let text = r#"{"a": "${ticket_of:one}", "b": "x${ticket_of:two}y", "c": "${ticket_of:"}"#;
        assert_eq!(crate::ticket_placeholders(text), ["one", "two"]);
        assert!(crate::ticket_placeholders(r#"{"plain": "text"}"#).is_empty());
    }

    #[test]
    fn semantic_errors_name_the_step_line() {
        let check = |from: &str, to: &str, expected: &str| {
            let error = error_of(&MINIMAL.replace(from, to));
            assert!(error.message.contains(expected), "{to}: {error}");
            assert!(error.line > 1, "{to}: {error}");
        };
        check("worker = \"worker-1\"", "worker = \"worker-9\"", "is not one of");
        check("operation = \"op1\"", "operation = \"op9\"", "not defined in [operations]");
        check("status = \"applied\"", "status = \"great\"", "`status` = \"great\"");
        check("call = \"first\"", "call = \"second\"", "not an earlier call");
        check("arguments = '{\"subject\": \"s\", \"body\": \"b\"}'", "arguments = '{nope'", "not JSON");
        check("rows = [\"C1\"]", "rows = [\"C11\"]", "use C1..C10");
        check("id = \"S90\"", "id = \"scenario\"", "must look like S01");
    }

    /// A step's own serde error (an unknown field, a wrong type, an unknown action) names that
    /// step, not the first `[[step]]`: the field's line where the step sets it, else the step's
    /// header.
    #[test]
    fn a_later_steps_field_error_names_its_own_line() {
        // MINIMAL's lines: the text starts with a newline, the second step's header is line 21,
        // its `status` line 24; the first step's `tool` is line 18.
        let error = error_of(&MINIMAL.replace("status = \"applied\"", "status = \"applied\"\nbogus = 3"));
        assert!(error.message.contains("unknown field `bogus`"), "{error}");
        assert_eq!(error.line, 25, "{error}");
        let error = error_of(&MINIMAL.replace("action = \"expect\"", "action = \"expectt\""));
        assert!(error.message.contains("expectt"), "{error}");
        assert_eq!(error.line, 21, "{error}");
        let error = error_of(&MINIMAL.replace("call = \"first\"", "call = 7"));
        assert_eq!(error.line, 21, "{error}");
        // The first step's error is still its own.
        let error =
            error_of(&MINIMAL.replace("tool = \"tickets.create\"", "tool = \"tickets.create\"\nbogus = 1"));
        assert_eq!(error.line, 19, "{error}");
    }

    #[test]
    fn every_builtin_scenario_is_valid() {
        let scenarios = crate::builtin();
        assert!(!scenarios.is_empty());
        for scenario in &scenarios {
            assert!(
                scenario.source.ends_with(&format!("{}.toml", scenario.full_name())),
                "{}",
                scenario.source
            );
            assert_eq!(scenario.line, 1, "{}: a built-in starts with its id", scenario.source);
        }
    }

    #[test]
    fn the_scenario_line_is_its_id_key_after_leading_comments() {
        let text = format!("# a comment\n\n# another\n{}", MINIMAL.trim_start());
        let scenario = Scenario::from_toml(&text, "commented.toml").expect("valid");
        assert_eq!(text.lines().nth(scenario.line - 1), Some("id = \"S90\""));
        assert_eq!(scenario.line, 4);
    }
}

// ----------------------------------------------------------------------- writing

impl Scenario {
    /// The scenario as a TOML file that [`Scenario::from_toml`] reads back to an equal
    /// scenario (the source name aside). Used to print shrunk cases found by exploration.
    pub fn to_toml(&self) -> String {
        let duration = |d: Duration| humantime::format_duration(d).to_string();
        let service = |name: &str| {
            self.downstream
                .services
                .get(name)
                .map(|spec| ServiceForm { idempotency: spec.idempotency, receipts: spec.receipts })
        };
        let call = |call: &CallStep| CallForm {
            id: call.id.clone(),
            worker: call.worker.clone(),
            operation: call.operation.clone(),
            tool: call.tool.clone(),
            version: Some(call.version.clone()),
            arguments: ArgumentsForm::Text(call.arguments.clone()),
            actor: call.actor.clone(),
            lose_answer: call.lose_answer,
            wait: call.wait,
        };
        let steps = self
            .steps
            .iter()
            .map(|step| {
                let form = match &step.kind {
                    StepKind::Call(c) => StepForm::Call { call: call(c) },
                    StepKind::Concurrent(calls) => {
                        StepForm::Concurrent { calls: calls.iter().map(call).collect() }
                    }
                    StepKind::Await { call } => StepForm::Await { call: call.clone() },
                    StepKind::Poll { id, operation, worker } => StepForm::Poll {
                        id: id.clone(),
                        operation: operation.clone(),
                        worker: worker.clone(),
                    },
                    StepKind::Reconcile { id, operation, worker } => StepForm::Reconcile {
                        id: id.clone(),
                        operation: operation.clone(),
                        worker: worker.clone(),
                    },
                    StepKind::Fault { name, rule } => {
                        StepForm::Fault { name: name.clone(), rule: rule.clone() }
                    }
                    StepKind::ReleaseHold { name } => StepForm::ReleaseHold { name: name.clone() },
                    StepKind::Pause { name, worker, point } => StepForm::Pause {
                        name: name.clone(),
                        worker: worker.clone().unwrap_or_else(|| ANY_WORKER.to_owned()),
                        point: point.to_string(),
                        request: point.filter().and_then(RequestFilter::request_text),
                        tool: point.filter().and_then(|filter| filter.tool.clone()),
                        operation: point.filter().and_then(|filter| filter.operation.clone()),
                    },
                    StepKind::WaitPaused { name } => StepForm::WaitPaused { name: name.clone() },
                    StepKind::Release { name } => StepForm::Release { name: name.clone() },
                    StepKind::Crash { worker } => {
                        let (worker, paused) = worker_ref_form(worker);
                        StepForm::Crash { worker, paused }
                    }
                    StepKind::Restart { worker } => {
                        let (worker, paused) = worker_ref_form(worker);
                        StepForm::Restart { worker, paused }
                    }
                    StepKind::Advance { by, since_request_of } => {
                        StepForm::Advance { by: duration(*by), since_request_of: since_request_of.clone() }
                    }
                    StepKind::Revoke { actor, tool } => {
                        StepForm::Revoke { actor: actor.clone(), tool: tool.clone() }
                    }
                    StepKind::HumanEdit { ticket_of } => StepForm::HumanEdit { ticket_of: ticket_of.clone() },
                    StepKind::Expect(expect) => StepForm::Expect {
                        call: expect.call.clone(),
                        status: OneOrMany::Many(
                            expect.status.iter().map(|s| s.as_str().to_owned()).collect(),
                        ),
                        reason: expect.reason.map(|reason| reason.as_str().to_owned()),
                        same_reference_as: expect.same_reference_as.clone(),
                        while_outstanding: expect.while_outstanding.clone(),
                        told: expect.told,
                        alone: expect.alone,
                    },
                    StepKind::ExpectEffects { operation, kind, count } => StepForm::ExpectEffects {
                        operation: operation.clone(),
                        kind: kind.clone(),
                        count: *count,
                    },
                };
                Spanned::new(0..0, form)
            })
            .collect();
        let form = FileForm {
            id: self.id.clone(),
            name: self.name.clone(),
            rows: self.rows.iter().map(ToString::to_string).collect(),
            summary: self.summary.clone(),
            expected: self.expected.clone(),
            workers: self.workers,
            operations: self
                .operations
                .iter()
                .map(|(name, op)| {
                    let form = OperationForm {
                        tenant: op.tenant.clone(),
                        environment: op.environment.clone(),
                        workflow: op.workflow_id.clone(),
                        step: op.step_id.clone(),
                        actor: op.actor.clone(),
                    };
                    (name.clone(), form)
                })
                .collect(),
            downstream: DownstreamForm {
                tickets: service("tickets"),
                charges: service("charges"),
                messages: service("messages"),
                jobs: service("jobs"),
                job_duration: self.downstream.job_duration.map(duration),
                webhook: self.downstream.webhook.map(|w| WebhookForm {
                    repeat_same_event: w.repeat_same_event,
                    extra_event_ids: w.extra_event_ids,
                }),
            },
            queue: QueueForm {
                duplicate_deliveries: self.queue.duplicate_deliveries,
                delivery_delay: self.queue.delivery_delay.map(duration),
            },
            timing: TimingForm {
                lease: self.timing.lease.map(duration),
                retention: self.timing.retention.map(duration),
                downstream_timeout: self.timing.downstream_timeout.map(duration),
            },
            settle: Some(duration(self.settle)),
            seed: self.seed,
            steps,
        };
        toml::to_string(&form).expect("a scenario serialises to TOML")
    }
}

fn worker_ref_form(worker: &WorkerRef) -> (Option<String>, Option<String>) {
    match worker {
        WorkerRef::Named(name) => (Some(name.clone()), None),
        WorkerRef::PausedAt(pause) => (None, Some(pause.clone())),
    }
}

#[cfg(test)]
mod writing_tests {
    use super::*;

    #[test]
    fn every_builtin_scenario_round_trips_through_toml() {
        for scenario in crate::builtin() {
            let text = scenario.to_toml();
            let again = Scenario::from_toml(&text, &scenario.source)
                .unwrap_or_else(|error| panic!("{}: {error}\n{text}", scenario.full_name()));
            let strip_lines = |s: &Scenario| s.steps.iter().map(|step| step.kind.clone()).collect::<Vec<_>>();
            assert_eq!(strip_lines(&again), strip_lines(&scenario), "{}", scenario.full_name());
            assert_eq!(again.operations, scenario.operations);
            assert_eq!(again.downstream, scenario.downstream);
            assert_eq!(
                (again.timing, again.settle, again.queue),
                (scenario.timing, scenario.settle, scenario.queue)
            );
        }
    }
}
