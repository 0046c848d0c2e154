//! The Stripe examples, judged as a user runs them: each from its own directory, where its
//! `replaylab.toml` binds the `payments.charge` role to Stripe's tool name and route.
//!
//! - `examples/python-stripe-naive` (the SDK's retries and its generated keys) fails C2 and C3
//!   (S32: a second charge after the agent's retry, and after a restart), and the reproduce
//!   command it prints fails again as printed, from another directory.
//! - `examples/python-stripe-careful` (its own claim, the operation's key to Stripe, a metadata
//!   search after a lost answer or a crash) passes them, and every other scenario is
//!   `not applicable` with the reason.
//! - A map that binds a tool the server does not list, and a map that does not parse, are bad
//!   input (exit 2) before any run.
//!
//! The Python environment is `.ci/python-examples`'s (mcp and stripe), as for the other
//! Python examples.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::black_box::{assert_valid, matrix_json, python, root, row, scenario, scratch, text};

/// Runs the binary from `directory`, as a user in that example's directory would.
fn replaylab_in(directory: &Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replaylab"))
        .env_remove("CARGO")
        .env_remove("CARGO_PKG_NAME")
        .args(arguments)
        .current_dir(directory)
        .stdin(Stdio::null())
        .output()
        .expect("replaylab runs")
}

/// The examples' python, if it has the stripe SDK too.
fn stripe_python() -> Option<PathBuf> {
    let python = python()?;
    let ready = Command::new(&python)
        .args(["-c", "import mcp, stripe"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    let how = format!("{} cannot import stripe: run `.ci/python-examples`", python.display());
    assert!(ready || std::env::var_os("CI").is_none(), "{how}");
    if !ready {
        eprintln!("SKIPPED: {how}");
    }
    ready.then_some(python)
}

fn example(name: &str) -> PathBuf {
    root().join("examples").join(name)
}

/// The example's command: its SQLite file in the run's state directory.
fn command(python: &Path, name: &str) -> String {
    format!(
        "PAYMENTS_DB={{state}}/payments.db {} {}",
        python.display(),
        example(name).join("server.py").display()
    )
}

fn matrix_of(python: &Path, name: &str, out: &Path, repeat: &str) -> (Output, Value) {
    let output = replaylab_in(
        &example(name),
        &[
            "matrix",
            "--executor-cmd",
            &command(python, name),
            "--workers",
            "2",
            "--repeat",
            repeat,
            "--out",
            &out.display().to_string(),
        ],
    );
    let matrix = matrix_json(out);
    assert_valid(&matrix);
    (output, matrix)
}

#[test]
fn the_naive_stripe_server_fails_c2_and_c3_and_its_reproduce_command_fails_again() {
    let Some(python) = stripe_python() else { return };
    let out = scratch("stripe-naive");
    let (output, matrix) = matrix_of(&python, "python-stripe-naive", &out, "1");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("tool map: ") && said.contains("python-stripe-naive/replaylab.toml"), "{said}");
    for id in ["C2", "C3"] {
        assert_eq!(row(&matrix, id)["verdict"], "fail", "{id}: {:#}", row(&matrix, id));
    }
    let failure = &scenario(&matrix, "S32")["failures"][0];
    let explanations = failure.to_string();
    assert!(explanations.contains("2 charge_created effects"), "a second charge: {failure:#}");
    // The fault was moved to the bound route: the SDK's own retry was answered from the first
    // charge, so the second is the agent's retry's, under a key the SDK minted again.
    assert!(!explanations.contains("violation: O4"), "{failure:#}");
    let reproduce = failure["reproduce"].as_str().expect("a reproduce command");
    assert!(reproduce.contains("run S32") && reproduce.contains("--config "), "{reproduce}");
    // As printed, from a directory without the map: `--config` names it.
    let elsewhere = scratch("stripe-naive-elsewhere");
    let again =
        Command::new("sh").arg("-c").arg(reproduce).current_dir(&elsewhere).stdin(Stdio::null()).output();
    let again = again.expect("the reproduce command runs");
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("single_effect"), "{}", text(&again));
}

