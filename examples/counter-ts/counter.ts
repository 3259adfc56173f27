// A counter actor in TypeScript: run a sidecar, then `node examples/counter-ts/counter.js`.
import { defineActor, defineActorApp } from '@sigx/sdk';

export const Counter = defineActor('Counter', {
  state: () => ({ count: 0 }),
  methods: {
    incr(ctx, by: number) { return (ctx.state.count += by); },
    get(ctx) { return ctx.state.count; },
  },
});

export const app = defineActorApp({ actors: [Counter], name: 'counter-ts' });
if (process.argv[1]?.endsWith('counter.js')) await app.serve();
