// The SDK against the real sigx-sidecar (--membership none --insecure): serve + call, one turn
// at a time, typed errors, not-after cancellation via a short call timeout, SIGTERM of the
// sidecar ending serve cleanly, and reconnecting to a restarted sidecar.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AppError, Client, defineActor, defineActorApp, defineWorker, InvalidError, OutcomeUnknownError,
  TimeoutError, UnreachableError, ActorError,
} from '../dist/index.js';
import { startSidecar, stopSidecar } from './harness.mjs';

let inside = 0;
let maxInside = 0;
let aborted = 0;
const Counter = defineActor('Counter', {
  state: () => ({ count: 0 }),
  methods: {
    incr(ctx, by) { return (ctx.state.count += by); },
    async slowIncr(ctx) {
      inside++; maxInside = Math.max(maxInside, inside);
      await sleep(5);
      inside--;
      return ++ctx.state.count;
    },
    fail() { throw new Error('asked to fail'); },
    hang(ctx) {
      return new Promise((_, no) => ctx.signal.addEventListener('abort', () => { aborted++; no(ctx.signal.reason); }));
    },
  },
});
const Echo = defineWorker('Echo', { methods: { echo(_ctx, x) { return x; } }, maxConcurrency: 4 });
const app = defineActorApp({ actors: [Counter, Echo], name: 'ts-sdk-test' });

async function serving(sidecar, extra = {}) {
  let registeredOnce;
  const registered = new Promise((r) => (registeredOnce = r));
  const registrations = [];
  const done = app.serve({
    target: sidecar.target, handleSignals: false,
    onRegistered: (i) => { registrations.push(i); registeredOnce(i); }, ...extra,
  });
  await registered;
  return { done, registrations };
}

test('serve + call, turn-based, typed errors, not-after honoured for cancellation', async (t) => {
  const sidecar = await startSidecar();
  const drain = new AbortController();
  const { done } = await serving(sidecar, { signal: drain.signal });
  const client = new Client({ target: sidecar.target });
  t.after(async () => { client.close(); drain.abort(); await done.catch(() => {}); await stopSidecar(sidecar); });

  const c = client.actor(Counter, 'a');
  assert.equal(await c.incr(2), 2);
  assert.equal(await c.incr(3), 5);
  assert.deepEqual(await client.worker(Echo).echo({ hi: [1, 2] }), { hi: [1, 2] });

  const all = await Promise.all(Array.from({ length: 20 }, () => client.actor(Counter, 'b').slowIncr()));
  assert.deepEqual([...all].sort((x, y) => x - y), Array.from({ length: 20 }, (_, i) => i + 1));
  assert.equal(maxInside, 1, 'concurrent calls to one actor never overlap in the handler');

  await assert.rejects(c.fail(), (e) => e instanceof AppError && e instanceof ActorError && e.kind === 'app' && e.message === 'asked to fail');
  await assert.rejects(client.call('NoSuchType', 'k', 'x'), (e) => e instanceof ActorError && e.kind !== 'outcome-unknown' && !(e instanceof OutcomeUnknownError));
  await assert.rejects(client.call('Counter', 'a', 'no-such-method'), InvalidError);

  const started = Date.now();
  await assert.rejects(c.hang(undefined, { timeoutMs: 300 }), TimeoutError);
  assert.ok(Date.now() - started < 5_000);
  for (let i = 0; i < 100 && aborted === 0; i++) await sleep(20);
  assert.equal(aborted, 1, 'the handler was cancelled at its not-after');
  assert.equal(await c.incr(1), 6, 'the activation serves on after a cancelled turn');

  const { hosts } = await client.members({ registers: 'Echo' });
  assert.deepEqual(hosts.map((h) => h.id), ['node-host']);
  assert.deepEqual(await client.workerOn(hosts[0], Echo).echo('on'), 'on');
  const watch = new AbortController();
  for await (const v of client.watchMembers({}, { signal: watch.signal })) {
    assert.ok(v.hosts.length >= 1);
    watch.abort();
  }
});

test('a dead socket is unreachable (never ran), not outcome-unknown', async () => {
  const client = new Client({ target: 'unix:///nonexistent/sigx.sock' });
  await assert.rejects(client.call('Counter', 'a', 'incr', 1, { timeoutMs: 1000 }), UnreachableError);
  client.close();
});

test('SIGTERM of the sidecar drains the app and ends serve cleanly', async () => {
  const sidecar = await startSidecar();
  const { done } = await serving(sidecar);
  const client = new Client({ target: sidecar.target });
  assert.equal(await client.actor(Counter, 'z').incr(1), 1);
  client.close();
  sidecar.child.kill('SIGTERM');
  await done; // resolves (stopping), does not reject (crashed)
  const exit = await sidecar.exited;
  assert.equal(exit.code, 0, `sidecar exit ${JSON.stringify(exit)}`);
  await stopSidecar(sidecar);
});

test('a restarted sidecar: the app reconnects, registers again and serves', async (t) => {
  const first = await startSidecar();
  const drain = new AbortController();
  const disconnects = [];
  const { done, registrations } = await serving(first, { signal: drain.signal, onDisconnect: (why) => disconnects.push(why) });
  const c1 = new Client({ target: first.target });
  assert.equal(await c1.actor(Counter, 'r').incr(1), 1);
  c1.close();
  first.child.kill('SIGKILL');
  await first.exited;
  const second = await startSidecar({ socket: first.socket });
  t.after(async () => { drain.abort(); await done; await stopSidecar(second); });
  for (let i = 0; i < 200 && registrations.length < 2; i++) await sleep(50);
  assert.equal(registrations.length, 2, `registered again after the restart (disconnects: ${disconnects})`);
  assert.ok(disconnects.length >= 1);
  const c2 = new Client({ target: second.target });
  assert.equal(await c2.actor(Counter, 'r').incr(1), 1, 'a fresh activation on the new sidecar');
  c2.close();
});

test('a sidecar killed with a call in flight: the call is outcome-unknown, not an actor error kind', async () => {
  const sidecar = await startSidecar();
  const drain = new AbortController();
  const { done } = await serving(sidecar, { signal: drain.signal });
  const client = new Client({ target: sidecar.target });
  const before = aborted;
  const inflight = client.actor(Counter, 'h').hang(undefined, { timeoutMs: 20_000 });
  for (let i = 0; i < 100; i++) { await sleep(20); if ((await client.status()).activations.length) break; }
  sidecar.child.kill('SIGKILL');
  await assert.rejects(inflight, OutcomeUnknownError);
  for (let i = 0; i < 100 && aborted === before; i++) await sleep(20);
  assert.equal(aborted, before + 1, 'the broken stream cancelled the running handler');
  client.close();
  drain.abort();
  await stopSidecar(sidecar);
  await done; // asked to stop with no sidecar left: serve ends instead of reconnecting forever
});
