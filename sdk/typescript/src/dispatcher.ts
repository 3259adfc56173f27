// Running turns: the turn-based guarantee, activation hooks, the lease-bounded not-after and the
// fence notice. Transport-free (turns in, results out) and on an injectable clock, so the
// refusal and cancellation rules are unit-tested without a sidecar.
import type { ActorContext, AnyDefinition, DeactivateReason, WorkerContext } from './define.js';
import { ActorError, kindEnumName } from './errors.js';
import { reminderFromWire, Reminders, type ReminderApi } from './reminders.js';
import { tickFromWire, Timers, type TimerApi } from './timers.js';
import { Storage, type StateReader, type WireWrite } from './storage.js';
import { traceFromWire, withTrace } from './trace.js';
import { closeSync, openSync, readSync } from 'node:fs';

/**
 * Unix milliseconds on the pod's wall clock, and a timer on it; and, where the platform has one,
 * milliseconds on the machine's boot clock (Linux `CLOCK_BOOTTIME`), which a suspend advances
 * and no wall-clock step moves. Injected by tests.
 */
export interface Clock {
  now(): number;
  setTimer(ms: number, fn: () => void): () => void;
  boot?(): number | undefined;
}

let uptimeFd: number | null | undefined;
const uptimeBuf = Buffer.alloc(64);

/**
 * `CLOCK_BOOTTIME` in milliseconds, read off `/proc/uptime` (Node has no clock_gettime for it):
 * one pread of an open file, ~1 µs. The file counts in hundredths of a second, rounded down;
 * 10 ms are added so the reading is never behind the clock (a turn is refused early, never late).
 */
export function bootClockMs(): number | undefined {
  if (uptimeFd === undefined) {
    try {
      uptimeFd = process.platform === 'linux' ? openSync('/proc/uptime', 'r') : null;
    } catch {
      uptimeFd = null;
    }
  }
  if (uptimeFd === null) return undefined;
  try {
    const n = readSync(uptimeFd, uptimeBuf, 0, uptimeBuf.length, 0);
    const seconds = parseFloat(uptimeBuf.toString('latin1', 0, n));
    return Number.isFinite(seconds) ? Math.round(seconds * 1000) + 10 : undefined;
  } catch {
    closeSync(uptimeFd);
    uptimeFd = null;
    return undefined;
  }
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const t = setTimeout(fn, Math.max(0, ms));
    return () => clearTimeout(t);
  },
  boot: bootClockMs,
};

/** A Turn as @grpc/proto-loader decodes it (longs as strings, enums as names, oneofs named). */
export interface WireTurn {
  turnId: string;
  actor: { actorType: string; key: string };
  activationId: string;
  notAfterUnixMs: string | number;
  /** The same bound on the boot clock (0 or absent: not set). */
  notAfterBootMs?: string | number;
  /** The activation's epoch (0 for workers and sidecars without state). */
  epoch?: string | number;
  kind: 'activate' | 'invoke' | 'deactivate' | 'reminder' | 'timer';
  invoke?: { method: string; payload: Uint8Array };
  reminder?: { name: string; payload: Uint8Array; dueUnixMs: string | number; periodMs: string | number; attempt: number };
  timer?: { name: string; payload: Uint8Array; periodMs: string | number; dueUnixMs: string | number; skipped: string | number };
  deactivate?: { reason: string };
  /** The turn's W3C trace context (null when the call that caused it was untraced). */
  trace?: { traceparent: string; tracestate: string } | null;
}
export interface WireResult {
  turnId: string;
  ok?: Uint8Array;
  error?: { kind: string; message: string };
  /** The turn's state writes: only ever with `ok` (a failed turn writes nothing). */
  writes?: WireWrite[];
}

interface Activation {
  ctx: ActorContext<unknown>;
  /** The tail of this activation's turn chain (non-reentrant types run turns one after another). */
  tail: Promise<unknown>;
}

interface Running {
  turnId: string;
  abort: AbortController;
  answer: (r: WireResult) => void;
}

const EMPTY = new Uint8Array(0);

function err(turnId: string, kind: string, message: string): WireResult {
  return { turnId, error: { kind: `ERROR_KIND_${kind}`, message } };
}

