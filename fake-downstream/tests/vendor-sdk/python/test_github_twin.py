"""The GitHub twin (docs/vendors.md section 6) driven by PyGithub as its client.

Every route the twin serves and every error it answers, each error arriving as PyGithub's own
exception; the effect ledger and the request journal (the admin API, read with urllib: the
harness's, not a GitHub client) after each; and what PyGithub's default retry does against a
service with no idempotency key. Run against `replaylab downstream` with GITHUB_TWIN_URL set
(harness/tests/it/vendor_sdk.rs does). Prints `N passed, N failed` last; exits 1 on a failure.

No check sleeps: PyGithub's throttle between requests and between writes (0.25 s and 1 s by
default) is set to 0, and no check waits out a Retry-After.
"""

import json
import os
import sys
import unittest
import urllib.request
from datetime import timedelta

import requests
from github import (Auth, BadCredentialsException, Github, GithubException, GithubRetry,
                    RateLimitExceededException, UnknownObjectException)

URL = os.environ["GITHUB_TWIN_URL"]
ISSUES = "/repos/acme/support/issues"
# Marks a client built with PyGithub's own default retry (Github.default_retry, a GithubRetry).
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


def journal(method=None, path=None):
    return [r for r in admin("GET", "/__admin/requests")
            if (method is None or r["method"] == method) and (path is None or r["path"] == path)]


def fault(method, path, action, **extra):
    return admin("POST", "/__admin/faults", {"match": {"method": method, "path": path}, "action": action, **extra})


def client(token="ghp_acme", retry=None, **options):
    """A PyGithub client of the twin; `retry=DEFAULT` keeps PyGithub's default retry."""
    if token is not None:
        options["auth"] = Auth.Token(token)
    if retry is not DEFAULT:
        options["retry"] = retry
    return Github(base_url=URL, seconds_between_requests=0, seconds_between_writes=0, **options)


