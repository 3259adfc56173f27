// examples/counter-ts as a user runs it: transpiled with the pinned TypeScript, run with node
// beside a real sidecar on SQLite state, called, stopped with SIGTERM (it drains and exits 0),
// and started again beside a restarted sidecar: the count was kept in the state API.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { Client } from '../dist/index.js';
import { startSidecar, stopSidecar } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const EXAMPLE = resolve(HERE, '..', '..', '..', 'examples', 'counter-ts', 'counter.ts');

// Under sdk/typescript, so `import '@sigx/sdk'` resolves to this package (self-reference).
function buildExample() {
  const out = join(HERE, '..', '.example-build'); // outside test/: node --test runs every .js there
  mkdirSync(out, { recursive: true });
  const js = ts.transpileModule(readFileSync(EXAMPLE, 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  writeFileSync(join(out, 'counter.js'), js);
  return join(out, 'counter.js');
}

function runExample(script, socket) {
  const child = spawn(process.execPath, [script], { env: { ...process.env, SIGX_SOCKET: socket }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (b) => (log += b));
  const exited = new Promise((ok) => child.on('exit', (code, signal) => ok({ code, signal })));
  return { child, exited, log: () => log };
}

async function callWhenServed(client, method, arg) {
  for (let i = 0; ; i++) {
    try {
      return await client.call('Counter', 'ts-example', method, arg, { timeoutMs: 5_000 });
    } catch (e) {
      if (i > 100 || !['unplaceable', 'unreachable', 'activation'].includes(e.kind)) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

test('the TypeScript counter example keeps its count in the state API across restarts', async (t) => {
  const script = buildExample();
  const dir = mkdtempSync(join(tmpdir(), 'sigx-nodex-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { SIGX_STATE: 'sqlite', SIGX_STATE_PATH: join(dir, 'state.db') };
  for (const [round, want] of [[1, [2, 5]], [2, [7, 10]]]) {
    const sidecar = await startSidecar({ socket: join(mkdtempSync(join(tmpdir(), `sigx-nodex${round}-`)), 's.sock'), env });
    const app = runExample(script, sidecar.socket);
    const client = new Client({ target: sidecar.target });
    try {
      assert.equal(await callWhenServed(client, 'incr', 2), want[0], app.log());
      assert.equal(await client.call('Counter', 'ts-example', 'incr', 3), want[1]);
      assert.equal(await client.call('Counter', 'ts-example', 'get'), want[1]);
      app.child.kill('SIGTERM');
      assert.deepEqual(await app.exited, { code: 0, signal: null }, `the example drains and exits 0 on SIGTERM:\n${app.log()}`);
    } finally {
      client.close();
      if (app.child.exitCode === null) app.child.kill('SIGKILL');
      await stopSidecar(sidecar);
    }
  }
});
