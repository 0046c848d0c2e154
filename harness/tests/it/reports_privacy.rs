//! Reports never carry request bodies: a real matrix run whose ticket body holds a sentinel
//! string writes every report format, and the sentinel is in none of them.
//!
//! At `trace` level too (issue 34): a scenario plants a key, a card number and a name in its
//! arguments; `matrix` and `run --trace`, with `--log trace` and with `RUST_LOG=trace`, in the
//! simulation and against processes, write reports and print text that hold none of them in
//! any encoding the check decodes (byte lists, base64, hex, percent-, JSON-, Debug- and
//! HTML-escapes, any case), while the executor's own events are still captured.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use harness::matrix::{self, MatrixConfig};
use reports::{Format, MatrixResult, Verdict};

const SENTINEL: &str = "SENTINEL-7f3a9c";

/// S01's shape (two calls for one step), plus one expectation that is meant to fail, so the
/// reports also render their failure sections (violations, reproduce command).
fn scenario_text(body: &str) -> String {
    format!(
        r#"id = "S90"
name = "privacy"
rows = ["C1"]
summary = "Two calls for the same step whose ticket body holds a secret."
expected = "One effect; no report repeats the body."

[operations.ticket]
tenant = "acme"
workflow = "run_827"
step = "record_issue"

[[step]]
action = "call"
id = "first"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '{{"queue": "support", "subject": "Refund request", "body": "{body}"}}'

[[step]]
action = "call"
id = "second"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '{{"queue": "support", "subject": "Refund request", "body": "{body}"}}'

[[step]]
action = "expect"
call = "second"
status = "applied"

[[step]]
action = "expect_effects"
operation = "ticket"
count = 1
"#
    )
}

fn run(body: &str) -> MatrixResult {
    let scenario = scenarios::Scenario::from_toml(&scenario_text(body), "privacy.toml")
        .expect("the privacy scenario is valid");
    let executor = harness::executors::find("reference").expect("the reference executor is registered");
    matrix::run(&MatrixConfig {
        executor,
        scenarios: vec![scenario],
        seeds: 2,
        first_seed: 0,
        shard: None,
        check_determinism: false,
        jobs: 1,
        commit: None,
        // The failing run shown carries the executor's log: it must not repeat the body either.
        log: Some(harness::log::LogFilter::parse("trace").expect("a filter")),
        selection: false,
        progress: false,
    })
}

fn first_fingerprint(result: &MatrixResult) -> String {
    result.scenarios[0]
        .shown
        .answers()
        .into_iter()
        .find(|answer| answer.label == "first")
        .and_then(|answer| answer.fingerprint.clone())
        .expect("a fingerprint of the first call")
}

#[test]
fn no_report_contains_a_request_body() {
    let body = format!("Customer secret {SENTINEL} must stay out of reports.");
    let result = run(&body);

    // The run is real: the body reached the executor (it changes the request's fingerprint)
    // and the deliberately wrong expectation failed, so failure sections are rendered too.
    let control = run("Customer reports a duplicate charge.");
    assert_ne!(first_fingerprint(&result), first_fingerprint(&control), "the body is material");
    assert_eq!(result.verdict, Verdict::Fail);
    assert!(!result.scenarios[0].failures.is_empty());
    assert!(!result.scenarios[0].timeline.marks.is_empty());

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-privacy");
    let _ = std::fs::remove_dir_all(&dir);
    let written = reports::write_reports(&result, &dir, &Format::ALL).expect("the reports are written");
    assert_eq!(written.len(), Format::ALL.len());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the report directory exists")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("a report is UTF-8 text");
        assert!(text.contains("S90"), "{} does not describe the run", path.display());
        assert!(!text.contains(SENTINEL), "{} contains the ticket body", path.display());
        assert!(!text.contains("must stay out of reports"), "{} contains the ticket body", path.display());
    }
}

// --- At trace level: planted secrets, every encoding -----------------------------------------

/// A key, a card number and a name planted in a scenario's arguments (none of them real).
const KEY: &str = "rk_planted_9fE7d6C5b4A3z2Y1x0";
const CARD: &str = "4000 0566 5566 5556";
const NAME: &str = "Zoë O'Brien-Łukasiewicz";
const PLANTED: [&str; 3] = [KEY, CARD, NAME];

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