class GitHubTwin(unittest.TestCase):
    def setUp(self):
        admin("POST", "/__admin/reset")
        self.github = client()
        self.repo = self.github.get_repo("acme/support")

    def tearDown(self):
        self.github.close()

    # ---------------------------------------------------------------- routes

    def test_the_repository_is_read_and_points_back_at_the_port(self):
        self.assertEqual((self.repo.full_name, self.repo.name, self.repo.owner.login),
                         ("acme/support", "support", "acme"))
        self.assertEqual(self.repo.url, URL + "/repos/acme/support")
        self.assertTrue(self.repo.has_issues)
        self.assertTrue(self.repo.raw_headers["x-github-request-id"])
        self.assertEqual(ledger(), [])
        self.assertEqual([(r["method"], r["path"], r["tenant"]) for r in journal()],
                         [("GET", "/repos/acme/support", "acme")])

    def test_an_issue_with_labels_and_assignees_is_one_ticket_created(self):
        issue = self.repo.create_issue("Refund for order 1182", body="Customer asks.\n\n<!-- op: 7 -->",
                                       labels=["billing", "op-7"], assignees=["octocat"])
        self.assertEqual((issue.number, issue.state, issue.title), (1, "open", "Refund for order 1182"))
        self.assertEqual(issue.body, "Customer asks.\n\n<!-- op: 7 -->", "the body is kept whole")
        self.assertEqual([label.name for label in issue.labels], ["billing", "op-7"])
        self.assertEqual([user.login for user in issue.assignees], ["octocat"])
        self.assertEqual((issue.assignee.login, issue.user.login), ("octocat", "acme"))
        self.assertEqual(issue.html_url, "https://github.com/acme/support/issues/1")
        self.assertEqual(issue.url, URL + ISSUES + "/1")
        self.assertIsNone(issue.closed_at)
        self.assertEqual([(e["kind"], e["effect_reference"], e["tenant"]) for e in ledger()],
                         [("ticket_created", issue.html_url, "acme")])

    def test_an_issue_is_read_back_by_number_and_is_hidden_from_another_tenant(self):
        made = self.repo.create_issue("Broken invoice", body="See attachment.")
        read = self.repo.get_issue(made.number)
        self.assertEqual((read.id, read.number, read.title, read.body, read.html_url),
                         (made.id, 1, "Broken invoice", "See attachment.", made.html_url))
        with client("ghp_globex") as other:
            theirs = other.get_repo("acme/support")
            with self.assertRaises(UnknownObjectException) as raised:
                theirs.get_issue(made.number)
            self.assertEqual(raised.exception.status, 404)
            self.assertEqual(list(theirs.get_issues(state="all")), [])

    def test_the_list_filters_by_state_labels_creator_and_since(self):
        first = self.repo.create_issue("One", labels=["a", "b"])
        second = self.repo.create_issue("Two", labels=["a"])
        third = self.repo.create_issue("Three")
        third.edit(state="closed")
        numbers = lambda issues: [issue.number for issue in issues]
        self.assertEqual(numbers(self.repo.get_issues()), [2, 1], "open by default, newest first")
        self.assertEqual(numbers(self.repo.get_issues(state="closed")), [3])
        self.assertEqual(numbers(self.repo.get_issues(state="all")), [3, 2, 1])
        self.assertEqual(numbers(self.repo.get_issues(state="all", labels=["a"])), [2, 1])
        self.assertEqual(numbers(self.repo.get_issues(state="all", labels=["a", "b"])), [1], "all labels required")
        self.assertEqual(numbers(self.repo.get_issues(state="all", creator="acme")), [3, 2, 1])
        self.assertEqual(numbers(self.repo.get_issues(state="all", creator="someone-else")), [])
        since = min(first.created_at, second.created_at)
        self.assertEqual(numbers(self.repo.get_issues(state="all", since=since)), [3, 2, 1])
        later = max(i.updated_at for i in self.repo.get_issues(state="all")) + timedelta(seconds=1)
        self.assertEqual(numbers(self.repo.get_issues(state="all", since=later)), [])

    def test_the_list_sorts_by_created_or_comments_in_either_direction(self):
        quiet, busy, talked = (self.repo.create_issue(title) for title in ("Quiet", "Busy", "Talked"))
        busy.create_comment("one")
        busy.create_comment("two")
        talked.create_comment("one")
        numbers = lambda issues: [issue.number for issue in issues]
        self.assertEqual(numbers(self.repo.get_issues(sort="created", direction="asc")), [1, 2, 3])
        self.assertEqual(numbers(self.repo.get_issues(sort="created", direction="desc")), [3, 2, 1])
        self.assertEqual(numbers(self.repo.get_issues(sort="comments", direction="desc")), [2, 3, 1])
        self.assertEqual(numbers(self.repo.get_issues(sort="comments", direction="asc")), [1, 3, 2])
        self.assertEqual([quiet.number, busy.number, talked.number], [1, 2, 3])

    def test_a_paginated_list_follows_the_link_header_across_pages(self):
        bulk = self.github.get_repo("acme/bulk")
        for n in range(1, 36):
            bulk.create_issue(f"Bulk {n}", labels=["bulk"] + (["odd"] if n % 2 else []))
        before = len(journal("GET", "/repos/acme/bulk/issues"))
        every = list(bulk.get_issues(state="all"))
        self.assertEqual([issue.number for issue in every], list(range(35, 0, -1)))
        self.assertEqual(len(journal("GET", "/repos/acme/bulk/issues")) - before, 2,
                         "30 a page (PyGithub's and GitHub's default): page 1, then the Link's next")
        self.assertEqual(bulk.get_issues(state="all").totalCount, 35, "from the last page's number at per_page=1")
        self.assertEqual([i.number for i in bulk.get_issues(state="all").get_page(1)], [5, 4, 3, 2, 1])
        self.assertEqual([i.number for i in bulk.get_issues(state="all").reversed], list(range(1, 36)),
                         "reversed starts at the last page and walks back by prev")
        odd = list(bulk.get_issues(labels=["bulk", "odd"], sort="created", direction="asc"))
        self.assertEqual([i.number for i in odd], list(range(1, 36, 2)))
        with client(per_page=100) as wide:
            before = len(journal("GET", "/repos/acme/bulk/issues"))
            self.assertEqual(len(list(wide.get_repo("acme/bulk").get_issues(state="all"))), 35)
            self.assertEqual(len(journal("GET", "/repos/acme/bulk/issues")) - before, 1, "one page of 100")

    def test_an_issue_is_edited_closed_with_a_reason_and_reopened(self):
        issue = self.repo.create_issue("Refund", body="Customer asks.")
        issue.edit(title="Refund for order 1182", labels=["billing"])
        self.assertEqual((issue.title, [l.name for l in issue.labels], issue.state),
                         ("Refund for order 1182", ["billing"], "open"))
        self.assertEqual([e["kind"] for e in ledger()], ["ticket_created"], "an edit without state is no effect")
        issue.edit(state="closed", state_reason="not_planned")
        self.assertEqual((issue.state, issue.state_reason), ("closed", "not_planned"))
        self.assertIsNotNone(issue.closed_at)
        self.assertEqual(self.repo.get_issue(1).state, "closed")
        issue.edit(state="open")
        self.assertEqual((issue.state, issue.state_reason, issue.closed_at), ("open", "reopened", None))
        effects = ledger()
        self.assertEqual([e["kind"] for e in effects], ["ticket_created", "ticket_status_changed", "ticket_status_changed"])
        self.assertEqual({e["effect_reference"] for e in effects}, {issue.html_url})

    def test_comments_are_messages_listed_oldest_first(self):
        issue = self.repo.create_issue("Refund")
        first = issue.create_comment("Looking into it.")
        second = issue.create_comment("Refunded.")
        self.assertEqual(first.body, "Looking into it.")
        self.assertEqual(first.user.login, "acme")
        self.assertTrue(first.html_url.startswith(issue.html_url + "#issuecomment-"), first.html_url)
        self.assertEqual([c.id for c in issue.get_comments()], [first.id, second.id])
        self.assertEqual(list(issue.get_comments(since=second.created_at + timedelta(seconds=1))), [])
        self.assertEqual(len(list(issue.get_comments(since=first.created_at))), 2)
        self.assertEqual(self.repo.get_issue(1).comments, 2)
        self.assertEqual([(e["kind"], e["effect_reference"]) for e in ledger()],
                         [("ticket_created", issue.html_url), ("message_sent", first.html_url),
                          ("message_sent", second.html_url)])
        with self.assertRaises(UnknownObjectException):
            self.github.requester.requestJsonAndCheck("POST", URL + ISSUES + "/9/comments", input={"body": "x"})

    def test_search_finds_words_phrases_and_qualifiers_newest_first(self):
        refund = self.repo.create_issue("Refund", body="Customer asks for a refund.\n<!-- op-7 -->", labels=["billing"])
        self.repo.create_issue("Broken link", body="The refund page 404s.")
        elsewhere = self.github.get_repo("acme/other").create_issue("Refund elsewhere")
        refund.create_comment("Sent the money back.")
        search = self.github.search_issues
        numbers = lambda found: [(i.repository_url.rsplit("/", 1)[1], i.number) for i in found]
        self.assertEqual(numbers(search("refund", repo="acme/support")), [("support", 2), ("support", 1)])
        self.assertEqual(numbers(search("refund")), [("other", 1), ("support", 2), ("support", 1)])
        self.assertEqual(numbers(search("refund", repo="acme/support", **{"in": "title"})), [("support", 1)])
        self.assertEqual(numbers(search("op-7", repo="acme/support", **{"in": "body", "is": "issue"})),
                         [("support", 1)], "a marker hidden in an HTML comment is found")
        self.assertEqual(numbers(search('"sent the money"', **{"in": "comments"})), [("support", 1)])
        self.assertEqual(numbers(search("refund", label="billing", author="acme", state="open")), [("support", 1)])
        elsewhere.edit(state="closed")
        self.assertEqual(numbers(search("refund", **{"is": "closed"})), [("other", 1)])
        self.assertEqual(numbers(search("refund", **{"is": "open"})), [("support", 2), ("support", 1)])
        self.assertEqual(search("refund", **{"is": "pr"}).totalCount, 0)
        found = search("refund")
        self.assertEqual((found.totalCount, found.incomplete_results), (3, False))
        with client("ghp_globex") as other:
            self.assertEqual(other.search_issues("refund").totalCount, 0)
        with self.assertRaises(GithubException) as raised:
            list(search("refund", milestone="v1"))
        self.assertEqual((raised.exception.status, raised.exception.data["errors"][0]["field"]), (422, "q"))

    # ---------------------------------------------------------------- errors

    def test_a_token_that_is_not_githubs_is_bad_credentials(self):
        for token in ["sk_test_x", "xoxb-1-2"]:
            with client(token) as bad:
                with self.assertRaises(BadCredentialsException) as raised:
                    bad.get_repo("acme/support").create_issue("T")
            self.assertEqual((raised.exception.status, raised.exception.data["message"]), (401, "Bad credentials"))
        self.assertEqual(ledger(), [])

    def test_no_token_is_a_401_requires_authentication(self):
        # PyGithub without auth sends no Authorization header at all (it does not refuse itself).
        with client(None) as anonymous:
            with self.assertRaises(GithubException) as raised:
                anonymous.get_repo("acme/support")
        self.assertIs(type(raised.exception), GithubException, "not BadCredentialsException")
        self.assertEqual((raised.exception.status, raised.exception.data["message"]), (401, "Requires authentication"))
        self.assertIsNone(journal()[-1]["tenant"])

    def test_a_missing_issue_is_unknown_object(self):
        with self.assertRaises(UnknownObjectException) as raised:
            self.repo.get_issue(999)
        self.assertEqual((raised.exception.status, raised.exception.data["message"]), (404, "Not Found"))
        with self.assertRaises(UnknownObjectException):
            self.github.requester.requestJsonAndCheck("PATCH", URL + ISSUES + "/999", input={"state": "closed"})
        self.assertEqual(ledger(), [])

    def test_validation_failed_is_a_422_naming_field_and_code(self):
        # create_issue asserts a str title, so the title-less request goes through its requester.
        with self.assertRaises(GithubException) as raised:
            self.github.requester.requestJsonAndCheck("POST", self.repo.url + "/issues", input={"body": "no title"})
        self.assertEqual((raised.exception.status, raised.exception.message), (422, "Validation Failed"))
        self.assertEqual(raised.exception.data["errors"][0]["code"], "missing_field")
        self.assertEqual(raised.exception.data["errors"][0]["field"], "title")
        with self.assertRaises(GithubException) as long_title:
            self.repo.create_issue("x" * 257)
        self.assertEqual((long_title.exception.status, long_title.exception.data["errors"][0]["code"]), (422, "custom"))
        with self.assertRaises(GithubException) as bad_state:
            list(self.repo.get_issues(state="bogus"))
        self.assertEqual((bad_state.exception.status, bad_state.exception.data["errors"][0]["code"]), (422, "invalid"))
        self.assertEqual(ledger(), [])

    def test_a_body_that_is_not_a_json_object_is_a_400(self):
        with self.assertRaises(GithubException) as raised:
            self.github.requester.requestJsonAndCheck("POST", self.repo.url + "/issues", input=["Refund"])
        self.assertEqual((raised.exception.status, raised.exception.message), (400, "Problems parsing JSON"))
        self.assertEqual(ledger(), [])

    def test_a_secondary_rate_limit_is_rate_limit_exceeded_with_retry_after(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "rate_limited", delay="1s")
        with self.assertRaises(RateLimitExceededException) as raised:
            self.repo.create_issue("Refund")
        self.assertEqual(raised.exception.status, 403)
        self.assertEqual(raised.exception.headers["retry-after"], "1")
        self.assertTrue(raised.exception.data["message"].startswith("You have exceeded a secondary rate limit"))
        self.assertEqual(ledger(), [])
        self.assertEqual(journal("POST", ISSUES)[0]["disposition"], "rate_limited")

    def test_githubretry_retries_a_secondary_rate_limit_and_that_makes_one_issue(self):
        # GithubRetry retries a 403 with Retry-After; urllib3 would sleep the Retry-After, which
        # this check does not wait for.
        fault("POST", "/repos/{owner}/{repo}/issues", "rate_limited", delay="1s")
        with client(retry=GithubRetry(respect_retry_after_header=False)) as patient:
            issue = patient.get_repo("acme/support").create_issue("Refund")
        self.assertEqual(issue.number, 1)
        self.assertEqual([r["disposition"] for r in journal("POST", ISSUES)], ["rate_limited", "committed"])
        self.assertEqual(len(ledger()), 1, "a refusal makes no effect, so its retry is safe")

    def test_a_5xx_after_the_commit_is_a_github_exception_and_the_issue_was_made(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "commit_then_error", status=502)
        with self.assertRaises(GithubException) as raised:
            self.repo.create_issue("Refund")
        self.assertIs(type(raised.exception), GithubException)
        self.assertEqual((raised.exception.status, raised.exception.message), (502, "Server Error"))
        self.assertEqual([e["kind"] for e in ledger()], ["ticket_created"], "committed, then the error")

    # ---------------------------------------------------------------- no key, and PyGithub's retries

    def test_two_identical_creates_are_two_issues_whatever_the_headers(self):
        first = self.repo.create_issue("Refund", body="Customer asks.")
        second = self.repo.create_issue("Refund", body="Customer asks.")
        self.assertEqual((first.number, second.number), (1, 2))
        for _ in range(2):
            self.github.requester.requestJsonAndCheck("POST", self.repo.url + "/issues", input={"title": "Keyed"},
                                                      headers={"Idempotency-Key": "order-1182"})
        effects = ledger()
        self.assertEqual(len(effects), 4, "GitHub has no idempotency key")
        self.assertEqual(len({e["effect_reference"] for e in effects}), 4)
        self.assertEqual(effects[0]["content_digest"], effects[1]["content_digest"], "the same business content")
        self.assertTrue(all(e["idempotency_key"] is None for e in effects), "PyGithub sends none; the twin reads none")

    def test_without_retry_a_dropped_answer_is_a_connection_error_after_one_issue(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "commit_then_drop")
        with self.assertRaises(requests.exceptions.ConnectionError):
            self.repo.create_issue("Refund")
        self.assertEqual(len(ledger()), 1)
        self.assertEqual(len(journal("POST", ISSUES)), 1)

    def test_default_retry_resends_a_post_whose_answer_was_dropped_making_two(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "commit_then_drop")
        fault("POST", "/repos/{owner}/{repo}/issues/{number}/comments", "commit_then_drop")
        with client(retry=DEFAULT) as default:
            repo = default.get_repo("acme/support")
            issue = repo.create_issue("Refund", body="Customer asks.")
            self.assertEqual(issue.number, 2, "the answer is the resend's")
            comment = issue.create_comment("On it.")
        self.assertEqual([(r["disposition"], r["fault_action"]) for r in journal("POST", ISSUES)],
                         [("committed", "commit_then_drop"), ("committed", None)])
        effects = ledger()
        self.assertEqual([e["kind"] for e in effects], ["ticket_created"] * 2 + ["message_sent"] * 2)
        self.assertEqual(effects[0]["content_digest"], effects[1]["content_digest"], "one call, two issues")
        self.assertEqual(effects[3]["effect_reference"], comment.html_url)

    def test_default_retry_does_not_resend_a_patch_whose_answer_was_dropped(self):
        self.repo.create_issue("Refund")
        fault("PATCH", "/repos/{owner}/{repo}/issues/{number}", "commit_then_drop")
        with client(retry=DEFAULT) as default:
            issue = default.get_repo("acme/support").get_issue(1)
            # PATCH is not among GithubRetry's allowed_methods (urllib3's idempotent ones, GET and POST).
            with self.assertRaises(requests.exceptions.ConnectionError):
                issue.edit(state="closed")
        self.assertEqual(len(journal("PATCH", ISSUES + "/1")), 1)
        self.assertEqual([e["kind"] for e in ledger()], ["ticket_created", "ticket_status_changed"])

    def test_default_retry_resends_a_post_after_a_502_making_two(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "commit_then_error", status=502)
        with client(retry=DEFAULT) as default:
            issue = default.get_repo("acme/support").create_issue("Refund")
        self.assertEqual(issue.number, 2)
        self.assertEqual([r["fault_action"] for r in journal("POST", ISSUES)], ["commit_then_error", None])
        self.assertEqual(len(ledger()), 2, "the 502 came after the commit, and the retry made another")

    def test_default_retry_gives_up_after_ten_retries_of_a_5xx_with_eleven_issues(self):
        fault("POST", "/repos/{owner}/{repo}/issues", "commit_then_error", status=502, times="always")
        with client(retry=DEFAULT) as default:
            repo = default.get_repo("acme/support")
            # urllib3 raises MaxRetryError, which requests turns into its RetryError: not a
            # GithubException, and no status for the caller to read.
            with self.assertRaises(requests.exceptions.RetryError) as raised:
                repo.create_issue("Refund")
        self.assertNotIsInstance(raised.exception, GithubException)
        self.assertEqual(len(journal("POST", ISSUES)), 11)
        self.assertEqual(len(ledger()), 11, "1 + GithubRetry's total of 10, every one committed")


if __name__ == "__main__":
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(GitHubTwin))
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
