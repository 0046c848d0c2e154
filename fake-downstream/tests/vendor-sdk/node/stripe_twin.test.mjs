// The Stripe twin (docs/vendors.md) driven by Stripe's official Node SDK as its client: every
// route and every error, each error as the SDK's typed error class; the ledger through the admin
// API (fetch: the harness's, not a Stripe client). Run with STRIPE_TWIN_URL set
// (harness/tests/it/vendor_sdk.rs does): `node --test stripe_twin.test.mjs`.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import Stripe from 'stripe';

const url = new URL(process.env.STRIPE_TWIN_URL);
const client = (tenant = 'acme', maxNetworkRetries = 0) =>
  new Stripe(`sk_test_${tenant}`, { host: url.hostname, port: Number(url.port), protocol: 'http', maxNetworkRetries });
const admin = async (method, path, body) => {
  const answer = await fetch(new URL(path, url), {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await answer.text();
  return text ? JSON.parse(text) : null;
};
const ledger = () => admin('GET', '/__admin/ledger');
const intent = (changes = {}) => ({
  amount: 5000, currency: 'eur', customer: 'cus_42', confirm: true,
  payment_method: 'pm_card_visa', metadata: { order: '1182' }, ...changes,
});
const stripe = client();

beforeEach(() => admin('POST', '/__admin/reset'));

test('a confirmed payment intent charges once and reads back', async () => {
  const made = await stripe.paymentIntents.create(intent());
  assert.match(made.id, /^pi_/);
  assert.equal(made.status, 'succeeded');
  assert.match(made.latest_charge, /^ch_/);
  assert.match(made.lastResponse.requestId, /^req_/);
  assert.equal((await stripe.paymentIntents.retrieve(made.id)).id, made.id);
  assert.equal((await stripe.charges.retrieve(made.latest_charge)).payment_intent, made.id);
  assert.deepEqual((await ledger()).map((e) => [e.kind, e.effect_reference]), [['charge_created', made.id]]);
});

test('the same key and parameters replay the first answer', async () => {
  const first = await stripe.paymentIntents.create(intent(), { idempotencyKey: 'order-1182' });
  const again = await stripe.paymentIntents.create(intent(), { idempotencyKey: 'order-1182' });
  assert.equal(again.id, first.id);
  assert.equal(again.lastResponse.headers['idempotent-replayed'], 'true');
  assert.equal((await ledger()).length, 1);
});

test('other parameters under a key are a StripeIdempotencyError', async () => {
  await stripe.paymentIntents.create(intent(), { idempotencyKey: 'k' });
  await assert.rejects(stripe.paymentIntents.create(intent({ amount: 5100 }), { idempotencyKey: 'k' }), (error) => {
    assert.ok(error instanceof Stripe.errors.StripeIdempotencyError, error.type);
    assert.equal(error.statusCode, 400);
    return true;
  });
  assert.equal((await ledger()).length, 1);
});

test('a key in flight is a 409 StripeAPIError', async () => {
  const rule = await admin('POST', '/__admin/faults', { match: { path: '/v1/payment_intents' }, action: 'hold', times: 1 });
  const first = stripe.paymentIntents.create(intent(), { idempotencyKey: 'busy' });
  const deadline = Date.now() + 30_000;
  while (!(await admin('GET', '/__admin/faults')).some((r) => r.id === rule.id && r.fired)) {
    assert.ok(Date.now() < deadline, 'the first request never reached the hold');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  try {
    await assert.rejects(stripe.paymentIntents.create(intent(), { idempotencyKey: 'busy' }), (error) => {
      assert.ok(error instanceof Stripe.errors.StripeAPIError, error.type);
      assert.equal(error.statusCode, 409);
      assert.equal(error.code, 'idempotency_key_in_use');
      return true;
    });
  } finally {
    await admin('POST', `/__admin/faults/${rule.id}/release`);
  }
  const made = await first;
  const replay = await client('acme', 2).paymentIntents.create(intent(), { idempotencyKey: 'busy' });
  assert.equal(replay.id, made.id);
  assert.equal((await ledger()).length, 1);
});

test('a decline is a StripeCardError, replayed under its key', async () => {
  const declined = intent({ payment_method: 'pm_card_chargeDeclined' });
  for (const attempt of [1, 2]) {
    await assert.rejects(stripe.paymentIntents.create(declined, { idempotencyKey: 'no' }), (error) => {
      assert.ok(error instanceof Stripe.errors.StripeCardError, error.type);
      assert.equal(error.code, 'card_declined');
      assert.equal(error.decline_code, 'generic_decline');
      assert.equal(error.headers['idempotent-replayed'], attempt === 2 ? 'true' : undefined);
      return true;
    });
  }
  await assert.rejects(stripe.charges.create({ amount: 100, currency: 'eur', source: 'tok_chargeDeclined' }), Stripe.errors.StripeCardError);
  assert.deepEqual(await ledger(), []);
});

test('bad parameters and missing objects are StripeInvalidRequestErrors naming them', async () => {
  const cases = [
    [{ amount: 1, currency: 'eur', colour: 'red' }, 'parameter_unknown', 'colour'],
    [{ amount: 'ten', currency: 'eur' }, 'parameter_invalid_integer', 'amount'],
    [{ currency: 'eur' }, 'parameter_missing', 'amount'],
  ];
  for (const [params, code, param] of cases) {
    await assert.rejects(stripe.paymentIntents.create(params), (error) => {
      assert.ok(error instanceof Stripe.errors.StripeInvalidRequestError, error.type);
      assert.deepEqual([error.statusCode, error.code, error.param], [400, code, param]);
      return true;
    });
  }
  for (const read of [() => stripe.paymentIntents.retrieve('pi_9'), () => stripe.charges.retrieve('ch_9'), () => stripe.refunds.retrieve('re_9')]) {
    await assert.rejects(read(), (error) => {
      assert.ok(error instanceof Stripe.errors.StripeInvalidRequestError, error.type);
      assert.deepEqual([error.statusCode, error.code], [404, 'resource_missing']);
      return true;
    });
  }
  assert.deepEqual(await ledger(), []);
});

test('a live key is a StripeAuthenticationError', async () => {
  const live = new Stripe('sk_live_0123456789abcdef', { host: url.hostname, port: Number(url.port), protocol: 'http', maxNetworkRetries: 0 });
  await assert.rejects(live.charges.create({ amount: 1, currency: 'eur', source: 'tok_visa' }), (error) => {
    assert.ok(error instanceof Stripe.errors.StripeAuthenticationError, error.type);
    assert.equal(error.statusCode, 401);
    return true;
  });
  assert.deepEqual(await ledger(), []);
});

test('search finds by metadata, customer and amount, per tenant', async () => {
  const first = await stripe.paymentIntents.create(intent());
  const second = await stripe.paymentIntents.create(intent({ amount: 900, metadata: { order: '1183' } }));
  const found = await stripe.paymentIntents.search({ query: "metadata['order']:'1182'" });
  assert.deepEqual(found.data.map((i) => i.id), [first.id]);
  const both = await stripe.paymentIntents.search({ query: "customer:'cus_42' AND amount>500" });
  assert.deepEqual(both.data.map((i) => i.id), [second.id, first.id]);
  assert.deepEqual((await client('globex').paymentIntents.search({ query: "customer:'cus_42'" })).data, []);
  await assert.rejects(stripe.paymentIntents.search({ query: "colour:'red'" }), (error) => error.param === 'query');
});

test('charges and refunds', async () => {
  const charge = await stripe.charges.create({ amount: 700, currency: 'usd', source: 'tok_visa' });
  assert.equal(charge.object, 'charge');
  const part = await stripe.refunds.create({ charge: charge.id, amount: 200 });
  assert.deepEqual([part.object, part.amount, part.charge], ['refund', 200, charge.id]);
  assert.equal((await stripe.refunds.retrieve(part.id)).amount, 200);
  await assert.rejects(stripe.refunds.create({ charge: charge.id, amount: 600 }), (error) => error.code === 'amount_too_large');
  const made = await stripe.paymentIntents.create(intent());
  assert.equal((await stripe.refunds.create({ payment_intent: made.id })).amount, 5000);
  assert.deepEqual((await ledger()).map((e) => e.kind), ['charge_created', 'refund_created', 'charge_created', 'refund_created']);
});

test("the SDK's own keys do not dedupe two creates", async () => {
  await stripe.paymentIntents.create(intent());
  await stripe.paymentIntents.create(intent());
  const effects = await ledger();
  assert.equal(effects.length, 2);
  assert.notEqual(effects[0].idempotency_key, effects[1].idempotency_key);
});

test('an error after the commit is a StripeAPIError in Stripe envelope', async () => {
  await admin('POST', '/__admin/faults', { match: { path: '/v1/charges' }, action: 'commit_then_error', status: 500, times: 1 });
  await assert.rejects(stripe.charges.create({ amount: 100, currency: 'eur', source: 'tok_visa' }), (error) => {
    assert.ok(error instanceof Stripe.errors.StripeAPIError, error.type);
    assert.equal(error.statusCode, 500);
    return true;
  });
  assert.equal((await ledger()).length, 1);
});
