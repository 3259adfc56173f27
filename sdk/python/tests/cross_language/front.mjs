// The TypeScript hop of the cross-language test (tests/test_cross_language.py): the actor Front
// relays `call` to the Go actor Middle with the same key. An app or invalid error from below is
// answered with the same kind and message; any other kind (which a handler cannot answer) as app,
// its message led by the kind this SDK decoded ("timeout: ...").
import { ActorError, Client, defineActor, defineActorApp } from '../../../typescript/dist/index.js';

const client = new Client(); // $SIGX_SOCKET

const Front = defineActor('Front', {
  methods: {
    async call(ctx, req) {
      if (typeof req !== 'object' || req === null) {
        throw new ActorError('invalid', 'Front.call takes a JSON object ({method, payload, ...})');
      }
      const { tsTimeoutMs, ...rest } = req;
      try {
        return await client.call('Middle', ctx.key, 'call', rest, { signal: ctx.signal, ...(tsTimeoutMs ? { timeoutMs: tsTimeoutMs } : {}) });
      } catch (e) {
        if (!(e instanceof ActorError)) throw e;
        if (e.kind === 'app' || e.kind === 'invalid') throw new ActorError(e.kind, e.message);
        throw new ActorError('app', `${e.kind}: ${e.message}`);
      }
    },
  },
});

await defineActorApp({ actors: [Front], name: 'cross-front-ts' }).serve();
