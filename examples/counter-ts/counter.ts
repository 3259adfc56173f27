// A counter actor in TypeScript: run a sidecar, then `node examples/counter-ts/counter.js`.
import { defineActor, defineActorApp } from '@sigx/sdk';

// The count lives in the sidecar's state store: it survives deactivation and host restarts.
export const Counter = defineActor('Counter', {
  methods: {
    async incr(ctx, by: number) {
      const count = ((await ctx.storage.get<number>('count')) ?? 0) + (by ?? 1);
      ctx.storage.put('count', count);
      return count;
    },
    async get(ctx) { return (await ctx.storage.get<number>('count')) ?? 0; },
  },
});

export const app = defineActorApp({ actors: [Counter], name: 'counter-ts' });
if (process.argv[1]?.endsWith('counter.js')) await app.serve();
