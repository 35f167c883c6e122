// The packaged .vsix in a real editor (issue 18): code-server with the extension installed, a workspace with a
// KernelBench-form module, Chromium driven by playwright-core. A user's path through it: the code lens appears, a
// job started from it shows its live step in the lens, the first diagnostic and the hover's timing table come, the
// candidate is inserted and saved, and the file on disk imports and agrees with Model; it is then no longer
// offered. Generation goes to the stand-in OpenAI-compatible endpoint of the Python tests
// (tests/server/endpoint_double.py), which answers with a known correct C++ kernel made many times slower than
// eager, and a wrong one (issue 27): the only correct kernel is shown for what it is, never offered as the result
// (no "Accept", no ★), and the user can still insert it, anyway.
//
// Run by scripts/e2e.sh (which installs code-server and Chromium and sets E2E_*). Screenshots of every step go to
// $E2E_ARTIFACTS; each step's time is printed.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const env = (name) => {
    const v = process.env[name];
    assert.ok(v, `${name} is not set (run scripts/e2e.sh)`);
    return v;
};
const VSIX = env('E2E_VSIX');
const PYTHON = env('E2E_PYTHON');
const CHROMIUM = env('E2E_CHROMIUM');
const REPO = env('E2E_REPO');
const ARTIFACTS = process.env.E2E_ARTIFACTS || path.join(HERE, 'artifacts');
const CODE_SERVER = path.join(HERE, 'node_modules', 'code-server', 'out', 'node', 'entry.js');
const JOB_TIMEOUT_MS = Number(process.env.E2E_JOB_TIMEOUT_S || 600) * 1000;
const CHROMIUM_FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// The module of the LSP tests (tests/server/relu2_model.py): relu(x) * 2, whose stand-in kernel is relu2.
const MODEL = fs.readFileSync(path.join(REPO, 'tests', 'server', 'relu2_model.py'), 'utf8');

// Loads the saved file as Python does, then checks ModelNew against Model on fresh inputs.
const CHECK_ON_DISK = `
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("relu_accepted", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ref, new = mod.Model(*mod.get_init_inputs()), mod.ModelNew(*mod.get_init_inputs())
for seed in range(3):
    torch.manual_seed(seed)
    inputs = mod.get_inputs()
    torch.testing.assert_close(new(*inputs), ref(*inputs))
print("ModelNew agrees with Model on 3 inputs")
`;

// A slower speed as kernel-lsp writes it: '1.58× slower', '48.3× ± 17 % slower' (uncertain: its interval is wide).
const SLOWER = '\\d+(\\.\\d+)?×( ± \\d+ %)? slower';
// the lens that takes a candidate: "Accept candidate 3 (…)" for a win, "Insert candidate 1 anyway (…)" otherwise
const takes = (l) => l.startsWith('Accept candidate') || l.startsWith('Insert candidate');
const times = {};
const started = Date.now();
const since = (t0) => (Date.now() - t0) / 1000;
const sleep = (ms) => delay(ms);

function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.listen(0, '127.0.0.1', () => {
            const { port } = srv.address();
            srv.close(() => resolve(port));
        });
        srv.on('error', reject);
    });
}

async function until(what, fn, timeoutMs, intervalMs = 150) {
    const end = Date.now() + timeoutMs;
    for (;;) {
        const v = await fn();
        if (v) {
            return v;
        }
        if (Date.now() > end) {
            throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
        }
        await sleep(intervalMs);
    }
}

/** The stand-in model endpoint: a Python process printing its base URL, stopped by closing its stdin. */
async function startEndpoint() {
    const proc = spawn(PYTHON, ['-u', path.join(REPO, 'tests', 'server', 'endpoint_double.py'), 'slowkernel,wrong'],
        { stdio: ['pipe', 'pipe', 'inherit'] });
    const url = await new Promise((resolve, reject) => {
        let buf = '';
        proc.stdout.on('data', (d) => {
            buf += d;
            const line = buf.split('\n')[0];
            if (buf.includes('\n')) {
                resolve(line.trim());
            }
        });
        proc.on('exit', (code) => reject(new Error(`the endpoint double exited (${code})`)));
    });
    return { url, stop: () => proc.stdin.end() };
}

