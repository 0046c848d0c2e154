//! The MCP conventions' JSON Schema (`protocol/schema/mcp.schema.json`) is the one the types
//! generate, accepts the examples `docs/mcp.md` shows (`docs/mcp/*.json`, whole JSON-RPC
//! messages) and refuses documents that break the conventions.

use std::path::PathBuf;

use protocol::mcp::{
    conventions_schema, CallMeta, ConsumeAnswer, ConsumeArguments, Manifest, WebhookAnswer, CALL_META,
    CONSUME_TOOL, MANIFEST_URI,
};
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example(name: &str) -> Value {
    let path = root().join("docs/mcp").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&conventions_schema()).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("the schema is a JSON Schema")
}

/// The documents a message carries, as the schema names them.
fn documents(message: &Value) -> Value {
    let mut documents = serde_json::Map::new();
    if let Some(meta) = message.pointer("/params/_meta").and_then(|meta| meta.get(CALL_META)) {
        documents.insert("call_meta".into(), meta.clone());
    }
    if message.pointer("/params/name").and_then(Value::as_str) == Some(CONSUME_TOOL) {
        if let Some(arguments) = message.pointer("/params/arguments") {
            documents.insert("consume_arguments".into(), arguments.clone());
        }
    }
    if let Some(structured) = message.pointer("/result/structuredContent") {
        // A consume tool's answer says `consumed`; every other answer is an outcome.
        let name = if structured.get("consumed").is_some() { "consume_answer" } else { "outcome" };
        documents.insert(name.into(), structured.clone());
    }
    if let Some(contents) = message.pointer("/result/contents").and_then(Value::as_array) {
        for content in contents.iter().filter(|content| content["uri"] == MANIFEST_URI) {
            let text = content["text"].as_str().expect("the manifest is text");
            documents.insert("manifest".into(), serde_json::from_str(text).expect("the manifest is JSON"));
        }
    }
    Value::Object(documents)
}

#[test]
fn checked_in_schema_is_current() {
    let path = root().join("protocol/schema/mcp.schema.json");
    let generated = conventions_schema();
    if std::env::var_os("UPDATE_SCHEMA").is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).expect("the schema is written");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: regenerate it with `UPDATE_SCHEMA=1 cargo test -p protocol --test mcp_conventions`",
        path.display()
    );
}

#[test]
fn the_documented_examples_follow_the_conventions() {
    let validator = validator();
    for (name, expected) in [
        ("call.json", "call_meta"),
        ("answer-replayed.json", "outcome"),
        ("answer-unknown.json", "outcome"),
        ("manifest.json", "manifest"),
        ("consume.json", "consume_arguments"),
        ("consume-answer.json", "consume_answer"),
    ] {
        let documents = documents(&example(name));
        assert!(documents.get(expected).is_some(), "{name} carries a {expected}");
        let errors: Vec<String> = validator.iter_errors(&documents).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
    }
    // A webhook receiver's answer is a plain HTTP body, not an MCP message.
    let webhook = json!({"webhook_answer": example("webhook-answer.json")});
    let errors: Vec<String> = validator.iter_errors(&webhook).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "webhook-answer.json: {errors:#?}");
    let _: WebhookAnswer =
        serde_json::from_value(webhook["webhook_answer"].clone()).expect("a WebhookAnswer");
    let consume = documents(&example("consume.json"));
    let consume: ConsumeArguments =
        serde_json::from_value(consume["consume_arguments"].clone()).expect("ConsumeArguments");
    assert_eq!((consume.envelope.tool.as_str(), consume.attempt), ("messages.send", 2));
    let answer = documents(&example("consume-answer.json"));
    let answer: ConsumeAnswer =
        serde_json::from_value(answer["consume_answer"].clone()).expect("a ConsumeAnswer");
    assert_eq!(answer.consumed, protocol::Consumed::Ack);
    // And the types read them.
    let call = documents(&example("call.json"));
    let meta: CallMeta = serde_json::from_value(call["call_meta"].clone()).expect("a CallMeta");
    assert_eq!(
        meta.idempotency_key,
        CallMeta::key_of(&meta.tenant, &meta.environment, &meta.workflow_id, &meta.step_id)
    );
    let manifest = documents(&example("manifest.json"));
    let manifest: Manifest = serde_json::from_value(manifest["manifest"].clone()).expect("a Manifest");
    assert!(manifest.capabilities.reconcile);
}

