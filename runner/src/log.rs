//! The executor's `tracing` events, captured per run on simulated time.
//!
//! A run asked to log ([`crate::runner::run_logged`]) installs, on its own thread and for its
//! own duration, a `tracing` subscriber whose one layer ([`Capture`]) records every event that
//! passes the filter as a [`LogLine`]: the world clock's time, the history position it follows,
//! the spans it happened in (the harness opens one per executor call, poll, reconcile, consume,
//! webhook, background task and worker start, naming the worker, its incarnation and the
//! operation), and its fields. An executor's own events, the reference's or a user's, are
//! captured the same way with no set-up on its side: it only uses the `tracing` macros.
//!
//! Deterministic: the lines come in the order the single-threaded simulation emits them, with
//! simulated times and no span ids, so the same seed gives the same log byte for byte. Off
//! (the default) nothing is installed and a `tracing` macro costs one check of its callsite.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use judge::history::History;
use world::clock::WorldClock;

/// The environment variable read for a log filter when no `--log` is given.
pub const LOG_VARIABLE: &str = "RUST_LOG";

/// Which events a run captures: `tracing_subscriber`'s target filter syntax, a level
/// (`debug`) or targets with levels (`executor=debug,my_executor=trace,warn`).
#[derive(Debug, Clone)]
pub struct LogFilter {
    targets: Targets,
    text: String,
}

impl LogFilter {
    /// Parses a filter; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let targets: Targets = text.parse().map_err(|error| {
            format!(
                "log filter {}: {error} (try `debug` or `executor=debug,warn`)",
                judge::text::quoted(text)
            )
        })?;
        Ok(Self { targets, text: text.to_owned() })
    }

    /// The filter from `--log`, else from `RUST_LOG` when it is set and not empty, else none.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<Option<Self>, String> {
        match flag {
            Some(text) => Self::parse(text).map(Some),
            None => match std::env::var(LOG_VARIABLE) {
                Ok(text) if !text.trim().is_empty() => {
                    Self::parse(text.trim()).map(Some).map_err(|error| format!("{LOG_VARIABLE}: {error}"))
                }
                _ => Ok(None),
            },
        }
    }

    /// The filter as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What the reports capture for the failing runs they show unless told otherwise:
    /// everything at `debug` and above.
    pub fn default_for_reports() -> Self {
        Self::parse("debug").expect("`debug` is a valid filter")
    }
}

/// The text values of a scenario's call arguments (four characters or more): what a log line
/// must not repeat, since the reports never carry request bodies.
pub fn request_texts(scenario: &scenarios::Scenario) -> Vec<String> {
    fn strings(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::String(text) if text.chars().count() >= 4 => into.push(text.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|item| strings(item, into)),
            serde_json::Value::Object(fields) => fields.values().for_each(|field| strings(field, into)),
            _ => {}
        }
    }
    let mut texts = Vec::new();
    for call in scenario.calls() {
        if let Ok(arguments) = serde_json::from_str::<serde_json::Value>(&call.arguments) {
            strings(&arguments, &mut texts);
        }
    }
    texts.sort_by_key(|text| std::cmp::Reverse(text.len()));
    texts.dedup();
    texts
}

/// `line` with every one of `secrets` replaced by `[request text]`.
pub fn redact(line: &str, secrets: &[String]) -> String {
    secrets.iter().fold(line.to_owned(), |line, secret| line.replace(secret.as_str(), "[request text]"))
}

/// One captured event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The history event it follows (`0`: before the first).
    pub after_seq: u64,
    /// When, by the world clock (ms of simulated time).
    pub at_ms: u64,
    /// `TRACE` .. `ERROR`.
    pub level: Level,
    /// Where it was emitted (`executor::machine`).
    pub target: String,
    /// The spans it happened in, outermost first: `call{worker=worker-2 incarnation=0 ...}`.
    pub spans: Vec<String>,
    /// The message and the event's other fields (`key=value`).
    pub text: String,
}

impl LogLine {
    /// `      4210ms  DEBUG executor::machine: the lease ran out; taking over key=..  [call{..}]`
    pub fn to_line(&self) -> String {
        let spans =
            if self.spans.is_empty() { String::new() } else { format!("  in {}", self.spans.join(" > ")) };
        format!("{:>10}ms  {:>5} {}: {}{spans}", self.at_ms, self.level, self.target, self.text)
    }
}

/// Where a run's lines are collected.
pub type Lines = Arc<Mutex<Vec<LogLine>>>;

