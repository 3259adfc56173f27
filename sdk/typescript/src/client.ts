// Calling actors and workers through the local sidecar: `call`, the typed `actor`/`worker`
// stubs, `members`, `watchMembers`, `dispatchOn` and `status`. Errors are `ActorError` classes.
import * as grpc from '@grpc/grpc-js';
import type { ActorDefinition, CallOptions, ClientOf, WorkerDefinition } from './define.js';
import { fromServiceError } from './errors.js';
import type { ReadStateRequest, WireEntry } from './storage.js';
import { ActorHostClient } from './proto.js';
import { infoFromWire, Reminders, setRequest, type ReminderApi, type ReminderFence, type ReminderInfo, type ReminderOptions } from './reminders.js';
import { setTimerRequest, type TimerApi, type TimerOptions } from './timers.js';
import { currentTrace } from './trace.js';

/** Slack on the gRPC deadline over the call's own: the sidecar answers TIMEOUT itself first. */
const TRANSPORT_SLACK_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 30_000;

/** `$SIGX_SOCKET` as a gRPC target (`unix:///path`). */
export function defaultTarget(): string {
  const socket = process.env.SIGX_SOCKET;
  if (!socket) throw new Error('SIGX_SOCKET is not set: point it at the sidecar socket, or pass { target }');
  return socket.startsWith('unix:') ? socket : `unix://${socket}`;
}

export interface HostDescriptor {
  id: string;
  advertise: string;
  types: string[];
  statefulTypes: string[];
  meta: Record<string, string>;
  status: string;
  startedAtUnixMs: number;
}
export interface MembersView { version: number; hosts: HostDescriptor[] }
export interface MembersFilter { status?: 'active' | 'any'; registers?: string }

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Raw = any;
function host(h: Raw): HostDescriptor {
  return {
    id: h.id,
    advertise: h.advertise,
    types: h.types?.names ?? [],
    statefulTypes: h.statefulTypes?.names ?? [],
    meta: h.meta ?? {},
    status: String(h.status).replace('HOST_STATUS_', '').toLowerCase(),
    startedAtUnixMs: Number(h.startedAtUnixMs),
  };
}
function view(r: Raw): MembersView {
  return { version: Number(r.version), hosts: (r.hosts ?? []).map(host) };
}
function membersRequest(f: MembersFilter = {}): Raw {
  return { status: f.status === 'any' ? 'MEMBER_STATUS_FILTER_ANY' : 'MEMBER_STATUS_FILTER_ACTIVE', registers: f.registers ?? '' };
}
function encode(arg: unknown): Buffer {
  return arg === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(arg));
}
function decode(payload: Uint8Array): unknown {
  return payload.length === 0 ? undefined : JSON.parse(Buffer.from(payload).toString('utf8'));
}

/** A handle on the local sidecar's app API. One channel; it reconnects on its own. */
export class Client implements ReminderApi, TimerApi {
  readonly target: string;
  private readonly raw: Raw;

  constructor(options: { target?: string } = {}) {
    this.target = options.target ?? defaultTarget();
    this.raw = new ActorHostClient(this.target, grpc.credentials.createInsecure());
  }

