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
//!
//! Private: nothing below the executor's own events is captured, whatever the filter says. The
//! simulator, the HTTP stacks and the runtime ([`NEVER_CAPTURED`]: turmoil, hyper, h2, axum,
//! tower, tokio, ...) print whole requests at `trace` level (bodies as lists of byte values),
//! so their events and spans are left out before the filter is asked; a filter that names only
//! them is refused ([`LogFilter::parse`]). What is captured is redacted as it is captured
//! ([`redact`]): every text argument of the scenario ([`request_texts`]) in every form a log
//! line may carry it ([`Secrets`]).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{filter_fn, Targets};
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
    /// Parses a filter; the error says what is wrong. A filter that could only capture events
    /// of [`NEVER_CAPTURED`] targets (`turmoil=trace`, `hyper=debug,h2=trace`) is refused: it
    /// would capture nothing.
    pub fn parse(text: &str) -> Result<Self, String> {
        let targets: Targets = text.parse().map_err(|error| {
            format!(
                "log filter {}: {error} (try `debug` or `executor=debug,warn`)",
                judge::text::quoted(text)
            )
        })?;
        let on = |level: LevelFilter| level != LevelFilter::OFF;
        let named: Vec<&str> =
            targets.iter().filter(|(_, level)| on(*level)).map(|(target, _)| target).collect();
        if !targets.default_level().is_some_and(on)
            && !named.is_empty()
            && named.iter().all(|target| never_captured(target))
        {
            return Err(format!(
                "log filter {} names only {}, whose events are never captured: the simulator's, the HTTP \
                 stacks' and the runtime's traces carry whole requests; name the executor's targets \
                 (`executor=trace`, `my_executor=debug`) or a level (`trace`)",
                judge::text::quoted(text),
                named.join(", ")
            ));
        }
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

/// The text values of a scenario's call arguments (four characters or more), and its numbers
/// of eight digits or more (a card or account number written as a number): what a log line
/// must not repeat, since the reports never carry request bodies. Shorter values would redact
/// ordinary words and times.
pub fn request_texts(scenario: &scenarios::Scenario) -> Vec<String> {
    fn strings(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::String(text) if text.chars().count() >= 4 => into.push(text.clone()),
            serde_json::Value::Number(number) if number.to_string().len() >= 8 => {
                into.push(number.to_string())
            }
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
    texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    texts.dedup();
    texts
}

/// The crates whose events and spans no capture takes, whatever the filter: the simulator, the
/// HTTP stacks (client, server, HTTP/2, TLS), the MCP SDK and the runtime. At `trace` level they
/// print whole requests and answers (headers, and bodies as lists of byte values), which hold
/// the scenario's arguments in forms no redaction can be sure to know; none of them is the
/// executor's own account of what it did. A target is matched by its first path segment
/// (`hyper` takes `hyper::proto::h1::io`).
pub const NEVER_CAPTURED: &[&str] = &[
    "axum",
    "axum_core",
    "h2",
    "http",
    "http_body",
    "http_body_util",
    "hyper",
    "hyper_util",
    "mio",
    "reqwest",
    "rmcp",
    "runtime",
    "rustls",
    "sse_stream",
    "tokio",
    "tokio_postgres",
    "tokio_rustls",
    "tokio_util",
    "tower",
    "tower_http",
    "turmoil",
    "want",
];

/// Whether events of `target` are left out of every capture (see [`NEVER_CAPTURED`]).
pub fn never_captured(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    NEVER_CAPTURED.contains(&krate)
}

/// What no captured line may repeat: each text of [`request_texts`] in every form a log line
/// was found or may be expected to carry it, matched without regard to ASCII case:
///
/// - as written, upper- and lower-cased;
/// - escaped: JSON (`\"`, and `\u00eb` for non-ASCII as Python writes it), Rust's `{:?}` of a
///   string, of a byte string (`\xc3\xab`, as `bytes` prints a body) and `ascii::escape_default`;
/// - percent-encoded, whichever of its bytes an encoder chose to escape (`%XX` in any case, a
///   space also as `+`), as written or JSON-escaped;
/// - its UTF-8 bytes as a list (`52, 50, 52`, `52,50,52` as JSON writes it, `0x34, 0x32` as
///   turmoil traces a TCP segment), in hex
///   (`343234`, `\x34\x32`), and in base64 (standard and URL-safe alphabets) at each of the
///   three alignments a text can have inside a longer encoded value.
///
/// One list for a run, built once ([`Secrets::of`]); [`redact`] reads it.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    /// Every form of every text, lower-cased (ASCII), longest first, without repeats.
    forms: Vec<Vec<u8>>,
    /// The texts as written and JSON-escaped, lower-cased (ASCII): matched with any of their
    /// bytes percent-encoded.
    written: Vec<Vec<u8>>,
}

impl Secrets {
    /// The secrets of `scenario`: its [`request_texts`].
    pub fn of(scenario: &scenarios::Scenario) -> Self {
        Self::new(&request_texts(scenario))
    }

    /// The secrets `texts`, in every form.
    pub fn new(texts: &[String]) -> Self {
        let mut forms: Vec<Vec<u8>> = texts
            .iter()
            .flat_map(|text| encodings(text))
            .filter(|form| form.chars().count() >= 4)
            .map(|form| form.into_bytes().to_ascii_lowercase())
            .collect();
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        forms.dedup();
        let mut written: Vec<Vec<u8>> = texts
            .iter()
            .flat_map(|text| written_forms(text))
            .map(|form| form.into_bytes().to_ascii_lowercase())
            .collect();
        written.sort();
        written.dedup();
        Self { forms, written }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }
}

/// `line` with every form of every one of `secrets` replaced by `[request text]` (overlapping
/// matches become one).
pub fn redact(line: &str, secrets: &Secrets) -> String {
    let haystack = line.as_bytes();
    let mut found: Vec<(usize, usize)> = Vec::new();
    for form in &secrets.written {
        for start in 0..haystack.len() {
            if let Some(end) = percent_encoded_at(haystack, start, form) {
                found.push((start, end));
            }
        }
    }
    for form in &secrets.forms {
        if form.len() > haystack.len() {
            continue;
        }
        for start in 0..=haystack.len() - form.len() {
            if haystack[start].to_ascii_lowercase() == form[0]
                && haystack[start..start + form.len()].eq_ignore_ascii_case(form)
            {
                found.push((start, start + form.len()));
            }
        }
    }
    if found.is_empty() {
        return line.to_owned();
    }
    found.sort_unstable();
    let mut redacted = String::with_capacity(line.len());
    let mut copied = 0;
    for (start, end) in found {
        if start >= copied {
            redacted.push_str(&line[copied..start]);
            redacted.push_str("[request text]");
            copied = end;
        } else {
            copied = copied.max(end);
        }
    }
    redacted.push_str(&line[copied..]);
    redacted
}

/// Where `form` (lower-cased) ends if it starts at `start` of `haystack`, each of its bytes
/// either as it is (any ASCII case), or `%XX` (either case), or a space as `+`.
fn percent_encoded_at(haystack: &[u8], start: usize, form: &[u8]) -> Option<usize> {
    let mut at = start;
    for &byte in form {
        let next = *haystack.get(at)?;
        if next.to_ascii_lowercase() == byte || (byte == b' ' && next == b'+') {
            at += 1;
            continue;
        }
        let escaped = haystack.get(at + 1..at + 3).filter(|_| next == b'%')?;
        let decoded = std::str::from_utf8(escaped).ok().and_then(|hex| u8::from_str_radix(hex, 16).ok())?;
        if decoded.to_ascii_lowercase() != byte {
            return None;
        }
        at += 3;
    }
    Some(at)
}

/// `text` as written, and as JSON writes it inside a string (plain, and ASCII only).
fn written_forms(text: &str) -> Vec<String> {
    let quoted = serde_json::Value::from(text).to_string();
    vec![text.to_owned(), quoted[1..quoted.len() - 1].to_owned(), json_ascii(text)]
}

/// The forms of `text` [`Secrets`] looks for (some may coincide with `text`): the text as
/// written and escaped, then each of those as bytes are encoded.
fn encodings(text: &str) -> Vec<String> {
    let quoted_inner = |quoted: String| quoted[1..quoted.len() - 1].to_owned();
    let json = |text: &str| quoted_inner(serde_json::Value::from(text).to_string());
    let mut written = written_forms(text);
    written.dedup();
    let mut forms = vec![text.to_lowercase(), text.to_uppercase()];
    for text in &written {
        let bytes = text.as_bytes();
        forms.push(text.clone());
        // Escaped once more: a JSON text in a JSON string, or printed with `{:?}`.
        forms.push(json(text));
        forms.push(quoted_inner(format!("{text:?}")));
        forms.push(byte_string(bytes));
        forms.push(bytes.iter().flat_map(|byte| std::ascii::escape_default(*byte)).map(char::from).collect());
        // Byte lists: `{:?}` of bytes, a JSON array, and turmoil's trace of a TCP segment
        // (`0x50, 0x4F, 0xD`), hex with and without leading zeros.
        let lists: [Vec<String>; 3] = [
            bytes.iter().map(u8::to_string).collect(),
            bytes.iter().map(|byte| format!("{byte:#X}")).collect(),
            bytes.iter().map(|byte| format!("{byte:#04X}")).collect(),
        ];
        for list in lists {
            forms.push(list.join(", "));
            forms.push(list.join(","));
        }
        forms.push(bytes.iter().map(|byte| format!("{byte:02x}")).collect());
        forms.push(bytes.iter().map(|byte| format!("\\x{byte:02x}")).collect());
        for alphabet in [BASE64_STANDARD, BASE64_URL] {
            for offset in 0..3 {
                forms.push(base64_inner(bytes, offset, alphabet));
            }
        }
    }
    forms
}

/// JSON string escapes with every non-ASCII character as `\uXXXX` (UTF-16), as Python's
/// `json.dumps` writes by default.
fn json_ascii(text: &str) -> String {
    let mut escaped = String::new();
    for character in text.chars() {
        match character {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            character if character.is_ascii() && !character.is_ascii_control() => escaped.push(character),
            character => {
                let mut units = [0u16; 2];
                for unit in character.encode_utf16(&mut units) {
                    let _ = write!(escaped, "\\u{unit:04x}");
                }
            }
        }
    }
    escaped
}

/// A byte string as the `bytes` crate's `Debug` writes it (hyper's and h2's bodies).
fn byte_string(bytes: &[u8]) -> String {
    let mut escaped = String::new();
    for byte in bytes {
        match byte {
            b'\n' => escaped.push_str("\\n"),
            b'\r' => escaped.push_str("\\r"),
            b'\t' => escaped.push_str("\\t"),
            b'\\' | b'"' => {
                escaped.push('\\');
                escaped.push(char::from(*byte));
            }
            0x20..=0x7e => escaped.push(char::from(*byte)),
            _ => {
                let _ = write!(escaped, "\\x{byte:02x}");
            }
        }
    }
    escaped
}

const BASE64_STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The base64 characters that depend on `bytes` alone when they sit `offset` bytes (0..3) into
/// a 3-byte group of a longer encoded value: what any encoding of a value holding them contains.
fn base64_inner(bytes: &[u8], offset: usize, alphabet: &[u8; 64]) -> String {
    let mut padded = vec![0u8; offset];
    padded.extend_from_slice(bytes);
    let bits = padded.len() * 8;
    let first = (offset * 8).div_ceil(6);
    let last = bits / 6;
    (first..last)
        .map(|index| {
            let bit = index * 6;
            let (byte, shift) = (bit / 8, bit % 8);
            let pair = (u16::from(padded[byte]) << 8) | u16::from(padded.get(byte + 1).copied().unwrap_or(0));
            char::from(alphabet[usize::from((pair >> (10 - shift)) & 0x3f)])
        })
        .collect()
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
    secrets: Secrets,
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
        let text = redact(&format!("{}{{{}}}", attrs.metadata().name(), fields.text()), &self.secrets);
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
            text: redact(&fields.text(), &self.secrets),
        };
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
}

