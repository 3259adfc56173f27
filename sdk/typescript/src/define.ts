// The programming model: `defineActor` and `defineWorker` describe a type once; the handlers'
// argument and return types flow from the definition to the typed client (`client.actor(Def,
// key).method(arg)`), so a call site is checked by tsc against the handler it reaches.

import type { Reminder, Reminders } from './reminders.js';
import type { Storage } from './storage.js';
import type { TimerTick, Timers } from './timers.js';
import type { TraceContext } from './trace.js';

/** Why an activation ends (`superseded`: a newer activation exists; its writes are ignored). */
export type DeactivateReason = 'idle' | 'shutdown' | 'superseded' | 'unspecified';

/** What a stateful handler sees: its activation's state, identity and cancellation. */
export interface ActorContext<S> {
  /** The activation's in-memory state: made by the definition's `state()` on Activate, kept
   * until Deactivate, lost with the activation. Durable state is `storage`. */
  state: S;
  /**
   * The actor's durable key/value state as this turn sees it (`get`/`put` JSON, `getText`/
   * `putText`, `getBytes`/`putBytes`, `delete`, `list`). Writes go out with the turn's result as
   * one atomic batch and the caller is answered once they are durable; a throw writes nothing.
   */
  readonly storage: Storage;
  /**
   * The activation's epoch: its fencing token for systems outside sigx, strictly greater than
   * every earlier activation's of this actor. Store it with what you write there and refuse a
   * write whose epoch is lower than the one stored (compare, refuse lower).
   */
  readonly epoch: bigint;
  /** The actor's key. */
  readonly key: string;
  /** This actor's durable reminders (`set`, `delete`, `list`); see `onReminder`. */
  readonly reminders: Reminders;
  /**
   * This activation's in-memory timers (`set`, `cancel`); see `onTimer`. Gone when the
   * activation deactivates: use `reminders` for a wake-up that must outlive it. Workers have none.
   */
  readonly timers: Timers;
  /** Unique per activation (not ordered: fence external writes with `epoch`). */
  readonly activationId: string;
  /**
   * Aborted when the turn passes its not-after (the caller's deadline or the host's lease) or the
   * host fences. Pass it to every fetch/timer/IO the handler awaits: past it the answer is
   * TIMEOUT whatever the handler does, and another host may already hold the actor.
   */
  readonly signal: AbortSignal;
  /**
   * The turn's W3C trace context (undefined when the call that caused it was untraced): the
   * sidecar's turn span when it exports spans, else the caller's context. Calls the handler makes
   * carry it already (see `currentTrace`).
   */
  readonly trace?: TraceContext;
}

