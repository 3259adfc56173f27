// Durable state and epochs (ctx.storage, ctx.epoch) against the real sigx-sidecar on SQLite
// state: put then get in a later turn, read-your-writes, delete, list, a failed turn writes
// nothing, an over-limit value is named, and the value survives a sidecar restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError, defineActor, defineActorApp, Dispatcher, InvalidError } from '../dist/index.js';
import { withServedApp } from './sdk-harness.mjs';

const epochs = [];
// Keeps nothing in memory: every value it answers came from ctx.storage.
const Box = defineActor('Box', {
  onActivate(ctx) { epochs.push(ctx.epoch); },
  methods: {
    async put(ctx, { k, v }) {
      const before = await ctx.storage.get(k);
      ctx.storage.put(k, v);
      return { before: before ?? null, after: (await ctx.storage.get(k)) ?? null };
    },
    async get(ctx, k) { return (await ctx.storage.get(k)) ?? null; },
    async text(ctx, s) {
      ctx.storage.putText('t', s);
      ctx.storage.putBytes('b', Uint8Array.from([0, 255]));
      return `${await ctx.storage.getText('t')}|${Buffer.from(await ctx.storage.getBytes('b')).toString('hex')}`;
    },
    async del(ctx, k) { ctx.storage.delete(k); return (await ctx.storage.get(k)) ?? 'gone'; },
    async list(ctx) { return Object.fromEntries([...(await ctx.storage.list())].map(([k, v]) => [k, Buffer.from(v).toString()])); },
    putThenFail(ctx, k) { ctx.storage.put(k, 'from a failed turn'); throw new Error('failing after a put'); },
    set(ctx, v) { ctx.storage.putText('s', v); ctx.storage.delete('gone'); },
    big(ctx) { ctx.storage.putBytes('big', new Uint8Array(1024 * 1024 + 1)); return 'answered'; },
    epoch(ctx) { return ctx.epoch.toString(); },
  },
});
const app = defineActorApp({ actors: [Box], name: 'ts-state-test' });

function withSidecar(dir, name, body) {
  return withServedApp(app, {
    prefix: `sigx-nodes-${name}-`,
    env: () => ({ SIGX_STATE: 'sqlite', SIGX_STATE_PATH: join(dir, 'state.db') }),
  }, body);
}

function stateDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'sigx-nodes-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('put then get in a later turn, read-your-writes, text and bytes', async (t) => {
  await withSidecar(stateDir(t), 'a', async (c) => {
    assert.deepEqual(await c.call('Box', 'k1', 'put', { k: 'n', v: 1 }), { before: null, after: 1 });
    assert.equal(await c.call('Box', 'k1', 'get', 'n'), 1);
    assert.deepEqual(await c.call('Box', 'k1', 'put', { k: 'n', v: [2, 3] }), { before: 1, after: [2, 3] });
    assert.deepEqual(await c.call('Box', 'k1', 'get', 'n'), [2, 3]);
    assert.equal(await c.call('Box', 'k2', 'get', 'n'), null, 'state is per actor');
    assert.equal(await c.call('Box', 'k1', 'text', 'hi'), 'hi|00ff');
  });
});

test('delete and list', async (t) => {
  await withSidecar(stateDir(t), 'a', async (c) => {
    for (const [k, v] of [['b', 2], ['a', 1], ['c', 3]]) await c.call('Box', 'k', 'put', { k, v });
    const listed = await c.call('Box', 'k', 'list');
    assert.deepEqual(listed, { a: '1', b: '2', c: '3' });
    assert.deepEqual(Object.keys(listed), ['a', 'b', 'c']);
    assert.equal(await c.call('Box', 'k', 'del', 'b'), 'gone');
    assert.equal(await c.call('Box', 'k', 'get', 'b'), null);
    assert.deepEqual(await c.call('Box', 'k', 'list'), { a: '1', c: '3' });
  });
});

test('a failed turn writes nothing; an over-limit value is refused by name', async (t) => {
  await withSidecar(stateDir(t), 'a', async (c) => {
    await c.call('Box', 'k', 'put', { k: 'x', v: 'kept' });
    await assert.rejects(c.call('Box', 'k', 'putThenFail', 'x'), (e) => e instanceof AppError && /failing after a put/.test(e.message));
    assert.equal(await c.call('Box', 'k', 'get', 'x'), 'kept');
    await assert.rejects(c.call('Box', 'k', 'big'), (e) => e instanceof InvalidError && /over the limit of 1048576 bytes/.test(e.message));
    assert.equal(await c.call('Box', 'k', 'get', 'big'), null);
    assert.equal(await c.call('Box', 'k', 'get', 'x'), 'kept', 'the actor activates again with its state');
  });
});

test('the value survives a sidecar restart on the same state file, and the epoch grows', async (t) => {
  const dir = stateDir(t);
  epochs.length = 0;
  const e1 = await withSidecar(dir, 'a', async (c) => {
    await c.call('Box', 'durable', 'put', { k: 'v', v: { n: 41 } });
    return BigInt(await c.call('Box', 'durable', 'epoch'));
  });
  const [value, e2] = await withSidecar(dir, 'b', async (c) => [
    await c.call('Box', 'durable', 'get', 'v'), BigInt(await c.call('Box', 'durable', 'epoch')),
  ]);
  assert.deepEqual(value, { n: 41 });
  assert.ok(e1 > 0n && e2 > e1, `epochs ${e1} then ${e2}`);
  assert.deepEqual(epochs, [e1, e2], 'ctx.epoch is each activation\'s epoch, a bigint');
});

test('only an ok result carries the turn\'s writes, in order', async () => {
  const d = new Dispatcher([Box]);
  const turn = (turnId, kind, method) => ({
    turnId, actor: { actorType: 'Box', key: 'k' }, activationId: 'act-1', notAfterUnixMs: '0', epoch: '5',
    kind, ...(kind === 'invoke' ? { invoke: { method, payload: Buffer.from('"v"') } } : {}),
  });
  assert.ok((await d.handle(turn('1', 'activate'))).ok);
  const failed = await d.handle(turn('2', 'invoke', 'putThenFail'));
  assert.ok(failed.error && !failed.ok);
  assert.equal(failed.writes, undefined);
  const ok = await d.handle(turn('3', 'invoke', 'set'));
  assert.deepEqual(ok.writes.map((w) => [w.key, 'put' in w ? Buffer.from(w.put).toString() : 'delete']), [['s', 'v'], ['gone', 'delete']]);
  const worker = new Dispatcher([Box]);
  const w = turn('4', 'activate');
  w.epoch = '0';
  await worker.handle(w);
  const refused = await worker.handle({ ...turn('5', 'invoke', 'set'), epoch: '0' });
  assert.match(refused.error.message, /no durable state/);
});
