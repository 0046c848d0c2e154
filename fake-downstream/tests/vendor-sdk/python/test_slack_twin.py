"""The Slack twin (docs/vendors.md section 7) driven by slack_sdk as its client.

Every method the twin serves and every error it answers, each error arriving as slack_sdk's
own `SlackApiError` with Slack's code; the effect ledger and the request journal (the admin
API, read with urllib: the harness's, not a Slack client) after each; and what slack_sdk's
default retry handler does against a service with no idempotency key. Run against
`replaylab downstream` with SLACK_TWIN_URL set (harness/tests/it/vendor_sdk.rs does). Prints
`N passed, N failed` last; exits 1 on a failure. No check sleeps.
"""

import json
import os
import sys
import unittest
import urllib.request

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler

URL = os.environ["SLACK_TWIN_URL"]
BASE = URL.rstrip("/") + "/api/"
POST = "/api/chat.postMessage"
# Marks a client built with slack_sdk's own default retry handlers.
DEFAULT = object()


def admin(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(URL + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def ledger():
    return admin("GET", "/__admin/ledger")


def journal(path=None):
    return [r for r in admin("GET", "/__admin/requests") if path is None or r["path"] == path]


def fault(path, action, **extra):
    return admin("POST", "/__admin/faults", {"match": {"path": path}, "action": action, **extra})


def client(token="xoxb-acme", retry=None):
    """A slack_sdk client of the twin; `retry=DEFAULT` keeps slack_sdk's default handlers."""
    options = {} if retry is DEFAULT else {"retry_handlers": retry or []}
    return WebClient(token=token, base_url=BASE, **options)


class SlackTwin(unittest.TestCase):
    def setUp(self):
        admin("POST", "/__admin/reset")
        self.slack = client()

    def error_of(self, call):
        with self.assertRaises(SlackApiError) as raised:
            call()
        return raised.exception.response

    # ---------------------------------------------------------------- methods

    def test_auth_test_names_the_tokens_tenant(self):
        who = self.slack.auth_test()
        self.assertEqual((who["ok"], who["team"], who["user_id"]), (True, "acme", "U_acme"))
        self.assertEqual(ledger(), [])

    def test_a_post_is_a_message_sent_whose_reference_is_its_ts(self):
        posted = self.slack.chat_postMessage(channel="C0-refunds", text="Refund for order 1182 approved.")
        self.assertTrue(posted["ok"])
        self.assertEqual(posted["channel"], "C0-refunds")
        self.assertEqual(posted["message"]["text"], "Refund for order 1182 approved.")
        effects = ledger()
        self.assertEqual([(e["kind"], e["effect_reference"], e["tenant"]) for e in effects],
                         [("message_sent", posted["ts"], "acme")])
        sent = journal(POST)
        self.assertEqual(len(sent), 1)
        self.assertIsNone(sent[0]["idempotency_key"])

    def test_blocks_threads_and_display_options_are_accepted(self):
        parent = self.slack.chat_postMessage(channel="C1", text="parent")
        reply = self.slack.chat_postMessage(
            channel="C1", text="reply", thread_ts=parent["ts"], mrkdwn=True, unfurl_links=False,
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*reply*"}}])
        self.assertEqual(reply["message"]["thread_ts"], parent["ts"])
        self.assertEqual(len(ledger()), 2)

    def test_history_reads_back_newest_first_with_metadata_only_when_asked(self):
        tag = {"event_type": "operation_posted", "event_payload": {"operation": "acme/run_1/notify"}}
        first = self.slack.chat_postMessage(channel="C2", text="first", metadata=tag)
        second = self.slack.chat_postMessage(channel="C2", text="second")
        plain = self.slack.conversations_history(channel="C2")
        self.assertEqual([m["ts"] for m in plain["messages"]], [second["ts"], first["ts"]])
        self.assertNotIn("metadata", plain["messages"][1])
        self.assertEqual(first["message"]["metadata"], tag, "the post's answer shows its metadata")
        tagged = self.slack.conversations_history(channel="C2", include_all_metadata=True)
        self.assertEqual(tagged["messages"][1]["metadata"], tag)
        self.assertEqual(self.slack.conversations_history(channel="C3")["messages"], [])
        other = client("xoxb-globex").conversations_history(channel="C2")
        self.assertEqual(other["messages"], [], "another tenant's token sees none of it")

    def test_history_pages_follow_the_cursor(self):
        for n in range(5):
            self.slack.chat_postMessage(channel="C4", text=f"m{n}")
        texts = []
        for page in self.slack.conversations_history(channel="C4", limit=2):
            texts.extend(m["text"] for m in page["messages"])
        self.assertEqual(texts, ["m4", "m3", "m2", "m1", "m0"])

    def test_oldest_and_latest_bound_the_history(self):
        posted = [self.slack.chat_postMessage(channel="C5", text=f"m{n}")["ts"] for n in range(3)]
        inside = self.slack.conversations_history(channel="C5", oldest=posted[0], latest=posted[2])
        self.assertEqual([m["ts"] for m in inside["messages"]], [posted[1]])
        inclusive = self.slack.conversations_history(channel="C5", oldest=posted[0], inclusive=True)
        self.assertEqual(len(inclusive["messages"]), 3)

    def test_history_answers_a_post_with_form_parameters_too(self):
        self.slack.chat_postMessage(channel="C6", text="hello")
        read = self.slack.api_call("conversations.history", http_verb="POST", data={"channel": "C6"})
        self.assertEqual(read["messages"][0]["text"], "hello")

    # ---------------------------------------------------------------- errors

    def test_no_token_is_not_authed(self):
        response = self.error_of(lambda: WebClient(base_url=BASE, retry_handlers=[]).chat_postMessage(
            channel="C1", text="t"))
        self.assertEqual((response.status_code, response["error"]), (200, "not_authed"))

    def test_another_token_is_invalid_auth(self):
        response = self.error_of(lambda: client("ghp_acme").chat_postMessage(channel="C1", text="t"))
        self.assertEqual(response["error"], "invalid_auth")

    def test_each_refusal_is_a_slack_api_error_with_its_code_and_makes_nothing(self):
        cases = [
            (lambda: self.slack.chat_postMessage(channel="", text="t"), "channel_not_found"),
            (lambda: self.slack.chat_postMessage(channel="C 1", text="t"), "channel_not_found"),
            (lambda: self.slack.chat_postMessage(channel="C1"), "no_text"),
            (lambda: self.slack.chat_postMessage(channel="C1", text="x" * 40_001), "msg_too_long"),
            (lambda: self.slack.api_call("chat.postMessage", json={"channel": "C1", "text": 7}), "invalid_arguments"),
            (lambda: self.slack.chat_postMessage(channel="C1", text="t", metadata={"event_type": "x"}),
             "invalid_metadata_format"),
            (lambda: self.slack.conversations_history(channel="C1", limit=0), "invalid_limit"),
            (lambda: self.slack.conversations_history(channel="C1", limit=1000), "invalid_limit"),
            (lambda: self.slack.conversations_history(channel="C1", cursor="bogus"), "invalid_cursor"),
            # A JSON body that is not an object (slack_sdk sends any truthy `json` as JSON).
            (lambda: self.slack.api_call("chat.postMessage", json=["channel", "C1"]), "invalid_json"),
            (lambda: self.slack.api_call("chat.delete", json={"channel": "C1", "ts": "1.000001"}),
             "unknown_method"),
        ]
        for call, code in cases:
            with self.subTest(code=code):
                response = self.error_of(call)
                self.assertEqual((response.status_code, response["ok"], response["error"]), (200, False, code))
        self.assertEqual(ledger(), [])

    def test_a_rate_limited_post_is_a_429_with_retry_after_and_no_message(self):
        fault(POST, "rate_limited", delay="7s")
        response = self.error_of(lambda: self.slack.chat_postMessage(channel="C1", text="t"))
        self.assertEqual((response.status_code, response["error"]), (429, "ratelimited"))
        self.assertEqual(response.headers.get("retry-after") or response.headers.get("Retry-After"), "7")
        self.assertEqual(ledger(), [])
        self.assertEqual(journal(POST)[0]["disposition"], "rate_limited")
        self.assertTrue(self.slack.chat_postMessage(channel="C1", text="t")["ok"], "the rule fired once")

    def test_a_5xx_after_the_commit_is_an_error_though_the_message_was_posted(self):
        fault(POST, "commit_then_error", status=502)
        response = self.error_of(lambda: self.slack.chat_postMessage(channel="C1", text="t"))
        self.assertEqual((response.status_code, response["error"]), (502, "internal_error"))
        self.assertEqual(len(ledger()), 1, "the 502 came after the commit")

    # ---------------------------------------------------------------- no key, and the SDK's retry

    def test_two_identical_posts_are_two_messages(self):
        self.slack.chat_postMessage(channel="C1", text="same")
        self.slack.chat_postMessage(channel="C1", text="same")
        self.assertEqual(len(ledger()), 2, "Slack has no idempotency key")

    def test_the_default_retry_handler_resends_after_a_dropped_answer_making_two(self):
        fault(POST, "commit_then_drop")
        default = client(retry=DEFAULT)
        self.assertTrue(any(isinstance(handler, ConnectionErrorRetryHandler) for handler in default.retry_handlers))
        posted = default.chat_postMessage(channel="C1", text="once, the caller thinks")
        self.assertTrue(posted["ok"])
        self.assertEqual(len(journal(POST)), 2)
        self.assertEqual(len(ledger()), 2, "the dropped answer came after the commit, and the retry posted again")

    def test_without_retry_handlers_a_dropped_answer_is_an_os_error_after_one_message(self):
        fault(POST, "commit_then_drop")
        with self.assertRaises(OSError):
            self.slack.chat_postMessage(channel="C1", text="t")
        self.assertEqual(len(ledger()), 1)


if __name__ == "__main__":
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(SlackTwin))
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