/// S02's shape (the answer to the committed ticket is lost, the agent retries) with the
/// planted secrets as the ticket's subject, body and trace id: `blind_retry` sends the ticket
/// twice and fails, so the reports show a failing run with its log.
fn planted_scenario() -> String {
    let arguments = serde_json::json!({ "queue": "support", "subject": NAME, "body": CARD, "trace_id": KEY });
    format!(
        r#"id = "S91"
name = "planted_secrets"
rows = ["C2"]
summary = "A lost answer to a ticket whose arguments hold a key, a card number and a name."
expected = "One effect; no report or printed line repeats the arguments in any encoding."

[operations.ticket]
tenant = "acme"
workflow = "run_827"
step = "record_issue"

[[step]]
action = "fault"
rule = {{ match = {{ method = "POST", path = "/v1/tickets" }}, action = "commit_then_drop", times = 1 }}

[[step]]
action = "call"
id = "first"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '''{arguments}'''

[[step]]
action = "call"
id = "retry"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '''{arguments}'''

[[step]]
action = "expect_effects"
operation = "ticket"
count = 1
"#
    )
}

/// A scratch directory of this test's own, with the planted scenario file in it.
fn planted(test: &str) -> (PathBuf, PathBuf) {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-privacy-trace").join(test);
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a scratch directory");
    let file = directory.join("planted.toml");
    std::fs::write(&file, planted_scenario()).expect("the scenario file is written");
    (directory, file)
}

/// The command as a user runs it (outside Cargo), with `RUST_LOG` as given (else unset).
fn replaylab(arguments: &[&str], rust_log: Option<&str>) -> Output {
    let mut command = Command::new(REPLAYLAB);
    command.env_remove("CARGO").env_remove("CARGO_PKG_NAME").env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    command.args(arguments).stdin(Stdio::null()).output().expect("replaylab runs")
}

