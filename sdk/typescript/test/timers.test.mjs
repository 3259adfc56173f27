// Per-activation timers (onTimer, ctx.timers.set/cancel) against the real sigx-sidecar: a
// one-shot ticks once with its payload, a periodic one ticks by its period until cancelled, a
// timer is gone once its activation deactivates at idle, and bad input, a worker and a type
// without onTimer are INVALID.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineActor, defineActorApp, defineWorker, Dispatcher, InvalidError } from '../dist/index.js';
import { until, withServedApp } from './sdk-harness.mjs';

/** Every tick a handler saw: { key, activationId, tick }. */
const ticks = [];
/** Every deactivation: { key, activationId, ticksThen }. */
const deactivated = [];
const methods = {
  async once(ctx, payload) {
    const replaced = await ctx.timers.set('once', { afterMs: 100, payload });
    return replaced ? 'replaced' : ctx.activationId;
  },
  async every(ctx, periodMs) {
    await ctx.timers.set('beat', { periodMs, payload: 'p' });
    return ctx.activationId;
  },
  stop(ctx, name) { return ctx.timers.cancel(name); },
  async bad(ctx, kind) {
    if (kind === 'name') await ctx.timers.set('', { afterMs: 1000 });
    if (kind === 'delay') await ctx.timers.set('far', { afterMs: 400 * 24 * 3600 * 1000 });
    return 'set';
  },
};
const onTimer = (ctx, tick) => { ticks.push({ key: ctx.key, activationId: ctx.activationId, tick }); };
const Beeper = defineActor('Beeper', { onTimer, methods });
// Deactivates 600 ms after its last call: ticks do not keep it alive.
const Brief = defineActor('Brief', {
  onTimer, methods, idleTimeoutMs: 600,
  onDeactivate(ctx) { deactivated.push({ key: ctx.key, activationId: ctx.activationId, ticksThen: ticks.length }); },
});
const Deaf = defineActor('Deaf', { methods: { async arm(ctx) { await ctx.timers.set('unheard'); return 'armed'; } } });
const Crew = defineWorker('Crew', { methods: { ping() { return 'pong'; } } });
const app = defineActorApp({ actors: [Beeper, Brief, Deaf, Crew], name: 'ts-timers-test' });

const of = (key) => ticks.filter((t) => t.key === key).map((t) => t.tick);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const waitFor = (what, check, timeoutMs) => until(what, check, { timeoutMs, seen: ticks, everyMs: 10 });

function withSidecar(body) {
  ticks.length = 0;
  deactivated.length = 0;
  return withServedApp(app, { prefix: 'sigx-nodet-' }, body);
}

test('a one-shot timer set inside a turn ticks once with its payload', () => withSidecar(async (client) => {
  const act = await client.call('Beeper', 'one', 'once', { hello: 'world' });
  await waitFor('the one tick', () => of('one').length > 0);
  assert.equal(ticks.length, 1);
  const [{ key, activationId, tick }] = ticks;
  assert.deepEqual([key, activationId], ['one', act], 'a tick is a turn of the activation that set it');
  assert.deepEqual([tick.name, tick.payload, tick.periodMs, tick.skipped], ['once', { hello: 'world' }, 0, 0]);
  assert.ok(tick.due instanceof Date && tick.due.getTime() > 0);
  // Gone after its tick: cancelling finds nothing, and no second tick comes.
  assert.equal(await client.call('Beeper', 'one', 'stop', 'once'), false);
  await sleep(300);
  assert.equal(of('one').length, 1, JSON.stringify(ticks));
}));

