// Helpers for the SDK's own tests (the stock-client tests use harness.mjs alone): serve an app on
// a fresh real sigx-sidecar, and wait for what its handlers saw.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '../dist/index.js';
import { startSidecar, stopSidecar } from './harness.mjs';

/**
 * Starts a sidecar on a socket in a fresh scratch directory (`env(dir)` adds to its
 * environment), serves `app` on it, runs `body(client)` once the app registered, then drains
 * the app, stops the sidecar and removes the scratch directory.
 */
export async function withServedApp(app, { prefix = 'sigx-node-', env = () => ({}) }, body) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const sidecar = await startSidecar({ socket: join(dir, 's.sock'), env: env(dir) });
  const drain = new AbortController();
  let registered;
  const ready = new Promise((r) => (registered = r));
  const done = app.serve({ target: sidecar.target, handleSignals: false, signal: drain.signal, onRegistered: registered });
  const client = new Client({ target: sidecar.target });
  try {
    await ready;
    return await body(client);
  } finally {
    drain.abort();
    await done;
    client.close();
    await stopSidecar(sidecar);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Waits for `check()` (deliveries arrive on the sidecar's schedule); the error shows `seen`. */
export async function until(what, check, { timeoutMs = 10_000, seen = [], everyMs = 20 } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms; saw ${JSON.stringify(seen)}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