fn said(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Decodes `\uXXXX` (with surrogate pairs), `\xNN`, `\n`, `\t`, `\r`, `\0` and `\` before any
/// other character, as JSON, Rust's `{:?}` and byte strings write them; the rest as it is.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let hex_at = |at: usize, digits: usize| {
        text.get(at..at + digits).and_then(|hex| u32::from_str_radix(hex, 16).ok())
    };
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'\\' || at + 1 == bytes.len() {
            out.push(bytes[at]);
            at += 1;
            continue;
        }
        match bytes[at + 1] {
            b'u' => match hex_at(at + 2, 4) {
                Some(high @ 0xd800..=0xdbff) if text.get(at + 6..at + 8) == Some("\\u") => {
                    let low = hex_at(at + 8, 4).unwrap_or(0);
                    let code = 0x10000 + ((high - 0xd800) << 10) + low.saturating_sub(0xdc00);
                    out.extend(char::from_u32(code).unwrap_or('?').to_string().bytes());
                    at += 12;
                }
                Some(code) => {
                    out.extend(char::from_u32(code).unwrap_or('?').to_string().bytes());
                    at += 6;
                }
                None => {
                    out.push(b'u');
                    at += 2;
                }
            },
            b'x' => match hex_at(at + 2, 2) {
                Some(byte) => {
                    out.push(byte as u8);
                    at += 4;
                }
                None => {
                    out.push(b'x');
                    at += 2;
                }
            },
            b'n' => {
                out.push(b'\n');
                at += 2;
            }
            b't' => {
                out.push(b'\t');
                at += 2;
            }
            b'r' => {
                out.push(b'\r');
                at += 2;
            }
            b'0' => {
                out.push(0);
                at += 2;
            }
            other => {
                out.push(other);
                at += 2;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// HTML's and XML's character references.
fn unescape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').filter(|end| *end <= 10);
        let decoded = end.and_then(|end| match &rest[1..end] {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            number if number.starts_with("#x") || number.starts_with("#X") => {
                u32::from_str_radix(&number[2..], 16).ok().and_then(char::from_u32)
            }
            number if number.starts_with('#') => number[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        });
        match (decoded, end) {
            (Some(character), Some(end)) => {
                out.push(character);
                rest = &rest[end + 1..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `%XX` and, in `form`, `+` as a space.
fn unescape_percent(text: &str, form: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = text.get(at + 1..at + 3).and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (b'+', _) if form => {
                out.push(b' ');
                at += 1;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every list of four or more numbers under 256 (`[52, 50, 52, 50`, `52,50,52,50`, or in hex
/// as turmoil traces a segment, `0x34, 0x32, 0xD`), as the text of its bytes, one a line.
fn byte_lists(text: &str) -> String {
    let mut found = String::new();
    let mut run: Vec<u8> = Vec::new();
    let flush = |run: &mut Vec<u8>, found: &mut String| {
        if run.len() >= 4 {
            found.push_str(&String::from_utf8_lossy(run));
            found.push('\n');
        }
        run.clear();
    };
    let mut rest = text;
    while !rest.is_empty() {
        let hex = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X"));
        let (radix, body) = match hex {
            Some(body) => (16, body),
            None => (10, rest),
        };
        let digits = body
            .bytes()
            .take_while(|b| if radix == 16 { b.is_ascii_hexdigit() } else { b.is_ascii_digit() })
            .count();
        if digits > 0 && digits <= 3 {
            let number = u32::from_str_radix(&body[..digits], radix).expect("digits");
            let after = &body[digits..];
            let separator = after.strip_prefix(", ").or_else(|| after.strip_prefix(','));
            if number < 256 {
                run.push(number as u8);
                match separator {
                    Some(next) => {
                        rest = next;
                        continue;
                    }
                    None => flush(&mut run, &mut found),
                }
            } else {
                flush(&mut run, &mut found);
            }
            rest = after;
        } else {
            flush(&mut run, &mut found);
            let skip = rest.chars().next().map_or(1, char::len_utf8).max(digits);
            rest = &rest[skip..];
        }
    }
    flush(&mut run, &mut found);
    found
}

/// Every run of eight or more characters of `alphabet`, decoded by `decode` at each start
/// offset below `offsets`, one a line.
fn runs_decoded(
    text: &str,
    in_alphabet: fn(char) -> bool,
    offsets: usize,
    decode: fn(&str) -> Vec<u8>,
) -> String {
    let mut found = String::new();
    for run in text.split(|c: char| !in_alphabet(c)).filter(|run| run.len() >= 8) {
        for offset in 0..offsets.min(run.len()) {
            found.push_str(&String::from_utf8_lossy(&decode(&run[offset..])));
            found.push('\n');
        }
    }
    found
}

fn decode_hex(run: &str) -> Vec<u8> {
    run.as_bytes()
        .chunks_exact(2)
        .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// Base64 in either alphabet, padding ignored, a trailing partial group dropped.
fn decode_base64(run: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = run.bytes().filter_map(value).collect();
    let mut out = Vec::new();
    for group in sextets.chunks(4).filter(|group| group.len() >= 2) {
        let number = group.iter().enumerate().fold(0u32, |n, (i, s)| n | (u32::from(*s) << (18 - 6 * i)));
        for index in 0..group.len() - 1 {
            out.push((number >> (16 - 8 * index)) as u8);
        }
    }
    out
}

/// Every reading of `text` the check knows: as it is, unescaped (JSON, Debug, HTML, percent),
/// and its byte lists, hex and base64 runs decoded; each of those read once more, so that a
/// byte list inside an HTML page or an escape inside a JSON string is seen too.
fn readings(text: &str) -> Vec<String> {
    fn once(text: &str) -> Vec<String> {
        vec![
            unescape(text),
            unescape(&unescape(text)),
            unescape_html(text),
            unescape_percent(text, false),
            unescape_percent(text, true),
            byte_lists(text),
            runs_decoded(text, |c| c.is_ascii_hexdigit(), 2, decode_hex),
            runs_decoded(
                text,
                |c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'),
                4,
                decode_base64,
            ),
        ]
    }
    let mut all = vec![text.to_owned()];
    for first in once(text) {
        all.extend(once(&first));
        all.push(first);
    }
    all
}

/// Which planted secrets `text` holds, in any reading, without regard to case.
fn leaks(text: &str) -> Vec<&'static str> {
    let readings: Vec<String> = readings(text).into_iter().map(|reading| reading.to_lowercase()).collect();
    PLANTED
        .into_iter()
        .filter(|secret| readings.iter().any(|reading| reading.contains(&secret.to_lowercase())))
        .collect()
}

/// `where_`'s text holds none of the planted secrets.
fn assert_no_leak(where_: &str, text: &str) {
    let leaked = leaks(text);
    assert!(leaked.is_empty(), "{where_} leaks {leaked:?}");
}

/// The reports in `out` (all four) hold no secret; the text of them all.
fn assert_reports_clean(out: &Path) -> String {
    let mut all = String::new();
    for name in ["matrix.json", "matrix.md", "junit.xml", "report.html"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains("S91"), "{name} describes the run");
        assert_no_leak(name, &text);
        all.push_str(&text);
    }
    all
}

/// The crates (a target's first segment) of captured log lines (`  4210ms  DEBUG
/// executor::machine: ...`).
fn captured_crates<'a>(lines: impl Iterator<Item = &'a str>) -> std::collections::BTreeSet<String> {
    lines
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (time, level, target) = (words.next()?, words.next()?, words.next()?);
            let levels = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];
            (time.ends_with("ms") && levels.contains(&level))
                .then(|| target.trim_end_matches(':').split("::").next().unwrap_or(target).to_owned())
        })
        .collect()
}

