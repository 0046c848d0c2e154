"""The Stripe twin (docs/vendors.md) driven by Stripe's official Python SDK as its client.

Every route the twin serves and every error it answers, each error arriving as the SDK's
typed exception; the effect ledger (the admin API, read with urllib: the harness's, not a
Stripe client) after each. Run against `replaylab downstream` with STRIPE_TWIN_URL set
(harness/tests/it/vendor_sdk.rs does). Prints `N passed, N failed` last; exits 1 on a failure.
"""

import json
import os
import sys
import threading
import time
import unittest
import urllib.request

import stripe

URL = os.environ["STRIPE_TWIN_URL"]


def admin(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(URL + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def client(tenant="acme", retries=0):
    return stripe.StripeClient(f"sk_test_{tenant}", base_addresses={"api": URL},
                               max_network_retries=retries).v1


def intent_params(**changes):
    params = {"amount": 5000, "currency": "eur", "customer": "cus_42", "confirm": True,
              "payment_method": "pm_card_visa", "metadata": {"order": "1182"}}
    params.update(changes)
    return params


def ledger():
    return admin("GET", "/__admin/ledger")


class StripeTwin(unittest.TestCase):
    def setUp(self):
        admin("POST", "/__admin/reset")
        self.stripe = client()

    def test_a_confirmed_payment_intent_charges_once_and_reads_back(self):
        intent = self.stripe.payment_intents.create(params=intent_params())
        self.assertTrue(intent.id.startswith("pi_"))
        self.assertEqual((intent.status, intent.amount_received, intent.currency), ("succeeded", 5000, "eur"))
        self.assertTrue(intent.latest_charge.startswith("ch_"))
        self.assertEqual(intent.metadata["order"], "1182")
        self.assertTrue(intent.last_response.headers["request-id"].startswith("req_"))
        again = self.stripe.payment_intents.retrieve(intent.id)
        self.assertEqual((again.id, again.status), (intent.id, "succeeded"))
        charge = self.stripe.charges.retrieve(intent.latest_charge)
        self.assertEqual((charge.object, charge.amount, charge.payment_intent), ("charge", 5000, intent.id))
        effects = ledger()
        self.assertEqual([(e["kind"], e["effect_reference"], e["tenant"]) for e in effects],
                         [("charge_created", intent.id, "acme")])

    def test_an_intent_not_confirmed_moves_no_money(self):
        waiting = self.stripe.payment_intents.create(params={"amount": 100, "currency": "usd", "payment_method": "pm_card_visa"})
        bare = self.stripe.payment_intents.create(params={"amount": 100, "currency": "usd"})
        self.assertEqual((waiting.status, bare.status), ("requires_confirmation", "requires_payment_method"))
        self.assertIsNone(waiting.latest_charge)
        self.assertEqual(ledger(), [])

    def test_the_same_key_and_parameters_replay_the_first_answer(self):
        first = self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "order-1182"})
        second = self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "order-1182"})
        self.assertEqual(second.id, first.id)
        self.assertEqual(second.last_response.headers.get("idempotent-replayed"), "true")
        self.assertIsNone(first.last_response.headers.get("idempotent-replayed"))
        self.assertEqual(len(ledger()), 1)

    def test_other_parameters_under_a_key_are_an_idempotency_error(self):
        self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "k"})
        with self.assertRaises(stripe.IdempotencyError) as raised:
            self.stripe.payment_intents.create(params=intent_params(amount=5100), options={"idempotency_key": "k"})
        self.assertEqual(raised.exception.http_status, 400)
        with self.assertRaises(stripe.IdempotencyError):
            self.stripe.charges.create(params={"amount": 5000, "currency": "eur", "source": "tok_visa"},
                                       options={"idempotency_key": "k"})
        self.assertEqual(len(ledger()), 1)

    def test_keys_are_per_tenant(self):
        self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "k"})
        other = client("globex").payment_intents.create(params=intent_params(), options={"idempotency_key": "k"})
        self.assertIsNone(other.last_response.headers.get("idempotent-replayed"))
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            client("globex").payment_intents.retrieve("pi_1")
        self.assertEqual((raised.exception.http_status, raised.exception.code), (404, "resource_missing"))
        self.assertEqual(sorted(e["tenant"] for e in ledger()), ["acme", "globex"])

    def test_a_key_in_flight_is_a_409_that_the_sdk_retries(self):
        rule = admin("POST", "/__admin/faults", {"match": {"method": "POST", "path": "/v1/payment_intents"},
                                                 "action": "hold", "times": 1})
        answers = {}

        def first():
            answers["first"] = self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "busy"})

        thread = threading.Thread(target=first, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not any(r["id"] == rule["id"] and r["fired"] for r in admin("GET", "/__admin/faults")):
            self.assertLess(time.monotonic(), deadline, "the first request never reached the hold")
            time.sleep(0.01)
        try:
            with self.assertRaises(stripe.APIError) as raised:
                self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "busy"})
        finally:
            admin("POST", f"/__admin/faults/{rule['id']}/release")
            thread.join()
        # The SDK maps any 409 to APIError; the envelope's code is in its error object.
        self.assertEqual(raised.exception.http_status, 409)
        self.assertEqual(raised.exception.error.code, "idempotency_key_in_use")
        # With its retries on, the SDK retries a 409 and then gets the replay.
        replay = client(retries=2).payment_intents.create(params=intent_params(), options={"idempotency_key": "busy"})
        self.assertEqual(replay.id, answers["first"].id)
        self.assertEqual(len(ledger()), 1)

    def test_a_decline_is_a_card_error_and_is_replayed_under_its_key(self):
        params = intent_params(payment_method="pm_card_chargeDeclined")
        with self.assertRaises(stripe.CardError) as raised:
            self.stripe.payment_intents.create(params=params, options={"idempotency_key": "no"})
        self.assertEqual((raised.exception.http_status, raised.exception.code), (402, "card_declined"))
        with self.assertRaises(stripe.CardError) as again:
            self.stripe.payment_intents.create(params=params, options={"idempotency_key": "no"})
        self.assertEqual(again.exception.headers.get("idempotent-replayed"), "true")
        with self.assertRaises(stripe.CardError):
            self.stripe.charges.create(params={"amount": 100, "currency": "eur", "source": "tok_chargeDeclined"})
        self.assertEqual(ledger(), [])

    def test_a_refused_request_is_not_kept_under_its_key(self):
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            self.stripe.payment_intents.create(params={"currency": "eur"}, options={"idempotency_key": "fix"})
        self.assertEqual((raised.exception.code, raised.exception.param), ("parameter_missing", "amount"))
        fixed = self.stripe.payment_intents.create(params=intent_params(), options={"idempotency_key": "fix"})
        self.assertEqual(fixed.status, "succeeded")

    def test_bad_parameters_are_invalid_request_errors_naming_them(self):
        cases = [
            ({"amount": 1, "currency": "eur", "colour": "red"}, "parameter_unknown", "colour"),
            ({"amount": "ten", "currency": "eur"}, "parameter_invalid_integer", "amount"),
            ({"amount": 1, "currency": "eur", "confirm": True}, "parameter_missing", "payment_method"),
            ({"amount": 1}, "parameter_missing", "currency"),
        ]
        for params, code, param in cases:
            with self.subTest(params=params):
                with self.assertRaises(stripe.InvalidRequestError) as raised:
                    self.stripe.payment_intents.create(params=params)
                self.assertEqual((raised.exception.http_status, raised.exception.code, raised.exception.param),
                                 (400, code, param))
        self.assertEqual(ledger(), [])

    def test_a_missing_object_is_a_404(self):
        for retrieve, object_id in [(self.stripe.payment_intents.retrieve, "pi_9"),
                                    (self.stripe.charges.retrieve, "ch_9"),
                                    (self.stripe.refunds.retrieve, "re_9")]:
            with self.assertRaises(stripe.InvalidRequestError) as raised:
                retrieve(object_id)
            self.assertEqual((raised.exception.http_status, raised.exception.code, raised.exception.param),
                             (404, "resource_missing", "id"))

    def test_a_live_or_foreign_key_is_an_authentication_error(self):
        for key in ["sk_live_0123456789abcdef", "sk_other_key"]:
            bad = stripe.StripeClient(key, base_addresses={"api": URL}, max_network_retries=0).v1
            with self.assertRaises(stripe.AuthenticationError) as raised:
                bad.charges.create(params={"amount": 1, "currency": "eur", "source": "tok_visa"})
            self.assertEqual(raised.exception.http_status, 401)
        self.assertEqual(ledger(), [])

    def test_search_finds_by_metadata_customer_status_and_amount(self):
        first = self.stripe.payment_intents.create(params=intent_params())
        second = self.stripe.payment_intents.create(params=intent_params(amount=900, metadata={"order": "1183"}))
        self.stripe.payment_intents.create(params={"amount": 100, "currency": "eur", "metadata": {"order": "1182"}})
        search = self.stripe.payment_intents.search
        found = search(params={"query": "metadata['order']:'1182' AND status:'succeeded'"})
        self.assertEqual([i.id for i in found.data], [first.id])
        both = search(params={"query": "customer:'cus_42' AND amount>500"})
        self.assertEqual([i.id for i in both.data], [second.id, first.id], "newest first")
        either = search(params={"query": "metadata['order']:'1183' OR amount:5000", "limit": 1})
        self.assertEqual((len(either.data), either.has_more), (1, True))
        self.assertEqual(client("globex").payment_intents.search(params={"query": "customer:'cus_42'"}).data, [])
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            search(params={"query": "colour:'red'"})
        self.assertEqual(raised.exception.param, "query")

    def test_charges_and_refunds(self):
        charge = self.stripe.charges.create(params={"amount": 700, "currency": "usd", "source": "tok_visa",
                                                    "metadata": {"order": "9"}})
        self.assertEqual((charge.object, charge.status, charge.paid, charge.metadata["order"]),
                         ("charge", "succeeded", True, "9"))
        part = self.stripe.refunds.create(params={"charge": charge.id, "amount": 200})
        self.assertEqual((part.object, part.amount, part.charge, part.status), ("refund", 200, charge.id, "succeeded"))
        self.assertEqual(self.stripe.refunds.retrieve(part.id).amount, 200)
        rest = self.stripe.refunds.create(params={"charge": charge.id})
        self.assertEqual(rest.amount, 500)
        read = self.stripe.charges.retrieve(charge.id)
        self.assertEqual((read.amount_refunded, read.refunded), (700, True))
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            self.stripe.refunds.create(params={"charge": charge.id, "amount": 1})
        self.assertEqual(raised.exception.code, "amount_too_large")
        intent = self.stripe.payment_intents.create(params=intent_params())
        by_intent = self.stripe.refunds.create(params={"payment_intent": intent.id})
        self.assertEqual((by_intent.amount, by_intent.payment_intent), (5000, intent.id))
        with self.assertRaises(stripe.InvalidRequestError) as missing:
            self.stripe.refunds.create(params={"charge": "ch_404"})
        self.assertEqual(missing.exception.code, "resource_missing")
        kinds = [e["kind"] for e in ledger()]
        self.assertEqual(kinds, ["charge_created", "refund_created", "refund_created", "charge_created", "refund_created"])

    def test_the_sdk_own_keys_do_not_dedupe_two_creates(self):
        # Without a key given, the SDK sends a fresh one of its own with each POST.
        self.stripe.payment_intents.create(params=intent_params())
        self.stripe.payment_intents.create(params=intent_params())
        effects = ledger()
        self.assertEqual(len(effects), 2)
        self.assertNotEqual(effects[0]["idempotency_key"], effects[1]["idempotency_key"])
        self.assertTrue(all(e["idempotency_key"] for e in effects), "the SDK sent a key of its own")

    def test_an_error_after_the_commit_is_an_api_error_in_stripe_envelope(self):
        admin("POST", "/__admin/faults", {"match": {"path": "/v1/charges"}, "action": "commit_then_error",
                                          "status": 500, "times": 1})
        with self.assertRaises(stripe.APIError) as raised:
            self.stripe.charges.create(params={"amount": 100, "currency": "eur", "source": "tok_visa"})
        self.assertEqual(raised.exception.http_status, 500)
        self.assertEqual(len(ledger()), 1, "committed, then the error")


if __name__ == "__main__":
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(StripeTwin))
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