/** What a worker handler sees: no state, no identity beyond the key it was called with. */
export interface WorkerContext {
  readonly key: string;
  /** As for actors: aborted at not-after or on the fence notice. */
  readonly signal: AbortSignal;
  /** As for actors: the turn's W3C trace context, carried by the calls the handler makes. */
  readonly trace?: TraceContext;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyArg = any;
/** A method: `(ctx)` or `(ctx, arg)`; the argument and result travel as JSON. */
export type Handler<C> = (ctx: C, arg: AnyArg) => unknown;
export type ActorMethods<S> = Record<string, Handler<ActorContext<S>>>;
export type WorkerMethods = Record<string, Handler<WorkerContext>>;

export interface ActorSpec<S, M extends ActorMethods<S>> {
  /** A fresh in-memory state for each activation (omit it to keep everything in `storage`). */
  state?: () => S;
  methods: M;
  /** Runs on Activate (load state). A throw fails the activation and the call. */
  onActivate?: (ctx: ActorContext<S>) => unknown;
  /** Runs on Deactivate (its `storage` writes count, except when superseded). Not run when the host fences. */
  onDeactivate?: (ctx: ActorContext<S>, reason: DeactivateReason) => unknown;
  /**
   * Runs as the turn of each due reminder of the actor (set with `ctx.reminders.set` or
   * `client.setReminder`). At least once: a throw is retried with backoff (`attempt` 2, 3, ...,
   * the same `due`), so make it idempotent per (`name`, `due`); throwing an `InvalidError`
   * abandons the occurrence. Without it, a due reminder is answered INVALID and dropped.
   */
  onReminder?: (ctx: ActorContext<S>, reminder: Reminder) => unknown;
  /**
   * Runs as the turn of each tick of this activation's timers (set with `ctx.timers.set`).
   * Not retried: a throw is counted by the sidecar (Status `timerFailures`) and a periodic timer
   * goes on. Without it, a tick is answered INVALID.
   */
  onTimer?: (ctx: ActorContext<S>, tick: TimerTick) => unknown;
  /** Several turns of one activation may interleave at await points. Default false. */
  reentrant?: boolean;
  /** Idle time before Deactivate; 0/absent = the sidecar's default (5 minutes). */
  idleTimeoutMs?: number;
}

export interface WorkerSpec<M extends WorkerMethods> {
  methods: M;
  /** How many turns may run at once on this host; 0/absent = the sidecar's default (16). */
  maxConcurrency?: number;
}

export interface ActorDefinition<N extends string = string, S = unknown, M extends ActorMethods<S> = ActorMethods<S>> {
  readonly kind: 'actor';
  readonly name: N;
  readonly spec: ActorSpec<S, M>;
}

export interface WorkerDefinition<N extends string = string, M extends WorkerMethods = WorkerMethods> {
  readonly kind: 'worker';
  readonly name: N;
  readonly spec: WorkerSpec<M>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyDefinition = ActorDefinition<string, any, any> | WorkerDefinition<string, any>;

const NAME = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
function checkName(name: string, what: string): void {
  if (!NAME.test(name)) {
    throw new TypeError(`${what} name ${JSON.stringify(name)} is not a valid type name: use letters, digits, '_', '.', '-'`);
  }
}

/** Defines a stateful actor type: one activation per key across the fleet, one turn at a time. */
export function defineActor<const N extends string, S, M extends ActorMethods<S>>(
  name: N,
  spec: ActorSpec<S, M>,
): ActorDefinition<N, S, M> {
  checkName(name, 'actor');
  return Object.freeze({ kind: 'actor' as const, name, spec });
}

/** Defines a stateless worker type: runs on the host that receives the call, up to its concurrency. */
export function defineWorker<const N extends string, M extends WorkerMethods>(
  name: N,
  spec: WorkerSpec<M>,
): WorkerDefinition<N, M> {
  checkName(name, 'worker');
  return Object.freeze({ kind: 'worker' as const, name, spec });
}

/** Per-call options. */
export interface CallOptions {
  /** The whole call's deadline; default the sidecar's (30 s). */
  timeoutMs?: number;
  /** Aborting it cancels the call (the outcome is then unknown). */
  signal?: AbortSignal;
  /**
   * The W3C trace context the call carries; default `currentTrace()` (inside a handler, the
   * turn's). `null` sends none.
   */
  trace?: TraceContext | null;
  /**
   * Where an actor this call activates should go, near this app's sidecar: a host on the same
   * node, else the same zone, else any (`'SAME_ZONE'`: the same zone, else any). It only places:
   * an actor already active elsewhere is called where it is; no preference ever fails a call.
   */
  locality?: Locality;
}

/**
 * A call's placement preference (`CallOptions.locality`); a number is sent as the enum's wire
 * value unchanged (the sidecar refuses one it does not know as invalid).
 */
export type Locality = 'ANY' | 'SAME_NODE' | 'SAME_ZONE' | number;

/** The client-side method for one handler: its argument (if any) and its awaited result. */
export type ClientMethod<H> = H extends (ctx: never) => infer R
  ? (arg?: undefined, options?: CallOptions) => Promise<Awaited<R>>
  : H extends (ctx: never, arg: infer A) => infer R
    ? (arg: A, options?: CallOptions) => Promise<Awaited<R>>
    : never;

/** A typed stub for one actor or worker: one method per handler. */
export type ClientOf<D> = D extends ActorDefinition<string, AnyArg, infer M>
  ? { [K in keyof M & string]: ClientMethod<M[K]> }
  : D extends WorkerDefinition<string, infer M>
    ? { [K in keyof M & string]: ClientMethod<M[K]> }
    : never;