test('a periodic timer ticks by its period and stops when cancelled', () => withSidecar(async (client) => {
  await client.call('Beeper', 'p', 'every', 50);
  await waitFor('three ticks', () => of('p').length >= 3);
  assert.equal(await client.call('Beeper', 'p', 'stop', 'beat'), true);
  // The cancel ran in a turn of the (non-reentrant) activation, so no tick was running.
  const seen = of('p');
  const stopped = seen.length;
  assert.ok(seen.every((t) => t.name === 'beat' && t.payload === 'p' && t.periodMs === 50), JSON.stringify(seen));
  for (let i = 1; i < seen.length; i++) {
    // Due times keep the rhythm (within the ms rounding of the sidecar's clock readings).
    const gap = seen[i].due.getTime() - seen[i - 1].due.getTime();
    assert.ok(Math.abs(gap - 50 * (seen[i].skipped + 1)) <= 2, `gap ${gap} ms, skipped ${seen[i].skipped}`);
  }
  await sleep(300);
  assert.equal(of('p').length, stopped, 'a tick came after ctx.timers.cancel returned');
  assert.equal(await client.call('Beeper', 'p', 'stop', 'beat'), false);
}));

test('a timer is gone once its activation deactivates', () => withSidecar(async (client) => {
  const first = await client.call('Brief', 'b', 'every', 40);
  await waitFor('the idle deactivation', () => deactivated.length > 0, 15_000);
  const [{ key, activationId, ticksThen }] = deactivated;
  assert.deepEqual([key, activationId], ['b', first]);
  assert.ok(ticksThen >= 3, `it ticked while alive: ${ticksThen}`);
  await sleep(400);
  assert.equal(of('b').length, ticksThen, 'a tick ran after the activation deactivated');
  // A new activation starts with no timers.
  assert.equal(await client.call('Brief', 'b', 'stop', 'beat'), false);
  assert.deepEqual([...new Set(ticks.filter((t) => t.key === 'b').map((t) => t.activationId))], [first]);
}));

test('bad input, a worker and a type without onTimer are INVALID', () => withSidecar(async (client) => {
  await assert.rejects(client.call('Beeper', 'bad', 'bad', 'name'),
    (e) => e instanceof InvalidError && e.message.includes('timer name of 0 bytes: names are 1..=256 bytes'));
  await assert.rejects(client.call('Beeper', 'bad', 'bad', 'delay'),
    (e) => e instanceof InvalidError && /timer due_ms of 34560000000 ms exceeds .*use a reminder/.test(e.message));
  // A worker has no activation: its ctx has no `timers` (a type error), and the RPC refuses one.
  await assert.rejects(client.setTimer('Crew', 'w', '', 'x', { afterMs: 10 }),
    (e) => e instanceof InvalidError && e.message.includes('no live activation ""'));
  assert.equal(await client.call('Deaf', 'd', 'arm'), 'armed');
  const failures = async () => Number((await client.status()).counters?.timerFailures ?? 0);
  const deadline = Date.now() + 10_000;
  while ((await failures()) < 1) {
    assert.ok(Date.now() < deadline, 'the unhandled tick was not counted as failed');
    await sleep(20);
  }
  assert.deepEqual(ticks, []);
}));

test('a type without onTimer and a worker answer timer turns INVALID', async () => {
  const d = new Dispatcher([Deaf, Crew, Beeper]);
  const turn = (turnId, actorType, kind) => ({
    turnId, actor: { actorType, key: 'k' }, activationId: 'act-1', notAfterUnixMs: '0', epoch: '1', kind,
    timer: { name: 'beat', payload: new Uint8Array(0), periodMs: '10', dueUnixMs: '5', skipped: '0' },
  });
  assert.ok((await d.handle(turn('1', 'Deaf', 'activate'))).ok);
  const r = await d.handle(turn('2', 'Deaf', 'timer'));
  assert.equal(r.error.kind, 'ERROR_KIND_INVALID');
  assert.match(r.error.message, /^Deaf has no timer handler, but timer "beat" ticked; add onTimer\(ctx, tick\)/);
  const w = await d.handle(turn('3', 'Crew', 'timer'));
  assert.deepEqual(w.error, { kind: 'ERROR_KIND_INVALID', message: 'Crew is a worker type: workers have no timers' });
  ticks.length = 0;
  assert.ok((await d.handle(turn('4', 'Beeper', 'activate'))).ok);
  assert.ok((await d.handle(turn('5', 'Beeper', 'timer'))).ok);
  assert.deepEqual(ticks.map((t) => [t.key, t.activationId, t.tick.name, t.tick.periodMs, t.tick.due.getTime()]), [['k', 'act-1', 'beat', 10, 5]]);
});