  /**
   * Calls `method` on the actor or worker `type`/`key` with a JSON argument; resolves with the JSON
   * result. Inside a handler the call carries the turn's W3C trace context (`options.trace`
   * overrides it), so the callee's spans and turn continue the turn's trace.
   */
  async call(type: string, key: string, method: string, arg?: unknown, options: CallOptions = {}): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const trace = options.trace === undefined ? currentTrace() : options.trace ?? undefined;
    const locality = wireLocality(options.locality);
    const res = await this.unary('Call', { actor: { actorType: type, key }, method, payload: encode(arg), timeoutMs, trace, locality }, timeoutMs, options.signal);
    return decode(res.payload);
  }

  /** A typed stub for one actor: `client.actor(Counter, 'k').incr(1)`. */
  actor<D extends ActorDefinition<string, Raw, Raw>>(def: D, key: string): ClientOf<D> {
    return this.stub(def.name, key, (m, a, o) => this.call(def.name, key, m, a, o));
  }

  /** A typed stub for a worker; `key` spreads load (default ''). */
  worker<D extends WorkerDefinition<string, Raw>>(def: D, key = ''): ClientOf<D> {
    return this.stub(def.name, key, (m, a, o) => this.call(def.name, key, m, a, o));
  }

  /** A typed stub for a worker on one chosen host: one attempt, no re-placement. */
  workerOn<D extends WorkerDefinition<string, Raw>>(hostOrId: string | HostDescriptor, def: D, key = ''): ClientOf<D> {
    const hostId = typeof hostOrId === 'string' ? hostOrId : hostOrId.id;
    return this.stub(def.name, key, (m, a, o) => this.dispatchOn(hostId, def.name, key, m, a, o));
  }

  /** One attempt at a worker method on `hostId`: unreachable and wrong-host are answers, not re-routes. */
  async dispatchOn(hostId: string, type: string, key: string, method: string, arg?: unknown, options: CallOptions = {}): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const res = await this.unary('DispatchOn', { hostId, worker: { actorType: type, key }, method, payload: encode(arg), timeoutMs }, timeoutMs, options.signal);
    return decode(res.payload);
  }

  /**
   * Where the stateful actor `type`/`key` is active (`active`, `hostId`, `activationId`; `epoch`,
   * a decimal string, only when this sidecar's host runs it). Activates nothing.
   */
  async locate(type: string, key: string, options: CallOptions = {}): Promise<ActorLocation> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const r = await this.unary('Locate', { actor: { actorType: type, key }, timeoutMs }, timeoutMs, options.signal);
    return { active: Boolean(r.active), hostId: String(r.hostId ?? ''), activationId: String(r.activationId ?? ''), epoch: String(r.epoch ?? '0') };
  }

  /**
   * One page of the live activations of `type` across the fleet, from the directory owners:
   * pass each page's `nextPageToken` back until it is empty, and check `incomplete` (partitions
   * whose owner did not answer are in `skipped`).
   */
  async listActors(type: string, page: ListActorsPage = {}, options: CallOptions = {}): Promise<Raw> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    return this.unary('ListActors', {
      actorType: type, pageSize: page.pageSize ?? 0, pageToken: page.pageToken ?? '',
      withReminders: page.withReminders ?? false, timeoutMs,
    }, timeoutMs, options.signal);
  }

  /** The membership view now, active hosts by default. */
  async members(filter?: MembersFilter, options: CallOptions = {}): Promise<MembersView> {
    return view(await this.unary('Members', membersRequest(filter), options.timeoutMs ?? 5_000, options.signal));
  }

  /** The view now, then again on every change, until `signal` aborts or the stream ends. */
  async *watchMembers(filter?: MembersFilter, options: { signal?: AbortSignal } = {}): AsyncGenerator<MembersView> {
    const call = this.raw.WatchMembers(membersRequest(filter));
    const onAbort = () => call.cancel();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for await (const r of call) yield view(r);
    } catch (e) {
      if (options.signal?.aborted) return;
      throw fromServiceError(e as grpc.ServiceError, this.target);
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      call.cancel();
    }
  }

  /**
   * Sets (or replaces, by name) a durable reminder of the actor `type`/`key`; resolves with its
   * first due time. `{ at }` (a Date or Unix ms; one in the past is due now) or `{ inMs }` (from
   * now); `periodMs` absent = one-shot, else at least 100; `payload` at most 64 KiB. The actor's
   * `onReminder` runs when it is due. Bad input rejects with `InvalidError` naming the limit.
   * `call.epoch` fences the change (see `ReminderFence`); `ctx.reminders` sets it for you.
   */
  async setReminder(type: string, key: string, name: string, options: ReminderOptions, call: CallOptions & ReminderFence = {}): Promise<Date> {
    const res = await this.unary('SetReminder', setRequest(type, key, name, options, call.epoch ?? 0n), call.timeoutMs ?? 10_000, call.signal);
    return new Date(Number(res.dueUnixMs));
  }

  /** Deletes a reminder by name; whether it existed (absent is fine). `call.epoch` fences it. */
  async deleteReminder(type: string, key: string, name: string, call: CallOptions & ReminderFence = {}): Promise<boolean> {
    const res = await this.unary('DeleteReminder', { actor: { actorType: type, key }, name, epoch: (call.epoch ?? 0n).toString() }, call.timeoutMs ?? 10_000, call.signal);
    return !!res.existed;
  }

  /** The actor's stored reminders, sorted by name. */
  async listReminders(type: string, key: string, call: CallOptions = {}): Promise<ReminderInfo[]> {
    const res = await this.unary('ListReminders', { actor: { actorType: type, key } }, call.timeoutMs ?? 10_000, call.signal);
    return (res.reminders ?? []).map(infoFromWire);
  }

  /**
   * Sets (or replaces) a timer of the live activation `activationId` of `type`/`key` on this
   * host; whether one was replaced. Inside a turn use `ctx.timers.set(name, options)`, which
   * fills in the running activation. The sidecar refuses (INVALID) an activation that is not
   * live here, and a name, delay or payload past its limits.
   */
  async setTimer(type: string, key: string, activationId: string, name: string, options: TimerOptions = {}, call: CallOptions = {}): Promise<boolean> {
    const res = await this.unary('SetTimer', setTimerRequest(type, key, activationId, name, options), call.timeoutMs ?? 10_000, call.signal);
    return !!res.replaced;
  }

  /** Cancels a timer of that activation; whether it existed. Inside a turn: `ctx.timers.cancel(name)`. */
  async cancelTimer(type: string, key: string, activationId: string, name: string, call: CallOptions = {}): Promise<boolean> {
    const res = await this.unary('CancelTimer', { actor: { actorType: type, key }, activationId, name }, call.timeoutMs ?? 10_000, call.signal);
    return !!res.existed;
  }

  /** The reminders of one actor (`set`, `delete`, `list`): `client.reminders(Invoice, 'inv-7')`. */
  reminders(def: ActorDefinition<string, Raw, Raw> | string, key: string): Reminders {
    return new Reminders(this, typeof def === 'string' ? def : def.name, key);
  }

  /** This host's state, activations and counters. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  status(options: CallOptions = {}): Promise<any> {
    return this.unary('Status', {}, options.timeoutMs ?? 5_000, options.signal);
  }

  /** ReadState for a running turn (`ctx.storage` calls it; not for use outside a turn). */
  async readState(req: ReadStateRequest, options: CallOptions = {}): Promise<WireEntry[]> {
    const res = await this.unary('ReadState', req, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, options.signal);
    return res.entries ?? [];
  }

  close(): void { this.raw.close(); }

  private stub<T>(type: string, key: string, invoke: (m: string, a: unknown, o?: CallOptions) => Promise<unknown>): T {
    void type; void key;
    return new Proxy({}, {
      get: (_t, method) => (typeof method === 'string' && method !== 'then'
        ? (arg?: unknown, options?: CallOptions) => invoke(method, arg, options)
        : undefined),
    }) as T;
  }

  private unary(method: string, request: Raw, timeoutMs: number, signal?: AbortSignal): Promise<Raw> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const call = this.raw[method](request, { deadline: Date.now() + timeoutMs + TRANSPORT_SLACK_MS }, (e: grpc.ServiceError | null, res: Raw) => {
        signal?.removeEventListener('abort', onAbort);
        if (e) reject(signal?.aborted ? signal.reason : fromServiceError(e, this.target));
        else resolve(res);
      });
      const onAbort = () => call.cancel();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

const LOCALITIES = new Set(['ANY', 'SAME_NODE', 'SAME_ZONE']);

/** `CallOptions.locality` as the proto enum; an unknown name is the caller's mistake, named. */
function wireLocality(locality: CallOptions['locality']): string | number {
  if (typeof locality === 'number') return locality;
  const name = locality ?? 'ANY';
  if (!LOCALITIES.has(name)) {
    throw new TypeError(`locality ${JSON.stringify(name)} is not one of 'ANY', 'SAME_NODE' or 'SAME_ZONE'`);
  }
  return `LOCALITY_${name}`;
}

/** Where an actor is active (`Client.locate`). */
export interface ActorLocation {
  active: boolean;
  hostId: string;
  activationId: string;
  /** The activation's state epoch as a decimal string; "0" when another host runs it. */
  epoch: string;
}

/** Which page of `Client.listActors`: size 1..=1000 (0 = 100), the previous page's token. */
export interface ListActorsPage {
  pageSize?: number;
  pageToken?: string;
  withReminders?: boolean;
}
