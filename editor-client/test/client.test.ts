// The extension's real LanguageClient (bundled, under a fake `vscode`) against the real Python server: start,
// provider registration, a command through the client, kernelLsp/jobs → status bar, the cancel quick pick, and a
// settings change pulled by the server through the extension's workspace/configuration middleware.
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import Module from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { build } from 'esbuild';
import { defaultServerSettings } from '../src/config';
import { findServerPython } from './lsp/python';
import { EXTENSION_ROOT, readPackageJson } from './unit/helpers';
import { Uri, createFakeVscode, fakeDocument } from './extension/fakeVscode';

const pkg = readPackageJson();
const loader = Module as unknown as { _load: (request: string, parent: unknown, isMain: boolean) => unknown };
const found = findServerPython();
const python = found.python;

describe('the extension with the real server (bundle + fake vscode)', { skip: python ? false : `no Python with kernel_lsp found (${found.reason}); set KERNEL_LSP_PYTHON` }, () => {
    let outDir: string;
    let workspaceFolder: string;
    let fake: ReturnType<typeof createFakeVscode>;
    let ext: { activate(c: unknown): Promise<void>; deactivate(): Promise<void> };
    let uri: string;
    let classLine: number;
    // The fake's settings object itself: changing it is changing the user's settings.
    const settings: Record<string, unknown> = { device: 'cpu', samples: 1, rounds: 1, maxTokens: 256, strategy: 'zero-shot' };
    let restore: typeof loader._load;

    const settle = async (what: string, probe: () => boolean, timeoutMs = 60_000) => {
        const deadline = Date.now() + timeoutMs;
        while (!probe()) {
            if (Date.now() > deadline) {
                throw new Error(`timed out waiting for ${what}\nstatus: ${fake.status()?.text}\nmessages: ${JSON.stringify(fake.recorded.messages)}\nlog (tail):\n${fake.recorded.log.slice(-30).join('\n')}`);
            }
            await new Promise((r) => setTimeout(r, 25));
        }
    };

    before(async () => {
        outDir = mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-bundle-'));
        workspaceFolder = mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-ws-'));
        const file = path.join(workspaceFolder, 'elementwise_add.py');
        copyFileSync(path.join(EXTENSION_ROOT, 'test', 'fixtures', 'elementwise_add.py'), file);
        const text = readFileSync(file, 'utf8');
        classLine = text.split(/\r?\n/).findIndex((l) => l.startsWith('class Model('));
        uri = Uri.file(file).toString();
        const bundle = path.join(outDir, 'extension.js');
        await build({
            entryPoints: [path.join(EXTENSION_ROOT, 'src', 'extension.ts')],
            bundle: true,
            format: 'cjs',
            platform: 'node',
            target: 'node18',
            external: ['vscode'],
            outfile: bundle,
            logLevel: 'silent',
        });
        fake = createFakeVscode({
            settings: Object.assign(settings, { interpreter: [python!] }),
            defaults: { ...defaultServerSettings(pkg), interpreter: [] },
            workspaceFolder,
            languageClient: true,
            documents: [fakeDocument(file, text)],
            // kernelLsp.cancelJob's quick pick: the first (only) active job.
            quickPickAnswers: [(items) => items[0]],
        });
        restore = loader._load;
        loader._load = function (request: string, parent: unknown, isMain: boolean) {
            return request === 'vscode' ? fake.api : restore.call(this, request, parent, isMain);
        };
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        ext = require(bundle) as typeof ext;
        await ext.activate({ subscriptions: [], extension: { packageJSON: pkg, extensionPath: EXTENSION_ROOT } });
    });

    after(async () => {
        await ext?.deactivate();
        loader._load = restore;
        rmSync(outDir, { recursive: true, force: true });
        rmSync(workspaceFolder, { recursive: true, force: true });
    });

    it('starts the server and shows it running', async () => {
        await settle('the server to run', () => fake.status()?.text === '$(zap) kernel-lsp', 120_000);
        assert.ok(fake.recorded.log.some((l) => /kernel-lsp [\d.]+ on Python 3\.\d+/.test(l)), 'the install check was not logged');
        assert.deepEqual(
            fake.recorded.messages.filter((m) => m.level === 'error'),
            [],
        );
    });

    it('registers the server\'s providers and commands through vscode-languageclient', () => {
        const methods = new Set(fake.registrations.map((r) => r.method));
        assert.ok(methods.has('languages.registerCodeActionsProvider'), [...methods].join(', '));
        assert.ok(methods.has('languages.registerCodeLensProvider'), [...methods].join(', '));
        assert.ok(fake.commands.has('kernel-lsp.generate') && fake.commands.has('kernel-lsp.accept'), [...fake.commands.keys()].join(', '));
    });

    it('Show Candidates asks the server and says when there are none', async () => {
        const before = fake.recorded.messages.length;
        await fake.api.commands.executeCommand('kernelLsp.showCandidates', { uri, module: 'Model' });
        const m = fake.recorded.messages.slice(before);
        assert.deepEqual(
            m.map((x) => [x.level, x.text, x.actions]),
            [['info', 'kernel-lsp: no candidates for Model yet.', ['Optimize']]],
        );
    });

    it('Show Candidates at a line inside a module: the server names the module', async () => {
        const before = fake.recorded.messages.length;
        await fake.api.commands.executeCommand('kernelLsp.showCandidates', { uri, line: classLine + 6 });
        assert.deepEqual(
            fake.recorded.messages.slice(before).map((x) => x.text),
            ['kernel-lsp: no candidates for Model yet.'],
        );
        // the answer the extension asked for: kernel-lsp.moduleAt, the server's rule
        const answer = await fake.api.commands.executeCommand('kernel-lsp.moduleAt', { uri, line: classLine + 6 });
        assert.deepEqual(answer, { module: 'Model', modules: [{ name: 'Model', line: classLine }] });
    });

    it('Optimize Module starts a job that the status bar shows; Cancel Job cancels it from the quick pick', async () => {
        await fake.api.commands.executeCommand('kernelLsp.optimizeModule', { uri, line: classLine + 1, strategy: 'zero-shot' });
        await settle('the status bar to show the job', () => /kernel-lsp: 1 (running|queued)/.test(fake.status().text), 30_000);
        assert.match(String(fake.status().tooltip), /Model \(elementwise_add\.py\)/);
        await fake.api.commands.executeCommand('kernelLsp.cancelJob');
        const pick = fake.recorded.quickPicks.at(-1)!;
        assert.match(JSON.stringify(pick.options), /cancel which job/);
        await settle('the job to end', () => fake.status().text === '$(zap) kernel-lsp', 60_000);
        assert.ok(fake.recorded.progress.length > 0, 'no $/progress reached window.withProgress');
    });

    it('a settings change reaches the server without the client-only keys', async () => {
        fake.recorded.messages.length = 0;
        settings.samples = 3;
        fake.fireConfigurationChange(['kernelLsp.samples']);
        // The server answers the notification by pulling workspace/configuration; read back what it now holds.
        let serverSettings: Record<string, unknown> = {};
        const deadline = Date.now() + 10_000;
        while (Date.now() < deadline) {
            const info = (await fake.api.commands.executeCommand('kernel-lsp.debugInfo')) as { settings?: Record<string, unknown> } | undefined;
            serverSettings = info?.settings ?? {};
            if (serverSettings.samples === 3) {
                break;
            }
            await new Promise((r) => setTimeout(r, 200));
        }
        assert.equal(serverSettings.samples, 3, 'the server did not pick up the change');
        assert.deepEqual(
            fake.recorded.messages.filter((m) => /setting/i.test(m.text)).map((m) => m.text),
            [],
            'the server complained about the settings it was sent',
        );
    });
});
