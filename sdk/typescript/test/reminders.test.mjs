// Durable reminders (onReminder, ctx.reminders, client.setReminder/deleteReminder/listReminders)
// against the real sigx-sidecar on SQLite state: a one-shot activates its actor and is gone, a
// periodic one ticks by its period until deleted, a failed delivery comes back as attempt 2, an
// actor sets its own reminder from a turn, and bad input is INVALID with the sidecar's reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { defineActor, defineActorApp, defineWorker, Dispatcher, InvalidError, StaleEpochError } from '../dist/index.js';
import { until, withServedApp } from './sdk-harness.mjs';

/** Every delivery the handler saw: { key, reminder, ranAt }. */
const seen = [];
const activated = [];
const Alarm = defineActor('Alarm', {
  onActivate(ctx) { activated.push(ctx.key); },
  onReminder(ctx, reminder) {
    seen.push({ key: ctx.key, reminder, ranAt: Date.now() });
    if (reminder.payload === 'fail-once' && reminder.attempt === 1) throw new Error('failing the first delivery on purpose');
    ctx.storage.put('last', reminder.name);
  },
  methods: {
    async arm(ctx, payload) {
      const due = await ctx.reminders.set('self', { inMs: 100, payload });
      return due.getTime();
    },
    async last(ctx) { return (await ctx.storage.get('last')) ?? ''; },
  },
});
/** `ctx.reminders` of each Lapse activation, kept past its end: { epoch, reminders }. */
const kept = [];
const lapsed = [];
// Deactivates 400 ms after its last call, so the next call gets a newer activation (and epoch).
const Lapse = defineActor('Lapse', {
  idleTimeoutMs: 400,
  onDeactivate(ctx, reason) { lapsed.push({ epoch: ctx.epoch, reason }); },
  methods: {
    async keep(ctx) {
      kept.push({ epoch: ctx.epoch, reminders: ctx.reminders });
      await ctx.reminders.set('mine', { inMs: 3_600_000 });
      return ctx.epoch.toString();
    },
  },
});
const Mute = defineActor('Mute', { methods: { ping() { return 'pong'; } } });
const Pool = defineWorker('Pool', { methods: { ping() { return 'pong'; } } });
const app = defineActorApp({ actors: [Alarm, Lapse, Mute, Pool], name: 'ts-reminders-test' });

const of = (key) => seen.filter((s) => s.key === key).map((s) => s.reminder);

const waitFor = (what, check, timeoutMs) => until(what, check, { timeoutMs, seen });

