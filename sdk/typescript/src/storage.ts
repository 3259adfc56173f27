// Durable actor state from inside a turn (DESIGN.md §11): `ctx.storage`.
//
// Reads go to the sidecar (and its state store) under the turn's activation and epoch; writes are
// collected during the turn and travel with its result, committed by the sidecar as one atomic
// batch before the caller sees the answer. Reads see the turn's own writes (and, through the
// store, every earlier turn's). A turn that throws writes nothing. A refused batch answers the
// caller `StaleEpochError` (a newer activation exists) or `InvalidError` naming the limit, and the
// activation is dropped. Limits (the sidecar's): keys 1..=1024 bytes, values up to 1 MiB, up to
// 1000 writes and 4 MiB per turn.
import { ActorError } from './errors.js';

/** One entry as ReadState answers it (proto-loader form). */
export interface WireEntry { key: string; found: boolean; value: Uint8Array }
/** One write of a turn's batch, in the form TurnResult.writes takes. */
export type WireWrite = { key: string; put: Uint8Array } | { key: string; delete: true };
/** A ReadState request (proto-loader form; the epoch as a decimal string). */
export interface ReadStateRequest {
  actor: { actorType: string; key: string };
  activationId: string;
  epoch: string;
  keys: string[];
  all: boolean;
}
/** Reads state through the sidecar (the app's Client; injected by tests). */
export type StateReader = (req: ReadStateRequest) => Promise<WireEntry[]>;

const DELETED = Symbol('deleted');
const utf8 = new TextDecoder();

/** The actor's durable key/value state as one turn sees it. `put*`/`delete` are pending until
 * the handler returns; `get*` and `list` see them at once. */
export class Storage {
  private readonly order: WireWrite[] = [];
  private readonly latest = new Map<string, Uint8Array | typeof DELETED>();

  constructor(
    private readonly reader: StateReader | undefined,
    private readonly actor: { actorType: string; key: string },
    private readonly activationId: string,
    /** The activation's epoch (see `ActorContext.epoch`); 0n for workers. */
    readonly epoch: bigint,
  ) {}

  private check(): void {
    if (this.epoch === 0n) {
      throw new ActorError('invalid', `${this.actor.actorType} has no durable state: workers (and sidecars older than state) give turns no epoch; keep state in an actor type`);
    }
  }

  private async read(keys: string[], all: boolean): Promise<WireEntry[]> {
    this.check();
    if (!this.reader) throw new ActorError('invalid', 'this dispatcher has no state reader (it was built without a sidecar client)');
    return this.reader({ actor: this.actor, activationId: this.activationId, epoch: this.epoch.toString(), keys, all });
  }

  /** The raw value of `key` (this turn's pending write first, else the store's); undefined when absent. */
  async getBytes(key: string): Promise<Uint8Array | undefined> {
    const mine = this.latest.get(key);
    if (mine !== undefined) return mine === DELETED ? undefined : mine;
    const [e] = await this.read([key], false);
    return e?.found ? Uint8Array.from(e.value) : undefined;
  }

  /** The value of `key` as UTF-8 text; undefined when absent. */
  async getText(key: string): Promise<string | undefined> {
    const raw = await this.getBytes(key);
    return raw === undefined ? undefined : utf8.decode(raw);
  }

  /** The value of `key` decoded from JSON; undefined when absent. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    const text = await this.getText(key);
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new ActorError('app', `state key ${JSON.stringify(key)} of ${this.actor.actorType}/${this.actor.key} does not hold JSON (${(e as Error).message}); read it with getBytes`);
    }
  }

  /** Every entry of the actor (raw values), in key order, with this turn's writes applied. */
  async list(): Promise<Map<string, Uint8Array>> {
    const all = new Map<string, Uint8Array>();
    for (const e of await this.read([], true)) if (e.found) all.set(e.key, Uint8Array.from(e.value));
    for (const [k, v] of this.latest) {
      if (v === DELETED) all.delete(k);
      else all.set(k, v);
    }
    return new Map([...all].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  /** Sets `key` to the raw `value` when the turn succeeds. */
  putBytes(key: string, value: Uint8Array): void {
    this.check();
    const v = Uint8Array.from(value);
    this.latest.set(key, v);
    this.order.push({ key, put: v });
  }

  /** Sets `key` to `value` as UTF-8 text when the turn succeeds. */
  putText(key: string, value: string): void {
    this.putBytes(key, Buffer.from(value, 'utf8'));
  }

  /** Sets `key` to `value` encoded as JSON when the turn succeeds. */
  put(key: string, value: unknown): void {
    const text = JSON.stringify(value);
    if (text === undefined) throw new ActorError('invalid', `state value for key ${JSON.stringify(key)} has no JSON form (${typeof value}); delete the key instead`);
    this.putText(key, text);
  }

  /** Removes `key` when the turn succeeds (absent is fine). */
  delete(key: string): void {
    this.check();
    this.latest.set(key, DELETED);
    this.order.push({ key, delete: true });
  }

  /** The pending batch in order (sent with an ok result only). */
  writes(): WireWrite[] {
    return [...this.order];
  }
}