/// None of the simulator's, the HTTP stacks' or the runtime's events was captured.
fn assert_no_wire_level(crates: &std::collections::BTreeSet<String>) {
    for wire in ["turmoil", "hyper", "hyper_util", "h2", "tower", "axum", "tokio", "mio", "want", "rmcp"] {
        assert!(!crates.contains(wire), "{wire} was captured: {crates:?}");
    }
}

/// The check itself finds each encoding a leak may take (so a clean verdict means something).
#[test]
fn the_leak_check_finds_every_encoding() {
    let body = serde_json::json!({ "subject": NAME, "body": CARD, "trace_id": KEY }).to_string();
    let base64 = |bytes: &[u8], alphabet: &[u8; 64]| {
        let mut encoded = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for index in 0..4 {
                if index <= chunk.len() {
                    encoded.push(char::from(alphabet[((n >> (18 - 6 * index)) & 0x3f) as usize]));
                } else {
                    encoded.push('=');
                }
            }
        }
        encoded
    };
    const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    assert_eq!(base64(b"foobar", STANDARD), "Zm9vYmFy");
    assert_eq!(base64(b"fo", STANDARD), "Zm8=");
    let percent = |text: &str| -> String {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02x}") })
            .collect()
    };
    let html = |text: &str| text.replace('&', "&amp;").replace('\'', "&#x27;").replace('"', "&quot;");
    let ascii_json: String = body
        .chars()
        .map(|c| if c.is_ascii() { c.to_string() } else { format!("\\u{:04x}", c as u32) })
        .collect();
    let encodings = [
        ("literal", body.clone()),
        ("upper case", body.to_uppercase()),
        ("JSON in JSON", serde_json::to_string(&body).expect("JSON")),
        ("\\u escapes", ascii_json),
        ("Debug", format!("{body:?}")),
        ("bytes Debug", format!("{:?}", body.as_bytes())),
        (
            "turmoil's segment",
            format!("[{}]", body.bytes().map(|b| format!("{b:#X}")).collect::<Vec<_>>().join(", ")),
        ),
        ("bytes in HTML", html(&format!("<td>{:?}</td>", body.as_bytes()))),
        ("JSON bytes", serde_json::to_string(body.as_bytes()).expect("JSON")),
        ("hex", body.bytes().map(|b| format!("{b:02x}")).collect()),
        ("\\x escapes", body.bytes().map(|b| format!("\\x{b:02x}")).collect()),
        ("base64", base64(body.as_bytes(), STANDARD)),
        ("base64 after one byte", base64(format!("x{body}").as_bytes(), URL)),
        ("base64 after two bytes", base64(format!("xy{body}").as_bytes(), STANDARD)),
        ("percent", percent(&body)),
        ("HTML", html(&body)),
        ("HTML of JSON", html(&serde_json::to_string(&body).expect("JSON"))),
    ];
    for (name, encoded) in encodings {
        let text = format!("<p>line before</p>\n  DEBUG x: sent {encoded} then\n");
        assert_eq!(leaks(&text), PLANTED.to_vec(), "{name}: {text}");
    }
    let clean = format!("sent [request text] to {} with 4200 EUR, [1, 2, 3]", "worker-1");
    assert!(leaks(&clean).is_empty());
}

