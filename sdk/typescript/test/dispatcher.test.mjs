// The turn rules without a sidecar, on an injected clock: refusal past not-after, cancellation
// at not-after, the fence notice, one turn at a time, hooks and error kinds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Dispatcher, defineActor, defineWorker } from '../dist/index.js';

/** A clock whose `now` the test sets; timers fire when `advance` passes them. */
function fakeClock(start = 1_000_000) {
  let now = start;
  let timers = [];
  return {
    now: () => now,
    setTimer(ms, fn) {
      const t = { at: now + ms, fn };
      timers.push(t);
      return () => { timers = timers.filter((x) => x !== t); };
    },
    advance(ms) {
      now += ms;
      const due = timers.filter((t) => t.at <= now);
      timers = timers.filter((t) => t.at > now);
      for (const t of due) t.fn();
    },
  };
}

let seq = 0;
const turn = (kind, extra = {}) => ({
  turnId: String(++seq), actor: { actorType: 'Box', key: 'k' }, activationId: 'a1', notAfterUnixMs: '0', kind, ...extra,
});
const invoke = (method, arg, extra) => turn('invoke', { invoke: { method, payload: Buffer.from(arg === undefined ? '' : JSON.stringify(arg)) }, ...extra });
const json = (r) => JSON.parse(Buffer.from(r.ok).toString());

test('a turn read at or past its not-after is refused UNREACHABLE and runs no code', async () => {
  const clock = fakeClock();
  let ran = 0;
  const Box = defineActor('Box', { state: () => ({}), methods: { touch() { ran++; return 1; } } });
  const d = new Dispatcher([Box], clock);
  assert.ok((await d.handle(turn('activate'))).ok);
  const atEdge = await d.handle(invoke('touch', undefined, { notAfterUnixMs: String(clock.now()) }));
  assert.equal(atEdge.error?.kind, 'ERROR_KIND_UNREACHABLE');
  const past = await d.handle(invoke('touch', undefined, { notAfterUnixMs: String(clock.now() - 5) }));
  assert.equal(past.error?.kind, 'ERROR_KIND_UNREACHABLE');
  assert.match(past.error.message, /never ran/);
  assert.equal(ran, 0);
  const inTime = await d.handle(invoke('touch', undefined, { notAfterUnixMs: String(clock.now() + 1) }));
  assert.equal(json(inTime), 1);
});

test('a handler still running at not-after is aborted and answered TIMEOUT, never ok', async () => {
  const clock = fakeClock();
  let release;
  let sawAbort = false;
  const Box = defineActor('Box', {
    state: () => ({}),
    methods: {
      async slow(ctx) {
        ctx.signal.addEventListener('abort', () => (sawAbort = true));
        await new Promise((r) => (release = r));
        return 'late';
      },
    },
  });
  const d = new Dispatcher([Box], clock);
  await d.handle(turn('activate'));
  const pending = d.handle(invoke('slow', undefined, { notAfterUnixMs: String(clock.now() + 100) }));
  await new Promise((r) => setImmediate(r));
  clock.advance(99);
  assert.equal(d.runningCount, 1, 'still running before not-after');
  clock.advance(1);
  const r = await pending;
  assert.equal(r.error?.kind, 'ERROR_KIND_TIMEOUT');
  assert.equal(r.ok, undefined);
  assert.ok(sawAbort, 'the handler saw ctx.signal abort');
  release();
});

test('a turn past its boot-clock not-after is refused though the wall clock was stepped back', async () => {
  // Regression (issue 12, schedule S_wall_step_back_inside_a_suspend): queued before a 4 s VM
  // suspend, read at the resume after the wall clock was stepped back 30 s.
  const clock = fakeClock();
  let boot = 500_000;
  clock.boot = () => boot;
  let ran = 0;
  const Box = defineActor('Box', { state: () => ({}), methods: { touch() { ran++; return 1; } } });
  const d = new Dispatcher([Box], clock);
  assert.ok((await d.handle(turn('activate'))).ok);
  const queued = invoke('touch', undefined, { notAfterUnixMs: String(clock.now() + 1000), notAfterBootMs: String(boot + 1000) });
  clock.advance(4000 - 30_000);
  boot += 4000;
  const r = await d.handle(queued);
  assert.equal(r.error?.kind, 'ERROR_KIND_UNREACHABLE');
  assert.match(r.error.message, /boot clock/);
  assert.equal(ran, 0, 'no handler code ran');
  // Without a boot clock only the wall clock judges, and it was fooled: this is what the boot
  // clock is for.
  delete clock.boot;
  const bootless = new Dispatcher([Box], clock);
  assert.ok((await bootless.handle(turn('activate'))).ok);
  assert.ok((await bootless.handle({ ...queued, turnId: String(++seq) })).ok);
  assert.equal(ran, 1);
});

test('a handler still running at its boot-clock not-after is aborted though the wall bound is far', async () => {
  const clock = fakeClock();
  clock.boot = () => 500_000;
  let release;
  const Box = defineActor('Box', {
    state: () => ({}),
    methods: { async slow() { await new Promise((r) => (release = r)); return 'late'; } },
  });
  const d = new Dispatcher([Box], clock);
  await d.handle(turn('activate'));
  const pending = d.handle(invoke('slow', undefined, { notAfterUnixMs: String(clock.now() + 60_000), notAfterBootMs: '500100' }));
  await new Promise((r) => setImmediate(r));
  clock.advance(99);
  assert.equal(d.runningCount, 1, 'still running before the boot not-after');
  clock.advance(1);
  const r = await pending;
  assert.equal(r.error?.kind, 'ERROR_KIND_TIMEOUT');
  release();
});

