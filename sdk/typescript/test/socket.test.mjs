// Node.js's stock @grpc/grpc-js, default channel options, against a real sigx-sidecar (issue 15).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { TYPE_URL, client, richError, serveCounter, startSidecar, stopSidecar, unary, untilNoApp } from './harness.mjs';

let sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await stopSidecar(sidecar);
});

const callCounter = async (key, method, actorType = 'Counter') => {
  const c = client(sidecar.target);
  try {
    const res = await unary(c, 'Call', { actor: { actorType, key }, method, timeoutMs: 10_000 });
    return res.payload.toString();
  } finally {
    c.close();
  }
};

test('a Node.js app serves turns and a Node.js client calls it', async () => {
  await untilNoApp(sidecar.target);
  const app = serveCounter(sidecar.target);
  try {
    const registered = await app.ready;
    assert.match(registered.hostId, /^node-host/);
    assert.deepEqual([await callCounter('a', 'incr'), await callCounter('a', 'incr')], ['1', '2']);
    assert.deepEqual(
      app.events.map(([kind, key]) => [kind, key]),
      [
        ['activate', 'a'],
        ['invoke', 'a'],
        ['invoke', 'a'],
      ],
    );

    // An actor's own error and a bad request, read with the standard rich error model.
    await assert.rejects(callCounter('a', 'fail'), (err) => {
      assert.equal(err.code, grpc.status.UNKNOWN);
      const rich = richError(err);
      assert.equal(rich.code, grpc.status.UNKNOWN);
      assert.equal(rich.message, err.details);
      assert.equal(rich.details.length, 1);
      assert.equal(rich.details[0].typeUrl, TYPE_URL);
      assert.equal(rich.details[0].detail.kind, 'ERROR_KIND_APP');
      assert.match(rich.details[0].detail.message, /asked to fail/);
      assert.deepEqual(err.metadata.get('sigx-error-kind'), ['app']);
      return true;
    });
    await assert.rejects(callCounter('a', 'get', 'NoSuchType'), (err) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
      assert.equal(richError(err).details[0].detail.kind, 'ERROR_KIND_INVALID');
      assert.deepEqual(err.metadata.get('sigx-error-kind'), ['invalid']);
      return true;
    });

    // A second app is refused, with a decodable error.
    const second = serveCounter(sidecar.target);
    await assert.rejects(second.ready, (err) => {
      assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
      assert.equal(richError(err).details[0].detail.kind, 'ERROR_KIND_WRONG_HOST');
      return true;
    });
    second.close();
  } finally {
    app.close();
  }
});

test('SIGTERM ends the Serve stream with OK after deactivating', async () => {
  await untilNoApp(sidecar.target);
  const app = serveCounter(sidecar.target);
  await app.ready;
  assert.equal(await callCounter('z', 'incr'), '1');
  sidecar.child.kill('SIGTERM');
  const end = await app.ended;
  assert.equal(end.code, grpc.status.OK, `the stream broke: ${JSON.stringify(end)}\n${sidecar.log()}`);
  assert.deepEqual(app.events.map(([kind, key]) => [kind, key]).at(-1), ['deactivate', 'z']);
  assert.deepEqual(await sidecar.exited, { code: 0, signal: null });
  app.close();
});