function decodeArg(payload: Uint8Array): unknown {
  if (payload.length === 0 || /^\s*$/.test(Buffer.from(payload).toString('utf8'))) return undefined;
  return JSON.parse(Buffer.from(payload).toString('utf8'));
}

function encodeResult(value: unknown): Uint8Array {
  return value === undefined ? EMPTY : Buffer.from(JSON.stringify(value));
}

function reasonOf(wire: string | undefined): DeactivateReason {
  if (wire === 'DEACTIVATE_REASON_IDLE') return 'idle';
  if (wire === 'DEACTIVATE_REASON_SHUTDOWN') return 'shutdown';
  if (wire === 'DEACTIVATE_REASON_SUPERSEDED') return 'superseded';
  return 'unspecified';
}

/** For a dispatcher built without a sidecar client (unit tests): `ctx.reminders` and `ctx.timers` say so. */
const noReminders: ReminderApi & TimerApi = {
  setReminder: () => Promise.reject(new ActorError('invalid', 'this dispatcher has no sidecar client for reminders')),
  deleteReminder: () => Promise.reject(new ActorError('invalid', 'this dispatcher has no sidecar client for reminders')),
  listReminders: () => Promise.reject(new ActorError('invalid', 'this dispatcher has no sidecar client for reminders')),
  setTimer: () => Promise.reject(new ActorError('invalid', 'this dispatcher has no sidecar client for timers')),
  cancelTimer: () => Promise.reject(new ActorError('invalid', 'this dispatcher has no sidecar client for timers')),
};

/** Turns → results for one registered set of definitions. */
export class Dispatcher {
  private readonly types = new Map<string, AnyDefinition>();
  private readonly activations = new Map<string, Activation>();
  private readonly running = new Set<Running>();

  /** `reader` serves `ctx.storage` reads and `reminders` the `ctx.reminders` and `ctx.timers`
   * RPCs (the app passes its sidecar client for both). */
  constructor(defs: readonly AnyDefinition[], private readonly clock: Clock = systemClock, private readonly reader?: StateReader,
    private readonly reminders: ReminderApi & TimerApi = noReminders) {
    for (const d of defs) {
      if (this.types.has(d.name)) throw new TypeError(`type name ${JSON.stringify(d.name)} is defined twice; names are unique across actors and workers`);
      this.types.set(d.name, d);
    }
  }

  /** Live activations, for tests and status. */
  get activationCount(): number { return this.activations.size; }
  /** Turns still running. */
  get runningCount(): number { return this.running.size; }

  /**
   * Runs one turn and resolves with its answer; never rejects. A turn read at or past its
   * not-after, on the wall clock or the boot clock, is refused (UNREACHABLE: it never ran); one
   * still running at its not-after is aborted and answered TIMEOUT at once, never `ok` (it may
   * have run in part). The boot clock is what catches a turn queued before a VM suspend when
   * the wall clock was stepped back across it.
   */
  handle(turn: WireTurn): Promise<WireResult> {
    let notAfter = Number(turn.notAfterUnixMs || 0);
    const now = this.clock.now();
    if (notAfter !== 0 && now >= notAfter) {
      return Promise.resolve(err(turn.turnId, 'UNREACHABLE',
        `turn ${turn.turnId} reached the app ${now - notAfter} ms past its not-after; it never ran`));
    }
    const bootNotAfter = Number(turn.notAfterBootMs || 0);
    const boot = bootNotAfter !== 0 ? this.clock.boot?.() : undefined;
    if (boot !== undefined) {
      if (boot >= bootNotAfter) {
        return Promise.resolve(err(turn.turnId, 'UNREACHABLE',
          `turn ${turn.turnId} reached the app ${boot - bootNotAfter} ms past its not-after on the boot clock; it never ran`));
      }
      // The earlier of the two bounds, as a wall-clock instant for the timer below.
      const byBoot = now + (bootNotAfter - boot);
      notAfter = notAfter === 0 ? byBoot : Math.min(notAfter, byBoot);
    }
    const def = this.types.get(turn.actor.actorType);
    if (!def) {
      return Promise.resolve(err(turn.turnId, 'INVALID',
        `this app registers no type ${JSON.stringify(turn.actor.actorType)}`));
    }
    return def.kind === 'actor' ? this.actorTurn(def, turn, notAfter) : this.workerTurn(def, turn, notAfter);
  }

