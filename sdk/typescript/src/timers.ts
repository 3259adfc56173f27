// Timers of an activation (DESIGN.md §11): "tick me while I am active", from inside a turn.
// A timer lives in the sidecar's memory and belongs to the activation that set it
// (`ctx.timers.set(..)` in a method, `onActivate` or `onTimer`). Its ticks are turns of that
// activation: the definition's `onTimer(ctx, tick)` runs one at a time with the other turns
// (unless reentrant), bounded like a call, its `ctx.storage` writes committed the same way. A
// timer ends when cancelled, after its one tick (one-shot), or with the activation: a new
// activation starts with none, so set them again in `onActivate`. Ticks do not reset the idle
// timeout, a failed tick is not retried, and a periodic timer skips ticks (`tick.skipped`) while
// the activation is busy rather than piling them up. For a wake-up that must survive the
// activation, use a durable reminder (`ctx.reminders`).

/** What `ctx.timers.set` sets. */
export interface TimerOptions {
  /** Delay until the first tick, in ms (absent or 0: as soon as the activation is free). */
  afterMs?: number;
  /** Absent or 0: one-shot (one tick, then gone). Otherwise the interval between ticks, in ms. */
  periodMs?: number;
  /** Delivered with every tick: JSON-encoded, or sent as is when a `Uint8Array`. */
  payload?: unknown;
}

/** One tick of a timer, as `onTimer` sees it. */
export interface TimerTick {
  readonly name: string;
  /** The payload, JSON-decoded (undefined when empty). Reading a payload that is not JSON throws. */
  readonly payload: unknown;
  /** The payload as sent. */
  readonly rawPayload: Uint8Array;
  /** 0 for a one-shot timer (this is its only tick and it is gone already: setting the name again sets a new one). */
  readonly periodMs: number;
  /** When the tick was due, on the pod's wall clock (earlier than now when the activation was busy). */
  readonly due: Date;
  /** Ticks of this periodic timer skipped since the previous one (it was still queued or running). */
  readonly skipped: number;
}

/** The timer RPCs of one sidecar (the `Client` implements them). */
export interface TimerApi {
  setTimer(type: string, key: string, activationId: string, name: string, options?: TimerOptions): Promise<boolean>;
  cancelTimer(type: string, key: string, activationId: string, name: string): Promise<boolean>;
}

/** The timers of one activation: `ctx.timers` inside its turns. */
export class Timers {
  constructor(private readonly api: TimerApi, readonly actorType: string, readonly key: string,
    readonly activationId: string) {}

  /**
   * Sets (or replaces, by name) a timer of this activation: its first tick `afterMs` from now,
   * then every `periodMs` (absent or 0: one tick). Resolves with whether a timer of that name was
   * replaced; bad input rejects with `InvalidError` naming the limit.
   */
  set(name: string, options: TimerOptions = {}): Promise<boolean> {
    return this.api.setTimer(this.actorType, this.key, this.activationId, name, options);
  }

  /** Cancels this activation's timer `name`: no tick of it starts afterwards. Whether it existed. */
  cancel(name: string): Promise<boolean> {
    return this.api.cancelTimer(this.actorType, this.key, this.activationId, name);
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Raw = any;

function millis(name: string, what: string, ms: number | undefined): string {
  const v = ms ?? 0;
  if (typeof v !== 'number' || !(v >= 0)) {
    throw new TypeError(`timer ${JSON.stringify(name)}: ${what} must be a number of ms >= 0, not ${String(ms)}`);
  }
  return String(Math.ceil(v));
}

/** The SetTimerRequest (proto-loader form); the sidecar checks the name, time and payload limits. */
export function setTimerRequest(type: string, key: string, activationId: string, name: string, o: TimerOptions): Raw {
  return {
    actor: { actorType: type, key },
    activationId,
    name,
    dueMs: millis(name, 'afterMs', o.afterMs),
    periodMs: millis(name, 'periodMs', o.periodMs),
    payload: o.payload instanceof Uint8Array ? o.payload : o.payload === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(o.payload)),
  };
}

/** A Turn's `timer` (proto-loader form) as the handler sees it. */
export function tickFromWire(t: Raw): TimerTick {
  const rawPayload: Uint8Array = t.payload ?? new Uint8Array(0);
  return {
    name: t.name,
    get payload() { return rawPayload.length === 0 ? undefined : JSON.parse(Buffer.from(rawPayload).toString('utf8')); },
    rawPayload,
    periodMs: Number(t.periodMs),
    due: new Date(Number(t.dueUnixMs)),
    skipped: Number(t.skipped),
  };
}
