// The W3C trace context through the TypeScript SDK, against a real sigx-sidecar (export off, so
// the sidecar passes the caller's context through unchanged): a turn exposes its trace as
// `ctx.trace`, and a call made while the turn runs (awaited, or started from a timer) carries it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { currentTrace, defineActor, defineActorApp } from '../dist/index.js';
import { withServedApp } from './sdk-harness.mjs';

const TRACE = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'sigx=ts' };
let client; // the test's client, used by the handlers: the trace comes from the turn, not from it

const seen = (ctx) => ({ turn: ctx.trace ?? null, ambient: currentTrace() ?? null });
const Relay = defineActor('Relay', {
  methods: {
    inner(ctx) { return seen(ctx); },
    async outer(ctx) {
      const key = `${ctx.key}-inner`;
      const direct = await client.call('Relay', key, 'inner');
      const fromTimer = await new Promise((resolve, reject) =>
        setTimeout(() => client.call('Relay', key, 'inner').then(resolve, reject), 1));
      return { ...seen(ctx), inner: [direct, fromTimer] };
    },
    async detached(ctx) {
      // The check can fail: a call told to carry no trace reaches an untraced turn.
      const inner = await client.call('Relay', `${ctx.key}-inner`, 'inner', undefined, { trace: null });
      return { ...seen(ctx), inner: [inner] };
    },
  },
});
const app = defineActorApp({ actors: [Relay], name: 'ts-trace-test' });

test('a turn exposes its trace and a call made from inside it carries it', async () => {
  await withServedApp(app, { prefix: 'sigx-nodet-' }, async (c) => {
    client = c;
    const want = { turn: TRACE, ambient: TRACE };
    const outer = await c.call('Relay', 'o', 'outer', undefined, { trace: TRACE });
    assert.deepEqual(outer, { ...want, inner: [want, want] });
    const detached = await c.call('Relay', 'd', 'detached', undefined, { trace: TRACE });
    assert.deepEqual(detached, { ...want, inner: [{ turn: null, ambient: null }] });
    assert.deepEqual(await c.call('Relay', 'p', 'inner'), { turn: null, ambient: null }, 'an untraced call');
  });
});
