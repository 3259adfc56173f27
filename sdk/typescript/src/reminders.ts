// Durable reminders (DESIGN.md §11): "wake me up later", by name, on an actor. The sidecar stores
// a reminder beside the actor's state; it outlives activations, hosts and restarts. When it is
// due the actor gets a turn wherever it lives (activated if need be) and the definition's
// `onReminder(ctx, reminder)` runs, turn-based like a method, its `ctx.storage` writes committed
// the same way. Delivery is at least once: a handler that throws (or times out, or whose host
// dies) is retried with backoff for the same occurrence (`attempt` 2, 3, ... up to 10; the same
// `due`), so make it idempotent per (`name`, `due`). Throwing an `InvalidError` abandons it.

/** When a reminder is first due: exactly one of `at` (a time) or `inMs` (from now, on the sidecar's clock). */
export type ReminderDue = { at: Date | number; inMs?: never } | { inMs: number; at?: never };

/** What `setReminder` stores. */
export type ReminderOptions = ReminderDue & {
  /** Absent or 0: a one-shot reminder, deleted once delivered. Otherwise at least 100 ms. */
  periodMs?: number;
  /** Delivered with every occurrence: JSON-encoded, or sent as is when a `Uint8Array`. At most 64 KiB. */
  payload?: unknown;
};

/** A due reminder, as `onReminder` sees it. */
export interface Reminder {
  readonly name: string;
  /** The payload, JSON-decoded (undefined when empty). Reading a payload that is not JSON throws. */
  readonly payload: unknown;
  /** The payload as sent. */
  readonly rawPayload: Uint8Array;
  /** This occurrence's due time: the same on every retry, so (`name`, `due`) identifies it. */
  readonly due: Date;
  /** 0 for a one-shot reminder. */
  readonly periodMs: number;
  /** 1 for the first delivery of this occurrence, 2 and up for retries. */
  readonly attempt: number;
}

/** A stored reminder, as `listReminders` returns it. */
export interface ReminderInfo {
  readonly name: string;
  /** Its next due time. */
  readonly due: Date;
  /** 0 for a one-shot reminder. */
  readonly periodMs: number;
  /** The payload, JSON-decoded (undefined when empty). */
  readonly payload: unknown;
  readonly rawPayload: Uint8Array;
  /** Failed deliveries of the current occurrence so far. */
  readonly failedAttempts: number;
}

/**
 * How a reminder change is fenced: `epoch` is an activation's epoch (`ctx.epoch`). The store
 * refuses the change (`StaleEpochError`, nothing changed) once a newer activation of the actor
 * exists, so an activation that outlived its lease cannot rearrange its successor's reminders.
 * Absent or 0: unfenced (a client outside the actor).
 */
export interface ReminderFence {
  epoch?: bigint;
}

/** The reminder RPCs of one sidecar (the `Client` implements them). */
export interface ReminderApi {
  setReminder(type: string, key: string, name: string, options: ReminderOptions, fence?: ReminderFence): Promise<Date>;
  deleteReminder(type: string, key: string, name: string, fence?: ReminderFence): Promise<boolean>;
  listReminders(type: string, key: string): Promise<ReminderInfo[]>;
}

/**
 * The reminders of one actor: `client.reminders(Def, key)`, or `ctx.reminders` inside its turns.
 * `ctx.reminders` carries the turn's epoch: its changes are refused (`StaleEpochError`, nothing
 * changed) once a newer activation of the actor exists.
 */
export class Reminders {
  constructor(private readonly api: ReminderApi, readonly actorType: string, readonly key: string,
    /** The epoch its changes carry; 0n: unfenced. */
    readonly epoch: bigint = 0n) {}

  /** Sets (or replaces, by name) a reminder of this actor; resolves with its first due time. */
  set(name: string, options: ReminderOptions): Promise<Date> {
    return this.api.setReminder(this.actorType, this.key, name, options, { epoch: this.epoch });
  }

  /** Deletes a reminder of this actor; whether it existed. */
  delete(name: string): Promise<boolean> {
    return this.api.deleteReminder(this.actorType, this.key, name, { epoch: this.epoch });
  }

  /** This actor's reminders, by name. */
  list(): Promise<ReminderInfo[]> {
    return this.api.listReminders(this.actorType, this.key);
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Raw = any;

function json(raw: Uint8Array): unknown {
  return raw.length === 0 ? undefined : JSON.parse(Buffer.from(raw).toString('utf8'));
}

/** The SetReminderRequest (proto-loader form) for `options`; the sidecar checks the limits. */
export function setRequest(type: string, key: string, name: string, options: ReminderOptions, epoch: bigint = 0n): Raw {
  const o = options as { at?: Date | number; inMs?: number; periodMs?: number; payload?: unknown };
  const req: Raw = {
    actor: { actorType: type, key },
    name,
    epoch: epoch.toString(),
    periodMs: String(Math.max(0, Math.ceil(o.periodMs ?? 0))),
    payload: o.payload instanceof Uint8Array ? o.payload : o.payload === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(o.payload)),
  };
  if ((o.at === undefined) === (o.inMs === undefined)) {
    throw new TypeError(`reminder ${JSON.stringify(name)}: give exactly one of { at } (a Date or Unix ms) or { inMs } (from now)`);
  }
  if (o.periodMs !== undefined && o.periodMs < 0) {
    throw new TypeError(`reminder ${JSON.stringify(name)} has a negative period (${o.periodMs} ms); omit periodMs for one-shot`);
  }
  if (o.at !== undefined) req.dueUnixMs = String(Math.floor(o.at instanceof Date ? o.at.getTime() : o.at));
  else req.dueInMs = String(Math.max(0, Math.ceil(o.inMs!)));
  return req;
}

/** A Turn's `reminder` (proto-loader form) as the handler sees it. */
export function reminderFromWire(r: Raw): Reminder {
  const rawPayload: Uint8Array = r.payload ?? new Uint8Array(0);
  return {
    name: r.name,
    get payload() { return json(rawPayload); },
    rawPayload,
    due: new Date(Number(r.dueUnixMs)),
    periodMs: Number(r.periodMs),
    attempt: Number(r.attempt),
  };
}

/** A ReminderInfo (proto-loader form). */
export function infoFromWire(r: Raw): ReminderInfo {
  const rawPayload: Uint8Array = r.payload ?? new Uint8Array(0);
  return {
    name: r.name,
    due: new Date(Number(r.dueUnixMs)),
    periodMs: Number(r.periodMs),
    get payload() { return json(rawPayload); },
    rawPayload,
    failedAttempts: Number(r.failedAttempts),
  };
}