async function settled(reminders) {
  const deadline = Date.now() + 5_000;
  while ((await reminders.list()).length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return reminders.list();
}

function withSidecar(body) {
  seen.length = 0;
  activated.length = 0;
  return withServedApp(app, {
    prefix: 'sigx-noder-',
    env: (dir) => ({ SIGX_STATE: 'sqlite', SIGX_STATE_PATH: join(dir, 'state.db') }),
  }, body);
}

test('a one-shot reminder set from a client activates the actor, runs once, and is gone', () => withSidecar(async (client) => {
  const alarm = client.reminders(Alarm, 'one');
  const before = Date.now();
  const due = await alarm.set('wake', { inMs: 300, payload: { hello: 'world' } });
  const after = Date.now();
  assert.ok(due instanceof Date);
  // Relative to the sidecar's clock (the same machine's here).
  assert.ok(due.getTime() >= before + 300 - 200 && due.getTime() <= after + 300 + 200, `${due.toISOString()} not ~300 ms after ${before}`);
  const listed = await alarm.list();
  assert.deepEqual(listed.map((i) => [i.name, i.due.getTime(), i.periodMs, i.payload, i.failedAttempts]), [['wake', due.getTime(), 0, { hello: 'world' }, 0]]);
  await waitFor('the one-shot delivery', () => of('one').length > 0);
  assert.deepEqual(activated, ['one'], 'the reminder activated the actor (nothing else called it)');
  const [r] = of('one');
  assert.deepEqual([r.name, r.payload, r.due.getTime(), r.periodMs, r.attempt], ['wake', { hello: 'world' }, due.getTime(), 0, 1]);
  assert.ok(seen[0].ranAt >= due.getTime() - 5, `ran at ${seen[0].ranAt}, due ${due.getTime()}`);
  assert.deepEqual(await settled(alarm), []);
  assert.equal(await client.call('Alarm', 'one', 'last'), 'wake', "the reminder turn's storage write committed");
  assert.equal(of('one').length, 1, 'a one-shot reminder fires once');
}));

test('a periodic reminder ticks by its period and stops when deleted', () => withSidecar(async (client) => {
  const periodMs = 300;
  const first = await client.setReminder('Alarm', 'tick', 'tick', { at: new Date(), periodMs, payload: 'p' });
  await waitFor('three ticks', () => of('tick').length >= 3);
  assert.equal(await client.deleteReminder('Alarm', 'tick', 'tick'), true);
  const ticks = of('tick');
  assert.equal(ticks[0].due.getTime(), first.getTime());
  for (let i = 1; i < ticks.length; i++) {
    const gap = ticks[i].due.getTime() - ticks[i - 1].due.getTime();
    assert.ok(gap > 0 && gap % periodMs === 0, `due times ${ticks[i - 1].due.getTime()} -> ${ticks[i].due.getTime()}`);
  }
  for (const t of ticks) assert.deepEqual([t.name, t.payload, t.periodMs, t.attempt], ['tick', 'p', periodMs, 1]);
  assert.deepEqual(await client.listReminders('Alarm', 'tick'), []);
  const afterDelete = of('tick').length;
  await new Promise((r) => setTimeout(r, 4 * periodMs));
  // One delivery may already have been in flight when the delete landed.
  assert.ok(of('tick').length <= afterDelete + 1, `${of('tick').length} ticks after delete (had ${afterDelete})`);
  assert.equal(await client.deleteReminder('Alarm', 'tick', 'tick'), false);
}));

test('a handler that throws sees attempt 2 of the same occurrence', () => withSidecar(async (client) => {
  const alarm = client.reminders('Alarm', 'retry');
  const due = await alarm.set('flaky', { inMs: 0, payload: 'fail-once' });
  await waitFor('the retry', () => of('retry').length >= 2);
  const [a, b] = of('retry');
  assert.deepEqual([a.attempt, b.attempt], [1, 2]);
  assert.equal(a.due.getTime(), due.getTime());
  assert.equal(b.due.getTime(), due.getTime(), 'a retry keeps the occurrence\'s due time');
  assert.deepEqual(await settled(alarm), []);
  assert.equal(of('retry').length, 2, 'the ok second attempt settled it');
}));

test('an actor sets its own reminder from inside a turn (ctx.reminders)', () => withSidecar(async (client) => {
  const dueMs = await client.actor(Alarm, 'me').arm('from-myself');
  await waitFor('the self-set reminder', () => of('me').length > 0);
  const [r] = of('me');
  assert.deepEqual([r.name, r.payload, r.attempt, r.due.getTime()], ['self', 'from-myself', 1, dueMs]);
}));

test('ctx.reminders carries its activation\'s epoch: once a newer activation exists its changes are refused', () => withSidecar(async (client) => {
  kept.length = 0;
  lapsed.length = 0;
  const first = BigInt(await client.call('Lapse', 'l', 'keep'));
  await waitFor('the idle deactivation', () => lapsed.length > 0, 5_000);
  assert.deepEqual(lapsed, [{ epoch: first, reason: 'idle' }]);
  const second = BigInt(await client.call('Lapse', 'l', 'keep'));
  assert.ok(second > first, `epochs ${first} then ${second}`);
  const [old, current] = kept;
  assert.deepEqual([old.epoch, old.reminders.epoch, current.reminders.epoch], [first, first, second]);
  // The first activation's handle is stale: the store refuses its set and delete, nothing changes.
  await assert.rejects(old.reminders.set('late', { inMs: 3_600_000 }),
    (e) => e instanceof StaleEpochError && e.kind === 'stale-epoch');
  await assert.rejects(old.reminders.delete('mine'), (e) => e instanceof StaleEpochError);
  await assert.rejects(client.setReminder('Lapse', 'l', 'late', { inMs: 1000 }, { epoch: first }), StaleEpochError);
  assert.deepEqual((await client.reminders(Lapse, 'l').list()).map((r) => r.name), ['mine']);
  // The current activation's handle, and a client's unfenced one, still work.
  assert.equal(await current.reminders.delete('mine'), true);
  assert.ok((await client.reminders(Lapse, 'l').set('outside', { inMs: 3_600_000 })) instanceof Date);
  assert.deepEqual((await client.reminders(Lapse, 'l').list()).map((r) => r.name), ['outside']);
}));

test('bad input is InvalidError with the sidecar\'s reason', () => withSidecar(async (client) => {
  const alarm = client.reminders(Alarm, 'bad');
  await assert.rejects(alarm.set('fast', { inMs: 1000, periodMs: 50 }),
    (e) => e instanceof InvalidError && /period of 50 ms, under the minimum of 100 ms/.test(e.message));
  await assert.rejects(alarm.set('', { inMs: 1000 }),
    (e) => e instanceof InvalidError && e.message.includes('a reminder name must be 1..=256 bytes (got 0 bytes)'));
  await assert.rejects(client.setReminder('Pool', 'k', 'x', { inMs: 1000 }),
    (e) => e instanceof InvalidError && e.message.includes('workers have no reminders'));
  await assert.rejects(alarm.set('x', {}), (e) => e instanceof TypeError && e.message.includes('give exactly one of { at }'));
  assert.deepEqual(await alarm.list(), []);
}));

test('a type without onReminder and a worker answer INVALID', async () => {
  const d = new Dispatcher([Mute, Pool]);
  const turn = (turnId, actorType, kind) => ({
    turnId, actor: { actorType, key: 'k' }, activationId: 'act-1', notAfterUnixMs: '0', epoch: '1', kind,
    reminder: { name: 'nag', payload: new Uint8Array(0), dueUnixMs: '5', periodMs: '0', attempt: 1 },
  });
  assert.ok((await d.handle(turn('1', 'Mute', 'activate'))).ok);
  const r = await d.handle(turn('2', 'Mute', 'reminder'));
  assert.equal(r.error.kind, 'ERROR_KIND_INVALID');
  assert.match(r.error.message, /^Mute has no reminder handler, but reminder "nag" came due; add onReminder/);
  const w = await d.handle(turn('3', 'Pool', 'reminder'));
  assert.deepEqual(w.error, { kind: 'ERROR_KIND_INVALID', message: 'Pool is a worker type: workers have no reminders' });
});
