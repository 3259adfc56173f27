// SDK overhead bench (issue 15), Node.js: an actor call through a real sigx-sidecar next to a raw
// @grpc/grpc-js unary echo over a Unix socket, measured in the same run.
//
// * raw: a trivial @grpc/grpc-js server (the ActorHost service loaded from proto/ by
//   @grpc/proto-loader, only `Call`, answering the payload back) and a client on a Unix socket,
//   default options: the cost of one unary round trip on Node's stock gRPC stack.
// * sdk: `Client.call` → the sigx-sidecar process (release build, SIGX_BIN_DIR) → the Serve
//   stream → a `defineActorApp` app serving the `Bench` actor, whose `echo` returns its argument
//   → back. The SDK's payloads are JSON: a 62-character string, 64 bytes on the wire like the
//   raw echo's payload.
//
// Both sides live in this one process (client and server, as an app that calls actors does),
// like the Rust bench (e2e/benches/call.rs). The sequential calls of the two alternate in ROUNDS
// blocks so both see the same machine; then CONCURRENCY callers for THROUGHPUT_S seconds each.
// Prints one `lang-bench` line of key=value figures that scripts/bench-lang.sh reads.
//
// Run: `make bench-lang`, or (after `npm run build` in sdk/typescript)
// `SIGX_BIN_DIR=<dir with sigx-sidecar> node sdk/typescript/bench/bench_call.mjs`.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Client, defineActor, defineActorApp } from '../dist/index.js';

const SEQUENTIAL = Number(process.env.SIGX_BENCH_CALLS ?? 3000);
const ROUNDS = 6;
const WARMUP = 200;
const CONCURRENCY = 32;
const THROUGHPUT_S = Number(process.env.SIGX_BENCH_THROUGHPUT_S ?? 2);
const PAYLOAD = Buffer.alloc(64, 7);
const ARG = 'x'.repeat(62); // JSON "xxx…" = 64 bytes

const PROTO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'proto');
const v1 = grpc.loadPackageDefinition(
  protoLoader.loadSync(['sigx/actors/v1/app.proto'], { includeDirs: [PROTO], longs: String, enums: String, defaults: true, oneofs: true }),
).sigx.actors.v1;

function sidecarBinary() {
  const d = process.env.SIGX_BIN_DIR;
  if (!d || !existsSync(join(d, 'sigx-sidecar'))) {
    throw new Error(`bench_call.mjs: set SIGX_BIN_DIR to a directory holding sigx-sidecar (got ${d})`);
  }
  return join(d, 'sigx-sidecar');
}

const Bench = defineActor('Bench', { methods: { echo(_ctx, x) { return x; } } });
const app = defineActorApp({ actors: [Bench], name: 'node-bench' });

const now = () => performance.now() * 1000; // µs
const pct = (sorted, q) => sorted[Math.floor((sorted.length - 1) * q)];

async function throughput(call) {
  const until = performance.now() + THROUGHPUT_S * 1000;
  let done = 0;
  await Promise.all(Array.from({ length: CONCURRENCY }, async (_, w) => {
    for (let i = w; performance.now() < until; i += CONCURRENCY) {
      await call(i);
      done++;
    }
  }));
  return done / THROUGHPUT_S;
}

async function measurePair(base, sdk) {
  for (let i = 0; i < WARMUP; i++) { await base(i); await sdk(i); }
  const lat = [[], []];
  const perRound = Math.floor(SEQUENTIAL / ROUNDS);
  for (let r = 0; r < ROUNDS; r++) {
    for (const [side, call] of [[0, base], [1, sdk]]) {
      for (let i = r * perRound; i < (r + 1) * perRound; i++) {
        const t = now();
        await call(i);
        lat[side].push(now() - t);
      }
    }
  }
  const out = [];
  for (const [side, call] of [[0, base], [1, sdk]]) {
    const s = lat[side].sort((a, b) => a - b);
    out.push({ p50: pct(s, 0.5), p99: pct(s, 0.99), perS: await throughput(call) });
  }
  return out;
}

const dir = mkdtempSync(join(tmpdir(), 'sigx-nodebench-'));
const socket = join(dir, 's.sock');
const log = openSync(join(dir, 'sidecar.log'), 'w');
const child = spawn(sidecarBinary(), [], {
  env: {
    ...process.env, SIGX_SOCKET: socket, SIGX_MEMBERSHIP: 'none', SIGX_HEALTH_ADDR: '127.0.0.1:0',
    SIGX_HOST_ID: 'node-bench', SIGX_INSECURE: 'true', SIGX_LOG: process.env.SIGX_LOG ?? 'warn',
  },
  stdio: ['ignore', log, log],
});
const exited = new Promise((ok) => child.on('exit', ok));
try {
  const rawPath = join(dir, 'raw.sock');
  const server = new grpc.Server();
  server.addService(v1.ActorHost.service, { Call: (call, cb) => cb(null, { payload: call.request.payload }) });
  await new Promise((ok, no) => server.bindAsync(`unix://${rawPath}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? no(e) : ok())));
  const raw = new v1.ActorHost(`unix://${rawPath}`, grpc.credentials.createInsecure());
  const request = { actor: { actorType: 'Bench', key: 'k' }, method: 'echo', payload: PAYLOAD };
  const base = () => new Promise((ok, no) => raw.Call(request, (e, res) => {
    if (e) return no(e);
    if (res.payload.length !== PAYLOAD.length) return no(new Error('bad echo'));
    ok();
  }));

  const until = Date.now() + 15_000;
  while (!existsSync(socket)) {
    if (child.exitCode !== null || Date.now() > until) throw new Error(`sigx-sidecar did not start:\n${readFileSync(join(dir, 'sidecar.log'))}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const target = `unix://${socket}`;
  const drain = new AbortController();
  let registered;
  const ready = new Promise((r) => (registered = r));
  const done = app.serve({ target, handleSignals: false, signal: drain.signal, onRegistered: registered });
  const client = new Client({ target });
  await ready;
  const viaSigx = async (i) => {
    const answer = await client.call('Bench', `k${i % 64}`, 'echo', ARG);
    if (answer !== ARG) throw new Error('bad echo');
  };
  const [rawF, sdkF] = await measurePair(base, viaSigx);
  drain.abort();
  await done;
  client.close();
  raw.close();
  server.forceShutdown();
  const version = createRequire(import.meta.url)('@grpc/grpc-js/package.json').version;
  console.log(
    `lang-bench lang=node stack=grpc-js-${version} calls=${SEQUENTIAL} ` +
      `raw_p50_us=${rawF.p50.toFixed(1)} raw_p99_us=${rawF.p99.toFixed(1)} raw_per_s=${rawF.perS.toFixed(0)} ` +
      `sdk_p50_us=${sdkF.p50.toFixed(1)} sdk_p99_us=${sdkF.p99.toFixed(1)} sdk_per_s=${sdkF.perS.toFixed(0)}`,
  );
} finally {
  if (child.exitCode === null) {
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(t);
  }
  rmSync(dir, { recursive: true, force: true });
}
