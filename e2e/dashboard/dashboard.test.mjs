// The browser test of `sigx dashboard`: a 3-host cluster of the real binaries (`sigx dev up
// --hosts 3`), counters called through the CLI, the dashboard served by the real `sigx`, and
// the page read in headless Debian chromium driven by playwright-core. It checks the numbers
// the page shows against what the test did and what the actors say about themselves, the actor
// search, and that the page follows a host that stops (its sidecar frozen with SIGSTOP: the row
// turns unreachable and stays, then the fleet count drops once its lease lapses) and comes back
// fenced (SIGCONT). Screenshots go to e2e/artifacts/ (git-ignored).
//
//   SIGX_BIN_DIR=target/debug node --test e2e/dashboard/dashboard.test.mjs   (make test-dashboard)
//
// A missing chromium or playwright-core fails the test: it never skips.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ARTIFACTS = path.join(HERE, "..", "artifacts");
const CHROMIUM = "/usr/bin/chromium";
const KEYS = ["k0", "k1", "k2", "k3", "k4", "k5", "k6"];

function binDir() {
  const dir = process.env.SIGX_BIN_DIR;
  assert.ok(dir, "SIGX_BIN_DIR is not set: point it at the built binaries (make test-dashboard does)");
  const sigx = path.join(dir, "sigx");
  assert.ok(fs.existsSync(sigx), `${sigx} is not built: cargo build -p sigx-cli -p sigx-sidecar -p sigx-example-counter`);
  return path.resolve(dir);
}

async function loadPlaywright() {
  assert.ok(fs.existsSync(CHROMIUM),
    `${CHROMIUM} is missing: install Debian's chromium (bash scripts/install-tools.sh dashboard)`);
  try {
    return (await import("playwright-core")).chromium;
  } catch (e) {
    assert.fail(`playwright-core is not installed in e2e/dashboard (bash scripts/install-tools.sh dashboard): ${e.message}`);
  }
}

/** A child process whose output lines are collected; `waitLine` waits for one. */
function cleanEnv(extra = {}) {
  const env = { ...process.env, ...extra };
  // Nothing of this shell's sigx settings may reach the cluster or the CLI.
  for (const k of ["SIGX_SOCKET", "SIGX_ACTORS", "SIGX_WORKERS"]) delete env[k];
  return env;
}

function start(cmd, args, env = {}) {
  const child = spawn(cmd, args, { env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  const waiters = [];
  for (const stream of [child.stdout, child.stderr]) {
    let buf = "";
    stream.on("data", (d) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
        for (const w of [...waiters]) w();
      }
    });
  }
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return {
    child, lines, exited,
    waitLine(what, ok, ms = 60_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const l = lines.find(ok);
          if (l !== undefined) {
            waiters.splice(waiters.indexOf(check), 1);
            clearTimeout(timer);
            resolve(l);
          }
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(check), 1);
          reject(new Error(`no line ${what} within ${ms} ms; ${cmd} printed:\n${lines.join("\n")}`));
        }, ms);
        waiters.push(check);
        check();
      });
    },
  };
}

function sigx(bin, args) {
  const out = spawnSync(path.join(bin, "sigx"), args, { encoding: "utf8", env: cleanEnv() });
  assert.equal(out.status, 0, `sigx ${args.join(" ")} failed: ${out.stdout}${out.stderr}`);
  return out.stdout;
}