  private actorTurn(def: AnyDefinition & { kind: 'actor' }, turn: WireTurn, notAfter: number): Promise<WireResult> {
    const key = `${def.name}\u0000${turn.actor.key}`;
    const spec = def.spec;
    // Each turn gets its own view of the durable state and its own pending writes.
    const storage = new Storage(this.reader, { actorType: turn.actor.actorType, key: turn.actor.key }, turn.activationId, BigInt(turn.epoch || 0));
    if (turn.kind === 'activate') {
      const act: Activation = { ctx: undefined as never, tail: Promise.resolve() };
      const state = spec.state ? spec.state() : undefined;
      return this.run(turn, notAfter, async (signal) => {
        act.ctx = { state, key: turn.actor.key, reminders: new Reminders(this.reminders, def.name, turn.actor.key, storage.epoch), timers: new Timers(this.reminders, def.name, turn.actor.key, turn.activationId), activationId: turn.activationId, epoch: storage.epoch, storage, signal, trace: traceFromWire(turn.trace) };
        if (spec.onActivate) await spec.onActivate(act.ctx);
        return undefined;
      }, () => {
        this.activations.set(key, act);
      }, storage);
    }
    const act = this.activations.get(key);
    if (!act || act.ctx.activationId !== turn.activationId) {
      return Promise.resolve(err(turn.turnId, 'INVALID',
        `no live activation ${turn.activationId} of ${def.name}/${turn.actor.key} in this app (it was dropped); the sidecar activates it again on the next call`));
    }
    const body = (signal: AbortSignal): Promise<unknown> => {
      const ctx = { ...act.ctx, signal, storage, trace: traceFromWire(turn.trace) } as ActorContext<unknown>;
      // Writes to ctx.state replace the activation's state for later turns.
      const done = (v: unknown) => { act.ctx.state = ctx.state; return v; };
      if (turn.kind === 'deactivate') {
        return Promise.resolve(spec.onDeactivate?.(ctx, reasonOf(turn.deactivate?.reason))).then(() => done(undefined));
      }
      if (turn.kind === 'reminder') {
        const r = reminderFromWire(turn.reminder);
        // INVALID: the sidecar abandons the occurrence instead of retrying it ten times.
        if (!spec.onReminder) {
          throw new ActorError('invalid', `${def.name} has no reminder handler, but reminder ${JSON.stringify(r.name)} came due; add onReminder(ctx, reminder) to its defineActor spec, or delete the reminder`);
        }
        return Promise.resolve(spec.onReminder(ctx, r)).then(() => done(undefined));
      }
      if (turn.kind === 'timer') {
        const t = tickFromWire(turn.timer);
        // INVALID: the sidecar counts a failed tick (never retried).
        if (!spec.onTimer) {
          throw new ActorError('invalid', `${def.name} has no timer handler, but timer ${JSON.stringify(t.name)} ticked; add onTimer(ctx, tick) to its defineActor spec, or cancel the timer`);
        }
        return Promise.resolve(spec.onTimer(ctx, t)).then(() => done(undefined));
      }
      const method = turn.invoke!.method;
      const h = Object.hasOwn(spec.methods, method) ? spec.methods[method] : undefined;
      if (!h) throw new ActorError('invalid', `${def.name} has no method ${JSON.stringify(method)}`);
      return Promise.resolve(h(ctx, decodeArg(turn.invoke!.payload))).then(done);
    };
    const after = () => { if (turn.kind === 'deactivate') this.activations.delete(key); };
    if (spec.reentrant) return this.run(turn, notAfter, body, after, storage);
    // One turn at a time: the sidecar already sends them so, and this chain keeps it so even if
    // an answer went out early (a TIMEOUT answered before its handler returned).
    // A turn queued behind one that a fence (or a broken stream) cancelled must not run on the
    // dropped activation: another host may hold the actor by now.
    const result = act.tail.then(() => (this.activations.get(key) === act
      ? this.run(turn, notAfter, body, after, storage)
      : err(turn.turnId, 'UNREACHABLE', `activation ${turn.activationId} of ${def.name}/${turn.actor.key} was dropped before turn ${turn.turnId} ran; it never ran`)));
    act.tail = result;
    return result;
  }