/// `matrix --log trace` and `RUST_LOG=trace` against `blind_retry`: the failing run shown
/// carries the executor's own events, and no report nor the printed text holds a secret.
#[test]
fn matrix_at_trace_level_leaks_no_secret() {
    let (directory, file) = planted("matrix");
    for (name, flag, rust_log) in [("flag", Some("trace"), None), ("env", None, Some("trace"))] {
        let out = directory.join(name);
        let out_text = out.display().to_string();
        let file_text = file.display().to_string();
        let mut arguments = vec![
            "matrix",
            "--executor",
            "mutant:blind_retry",
            "--scenario-file",
            &file_text,
            "--only",
            "S91",
            "--seeds",
            "2",
            "--out",
            &out_text,
        ];
        if let Some(filter) = flag {
            arguments.extend(["--log", filter]);
        }
        let output = replaylab(&arguments, rust_log);
        let printed = said(&output);
        assert_eq!(output.status.code(), Some(i32::from(harness::exit::CHECK_FAILED)), "{name}: {printed}");
        assert_no_leak(&format!("{name}: stdout and stderr"), &printed);
        let reports = assert_reports_clean(&out);
        // The executor's own events are captured (the failing run's log is there), and none of
        // the simulator's or the HTTP stacks'.
        let matrix: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).expect("matrix.json"))
                .expect("JSON");
        let log: Vec<String> = matrix["scenarios"][0]["timeline"]["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .flat_map(|mark| mark["log"].as_array().cloned().unwrap_or_default())
            .filter_map(|line| line.as_str().map(str::to_owned))
            .collect();
        assert!(
            log.iter().any(|line| line.contains("DEBUG executor::machine: claim won")),
            "{name}: {log:#?}"
        );
        assert!(reports.contains("executor::machine"), "{name}: the reports show the log");
        let crates = captured_crates(log.iter().map(String::as_str));
        assert!(crates.contains("executor"), "{name}: {crates:?}");
        assert_no_wire_level(&crates);
    }
}

/// `run --trace --log trace` (and `RUST_LOG=trace`) prints the history and the executor's
/// events, and no secret.
#[test]
fn run_trace_at_trace_level_leaks_no_secret() {
    let (_directory, file) = planted("run");
    let file_text = file.display().to_string();
    let base = [
        "run",
        "S91",
        "--seed",
        "0",
        "--executor",
        "mutant:blind_retry",
        "--trace",
        "--scenario-file",
        &file_text,
    ];
    for (flag, rust_log) in [(Some("trace"), None), (None, Some("trace"))] {
        let mut arguments = base.to_vec();
        if let Some(filter) = flag {
            arguments.extend(["--log", filter]);
        }
        let output = replaylab(&arguments, rust_log);
        let printed = said(&output);
        assert_eq!(output.status.code(), Some(i32::from(harness::exit::CHECK_FAILED)), "{printed}");
        assert!(printed.contains("DEBUG executor::machine: claim won"), "{printed}");
        assert!(printed.contains("agent -> worker-1: call"), "the history is printed: {printed}");
        let crates = captured_crates(printed.lines());
        assert!(crates.contains("executor"), "{crates:?}");
        assert_no_wire_level(&crates);
        assert_no_leak("run --trace", &printed);
    }
}

/// A filter that names only what is never captured is bad input, not an empty log.
#[test]
fn a_filter_of_only_wire_level_targets_is_refused() {
    let (_directory, file) = planted("refused");
    let file_text = file.display().to_string();
    for (flag, rust_log) in
        [(Some("turmoil=trace"), None), (Some("hyper=trace,h2=trace"), None), (None, Some("turmoil=trace"))]
    {
        let mut arguments = vec!["run", "S91", "--seed", "0", "--scenario-file", &file_text];
        if let Some(filter) = flag {
            arguments.extend(["--log", filter]);
        }
        let output = replaylab(&arguments, rust_log);
        let printed = said(&output);
        assert_eq!(
            output.status.code(),
            Some(i32::from(harness::exit::BAD_INPUT)),
            "{flag:?} {rust_log:?}: {printed}"
        );
        assert!(printed.contains("never captured"), "{printed}");
        assert!(!printed.contains("S91_planted_secrets seed"), "nothing ran: {printed}");
    }
}

