// `defineActorApp` and its serve loop: register with the sidecar on the Serve stream, answer
// turns, drain on SIGTERM, and reconnect with backoff when the sidecar goes away.
import * as grpc from '@grpc/grpc-js';
import type { AnyDefinition } from './define.js';
import { Clock, Dispatcher, systemClock, WireResult, WireTurn } from './dispatcher.js';
import { ActorError, fromServiceError, InvalidError, WrongHostError } from './errors.js';
import { Client, defaultTarget } from './client.js';
import { ActorHostClient } from './proto.js';

export interface AppSpec {
  /** Stateful actor and stateless worker definitions this app serves. */
  actors: readonly AnyDefinition[];
  /** A name for the sidecar's logs. */
  name?: string;
}

export interface ServeOptions {
  /** gRPC target of the sidecar; default `unix://$SIGX_SOCKET`. */
  target?: string;
  /** Aborting it drains the app (as SIGTERM does): the sidecar finishes and ends the stream. */
  signal?: AbortSignal;
  /** Drain on SIGTERM and SIGINT. Default true. */
  handleSignals?: boolean;
  /** Called once per accepted registration (again after each reconnect). */
  onRegistered?: (info: { hostId: string; maxPayloadBytes: number }) => void;
  /** Called when the stream broke and the app is about to reconnect. */
  onDisconnect?: (why: string, retryInMs: number) => void;
  /** Injected by tests. */
  clock?: Clock;
}

/** Capped exponential backoff: 100 ms, doubling, at most 5 s; reset after a registration. */
export class Backoff {
  private next = 100;
  nextDelay(): number {
    const d = this.next;
    this.next = Math.min(this.next * 2, 5_000);
    return d;
  }
  reset(): void { this.next = 100; }
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const t = setTimeout(done, ms);
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); }
  signal?.addEventListener('abort', done, { once: true });
});

type Ended = { kind: 'ok' } | { kind: 'broken'; why: string; registered: boolean } | { kind: 'refused'; error: ActorError };

export interface ActorApp {
  readonly definitions: readonly AnyDefinition[];
  /**
   * Registers with the sidecar and answers turns until it ends the stream with OK (after a
   * drain: SIGTERM of this process or of the sidecar, or `signal`). Resolves then. A broken
   * stream is re-opened with backoff; a refused registration (INVALID, WRONG_HOST) rejects.
   */
  serve(options?: ServeOptions): Promise<void>;
  /** A client for the same sidecar. */
  client(options?: { target?: string }): Client;
}

/** Describes an app: the types it registers with its sidecar. */
export function defineActorApp(spec: AppSpec): ActorApp {
  const defs = [...spec.actors];
  new Dispatcher(defs); // validates names now, not at serve time
  const register = {
    appName: spec.name ?? 'sigx-ts-app',
    actors: defs.filter((d) => d.kind === 'actor').map((d) => ({
      name: d.name,
      reentrant: !!d.spec.reentrant,
      idleTimeoutMs: d.spec.idleTimeoutMs ?? 0,
      methods: Object.keys(d.spec.methods),
    })),
    workers: defs.filter((d) => d.kind === 'worker').map((d) => ({
      name: d.name,
      maxConcurrency: d.spec.maxConcurrency ?? 0,
      methods: Object.keys(d.spec.methods),
    })),
  };

  async function serve(options: ServeOptions = {}): Promise<void> {
    const target = options.target ?? defaultTarget();
    const stateClient = new Client({ target });
    const dispatcher = new Dispatcher(defs, options.clock ?? systemClock, (req) => stateClient.readState(req), stateClient);
    const backoff = new Backoff();
    let draining = false;
    let drainCurrent: (() => void) | undefined;
    const stop = new AbortController();
    const drain = () => {
      draining = true;
      drainCurrent?.();
      stop.abort(); // wakes a reconnect backoff: with no stream open there is nothing to drain
    };
    if (options.signal?.aborted) draining = true;
    options.signal?.addEventListener('abort', drain, { once: true });
    const handle = options.handleSignals ?? true;
    if (handle) { process.on('SIGTERM', drain); process.on('SIGINT', drain); }
    try {
      for (;;) {
        const ended = await once();
        if (ended.kind === 'ok') return;
        if (ended.kind === 'refused') throw ended.error;
        dispatcher.dropAll();
        // Asked to stop while the sidecar is gone: the sidecar dropped our activations with
        // the stream, so there is nothing left to drain.
        if (draining) return;
        if (ended.registered) backoff.reset();
        const delay = backoff.nextDelay();
        options.onDisconnect?.(ended.why, delay);
        await sleep(delay, stop.signal);
        if (draining) return;
      }
    } finally {
      stateClient.close();
      options.signal?.removeEventListener('abort', drain);
      if (handle) { process.off('SIGTERM', drain); process.off('SIGINT', drain); }
    }

    function once(): Promise<Ended> {
      return new Promise<Ended>((resolve) => {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        const raw: any = new ActorHostClient(target, grpc.credentials.createInsecure());
        const stream: grpc.ClientDuplexStream<unknown, any> = raw.Serve();
        let registered = false;
        const send = (r: WireResult) => {
          if (stream.writable) stream.write({ result: r });
        };
        drainCurrent = () => { if (stream.writable) stream.write({ drain: {} }); };
        stream.on('error', () => {}); // the 'status' event below says how it ended
        stream.on('data', (msg: { msg: string; registered?: { hostId: string; maxPayloadBytes: string }; turn?: WireTurn; fenced?: { reason: string } }) => {
          if (msg.msg === 'registered' && msg.registered) {
            registered = true;
            backoff.reset();
            options.onRegistered?.({ hostId: msg.registered.hostId, maxPayloadBytes: Number(msg.registered.maxPayloadBytes) });
            if (draining) drainCurrent?.();
          } else if (msg.msg === 'turn' && msg.turn) {
            void dispatcher.handle(msg.turn).then(send);
          } else if (msg.msg === 'fenced' && msg.fenced) {
            dispatcher.fence(msg.fenced.reason);
          }
        });
        stream.on('status', (s: grpc.StatusObject) => {
          drainCurrent = undefined;
          stream.end();
          raw.close();
          if (s.code === grpc.status.OK) return resolve({ kind: 'ok' });
          if (!registered && (s.code === grpc.status.INVALID_ARGUMENT || s.code === grpc.status.FAILED_PRECONDITION)) {
            const e = fromServiceError(s as unknown as grpc.ServiceError, target);
            if (e instanceof InvalidError || e instanceof WrongHostError) return resolve({ kind: 'refused', error: e });
          }
          resolve({ kind: 'broken', why: `${grpc.status[s.code]}: ${s.details}`, registered });
        });
        stream.write({ register });
      });
    }
  }

  return {
    definitions: defs,
    serve,
    client: (o) => new Client(o),
  };
}