  private workerTurn(def: AnyDefinition & { kind: 'worker' }, turn: WireTurn, notAfter: number): Promise<WireResult> {
    if (turn.kind === 'reminder') return Promise.resolve(err(turn.turnId, 'INVALID', `${def.name} is a worker type: workers have no reminders`));
    if (turn.kind === 'timer') return Promise.resolve(err(turn.turnId, 'INVALID', `${def.name} is a worker type: workers have no timers`));
    if (turn.kind !== 'invoke') return Promise.resolve({ turnId: turn.turnId, ok: EMPTY });
    const method = turn.invoke!.method;
    const h = Object.hasOwn(def.spec.methods, method) ? def.spec.methods[method] : undefined;
    if (!h) return Promise.resolve(err(turn.turnId, 'INVALID', `${def.name} has no method ${JSON.stringify(method)}`));
    return this.run(turn, notAfter, (signal) => {
      const ctx: WorkerContext = { key: turn.actor.key, signal, trace: traceFromWire(turn.trace) };
      return Promise.resolve(h(ctx, decodeArg(turn.invoke!.payload)));
    });
  }

  /** Runs `body` under an AbortSignal that fires at not-after (or on fence); answers once. */
  private run(turn: WireTurn, notAfter: number, body: (s: AbortSignal) => Promise<unknown>, onOk?: () => void, storage?: Storage): Promise<WireResult> {
    return new Promise<WireResult>((resolve) => {
      const abort = new AbortController();
      let answered = false;
      let cancelTimer = (): void => {};
      const entry: Running = {
        turnId: turn.turnId,
        abort,
        answer: (r) => {
          if (answered) return;
          answered = true;
          cancelTimer();
          this.running.delete(entry);
          resolve(r);
        },
      };
      this.running.add(entry);
      if (notAfter !== 0) {
        cancelTimer = this.clock.setTimer(notAfter - this.clock.now(), () => {
          abort.abort(new ActorError('timeout', 'the turn passed its not-after'));
          entry.answer(err(turn.turnId, 'TIMEOUT',
            `turn ${turn.turnId} was cancelled at its not-after; it may have run in part`));
        });
      }
      let out: Promise<unknown>;
      try {
        // Calls the handler makes (awaited or not) continue the turn's trace.
        out = withTrace(traceFromWire(turn.trace), () => body(abort.signal));
      } catch (e) {
        out = Promise.reject(e);
      }
      out.then(
        (v) => {
          if (answered) return;
          let payload: Uint8Array;
          try {
            payload = encodeResult(v);
          } catch (e) {
            return entry.answer(err(turn.turnId, 'APP', `the result is not JSON-encodable: ${(e as Error).message}`));
          }
          onOk?.();
          // Only an ok answer carries the turn's writes.
          const writes = storage?.writes() ?? [];
          entry.answer(writes.length ? { turnId: turn.turnId, ok: payload, writes } : { turnId: turn.turnId, ok: payload });
        },
        (e: unknown) => {
          if (answered) return;
          if (e instanceof SyntaxError) {
            return entry.answer(err(turn.turnId, 'INVALID', `the payload is not JSON: ${e.message}`));
          }
          const kind = e instanceof ActorError && e.kind === 'invalid' ? kindEnumName('invalid') : kindEnumName('app');
          const message = e instanceof Error ? e.message : String(e);
          entry.answer({ turnId: turn.turnId, error: { kind, message } });
        },
      );
    });
  }

  /**
   * The host fenced: cancel every running turn (answered TIMEOUT) and drop every activation
   * without running its deactivation hook — another host may already hold it.
   */
  fence(reason: string): number {
    const dropped = this.activations.size;
    for (const r of [...this.running]) {
      r.abort.abort(new ActorError('fenced', `the host fenced: ${reason}`));
      r.answer({ turnId: r.turnId, error: { kind: 'ERROR_KIND_TIMEOUT', message: `cancelled: the host fenced (${reason})` } });
    }
    this.activations.clear();
    return dropped;
  }

  /** The stream to the sidecar broke: it has dropped this app's activations, so do the same. */
  dropAll(): number {
    const dropped = this.activations.size;
    for (const r of [...this.running]) r.abort.abort(new Error('the Serve stream to the sidecar ended'));
    this.activations.clear();
    return dropped;
  }
}