/// A user's executor that logs what it was sent in the forms executors do (the JSON text, its
/// bytes, hex, base64 in a header, a query string, `{:?}`): every line is captured, with the
/// secrets redacted, into the reports.
#[test]
fn an_executor_logging_its_arguments_is_captured_redacted() {
    use protocol::{LocalBoxFuture, Outcome, OutcomeStatus, ToolCall, WorkerEnv};
    fn chatty(_env: WorkerEnv, call: ToolCall) -> LocalBoxFuture<'static, Outcome> {
        let arguments = call.arguments.get().to_owned();
        let bytes = arguments.as_bytes();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let query: String = serde_json::from_str::<serde_json::Value>(&arguments)
            .ok()
            .and_then(|value| value.as_object().cloned())
            .into_iter()
            .flatten()
            .map(|(key, value)| {
                let value = value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
                let encoded: String = value
                    .bytes()
                    .map(|b| {
                        if b.is_ascii_alphanumeric() {
                            char::from(b).to_string()
                        } else {
                            format!("%{b:02X}")
                        }
                    })
                    .collect();
                format!("{key}={encoded}&")
            })
            .collect();
        let mut base64 = String::new();
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for index in 0..=chunk.len() {
                base64.push(char::from(ALPHABET[((n >> (18 - 6 * index)) & 0x3f) as usize]));
            }
        }
        tracing::trace!(target: "chatty_executor", arguments = %arguments, "received");
        tracing::trace!(target: "chatty_executor", body = ?bytes, "the body's bytes");
        tracing::debug!(target: "chatty_executor", hex = %hex, authorization = %format!("Basic {base64}"), "sending");
        tracing::debug!(target: "chatty_executor", "GET /v1/lookup?{query}");
        tracing::info!(target: "chatty_executor", arguments = ?arguments, "giving up");
        Box::pin(async { Outcome::new(OutcomeStatus::Unknown) })
    }
    let scenario = scenarios::Scenario::from_toml(&planted_scenario(), "planted.toml").expect("valid");
    let executor = crate::support::scripted("chatty", chatty, || Outcome::new(OutcomeStatus::Unknown));
    let result = matrix::run(&MatrixConfig {
        executor,
        scenarios: vec![scenario],
        seeds: 1,
        first_seed: 0,
        shard: None,
        check_determinism: false,
        jobs: 1,
        commit: None,
        log: Some(harness::log::LogFilter::parse("trace").expect("a filter")),
        selection: false,
        progress: false,
    });
    assert_ne!(result.verdict, Verdict::Pass, "the scripted executor makes no effect: {result:?}");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-privacy-trace").join("chatty");
    let _ = std::fs::remove_dir_all(&out);
    reports::write_reports(&result, &out, &Format::ALL).expect("the reports are written");
    let reports = assert_reports_clean(&out);
    let log: Vec<&String> = result.scenarios[0].timeline.marks.iter().flat_map(|mark| &mark.log).collect();
    for said in
        ["received arguments=", "the body's bytes body=", "sending hex=", "GET /v1/lookup?", "giving up"]
    {
        let lines: Vec<&&String> = log.iter().filter(|line| line.contains(said)).collect();
        // Each of the two calls logged it, and the secrets in it are redacted, not dropped.
        assert_eq!(lines.len(), 2, "{said}: {log:#?}");
        assert!(lines.iter().all(|line| line.contains("[request text]")), "{said}: {lines:#?}");
    }
    assert!(reports.contains("chatty_executor"), "the reports show the executor's lines");
}

/// The black-box world: a server that writes each tool call it is sent to stderr (the naive
/// way), run with `RUST_LOG=trace`; a failing run's notes quote its stderr, redacted. `--log`
/// itself needs the simulation and is refused there.
#[test]
fn a_process_writing_its_requests_to_stderr_leaks_no_secret() {
    let (directory, file) = planted("black-box");
    let file_text = file.display().to_string();
    let out = directory.join("out");
    let out_text = out.display().to_string();
    let command = format!(
        "while IFS= read -r line; do printf '%s\\n' \"$line\"; case \"$line\" in *tickets.create*) printf 'got %s\\n' \"$line\" >&2;; esac; done | exec {REPLAYLAB} executor serve --mutant blind_retry --store sqlite:{{state}}/claims.db"
    );
    let base = [
        "matrix",
        "--executor-cmd",
        &command,
        "--scenario-file",
        &file_text,
        "--only",
        "S91",
        "--out",
        &out_text,
    ];
    let output = replaylab(&[&base[..], &["--repeat", "1"]].concat(), Some("trace"));
    let printed = said(&output);
    assert_eq!(output.status.code(), Some(i32::from(harness::exit::CHECK_FAILED)), "{printed}");
    assert_no_leak("black-box stdout and stderr", &printed);
    let reports = assert_reports_clean(&out);
    // The stderr the process wrote is quoted, with the arguments redacted: the check above
    // is not clean because nothing was quoted.
    assert!(reports.contains("wrote to stderr: got "), "the notes quote the process's stderr");
    assert!(reports.contains("[request text]"), "the quoted requests are redacted");
    let refused = replaylab(&[&base[..], &["--log", "trace"]].concat(), None);
    assert_eq!(refused.status.code(), Some(i32::from(harness::exit::BAD_INPUT)), "{}", said(&refused));
    assert!(said(&refused).contains("--log"), "{}", said(&refused));
}