/** The pid of the sidecar serving `socket` (it is dev up's child, started with --socket). */
function sidecarPid(socket) {
  for (const pid of fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    let argv;
    try {
      argv = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    const at = argv.indexOf("--socket");
    if (path.basename(argv[0]) === "sigx-sidecar" && at >= 0 && argv[at + 1] === socket) return Number(pid);
  }
  assert.fail(`no sigx-sidecar process serves ${socket}`);
}

// The byte-range locks `pid` holds for writing (/proc/locks), e.g. SQLite's WAL write lock.
function writeLocksOf(pid) {
  return fs.readFileSync("/proc/locks", "utf8").split("\n")
    .filter((l) => { const f = l.trim().split(/\s+/); return f[3] === "WRITE" && Number(f[4]) === pid; });
}

// Stops a sidecar where it holds no write lock. The dev cluster shares one SQLite file: a process
// stopped inside a write transaction keeps every other host from renewing its lease, and after a
// TTL they fence too (a hazard of the embedded dev store, not of a stopped host). This test is
// about a stopped host, so it stops the sidecar between writes.
async function stopBetweenWrites(pid) {
  for (let attempt = 1; ; attempt++) {
    process.kill(pid, "SIGSTOP");
    const held = writeLocksOf(pid);
    if (held.length === 0) return;
    console.error(`sidecar ${pid} stopped holding a write lock (${held.join("; ")}); attempt ${attempt}, resuming it`);
    process.kill(pid, "SIGCONT");
    if (attempt >= 50) assert.fail(`sidecar ${pid} held a write lock at each of 50 stops`);
    await new Promise((r) => setTimeout(r, 37));
  }
}

/** Prints the end of every host's sidecar and app log under the dev directory `dir`. */
function dumpHostLogs(dir) {
  let hosts = [];
  try {
    hosts = fs.readdirSync(dir).filter((d) => d.startsWith("host-")).sort();
  } catch {
    return;
  }
  for (const h of hosts) {
    for (const f of ["sidecar.log", "app.log"]) {
      let lines = [];
      try {
        lines = fs.readFileSync(path.join(dir, h, f), "utf8").trimEnd().split("\n");
      } catch {
        continue;
      }
      console.error(`--- ${h}/${f} (last 60 of ${lines.length} lines)`);
      console.error(lines.slice(-60).join("\n"));
    }
  }
}

/** Polls `fn` until it returns a truthy value (or throws no more), for up to `ms`. */
async function eventually(what, fn, ms = 20_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = new Error(`${what}: not yet (got ${JSON.stringify(v)})`);
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms: ${last.message}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("the dashboard shows a 3-host dev cluster, finds actors, and follows a host that stops", async (t) => {
  const chromium = await loadPlaywright();
  const bin = binDir();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sx-dash-"));
  const dir = path.join(scratch, "d");
  const cleanups = [];
  let passed = false;
  let fleetUrl = null;
  t.after(async () => {
    // A failure is the sidecars' doing, the dashboard's or the browser's: before anything stops,
    // show what the dashboard serves (read without the browser), then what each host logged.
    if (!passed && fleetUrl) {
      try {
        const s = await (await fetch(fleetUrl, { signal: AbortSignal.timeout(5_000) })).json();
        console.error(`--- ${fleetUrl} at the failure: ${s.summary.text}; activations by type ` +
          `${JSON.stringify(s.activationsByType)}; hosts ` +
          JSON.stringify(s.hosts.map((h) => [h.source, h.state, h.reachable, h.fenceReason, h.activations])));
      } catch (e) {
        console.error(`--- ${fleetUrl} did not answer at the failure: ${e.message}`);
      }
    }
    for (const c of cleanups.reverse()) await c().catch(() => {});
    if (!passed) dumpHostLogs(dir);
    fs.rmSync(scratch, { recursive: true, force: true });
  });

  // 1. The cluster: three sidecars and counter apps, a short lease so a stopped host lapses.
  // Rebalancing off (the sidecars inherit SIGX_REBALANCE): live activations stay where the
  // calls put them, so the page's figures can be held to exactly what the test did.
  const dev = start(path.join(bin, "sigx"),
    ["dev", "up", "--hosts", "3", "--dir", dir, "--beat-ms", "500", "--ttl-ms", "3000"],
    { SIGX_BIN_DIR: bin, SIGX_REBALANCE: "false" });
  cleanups.push(async () => {
    dev.child.kill("SIGINT");
    await Promise.race([dev.exited, new Promise((r) => setTimeout(r, 30_000))]);
    dev.child.kill("SIGKILL");
  });
  await dev.waitLine("saying the cluster is running", (l) => l.startsWith("running; Ctrl-C"));
  const socket = (n) => path.join(dir, `host-${n}`, "sidecar.sock");

  // 2. Seven counters through the three hosts in turn, and alice, who says where she runs.
  KEYS.forEach((k, i) => sigx(bin, ["call", `Counter/${k}`, "increment", "--socket", socket((i % 3) + 1)]));
  const alice = JSON.parse(sigx(bin, ["call", "Counter/alice", "info", "--socket", socket(2)]));
  const activations = KEYS.length + 1;
  const ids = {};
  for (const n of [1, 2, 3]) {
    ids[n] = JSON.parse(sigx(bin, ["status", "--json", "--socket", socket(n)])).host.id;
  }

  // 3. The dashboard on a free port, pointed at the dev directory.
  const dash = start(path.join(bin, "sigx"),
    ["dashboard", "--dir", dir, "--listen", "127.0.0.1:0", "--interval", "300ms", "--probe-timeout", "1s"]);
  cleanups.push(async () => dash.child.kill("SIGKILL"));
  const url = (await dash.waitLine("with the dashboard's address", (l) => l.startsWith("sigx dashboard: http://"), 10_000))
    .match(/http:\/\/\S+\//)[0];
  fleetUrl = `${url}api/fleet`;

  // 4. Headless chromium with a fresh profile.
  const profile = fs.mkdtempSync(path.join(scratch, "chromium-"));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-dev-shm-usage",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1500, height: 900 },
  });
  cleanups.push(async () => browser.close());
  // Every read has a short wait: `eventually` owns the deadlines, and an element not there yet
  // is a "not yet" it retries and reports, not one 30 s wait that outlives it.
  browser.setDefaultTimeout(5_000);
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.on("crash", () => console.error("chromium's renderer crashed: the page no longer answers"));
  await page.goto(url, { timeout: 20_000 });
  const text = (sel) => page.locator(sel).innerText();
  const expectText = async (sel, want) => {
    const got = await text(sel);
    if (got !== want) throw new Error(`${sel} shows ${JSON.stringify(got)}, not ${JSON.stringify(want)}`);
    return true;
  };
  const row = (source) => page.locator(`#hosts tbody tr[data-source="${source}"]`);

  // The fleet: three ready hosts on this one machine, each under its own id.
  await eventually("the summary says 3 hosts on 1 node",
    async () => expectText("#summary", "3 host(s) / 1 node(s)"));
  assert.equal(await page.locator("#hosts tbody tr").count(), 3);
  for (const n of [1, 2, 3]) {
    assert.equal(await row(`host-${n}`).getAttribute("data-host-id"), ids[n]);
    assert.equal(await row(`host-${n}`).getAttribute("data-state"), "ready");
    assert.equal(await row(`host-${n}`).locator('[data-testid="host-node"]').innerText(), os.hostname());
  }
  assert.match(await text("#reachability"), /3 of 3 sidecar\(s\) answered/);

  // Activations per type: every counter called, and the hosts' rows add up to it.
  await eventually(`Counter shows ${activations} activations`, async () =>
    expectText('#activations tr[data-type="Counter"] [data-testid="activation-count"]', String(activations)));
  let perHost = 0;
  const actsOf = {};
  for (const n of [1, 2, 3]) {
    actsOf[n] = Number((await row(`host-${n}`).locator('[data-testid="host-activations"]').innerText()).split(" ")[0]);
    perHost += actsOf[n];
  }
  assert.equal(perHost, activations);
  // The same figure through the other path, the directory's enumeration.
  const listed = JSON.parse(sigx(bin, ["actors", "list", "Counter", "--json", "--socket", socket(1)]));
  assert.equal(listed.actors.length, activations);
  assert.equal(await text('#counters tr[data-counter="activations"] td.num'), String(activations));
  assert.equal(await text('#counters tr[data-counter="turns"] td.num'), String(activations));

  // Latency from /metrics: each CLI call is one app API Call on the host it went through.
  await eventually(`the fleet latency counts ${activations} calls`, async () =>
    expectText('#latency tr[data-metric="calls"] td.num', String(activations)));
  assert.equal(await text('#latency tr[data-metric="hosts measured"] td.num'), "3");
  assert.match(await text('#latency tr[data-metric="mean"] td.num'), /^\d+(\.\d+)? ms$/);
  assert.match(await text('#counters'), /localDispatches|remoteDispatches/);

  // The actor search: alice is where she says she is; a list finds every counter.
  await page.fill("#search-input", "Counter/alice");
  await page.click("#search-button");
  const foundAlice = page.locator('[data-testid="search-found"]');
  await foundAlice.waitFor({ timeout: 10_000 });
  assert.equal(await foundAlice.getAttribute("data-host-id"), alice.host_id);
  assert.match(await foundAlice.innerText(), new RegExp(`active on host ${alice.host_id} \\(activation ${alice.activation_id}`));
  await page.fill("#search-input", "Counter");
  await page.click("#search-button");
  await page.locator('[data-testid="search-summary"]').waitFor({ timeout: 10_000 });
  assert.match(await text('[data-testid="search-summary"]'), new RegExp(`^${activations} live actor\\(s\\) of type Counter`));
  assert.equal(await page.locator('[data-testid="search-list"] tbody tr').count(), activations);
  assert.equal(await page.locator('[data-testid="search-list"] tr[data-key="alice"]').getAttribute("data-host-id"), alice.host_id);
  await page.fill("#search-input", "Counter/nobody-called-me");
  await page.click("#search-button");
  await page.locator('[data-testid="search-not-active"]').waitFor({ timeout: 10_000 });

  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-3-hosts.png"), fullPage: true, timeout: 20_000 });

  // A dashboard given one socket sees the other hosts through that sidecar's view and asks each
  // for its /metrics at the health address its descriptor publishes (meta.health): they are
  // listed, counted, and show their own activations, with no socket for them.
  const one = start(path.join(bin, "sigx"),
    ["dashboard", "--socket", socket(1), "--listen", "127.0.0.1:0", "--interval", "300ms"]);
  cleanups.push(async () => one.child.kill("SIGKILL"));
  const oneUrl = (await one.waitLine("with the dashboard's address", (l) => l.startsWith("sigx dashboard: http://"), 10_000))
    .match(/http:\/\/\S+\//)[0];
  const page1 = await browser.newPage();
  await page1.goto(oneUrl, { timeout: 20_000 });
  await eventually("the one-socket page counts 3 hosts", async () =>
    (await page1.locator("#summary").innerText()) === "3 host(s) / 1 node(s)");
  await eventually("the one-socket page scrapes the other two", async () =>
    (await page1.locator('#hosts tbody tr[data-reachable="true"]').count()) === 3);
  assert.equal(await page1.locator('#hosts tbody tr[data-reachable="null"]').count(), 0);
  for (const n of [2, 3]) {
    const r = page1.locator(`#hosts tbody tr[data-host-id="${ids[n]}"]`);
    assert.match(await r.getAttribute("data-source"), /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    assert.equal(await r.getAttribute("data-state"), "ready");
    assert.equal(Number((await r.locator('[data-testid="host-activations"]').innerText()).split(" ")[0]), actsOf[n]);
    assert.equal(await r.locator('[data-testid="host-node"]').innerText(), os.hostname());
  }
  assert.match(await page1.locator("#reachability").innerText(), /3 of 3 sidecar\(s\) answered/);
  await page1.close();
  one.child.kill("SIGKILL");

  // 5. Host 3 stops: its sidecar frozen (dev up ends the whole cluster when a sidecar exits).
  const before = Number((await row("host-3").locator('[data-testid="host-activations"]').innerText()).split(" ")[0]);
  const stopped = sidecarPid(socket(3));
  cleanups.push(async () => process.kill(stopped, "SIGCONT"));
  await stopBetweenWrites(stopped);

  await eventually("host 3 is shown unreachable under its id", async () =>
    (await row("host-3").getAttribute("data-reachable")) === "false" &&
    (await row("host-3").getAttribute("data-host-id")) === ids[3]);
  assert.equal(await row("host-3").getAttribute("data-state"), "unreachable");
  // What is shown of it is its last answer, not a guess.
  assert.equal(await row("host-3").locator('[data-testid="host-node"]').innerText(), os.hostname());
  assert.match(await text("#reachability"), /2 of 3 sidecar\(s\) answered, 1 unreachable/);
  // What is summed is what answered.
  await eventually("the activations drop by host 3's", async () =>
    expectText('#activations tr[data-type="Counter"] [data-testid="activation-count"]', String(activations - before)));

  // Its lease lapses: the fleet count follows, the row stays.
  await eventually("the summary drops to 2 hosts", async () =>
    expectText("#summary", "2 host(s) / 1 node(s)"), 30_000);
  assert.equal(await page.locator("#hosts tbody tr").count(), 3, "an unreachable host is never dropped");
  assert.equal(await row("host-3").locator('[data-testid="host-membership"]').innerText(), "not in any view");
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-host-stopped.png"), fullPage: true, timeout: 20_000 });

  // 6. It resumes: its lease lapsed meanwhile, so it fences itself, and the page says so: it
  // answers again, fenced with its reason, and stays out of the fleet count.
  process.kill(stopped, "SIGCONT");
  await eventually("host 3 is shown fenced", async () =>
    (await row("host-3").getAttribute("data-state")) === "fenced");
  assert.equal(await row("host-3").getAttribute("data-reachable"), "true");
  assert.match(await row("host-3").locator('[data-testid="host-state"]').innerText(), /^fenced: \S/);
  assert.equal(await text("#fenced"), `fenced: ${ids[3]}`);
  await expectText("#summary", "2 host(s) / 1 node(s)");
  assert.match(await text("#reachability"), /3 of 3 sidecar\(s\) answered/);
  await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-host-fenced.png"), fullPage: true, timeout: 20_000 });

  // 7. The dashboard itself stops: the page says its figures are stale rather than freezing.
  dash.child.kill("SIGKILL");
  await page.locator("#stale").waitFor({ state: "visible", timeout: 10_000 });
  assert.match(await text("#stale"), /the dashboard does not answer/);
  passed = true;
});