function writeWorkspace(root, endpoint) {
    const ws = path.join(root, 'ws');
    fs.mkdirSync(path.join(ws, '.vscode'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'relu.py'), MODEL);
    // The workspace's settings, as a user would write them (README: kernelLsp.interpreter is a path).
    fs.writeFileSync(path.join(ws, '.vscode', 'settings.json'), JSON.stringify({
        'kernelLsp.interpreter': PYTHON,
        'kernelLsp.endpoint': endpoint,
        'kernelLsp.endpointModel': 'scripted',
        'kernelLsp.device': 'cpu',
        'kernelLsp.samples': 2,
        'kernelLsp.rounds': 1,
        'kernelLsp.trials': 3,
        'kernelLsp.timingCalls': 20,
        'kernelLsp.timeCompiled': false,
    }, null, 2));
    const user = path.join(root, 'user-data', 'User');
    fs.mkdirSync(user, { recursive: true });
    fs.writeFileSync(path.join(user, 'settings.json'), JSON.stringify({
        'security.workspace.trust.enabled': false,
        'workbench.startupEditor': 'none',
        'workbench.tips.enabled': false,
        'telemetry.telemetryLevel': 'off',
        'update.mode': 'none',
        'extensions.autoCheckUpdates': false,
        'extensions.autoUpdate': false,
        'editor.codeLens': true,
        'editor.hover.delay': 200,
        'files.autoSave': 'off',
    }, null, 2));
    return ws;
}

function codeServerEnv(root) {
    const home = path.join(root, 'home');
    fs.mkdirSync(home, { recursive: true });
    return {
        ...process.env,
        HOME: home, // code-server writes its config.yaml under ~/.config
        XDG_CONFIG_HOME: path.join(home, '.config'),
        XDG_DATA_HOME: path.join(home, '.local', 'share'),
        XDG_CACHE_HOME: path.join(root, 'cache'), // kernel-lsp's build cache: cold, as on a user's first run
        TORCH_EXTENSIONS_DIR: path.join(root, 'torch-extensions'),
    };
}

async function startCodeServer(root, ws, port, cenv) {
    const common = ['--user-data-dir', path.join(root, 'user-data'), '--extensions-dir', path.join(root, 'extensions')];
    const inst = spawnSync(process.execPath, [CODE_SERVER, ...common, '--install-extension', VSIX],
        { env: cenv, encoding: 'utf8', timeout: 120_000 });
    assert.equal(inst.status, 0, `--install-extension failed:\n${inst.stdout}\n${inst.stderr}`);
    assert.match(inst.stdout, /successfully installed/);
    const log = fs.openSync(path.join(ARTIFACTS, 'code-server.log'), 'w');
    const proc = spawn(process.execPath, [CODE_SERVER, ...common, '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none',
        '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust', '--ignore-last-opened', ws],
    { env: cenv, detached: true, stdio: ['ignore', log, log] });
    await until('code-server listening', async () => {
        const status = await new Promise((resolve) => {
            http.get(`http://127.0.0.1:${port}/healthz`, (r) => {
                r.resume();
                resolve(r.statusCode);
            }).on('error', () => resolve(0));
        });
        return status === 200;
    }, 60_000, 250);
    return proc;
}

function stopGroup(proc) {
    if (proc && proc.exitCode === null) {
        try {
            process.kill(-proc.pid, 'SIGTERM'); // code-server and everything it started (extension host, server)
        } catch {
            /* already gone */
        }
    }
}

// Monaco writes spaces as U+00A0 in what it renders
const lensTexts = (page) => page.$$eval('.codelens-decoration a',
    (els) => els.map((e) => (e.textContent || '').replace(/\u00a0/g, ' ').trim()));