#[test]
fn documents_that_break_the_conventions_are_refused() {
    let validator = validator();
    let call = documents(&example("call.json"));
    let outcome = documents(&example("answer-replayed.json"));
    let manifest = documents(&example("manifest.json"));
    let refused = |base: &Value, change: &dyn Fn(&mut Value), what: &str| {
        let mut changed = base.clone();
        change(&mut changed);
        assert!(!validator.is_valid(&changed), "the schema accepts {what}");
    };
    refused(&call, &|v| v["call_meta"]["version"] = 2.into(), "another conventions version");
    refused(&call, &|v| v["call_meta"]["surprise"] = true.into(), "an unknown field in _meta");
    refused(
        &call,
        &|v| v["call_meta"].as_object_mut().map(|m| m.remove("idempotency_key")).map_or((), drop),
        "a call without its key",
    );
    refused(&call, &|v| v["call_meta"]["attempt"] = 0.into(), "attempt 0");
    refused(&outcome, &|v| v["outcome"]["status"] = "done".into(), "status done");
    refused(&outcome, &|v| v["outcome"]["reason"] = "because".into(), "an unknown reason");
    refused(
        &outcome,
        &|v| v["outcome"].as_object_mut().map(|m| m.remove("next_action")).map_or((), drop),
        "an outcome without next_action",
    );
    refused(&manifest, &|v| v["manifest"]["capabilities"]["teleport"] = true.into(), "an unknown capability");
    refused(&manifest, &|v| v["manifest"]["timing"]["lease_ms"] = 0.into(), "a lease of 0 ms");
    refused(&json!({}), &|v| v["surprise"] = json!({}), "an unknown document");
    let consume = documents(&example("consume.json"));
    refused(&consume, &|v| v["consume_arguments"]["attempt"] = 0.into(), "delivery attempt 0");
    refused(
        &consume,
        &|v| {
            v["consume_arguments"]["envelope"]
                .as_object_mut()
                .map(|m| m.remove("operation_key"))
                .map_or((), drop)
        },
        "an envelope without its operation key",
    );
    refused(&json!({"consume_answer": {"consumed": "done"}}), &|_| {}, "consumed done");
    refused(&json!({"webhook_answer": {"ack": "ok"}}), &|_| {}, "an unknown webhook ack");
    refused(
        &manifest,
        &|v| v["manifest"]["capabilities"]["webhook_path"] = "hooks".into(),
        "a webhook path not starting with /",
    );
}

/// Every JSON example in `docs/mcp.md` follows the conventions too (a request, an answer's
/// result, or a manifest's text).
#[test]
fn the_examples_in_the_prose_follow_the_conventions() {
    let validator = validator();
    let text = std::fs::read_to_string(root().join("docs/mcp.md")).expect("docs/mcp.md");
    let blocks: Vec<&str> =
        text.split("```json\n").skip(1).map(|rest| rest.split("```").next().unwrap_or_default()).collect();
    assert!(blocks.len() >= 3, "docs/mcp.md shows a call, an answer and a manifest");
    for block in blocks {
        let value: Value =
            serde_json::from_str(block).unwrap_or_else(|error| panic!("docs/mcp.md: {error}\n{block}"));
        let documents = if value.get("method").is_some() {
            documents(&value)
        } else if let Some(outcome) = value.get("structuredContent") {
            json!({ "outcome": outcome })
        } else if value.get("envelope_id").is_some() {
            json!({ "consume_arguments": { "envelope": value, "attempt": 1 } })
        } else if value.get("event_id").is_some() {
            // A completion event is the downstream's document (docs/downstream.md), not one of
            // the conventions'; the downstream's tests hold it.
            assert_eq!(value["type"], "job.succeeded", "{block}");
            continue;
        } else {
            json!({ "manifest": value })
        };
        let errors: Vec<String> = validator.iter_errors(&documents).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "docs/mcp.md example {block}: {errors:#?}");
    }
}
