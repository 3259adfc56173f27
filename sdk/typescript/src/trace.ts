// The W3C trace context of calls: a turn's, exposed to its handler as `ctx.trace` and carried by
// the calls made while it runs. It rides on an AsyncLocalStorage, so it follows the handler's
// awaits, promise callbacks and timers: every `client.call` started from inside a turn carries the
// turn's trace as `CallRequest.trace`, and the callee's spans and turn continue it.
import { AsyncLocalStorage } from 'node:async_hooks';

/** One span's W3C `traceparent` and `tracestate` headers. */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate: string;
}

const ambient = new AsyncLocalStorage<TraceContext | undefined>();

/** The trace context calls made now carry: the running turn's inside a handler. */
export function currentTrace(): TraceContext | undefined {
  return ambient.getStore();
}

/** Runs `fn` with `trace` as the context its calls carry (`undefined`: none). */
export function withTrace<T>(trace: TraceContext | undefined, fn: () => T): T {
  return ambient.run(trace, fn);
}

/** A Turn's or request's `trace` field as proto-loader decodes it; `undefined` when untraced. */
export function traceFromWire(t: { traceparent?: string; tracestate?: string } | null | undefined): TraceContext | undefined {
  return t?.traceparent ? { traceparent: t.traceparent, tracestate: t.tracestate ?? '' } : undefined;
}