/// The layer that records events as [`LogLine`]s.
struct Capture {
    history: History,
    clock: WorldClock,
    lines: Lines,
}

/// A span's name and fields as text, kept in the span's extensions.
struct SpanText(String);

/// Writes fields as `message key=value ...` (strings unquoted).
#[derive(Default)]
struct FieldText {
    message: String,
    fields: String,
}

impl FieldText {
    fn text(self) -> String {
        match (self.message.is_empty(), self.fields.is_empty()) {
            (_, true) => self.message,
            (true, false) => self.fields.trim_start().to_owned(),
            (false, false) => format!("{}{}", self.message, self.fields),
        }
    }
}

impl Visit for FieldText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut fields = FieldText::default();
        attrs.record(&mut fields);
        let text = format!("{}{{{}}}", attrs.metadata().name(), fields.text());
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanText(text));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .from_root()
                    .filter_map(|span| span.extensions().get::<SpanText>().map(|text| text.0.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut fields = FieldText::default();
        event.record(&mut fields);
        let line = LogLine {
            after_seq: self.history.len() as u64,
            at_ms: self.clock.now_ms(),
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            spans,
            text: fields.text(),
        };
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
}

/// A dispatcher that captures the events `filter` lets through into `lines`, timed by `clock`
/// and placed after the latest event of `history`.
///
/// It is installed on the run's thread only. tracing caches one interest per callsite for the
/// whole process, and while exactly one dispatcher is registered it takes that interest from
/// the default of whichever thread reaches a callsite first (tokio-rs/tracing#3611): a thread
/// without a subscriber (another run, unlogged) would cache `never` and the captured run would
/// lose that callsite's events. So a second dispatcher, [`Pin`], stays registered for the life
/// of the process from the first capture on: interest is then always computed over every
/// registered dispatcher, and the pin's `sometimes` keeps any callsite from being cached as
/// `never`. `harness/tests/log_capture.rs` reproduces the loss without it.
pub fn dispatch(filter: &LogFilter, history: History, clock: WorldClock, lines: Lines) -> tracing::Dispatch {
    PIN.get_or_init(|| tracing::Dispatch::new(Pin));
    let capture = Capture { history, clock, lines };
    let subscriber = tracing_subscriber::registry().with(filter.targets.clone()).with(capture);
    tracing::Dispatch::new(subscriber)
}

/// The dispatcher kept registered once a capture exists (see [`dispatch`]).
static PIN: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();

/// Wants nothing, but says `sometimes` for every callsite, so that no callsite's interest is
/// cached as `never` while captures come and go; it does not raise the maximum level.
struct Pin;

impl tracing::Subscriber for Pin {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::OFF)
    }

    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_texts_are_redacted_from_log_lines() {
        let scenario = scenarios::builtin().into_iter().find(|s| s.id == "S01").expect("S01");
        let secrets = request_texts(&scenario);
        assert!(secrets.iter().any(|text| text == "Customer reports a duplicate charge."), "{secrets:?}");
        let line =
            "DEBUG my_executor: sending body=Customer reports a duplicate charge. queue=support tenant=acme";
        assert_eq!(
            redact(line, &secrets),
            "DEBUG my_executor: sending body=[request text] queue=[request text] tenant=acme"
        );
        // Values under four characters would redact ordinary words: they are not looked for.
        assert!(!secrets.iter().any(|text| text.chars().count() < 4));
    }

    #[test]
    fn filters_parse_or_say_what_is_wrong() {
        assert!(LogFilter::parse("debug").is_ok());
        assert!(LogFilter::parse("executor=trace,warn").is_ok());
        let error = LogFilter::parse("executor=loud").expect_err("not a level");
        assert!(error.contains("executor=loud"), "{error}");
    }

    #[test]
    fn events_are_captured_with_their_spans_time_and_place_in_the_history() {
        let clock = WorldClock::default();
        clock.set_simulated_ms(1500);
        let history = History::new(clock.clone());
        let lines = Lines::default();
        let filter = LogFilter::parse("debug").expect("a filter");
        let dispatch = dispatch(&filter, history.clone(), clock, lines.clone());
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("call", worker = "worker-1", incarnation = 0);
            let _entered = span.enter();
            tracing::debug!(key = "acme:k", "claimed");
            tracing::trace!("filtered out");
        });
        let lines = lines.lock().expect("lines").clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].after_seq, 0);
        assert_eq!(
            lines[0].to_line(),
            "      1500ms  DEBUG runner::log::tests: claimed key=acme:k  in call{worker=worker-1 incarnation=0}"
        );
    }
}
