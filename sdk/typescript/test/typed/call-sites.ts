// Compiled by `npm run typecheck` (tsc --noEmit): the client's types come from the definitions,
// so a wrong argument or a misuse of the result is a compile error. Each @ts-expect-error line
// fails the check if the mistake below it ever type-checks.
import { Client, defineActor, defineWorker, OutcomeUnknownError, ActorError } from '@sigx/sdk';

const Counter = defineActor('Counter', {
  state: () => ({ count: 0 }),
  methods: {
    incr(ctx, by: number) { return (ctx.state.count += by); },
    async label(ctx, p: { prefix: string }) { return `${p.prefix}${ctx.state.count}`; },
    get(ctx) { return ctx.state.count; },
  },
});
const Hasher = defineWorker('Hasher', { methods: { hash(_ctx, s: string) { return s.length; } } });

export async function callSites(client: Client): Promise<void> {
  const c = client.actor(Counter, 'k');
  const n: number = await c.incr(5);
  const s: string = await c.label({ prefix: '#' });
  const g: number = await c.get();
  const h: number = await client.worker(Hasher).hash('abc', { timeoutMs: 100 });
  void [n, s, g, h];
  // @ts-expect-error incr takes a number
  await c.incr('5');
  // @ts-expect-error label's result is a string
  const wrong: number = await c.label({ prefix: '#' });
  // @ts-expect-error no such method on Counter
  await c.decr(1);
  // @ts-expect-error label needs its argument
  await c.label();
  void wrong;
  try { await c.get(); } catch (e) {
    if (e instanceof OutcomeUnknownError) { const k: 'outcome-unknown' | string = e.kind; void k; }
    else if (e instanceof ActorError) { void e.retryAfterMs; }
  }
}

defineActor('Typed', {
  state: () => ({ count: 0 }),
  methods: {
    // @ts-expect-error the state has no field `missing`
    bad(ctx) { return ctx.state.missing; },
  },
});

// Reminders: one due form at a time; the handler's reminder is typed.
defineActor('Reminded', {
  onReminder(ctx, r) {
    const due: Date = r.due;
    const attempt: number = r.attempt;
    // @ts-expect-error periodMs is a number (0 = one-shot), not a Date
    const p: Date = r.periodMs;
    void [due, attempt, p];
    return ctx.reminders.set('again', { inMs: 1_000, periodMs: 60_000 });
  },
  methods: {},
});

export async function reminderSites(client: Client): Promise<void> {
  const r = client.reminders(Counter, 'k');
  const due: Date = await r.set('wake', { at: new Date(), payload: { any: 'json' } });
  const existed: boolean = await r.delete('wake');
  const names: string[] = (await client.listReminders('Counter', 'k')).map((i) => i.name);
  void [due, existed, names];
  // @ts-expect-error exactly one of at / inMs
  await r.set('wake', { at: Date.now(), inMs: 5 });
  // @ts-expect-error a due time is required
  await r.set('wake', { periodMs: 100 });
}

defineActor('Ticking', {
  async onActivate(ctx) {
    const replaced: boolean = await ctx.timers.set('flush', { afterMs: 1_000, periodMs: 1_000 });
    // @ts-expect-error the delay is a number of ms, not a Date
    await ctx.timers.set('flush', { afterMs: new Date() });
    void replaced;
  },
  async onTimer(ctx, tick) {
    const skipped: number = tick.skipped;
    // @ts-expect-error periodMs is a number (0 = one-shot)
    const p: Date = tick.periodMs;
    void [skipped, p];
    const existed: boolean = await ctx.timers.cancel(tick.name);
    void existed;
  },
  methods: {},
});

defineWorker('NoTimers', {
  methods: {
    // @ts-expect-error a worker has no activation, so no timers
    ping(ctx) { return ctx.timers.set('x'); },
  },
});
