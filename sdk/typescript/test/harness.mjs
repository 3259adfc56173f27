// Test harness: the real sigx-sidecar process and the sigx.actors.v1 service loaded from proto/
// by @grpc/proto-loader. Only the stock @grpc/grpc-js with default channel options is used.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const PROTO = join(REPO, 'proto');

/** The sidecar binary: $SIGX_BIN_DIR, else $CARGO_TARGET_DIR/debug, else ./target/debug. */
export function sidecarBinary() {
  const dirs = [];
  if (process.env.SIGX_BIN_DIR) dirs.push(process.env.SIGX_BIN_DIR);
  if (process.env.CARGO_TARGET_DIR) dirs.push(join(process.env.CARGO_TARGET_DIR, 'debug'));
  dirs.push(join(REPO, 'target', 'debug'));
  for (const d of dirs) {
    if (existsSync(join(d, 'sigx-sidecar'))) return join(d, 'sigx-sidecar');
  }
  throw new Error(
    `no sigx-sidecar binary in ${dirs.join(', ')}: run \`cargo build --workspace --bins\` ` +
      'first, or point SIGX_BIN_DIR at the directory that holds it',
  );
}

const definition = protoLoader.loadSync(['sigx/actors/v1/app.proto'], {
  includeDirs: [PROTO],
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
export const sigx = grpc.loadPackageDefinition(definition).sigx.actors.v1;

// The rich error model's messages, decoded with protobufjs (the codec under proto-loader).
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => join(PROTO, target);
root.loadSync(['google/rpc/status.proto', 'sigx/actors/v1/errors.proto']);
const RpcStatus = root.lookupType('google.rpc.Status');
const ErrorDetail = root.lookupType('sigx.actors.v1.ErrorDetail');
export const TYPE_URL = 'type.googleapis.com/sigx.actors.v1.ErrorDetail';

/** Reads an error's `grpc-status-details-bin` as the standard google.rpc.Status. */
export function richError(err) {
  const [bin] = err.metadata.get('grpc-status-details-bin');
  if (!bin) throw new Error(`no grpc-status-details-bin on ${err.code} ${err.details}`);
  const status = RpcStatus.decode(bin);
  const details = status.details.map((any) => ({
    typeUrl: any.type_url ?? any.typeUrl,
    detail: ErrorDetail.toObject(ErrorDetail.decode(any.value), { enums: String }),
  }));
  return { code: status.code, message: status.message, details };
}

export function client(target) {
  return new sigx.ActorHost(target, grpc.credentials.createInsecure());
}

export function unary(c, method, request, deadlineMs = 15_000) {
  return new Promise((ok, fail) => {
    c[method](request, { deadline: Date.now() + deadlineMs }, (err, res) => (err ? fail(err) : ok(res)));
  });
}

/**
 * Waits until the sidecar at `target` has no app registered: a closed Serve stream detaches on
 * the sidecar's schedule, so a test that registers right after another one closed its app
 * would race the detach (and be refused as a second app).
 */
export async function untilNoApp(target, withinMs = 5_000) {
  const until = Date.now() + withinMs;
  for (;;) {
    const c = client(target);
    try {
      if (!(await unary(c, 'Status', {}, 2_000)).appConnected) return;
    } finally {
      c.close();
    }
    if (Date.now() > until) throw new Error(`an app is still registered after ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts a sigx-sidecar (no membership, insecure) in a fresh directory (or on `socket`), with
 * `env` added (e.g. a state store); resolves once it answers Status.
 */
export async function startSidecar({ socket, env = {} } = {}) {
  if (!socket) socket = join(mkdtempSync(join(tmpdir(), 'sigx-node-')), 's.sock');
  const child = spawn(sidecarBinary(), [], {
    env: {
      ...process.env,
      SIGX_SOCKET: socket,
      SIGX_MEMBERSHIP: 'none',
      SIGX_HEALTH_ADDR: '127.0.0.1:0',
      SIGX_HOST_ID: 'node-host',
      SIGX_INSECURE: 'true',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr.on('data', (b) => (log += b));
  const exited = new Promise((ok) => child.on('exit', (code, signal) => ok({ code, signal })));
  const sidecar = { child, socket, target: `unix://${socket}`, exited, log: () => log };
  const until = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`sigx-sidecar exited with ${child.exitCode}:\n${log}`);
    if (existsSync(socket)) {
      const c = client(sidecar.target);
      try {
        await unary(c, 'Status', {}, 2_000);
        return sidecar;
      } catch {
        // not ready yet
      } finally {
        c.close();
      }
    }
    if (Date.now() > until) {
      child.kill('SIGKILL');
      throw new Error(`sigx-sidecar did not answer Status within 15 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function stopSidecar(sidecar) {
  if (sidecar.child.exitCode === null && sidecar.child.signalCode === null) {
    sidecar.child.kill('SIGTERM');
    const timer = setTimeout(() => sidecar.child.kill('SIGKILL'), 30_000);
    await sidecar.exited;
    clearTimeout(timer);
  }
  rmSync(dirname(sidecar.socket), { recursive: true, force: true });
}

/**
 * A Counter actor on the Serve stream, one turn at a time: `incr` answers the new count in
 * ASCII, `fail` an APP error. `ended` resolves with the stream's final status.
 */
export function serveCounter(target) {
  const c = client(target);
  const stream = c.Serve();
  const counts = new Map();
  const events = [];
  let registered;
  const ready = new Promise((ok, fail) => {
    registered = { ok, fail };
  });
  const ended = new Promise((ok) => {
    stream.on('status', (s) => ok({ code: s.code, details: s.details }));
  });
  stream.on('error', (e) => registered.fail(e));
  stream.on('data', (msg) => {
    if (msg.msg === 'registered') return registered.ok(msg.registered);
    if (msg.msg !== 'turn') return;
    const turn = msg.turn;
    const key = turn.actor.key;
    events.push([turn.kind, key, turn.activationId]);
    let outcome;
    if (turn.kind === 'activate') {
      counts.set(key, 0);
      outcome = { ok: Buffer.alloc(0) };
    } else if (turn.kind === 'deactivate') {
      counts.delete(key);
      outcome = { ok: Buffer.alloc(0) };
    } else if (turn.invoke.method === 'incr') {
      counts.set(key, counts.get(key) + 1);
      outcome = { ok: Buffer.from(String(counts.get(key))) };
    } else {
      outcome = { error: { kind: 'ERROR_KIND_APP', message: 'asked to fail' } };
    }
    stream.write({ result: { turnId: turn.turnId, ...outcome } });
  });
  stream.write({ register: { actors: [{ name: 'Counter' }], appName: 'node-counter' } });
  return {
    ready,
    ended,
    events,
    close: () => {
      stream.end();
      c.close();
    },
  };
}
