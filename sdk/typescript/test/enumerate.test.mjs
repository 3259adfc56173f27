// `Client.locate` and `Client.listActors` against a real sigx-sidecar: a called actor is located
// on this host, an uncalled one is not active (and stays so), and paging lists exactly the
// called actors once each.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineActor, defineActorApp } from '../dist/index.js';
import { withServedApp } from './sdk-harness.mjs';

const Listed = defineActor('Listed', { methods: { hello(_ctx, who) { return `hi ${who}`; } } });
const app = defineActorApp({ actors: [Listed], name: 'ts-enumerate-test' });

test('locate and listActors', async () => {
  await withServedApp(app, { prefix: 'sigx-nodee-' }, async (c) => {
    for (const k of ['a', 'b', 'c']) await c.call('Listed', k, 'hello', k);
    const where = await c.locate('Listed', 'b');
    assert.ok(where.active && where.hostId && where.activationId && where.epoch !== '0', JSON.stringify(where));
    assert.equal((await c.locate('Listed', 'never')).active, false);
    const seen = [];
    let pageToken = '';
    for (let pages = 0; pages < 10; pages++) {
      const page = await c.listActors('Listed', { pageSize: 2, pageToken });
      assert.equal(page.incomplete, false);
      for (const a of page.actors) seen.push(`${a.actor.key}@${a.hostId}`);
      pageToken = page.nextPageToken;
      if (!pageToken) break;
    }
    assert.deepEqual(seen.sort(), ['a', 'b', 'c'].map((k) => `${k}@${where.hostId}`));
  });
});
