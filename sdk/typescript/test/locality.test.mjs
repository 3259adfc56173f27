// `CallOptions.locality` travels in CallRequest.locality, against a real sigx-sidecar: a known
// preference places (on one host here), a wire number the sidecar does not know is refused by
// it as invalid, naming it (it could not be if the field were never sent), and an unknown name
// is refused before anything is sent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidError, defineActor, defineActorApp } from '../dist/index.js';
import { withServedApp } from './sdk-harness.mjs';

const Near = defineActor('Near', { methods: { hello(_ctx, who) { return `hi ${who}`; } } });
const app = defineActorApp({ actors: [Near], name: 'ts-locality-test' });

test('a locality preference travels on the call', async () => {
  await withServedApp(app, { prefix: 'sigx-nodel-' }, async (c) => {
    assert.equal(await c.call('Near', 'a', 'hello', 'zone', { locality: 'SAME_ZONE' }), 'hi zone');
    assert.equal(await c.call('Near', 'a', 'hello', 'node', { locality: 'SAME_NODE' }), 'hi node');
    await assert.rejects(c.call('Near', 'a', 'hello', 'x', { locality: 9 }),
      (e) => e instanceof InvalidError && /locality 9/.test(e.message));
    await assert.rejects(c.call('Near', 'a', 'hello', 'x', { locality: 'NEARBY' }),
      (e) => e instanceof TypeError && /"NEARBY"/.test(e.message));
  });
});