test('the .vsix in code-server: lens, live job, diagnostic, hover, accept', { timeout: 900_000 }, async (t) => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of fs.readdirSync(ARTIFACTS)) { // this test's files from an earlier run (not anything else there)
        if (/^(\d\d-[\w-]+\.png|failure\.png|code-server\.log|relu_accepted\.py)$/.test(f)) {
            fs.rmSync(path.join(ARTIFACTS, f));
        }
    }
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-e2e-'));
    const shot = async (page, name) => page.screenshot({ path: path.join(ARTIFACTS, name) });
    const endpoint = await startEndpoint();
    t.after(() => endpoint.stop());
    const ws = writeWorkspace(root, endpoint.url);
    const port = await freePort();
    const cenv = codeServerEnv(root);
    const server = await startCodeServer(root, ws, port, cenv);
    t.after(() => stopGroup(server));
    times['code-server up'] = since(started);

    const browser = await chromium.launchPersistentContext(path.join(root, 'chromium'), {
        executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS, viewport: { width: 1500, height: 950 },
    });
    t.after(() => browser.close());
    const page = browser.pages()[0] ?? (await browser.newPage());
    try {
        await userPath(page, ws, port, shot);
        t.after(() => fs.rmSync(root, { recursive: true, force: true, maxRetries: 3 })); // kept when it failed
    } catch (e) {
        await shot(page, 'failure.png').catch(() => undefined); // where it stopped
        throw e;
    }
});