#[test]
fn the_careful_stripe_server_passes_every_row_that_applies() {
    let Some(python) = stripe_python() else { return };
    let out = scratch("stripe-careful");
    let (output, matrix) = matrix_of(&python, "python-stripe-careful", &out, "2");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    for id in ["C2", "C3"] {
        assert_eq!(row(&matrix, id)["verdict"], "pass", "{id}: {:#}", row(&matrix, id));
    }
    let s32 = scenario(&matrix, "S32");
    assert_eq!(s32["verdict"], "pass", "{s32:#}");
    // Delivered again and again, one charge per operation: the idempotent hint is earned.
    let hints = &matrix["black_box"]["hints"][0];
    assert_eq!(hints["tool"], "create_payment_intent", "{hints:#}");
    assert_eq!(hints["earned"]["idempotentHint"], true, "{hints:#}");
    // Every other scenario says why it did not run: a role the server does not play, or a
    // premise the Stripe twin cannot give (keys ignored).
    let s05 = scenario(&matrix, "S05");
    assert_eq!(s05["verdict"], "not_applicable", "{s05:#}");
    assert!(s05.to_string().contains("honours every key"), "{s05:#}");
    let s02 = scenario(&matrix, "S02");
    assert!(s02.to_string().contains("[tools.\\\"tickets.create\\\"]"), "{s02:#}");
}

#[test]
fn a_map_that_does_not_fit_the_server_is_bad_input_before_any_run() {
    let Some(python) = stripe_python() else { return };
    let directory = scratch("stripe-bad-map");
    let out = directory.join("report").display().to_string();
    let server = command(&python, "python-stripe-careful");
    let map = directory.join("replaylab.toml");
    let careful =
        std::fs::read_to_string(example("python-stripe-careful").join("replaylab.toml")).expect("the map");
    // A tool the server does not list: named, with what it lists.
    std::fs::write(&map, careful.replace("tool = \"create_payment_intent\"", "tool = \"create_payment\""))
        .expect("written");
    let output = replaylab_in(&directory, &["matrix", "--executor-cmd", &server, "--out", &out]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("it names create_payment_intent"), "{}", text(&output));
    // A required argument of the tool's inputSchema left unbuilt.
    std::fs::write(&map, careful.replace("customer = \"customer\"\n", "customer_id = \"customer\"\n"))
        .expect("written");
    let output = replaylab_in(&directory, &["matrix", "--executor-cmd", &server, "--out", &out]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("builds no customer for"), "{}", text(&output));
    // A map that does not parse is refused before the server is started at all.
    let marker = directory.join("started");
    let noting = format!("touch {} && {server}", marker.display());
    std::fs::write(&map, "[tools.\"payments.charge\"\ntool = 1\n").expect("written");
    let output = replaylab_in(&directory, &["matrix", "--executor-cmd", &noting, "--out", &out]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("replaylab.toml"), "{}", text(&output));
    assert!(!marker.exists(), "no process was started");
    // --config names another file; a directory is no map.
    let output = replaylab_in(
        &directory,
        &["matrix", "--executor-cmd", &noting, "--config", &directory.display().to_string(), "--out", &out],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("not a regular file"), "{}", text(&output));
    assert!(!marker.exists(), "no process was started");
    assert!(!Path::new(&out).join("matrix.json").exists(), "nothing was written");
}