/// A dispatcher that captures the events `filter` lets through into `lines`, timed by `clock`,
/// placed after the latest event of `history`, and with `secrets` redacted from their text and
/// their spans'. Events and spans of [`NEVER_CAPTURED`] targets are left out whatever `filter`
/// says (their callsites are disabled for this dispatcher, so they cost nothing).
///
/// It is installed on the run's thread only. tracing caches one interest per callsite for the
/// whole process, and while exactly one dispatcher is registered it takes that interest from
/// the default of whichever thread reaches a callsite first (tokio-rs/tracing#3611): a thread
/// without a subscriber (another run, unlogged) would cache `never` and the captured run would
/// lose that callsite's events. So a second dispatcher, [`Pin`], stays registered for the life
/// of the process from the first capture on: interest is then always computed over every
/// registered dispatcher, and the pin's `sometimes` keeps any callsite from being cached as
/// `never`. `harness/tests/log_capture.rs` reproduces the loss without it.
pub fn dispatch(
    filter: &LogFilter,
    history: History,
    clock: WorldClock,
    lines: Lines,
    secrets: Secrets,
) -> tracing::Dispatch {
    PIN.get_or_init(|| tracing::Dispatch::new(Pin));
    let capture = Capture { history, clock, lines, secrets };
    let subscriber = tracing_subscriber::registry()
        .with(filter_fn(|metadata| !never_captured(metadata.target())))
        .with(filter.targets.clone())
        .with(capture);
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
            redact(line, &Secrets::new(&secrets)),
            "DEBUG my_executor: sending body=[request text] queue=[request text] tenant=acme"
        );
        // Values under four characters would redact ordinary words: they are not looked for.
        assert!(!secrets.iter().any(|text| text.chars().count() < 4));
    }

    #[test]
    fn long_numbers_are_secrets_short_ones_are_not() {
        let toml = r#"id = "S92"
name = "numbers"
rows = ["C1"]
summary = "A charge whose customer is a number."
expected = "Nothing."

[operations.charge]
tenant = "acme"
workflow = "run_1"
step = "charge"

[[step]]
action = "call"
id = "one"
worker = "worker-1"
operation = "charge"
tool = "payments.charge"
arguments = '{"customer": "cus", "amount_minor": 4200, "currency": "EUR", "trace_id": "trace-1", "card": 4000056655665556}'
"#;
        let scenario = scenarios::Scenario::from_toml(toml, "numbers.toml").expect("a valid scenario");
        assert_eq!(request_texts(&scenario), ["4000056655665556", "trace-1"]);
    }

    /// Base64 as RFC 4648 writes it, 3 bytes to 4 characters: written apart from
    /// [`base64_inner`], which indexes bits, so that one checks the other.
    fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
        let mut encoded = String::new();
        for chunk in bytes.chunks(3) {
            let group = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
            let number = (u32::from(group[0]) << 16) | (u32::from(group[1]) << 8) | u32::from(group[2]);
            for index in 0..=chunk.len() {
                encoded.push(char::from(alphabet[((number >> (18 - 6 * index)) & 0x3f) as usize]));
            }
        }
        encoded
    }

    #[test]
    fn the_test_base64_is_rfc_4648() {
        for (plain, encoded) in
            [("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(base64(plain.as_bytes(), BASE64_STANDARD), encoded);
        }
        assert_eq!(base64(&[0xfb, 0xff], BASE64_URL), "-_8");
    }

    /// The base64 characters of `encoded` (standard alphabet, of `whole`) that depend only on
    /// the bytes of `part` inside `whole`.
    fn base64_of_part(whole: &str, part: &str, alphabet: &[u8; 64]) -> String {
        let at = whole.find(part).expect("the part is in the whole");
        let encoded = base64(whole.as_bytes(), alphabet);
        encoded[(at * 8).div_ceil(6)..(at + part.len()) * 8 / 6].to_owned()
    }

    /// A planted key, a card number and a name (non-ASCII, an apostrophe and quotes), each in
    /// every form a log line is expected to carry it, inside a longer value and a longer line.
    /// Each case names the form in the line and a witness: what of the secret that form shows
    /// (computed apart from [`encodings`]); the witness must be gone.
    #[test]
    fn every_encoding_of_a_secret_is_redacted() {
        let texts = ["rk_planted_unit_8dQ2mX7pL4vN9s", "4242 4242 4242 4242", "Zoë O'Brien \"Zed\""];
        let secrets = Secrets::new(&texts.map(String::from));
        let list = |bytes: &[u8]| {
            let list = format!("{bytes:?}");
            list[1..list.len() - 1].to_owned()
        };
        // As turmoil traces a TCP segment's bytes.
        let hex_list =
            |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:#X}")).collect::<Vec<_>>().join(", ");
        let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02X}")).collect::<String>();
        for text in texts {
            let bytes = text.as_bytes();
            let json = serde_json::to_string(text).expect("JSON");
            let json = json[1..json.len() - 1].to_owned();
            let body = serde_json::json!({ "amount_minor": 4200, "customer": text, "z": 1 }).to_string();
            let ascii_json: String = json
                .chars()
                .map(|c| if c.is_ascii() { c.to_string() } else { format!("\\u{:04X}", c as u32) })
                .collect();
            let percent: String = bytes
                .iter()
                .map(|&byte| match byte {
                    b'-' | b'.' | b'_' | b'~' => char::from(byte).to_string(),
                    _ if byte.is_ascii_alphanumeric() => char::from(byte).to_string(),
                    _ => format!("%{byte:02X}"),
                })
                .collect();
            let eager: String = bytes
                .iter()
                .map(|&byte| {
                    if byte.is_ascii_alphanumeric() {
                        char::from(byte).to_string()
                    } else {
                        format!("%{byte:02x}")
                    }
                })
                .collect();
            let lazy: String = bytes
                .iter()
                .map(|&byte| {
                    if byte.is_ascii_graphic() {
                        char::from(byte).to_string()
                    } else {
                        format!("%{byte:02X}")
                    }
                })
                .collect();
            let debug = format!("{text:?}");
            let mut cases = vec![
                ("literal", text.to_owned(), text.to_owned()),
                ("upper case", format!("[{}]", text.to_uppercase()), text.to_uppercase()),
                ("lower case", text.to_lowercase(), text.to_lowercase()),
                ("in a JSON body", body.clone(), json.clone()),
                (
                    "JSON with \\u escapes (Python)",
                    format!("{{\"customer\": \"{ascii_json}\"}}"),
                    ascii_json.clone(),
                ),
                ("a JSON body in a JSON string", serde_json::to_string(&body).expect("JSON"), {
                    let twice = serde_json::to_string(&json).expect("JSON");
                    twice[1..twice.len() - 1].to_owned()
                }),
                ("Debug of a str", debug.clone(), debug[1..debug.len() - 1].to_owned()),
                ("Debug of a JSON body", format!("{body:?}"), {
                    let escaped = format!("{json:?}");
                    escaped[1..escaped.len() - 1].to_owned()
                }),
                ("Debug of the bytes", format!("{bytes:?}"), list(bytes)),
                (
                    "turmoil's trace of a segment",
                    format!("TCP [{}]", hex_list(body.as_bytes())),
                    hex_list(json.as_bytes()),
                ),
                ("Debug of a body's bytes", format!("{:?}", body.as_bytes()), list(json.as_bytes())),
                (
                    "a JSON array of the bytes",
                    serde_json::to_string(bytes).expect("JSON"),
                    list(bytes).replace(", ", ","),
                ),
                ("upper-case hex of a body", hex(body.as_bytes()), hex(json.as_bytes())),
                ("lower-case hex", hex(bytes).to_lowercase(), hex(bytes).to_lowercase()),
                ("percent-encoded", format!("?customer={percent}&x=1"), percent.clone()),
                ("percent-encoded, lower-case", percent.to_lowercase(), percent.to_lowercase()),
                ("percent-encoded, every byte but letters and digits", format!("q={eager}&"), eager.clone()),
                ("percent-encoded, only the space and non-ASCII", format!("q={lazy}&"), lazy.clone()),
                (
                    "form-encoded",
                    format!("customer={}", percent.replace("%20", "+")),
                    percent.replace("%20", "+"),
                ),
            ];
            for prefix in ["", "a", "ab"] {
                let whole = format!("{prefix}{body}");
                cases.push((
                    "base64 of a body",
                    base64(whole.as_bytes(), BASE64_STANDARD),
                    base64_of_part(&whole, &json, BASE64_STANDARD),
                ));
                cases.push((
                    "URL-safe base64 of a body",
                    base64(whole.as_bytes(), BASE64_URL),
                    base64_of_part(&whole, &json, BASE64_URL),
                ));
            }
            for (name, form, witness) in cases {
                assert!(form.contains(&witness), "{name}: the witness {witness} is not in {form}");
                let line = format!("TRACE my_executor: sent {form} to the downstream");
                let redacted = redact(&line, &secrets);
                assert!(redacted.contains("[request text]"), "{name} of {text}: {redacted}");
                assert!(
                    !redacted.to_lowercase().contains(&witness.to_lowercase()),
                    "{name} of {text}: {redacted}"
                );
                assert!(redacted.starts_with("TRACE my_executor: sent "), "{name}: {redacted}");
                assert!(redacted.ends_with(" to the downstream"), "{name}: {redacted}");
            }
        }
    }

    #[test]
    fn redaction_leaves_other_text_alone_and_merges_overlaps() {
        let secrets = Secrets::new(&["Refund request".to_owned(), "request text".to_owned()]);
        assert_eq!(redact("nothing to see", &secrets), "nothing to see");
        // The two texts overlap in the line: one marker, and the marker is not redacted again.
        assert_eq!(redact("a Refund request text here", &secrets), "a [request text] here");
        assert!(Secrets::new(&[]).is_empty());
    }

    #[test]
    fn wire_level_targets_are_never_captured_and_a_filter_of_only_them_is_refused() {
        for target in ["turmoil", "hyper::proto::h1::io", "h2::codec", "tokio::task", "rmcp::service"] {
            assert!(never_captured(target), "{target}");
        }
        for target in ["executor::machine", "harness", "my_executor", "hyperloop", "tokio_executor"] {
            assert!(!never_captured(target), "{target}");
        }
        for only_them in ["turmoil=trace", "hyper=debug,h2=trace", "turmoil=trace,executor=off"] {
            let error = LogFilter::parse(only_them).expect_err(only_them);
            assert!(error.contains("never captured") && error.contains(only_them), "{error}");
        }
        for fine in ["trace", "turmoil=trace,executor=debug", "warn,hyper=trace"] {
            assert!(LogFilter::parse(fine).is_ok(), "{fine}");
        }
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
        let secrets = Secrets::new(&["Zoë O'Brien".to_owned()]);
        let dispatch = dispatch(&filter, history.clone(), clock, lines.clone(), secrets);
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("call", worker = "worker-1", incarnation = 0);
            let _entered = span.enter();
            tracing::debug!(key = "acme:k", "claimed");
            tracing::trace!("filtered out");
            tracing::debug!(target: "hyper::proto", body = ?"Zoë O'Brien".as_bytes(), "never captured");
            let customer = tracing::debug_span!("customer", name = "Zoë O'Brien");
            let _customer = customer.enter();
            tracing::debug!(body = ?"Zoë O'Brien".as_bytes(), "sent");
        });
        let lines = lines.lock().expect("lines").clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(
            lines[1].to_line(),
            "      1500ms  DEBUG runner::log::tests: sent body=[[request text]]  in call{worker=worker-1 incarnation=0} > customer{name=[request text]}"
        );
        assert_eq!(lines[0].after_seq, 0);
        assert_eq!(
            lines[0].to_line(),
            "      1500ms  DEBUG runner::log::tests: claimed key=acme:k  in call{worker=worker-1 incarnation=0}"
        );
    }
}