test('the system boot clock reads CLOCK_BOOTTIME on Linux and never runs behind the monotonic clock', async () => {
  const { bootClockMs } = await import('../dist/dispatcher.js');
  const b0 = bootClockMs();
  if (process.platform !== 'linux') return assert.equal(b0, undefined);
  const m0 = performance.now();
  await new Promise((r) => setTimeout(r, 50));
  const m1 = performance.now();
  const b1 = bootClockMs();
  assert.ok(typeof b0 === 'number' && b0 > 0);
  // Hundredths of a second: allow the file's rounding on top of the monotonic advance.
  assert.ok(b1 - b0 >= m1 - m0 - 10, `boot advanced ${b1 - b0} ms, monotonic ${m1 - m0} ms`);
});

test('the fence notice cancels running turns (TIMEOUT) and drops activations without Deactivate', async () => {
  const clock = fakeClock();
  let deactivated = 0;
  const Box = defineActor('Box', {
    state: () => ({}),
    onDeactivate() { deactivated++; },
    methods: { hang(ctx) { return new Promise((_, no) => ctx.signal.addEventListener('abort', () => no(ctx.signal.reason))); } },
  });
  const d = new Dispatcher([Box], clock);
  await d.handle(turn('activate'));
  const pending = d.handle(invoke('hang'));
  await new Promise((r) => setImmediate(r));
  assert.equal(d.fence('suspect-wall'), 1);
  const r = await pending;
  assert.equal(r.error?.kind, 'ERROR_KIND_TIMEOUT');
  assert.equal(r.turnId, String(seq));
  assert.equal(d.activationCount, 0);
  assert.equal(deactivated, 0, 'no deactivation hook after a fence');
  const after = await d.handle(invoke('hang'));
  assert.equal(after.error?.kind, 'ERROR_KIND_INVALID', 'a dropped activation does not run');
});

test('turns of one non-reentrant activation never overlap, even when handed over at once', async () => {
  let inside = 0;
  let maxInside = 0;
  const Box = defineActor('Box', {
    state: () => ({ n: 0 }),
    methods: {
      async add(ctx, by) {
        inside++; maxInside = Math.max(maxInside, inside);
        await new Promise((r) => setTimeout(r, 2));
        ctx.state.n += by;
        inside--;
        return ctx.state.n;
      },
    },
  });
  const d = new Dispatcher([Box]);
  await d.handle(turn('activate'));
  const rs = await Promise.all(Array.from({ length: 10 }, () => d.handle(invoke('add', 1))));
  assert.deepEqual(rs.map(json), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  assert.equal(maxInside, 1);
});

test('hooks run with the state; errors answer APP or INVALID', async () => {
  const events = [];
  const Box = defineActor('Box', {
    state: () => ({ n: 0 }),
    onActivate(ctx) { ctx.state.n = 41; events.push('activate'); },
    onDeactivate(ctx, reason) { events.push(`deactivate ${reason} ${ctx.state.n}`); },
    methods: { get(ctx) { return ctx.state.n; }, boom() { throw new Error('asked to fail'); } },
  });
  const W = defineWorker('W', { methods: { echo(_ctx, x) { return x; } } });
  const d = new Dispatcher([Box, W]);
  await d.handle(turn('activate'));
  assert.equal(json(await d.handle(invoke('get'))), 41);
  assert.deepEqual((await d.handle(invoke('boom'))).error, { kind: 'ERROR_KIND_APP', message: 'asked to fail' });
  assert.equal((await d.handle(invoke('nope'))).error?.kind, 'ERROR_KIND_INVALID');
  assert.equal((await d.handle(turn('invoke', { invoke: { method: 'get', payload: Buffer.from('{x') } }))).error?.kind, 'ERROR_KIND_INVALID');
  await d.handle(turn('deactivate', { deactivate: { reason: 'DEACTIVATE_REASON_IDLE' } }));
  assert.deepEqual(events, ['activate', 'deactivate idle 41']);
  assert.equal(d.activationCount, 0);
  const w = await d.handle({ ...invoke('echo', { a: 1 }), actor: { actorType: 'W', key: '' }, activationId: '' });
  assert.deepEqual(json(w), { a: 1 });
});

test('a turn queued behind a running one does not run after a fence dropped its activation', async () => {
  let ran = 0;
  const Box = defineActor('Box', {
    state: () => ({}),
    methods: {
      hang(ctx) { return new Promise((_, no) => ctx.signal.addEventListener('abort', () => no(ctx.signal.reason))); },
      touch() { ran++; return 1; },
    },
  });
  const d = new Dispatcher([Box]);
  await d.handle(turn('activate'));
  const first = d.handle(invoke('hang'));
  const queued = d.handle(invoke('touch'));
  await new Promise((r) => setImmediate(r));
  d.fence('lost the lease');
  assert.equal((await first).error?.kind, 'ERROR_KIND_TIMEOUT');
  const q = await queued;
  assert.equal(q.ok, undefined);
  assert.equal(ran, 0, 'the queued turn never ran');
});

test('a reentrant type interleaves turns of one activation at await points', async () => {
  let inside = 0;
  let maxInside = 0;
  const Box = defineActor('Box', {
    state: () => ({}),
    reentrant: true,
    methods: { async wait() { inside++; maxInside = Math.max(maxInside, inside); await new Promise((r) => setTimeout(r, 5)); inside--; } },
  });
  const d = new Dispatcher([Box]);
  await d.handle(turn('activate'));
  await Promise.all([d.handle(invoke('wait')), d.handle(invoke('wait')), d.handle(invoke('wait'))]);
  assert.equal(maxInside, 3);
});