/// `replaylab init` against the careful server writes a map from its tools/list alone, and
/// the matrix runs against the server with that file as written; it refuses to overwrite a
/// file without `--force`, before starting anything.
#[test]
fn init_writes_a_map_the_matrix_runs_with() {
    let Some(python) = stripe_python() else { return };
    let directory = scratch("stripe-init");
    let server = format!(
        "PAYMENTS_DB={}/payments.db {} {}",
        directory.display(),
        python.display(),
        example("python-stripe-careful").join("server.py").display()
    );
    let output = replaylab_in(&directory, &["init", "--executor-cmd", &server]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("1 role bound by a guess"), "{}", text(&output));
    let written = std::fs::read_to_string(directory.join("replaylab.toml")).expect("the file");
    assert!(written.contains("tool = \"create_payment_intent\""), "{written}");
    assert!(written.contains("key_argument = \"idempotency_key\""), "{written}");
    let again = replaylab_in(&directory, &["init", "--executor-cmd", "touch started; false"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("--force"), "{}", text(&again));
    assert!(!directory.join("started").exists(), "nothing was started");
    let out = directory.join("report");
    let command = command(&python, "python-stripe-careful");
    let output = replaylab_in(
        &directory,
        &[
            "matrix",
            "--executor-cmd",
            &command,
            "--only",
            "S32",
            "--repeat",
            "1",
            "--out",
            &out.display().to_string(),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert_eq!(row(&matrix_json(&out), "C3")["verdict"], "pass");
}

/// A server with its own tool (`create_issue(project, title, body)`, on the native API): init
/// binds it to `tickets.create` by its name and arguments, and with that file S07 (a new key,
/// the same arguments: two tickets) runs against it and passes; the scenario's arguments
/// reached it under its own names.
#[test]
fn init_binds_a_tool_of_its_own_name_and_the_scenarios_run_against_it() {
    let Some(python) = python() else { return };
    let directory = scratch("own-names");
    let server = directory.join("server.py");
    std::fs::write(
        &server,
        r#"import json, os, urllib.request
from mcp.server.mcpserver import MCPServer
mcp = MCPServer("issues")
@mcp.tool()
def create_issue(project: str, title: str, body: str) -> str:
    """Open an issue in a project."""
    fields = {"tenant": "acme", "queue": project, "subject": title, "body": body}
    request = urllib.request.Request(os.environ["REPLAYLAB_DOWNSTREAM_URL"] + "/v1/tickets",
        data=json.dumps(fields).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as answer:
        return "created " + json.load(answer)["ticket_id"]
mcp.run()
"#,
    )
    .expect("the server is written");
    let command = format!("{} {}", python.display(), server.display());
    let output = replaylab_in(&directory, &["init", "--executor-cmd", &command]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let written = std::fs::read_to_string(directory.join("replaylab.toml")).expect("the file");
    for line in ["tool = \"create_issue\"", "project = \"queue\"", "title = \"subject\"", "body = \"body\""] {
        assert!(written.contains(line), "{line}:\n{written}");
    }
    let out = directory.join("report");
    let output = replaylab_in(
        &directory,
        &[
            "matrix",
            "--executor-cmd",
            &command,
            "--only",
            "S07",
            "--repeat",
            "1",
            "--out",
            &out.display().to_string(),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let matrix = matrix_json(&out);
    assert_eq!(scenario(&matrix, "S07")["verdict"], "pass", "{:#}", scenario(&matrix, "S07"));
}

/// The naive Stripe server declaring `idempotentHint: true` and `destructiveHint: false` (as
/// servers often do for a create): the matrix reports what its results earned beside what it
/// declares, and `--check-annotations` fails it on the idempotent hint that a second charge
/// for one operation contradicts; the additive hint holds.
#[test]
fn a_declared_hint_the_results_contradict_fails_check_annotations() {
    let Some(python) = stripe_python() else { return };
    let directory = scratch("stripe-hints");
    let naive =
        std::fs::read_to_string(example("python-stripe-naive").join("server.py")).expect("the server");
    let declaring = naive
        .replace(
            "from mcp.server.mcpserver import MCPServer",
            "from mcp.server.mcpserver import MCPServer\nfrom mcp.types import ToolAnnotations",
        )
        .replace(
            "@mcp.tool()",
            "@mcp.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))",
        );
    assert_ne!(declaring, naive, "the decorator was rewritten");
    std::fs::write(directory.join("server.py"), declaring).expect("written");
    std::fs::copy(example("python-stripe-naive").join("replaylab.toml"), directory.join("replaylab.toml"))
        .expect("the map");
    let command = format!("{} {}", python.display(), directory.join("server.py").display());
    let out = directory.join("report");
    let output = replaylab_in(
        &directory,
        &[
            "matrix",
            "--executor-cmd",
            &command,
            "--only",
            "S32",
            "--repeat",
            "1",
            "--check-annotations",
            "--out",
            &out.display().to_string(),
        ],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("tool create_payment_intent (payments.charge): declares destructiveHint=false idempotentHint=true; earned readOnlyHint=false destructiveHint=false idempotentHint=false"),
        "{said}"
    );
    assert!(
        said.contains("CONTRADICTED: idempotentHint") && said.contains("--check-annotations: 1 declared"),
        "{said}"
    );
    let matrix = matrix_json(&out);
    let hints = &matrix["black_box"]["hints"][0];
    assert_eq!(hints["contradicted"], serde_json::json!(["idempotentHint"]), "{hints:#}");
    assert_eq!(hints["earned"]["destructiveHint"], false, "charges only add: {hints:#}");
}