async function userPath(page, ws, port, shot) {
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
    await page.waitForSelector('.monaco-workbench .explorer-folders-view', { timeout: 90_000 });
    await shot(page, '01-workbench.png');

    // 1. open the module: the code lens appears
    await page.locator('.explorer-folders-view .monaco-list-row', { hasText: 'relu.py' }).click();
    const opened = Date.now();
    await until('the Generate kernel lens', async () => (await lensTexts(page)).includes('⚡ Generate kernel'), 120_000);
    times['lens after open'] = since(opened);
    const first = await lensTexts(page);
    assert.deepEqual(first, ['⚡ Generate kernel', 'Best of 2', 'Profile'], `lenses: ${first}`);
    await shot(page, '02-lens.png');

    // 2. start a job from the lens: the spinning lens shows the job's live step, which changes while it runs
    await page.locator('.codelens-decoration a', { hasText: 'Generate kernel' }).click();
    const clicked = Date.now();
    const steps = [];
    let firstDiagnostic = null;
    let lastRunning = Date.now();
    await until('the job to end', async () => {
        const lenses = await lensTexts(page);
        const running = lenses.find((l) => l.endsWith('— cancel'));
        if (running && steps.at(-1) !== running) {
            steps.push(running);
            if (steps.length === 1) {
                await shot(page, '03-job-started.png');
            } else if (steps.length === 2) {
                await shot(page, '04-job-live-step.png');
            }
        }
        if (firstDiagnostic === null && (await page.$('.view-overlays [class*="squiggly-info"]'))) {
            firstDiagnostic = since(clicked);
            await shot(page, '05-first-diagnostic.png');
        }
        if (running) {
            lastRunning = Date.now();
        }
        // ended: a lens to take a candidate, or no running lens for 5 s after one was seen (a job that failed)
        return !running && (lenses.some(takes)
            || (steps.length > 0 && Date.now() - lastRunning > 5000));
    }, JOB_TIMEOUT_MS, 150);
    times.job = since(clicked);
    times['first diagnostic'] = firstDiagnostic;
    console.log(`the job's lens said, in turn:\n  ${steps.join('\n  ')}`);
    assert.ok(steps.length >= 3, `the running job's lens changed only ${steps.length - 1} time(s): ${steps}`);
    assert.ok(steps.every((s) => s.startsWith('generate: ')), `${steps}`); // the codicon is not text
    assert.ok(firstDiagnostic !== null, 'no Information squiggle on Model while the job ran or when it ended');
    const done = await lensTexts(page);
    if (!done.some(takes)) {
        await page.keyboard.press('Control+Shift+M');
        await sleep(1000);
        const rows = await page.$$eval('.markers-panel .monaco-list-row', (els) => els.map((e) => e.textContent || ''));
        assert.fail(`the job ended without a candidate to accept; lenses: ${done}; problems: ${rows.join(' / ')}`);
    }
    assert.ok(done.includes('⚡ Generate kernel'), `${done}`);
    // the only correct kernel is slower than eager: nothing is offered as the result, the lens says "anyway" and
    // how slow, in words; on a busy machine with its ± figure (the reason is in the hover)
    assert.ok(!done.some((l) => l.startsWith('Accept')), `${done}`);
    const insertLens = done.find(takes);
    assert.match(insertLens, new RegExp(`^Insert candidate \\d+ anyway \\(${SLOWER} than eager(, uncertain)?\\)$`));
    assert.ok(!insertLens.includes('±') || insertLens.endsWith(', uncertain)'), insertLens);
    const number = insertLens.match(/^Insert candidate (\d+)/)[1];

    // 3. the diagnostic as the Problems panel shows it: plain text, the speed in words
    await page.keyboard.press('Control+Shift+M');
    const problem = await until('the candidate in the Problems panel', async () => {
        const rows = await page.$$eval('.markers-panel .monaco-list-row', (els) => els.map((e) => (e.textContent || '').replace(/\u00a0/g, ' ')));
        return rows.find((r) => r.includes('the fastest correct one'));
    }, 20_000);
    assert.match(problem, new RegExp(`no kernel faster than eager yet: the fastest correct one, candidate ${number}, is ${SLOWER} than eager \\(.* ms vs .* ms\\)(, uncertain)?, correct on \\d+ trials`));
    assert.ok(!problem.includes('±') || problem.includes(', uncertain, correct on'), problem);
    assert.ok(!problem.includes('`'), problem);
    await shot(page, '06-problems.png');
    await page.keyboard.press('Control+Shift+M'); // close the panel again

    // 4. the hover on the class name: the candidates' timing table
    const name = page.locator('.view-line', { hasText: 'class Model(nn.Module):' }).locator('span span', { hasText: /^Model$/ });
    await name.first().hover();
    const hover = await until('the hover table', async () => {
        const h = await page.$('.monaco-hover:not(.hidden)');
        const text = h ? await h.textContent() : '';
        return text && text.includes('vs torch.compile') ? text : '';
    }, 20_000, 200);
    assert.ok(hover.includes('kernel-lsp — Model'), hover);
    assert.match(hover, /vs eager/);
    assert.match(hover, new RegExp(SLOWER));
    assert.ok(!hover.includes('★'), hover); // nothing is marked as the result
    assert.match(hover, new RegExp(`No kernel faster than eager: the fastest correct one, candidate ${number}, is ${SLOWER}`));
    await sleep(600); // the hover fades in
    await shot(page, '07-hover.png');
    await page.mouse.move(1400, 900);
    await page.keyboard.press('Escape');

    // 5. insert it anyway, save: the file on disk holds the candidate; it is no longer offered
    const file = path.join(ws, 'relu.py');
    await page.locator('.codelens-decoration a', { hasText: 'Insert candidate' }).click();
    const accepting = Date.now();
    await until('the accepted block in the editor', async () => {
        const lines = await page.$$eval('.view-line', (els) => els.map((e) => (e.textContent || '').replace(/\u00a0/g, ' ')));
        return lines.some((l) => l.includes('kernel-lsp: accepted candidate'));
    }, 30_000);
    assert.equal(fs.readFileSync(file, 'utf8'), MODEL, 'the file changed on disk before the user saved');
    await page.keyboard.press('Control+S');
    await until('the accepted block on disk', () => fs.readFileSync(file, 'utf8').includes('# >>> kernel-lsp: accepted candidate'), 30_000);
    times.accept = since(accepting);
    const after = await until('the lenses of a file holding the candidate', async () => {
        const lenses = await lensTexts(page);
        return lenses.includes('Verify ModelNew') && !lenses.some(takes) ? lenses : null;
    }, 30_000);
    assert.deepEqual(after, ['⚡ Generate kernel', 'Best of 2', 'Verify ModelNew', 'Refine ModelNew', 'Profile']);
    await shot(page, '08-accepted.png');
    // the check on save takes the accepted candidate's verdict (no second build), with its speed
    await page.keyboard.press('Control+Shift+M');
    const check = await until('the check of ModelNew in the Problems panel', async () => {
        const rows = await page.$$eval('.markers-panel .monaco-list-row', (els) => els.map((e) => (e.textContent || '').replace(/\u00a0/g, ' ')));
        return rows.find((r) => r.includes('ModelNew: '));
    }, 60_000);
    assert.match(check, new RegExp(`ModelNew: ${SLOWER} than eager .*\\(candidate ${number} as accepted: its check\\)`));
    await shot(page, '09-after-save.png');

    // 6. the saved file imports, builds its kernel and agrees with Model
    const t0 = Date.now();
    const run = spawnSync(PYTHON, ['-c', CHECK_ON_DISK, file], {
        env: { ...process.env, TORCH_EXTENSIONS_DIR: path.join(path.dirname(ws), 'torch-extensions-check') },
        encoding: 'utf8', timeout: 600_000,
    });
    times['check on disk'] = since(t0);
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /agrees with Model/);
    fs.copyFileSync(file, path.join(ARTIFACTS, 'relu_accepted.py'));
}

test.after(() => {
    times.total = since(started);
    const lines = Object.entries(times).map(([k, v]) => `  ${k.padEnd(18)} ${v === null ? '—' : `${v.toFixed(1)} s`}`);
    console.log(`editor e2e step times:\n${lines.join('\n')}\nscreenshots: ${ARTIFACTS}`);
});

// The embedded model (SmolLM2-135M through llama-cpp-python) while it writes: the running job's lens counts the
// tokens so far and their rate, and Best of n says how long the model may write. Opt in with E2E_EMBEDDED=1 (it
// runs the real model on the CPU for a minute or so; the stand-in endpoint above covers the rest of the path).
test('the embedded model in code-server: tokens while it writes', {
    timeout: 600_000, skip: process.env.E2E_EMBEDDED === '1' ? false : 'set E2E_EMBEDDED=1 to run the embedded model',
}, async (t) => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-e2e-embedded-'));
    const shot = async (page, name) => page.screenshot({ path: path.join(ARTIFACTS, name) });
    const ws = writeWorkspace(root, '');
    const settings = path.join(ws, '.vscode', 'settings.json');
    const s = JSON.parse(fs.readFileSync(settings, 'utf8'));
    delete s['kernelLsp.endpoint'];
    delete s['kernelLsp.endpointModel'];
    delete s['kernelLsp.samples'];
    fs.writeFileSync(settings, JSON.stringify(s, null, 2));
    const port = await freePort();
    const server = await startCodeServer(root, ws, port, codeServerEnv(root));
    t.after(() => stopGroup(server));
    const browser = await chromium.launchPersistentContext(path.join(root, 'chromium'), {
        executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS, viewport: { width: 1500, height: 950 },
    });
    t.after(() => browser.close());
    const page = browser.pages()[0] ?? (await browser.newPage());
    try {
        await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
        await page.waitForSelector('.monaco-workbench .explorer-folders-view', { timeout: 90_000 });
        await page.locator('.explorer-folders-view .monaco-list-row', { hasText: 'relu.py' }).click();
        const lenses = await until('the Generate kernel lens', async () => {
            const l = await lensTexts(page);
            return l.includes('⚡ Generate kernel') ? l : null;
        }, 120_000);
        const best = lenses.find((l) => l.startsWith('Best of'));
        assert.match(best, /^Best of \d+ \(embedded model: up to \d+ min\)$/, `${lenses}`);
        await page.locator('.codelens-decoration a', { hasText: 'Generate kernel' }).click();
        const counts = [];
        await until('token counts rising in the running lens', async () => {
            const running = (await lensTexts(page)).find((l) => l.endsWith('— cancel'));
            const m = running && running.match(/(\d+)\/\d+ tokens, \d+(\.\d+)? tok\/s/);
            if (m && counts.at(-1) !== Number(m[1])) {
                counts.push(Number(m[1]));
                if (counts.length === 2) {
                    await shot(page, '10-embedded-writing.png');
                }
            }
            return counts.length >= 3;
        }, 300_000, 200);
        console.log(`the running lens counted tokens: ${counts.join(', ')}`);
        assert.ok(counts.every((c, i) => i === 0 || c > counts[i - 1]), `${counts}`);
        await page.locator('.codelens-decoration a', { hasText: '— cancel' }).click();
        await until('the job cancelled', async () => !(await lensTexts(page)).some((l) => l.endsWith('— cancel')),
            60_000);
        t.after(() => fs.rmSync(root, { recursive: true, force: true, maxRetries: 3 }));
    } catch (e) {
        await shot(page, 'failure-embedded.png').catch(() => undefined);
        throw e;
    }
});
