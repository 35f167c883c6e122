// Activates the bundled extension (the same esbuild bundle that ships) against a fake `vscode` module, and checks
// the glue that the unit tests cannot reach: command registration, the status bar, and what the user is told
// when the interpreter cannot run the server.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import Module from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { build } from 'esbuild';
import { defaultServerSettings } from '../../src/config';
import { EXTENSION_ROOT, readPackageJson } from '../unit/helpers';
import { EventEmitter, Uri, createFakeVscode, fakeDocument } from './fakeVscode';

type Fake = ReturnType<typeof createFakeVscode>;
interface ExtensionModule {
    activate(context: unknown): Promise<void>;
    deactivate(): Promise<void>;
}

const pkg = readPackageJson();
const defaults: Record<string, unknown> = { ...defaultServerSettings(pkg), interpreter: [] };
const loader = Module as unknown as { _load: (request: string, parent: unknown, isMain: boolean) => unknown };
let current: Fake | undefined;
let outDir: string;
let bundle: string;

before(async () => {
    outDir = mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-bundle-'));
    bundle = path.join(outDir, 'extension.js');
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
    const original = loader._load;
    loader._load = function (request: string, parent: unknown, isMain: boolean) {
        if (request === 'vscode') {
            assert.ok(current, 'vscode required outside a test');
            return current.api;
        }
        return original.call(this, request, parent, isMain);
    };
});

const workspaces: string[] = [];

after(() => {
    for (const dir of [outDir, ...workspaces]) {
        rmSync(dir, { recursive: true, force: true });
    }
});

async function activate(settings: Record<string, unknown>, extra: Partial<Parameters<typeof createFakeVscode>[0]> = {}) {
    const workspaceFolder = mkdtempSync(path.join(os.tmpdir(), 'kernel-lsp-ws-'));
    workspaces.push(workspaceFolder);
    current = createFakeVscode({ settings, defaults, workspaceFolder, ...extra });
    delete require.cache[bundle];
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const ext = require(bundle) as ExtensionModule;
    const context = { subscriptions: [] as { dispose(): unknown }[], extension: { packageJSON: pkg, extensionPath: EXTENSION_ROOT } };
    await ext.activate(context);
    return { ext, fake: current, context, workspaceFolder };
}

async function settle(fake: Fake, what: string, probe: () => boolean, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!probe()) {
        if (Date.now() > deadline) {
            throw new Error(`timed out waiting for ${what}\nlog:\n${fake.recorded.log.join('\n')}`);
        }
        await new Promise((r) => setTimeout(r, 20));
    }
}

describe('activation (bundle + fake vscode)', () => {
    it('registers exactly the contributed commands and shows the status bar item', async () => {
        const { ext, fake } = await activate({ interpreter: ['/nonexistent/bin/python'] });
        assert.deepEqual([...fake.commands.keys()].sort(), pkg.contributes.commands.map((c) => c.command).sort());
        assert.ok(fake.status()?.visible, 'no visible status bar item');
        await settle(fake, 'the error message', () => fake.recorded.messages.length > 0);
        await ext.deactivate();
    });

    it('tells the user when the interpreter cannot be run, and shows it in the status bar', async () => {
        const { ext, fake } = await activate({ interpreter: ['/nonexistent/bin/python'] });
        await settle(fake, 'the error message', () => fake.recorded.messages.length > 0);
        const m = fake.recorded.messages[0];
        assert.equal(m.level, 'error');
        assert.match(m.text, /cannot run the Python interpreter `\/nonexistent\/bin\/python`/);
        assert.ok(m.actions.includes('Open Settings'), `actions: ${m.actions.join(', ')}`);
        assert.match(fake.status().text, /\$\(error\) kernel-lsp/);
        assert.ok(fake.recorded.log.some((l) => l.includes('interpreter: /nonexistent/bin/python (from the kernelLsp.interpreter setting)')));
        await ext.deactivate();
    });

    const plainPython = ['python3', 'python'].find((p) => spawnSync(p, ['-c', 'import kernel_lsp'], { encoding: 'utf8' }).status === 1);
    it('offers the install command when kernel_lsp is missing', { skip: plainPython ? false : 'no Python without kernel_lsp on PATH' }, async () => {
        const { ext, fake } = await activate({ interpreter: [plainPython!] });
        await settle(fake, 'the error message', () => fake.recorded.messages.length > 0);
        const m = fake.recorded.messages[0];
        assert.match(m.text, /kernel-lsp is not installed in/);
        // not published on PyPI: the command installs a checkout, copied for the user to fill in, never run as it is
        assert.match(m.text, /-m pip install -e \/path\/to\/kernel-lsp/);
        assert.doesNotMatch(m.text, /pip install kernel-lsp/);
        assert.ok(m.actions.includes('Copy Install Command') && !m.actions.includes('Install in Terminal'), `actions: ${m.actions.join(', ')}`);
        assert.match(fake.status().text, /not installed/);
        await ext.deactivate();
    });

    it('restarts the server when kernelLsp.interpreter changes, not for other settings', async () => {
        const settings: Record<string, unknown> = { interpreter: ['/nonexistent/a'] };
        const { ext, fake } = await activate(settings);
        await settle(fake, 'the first check', () => fake.recorded.messages.length === 1);
        settings.interpreter = ['/nonexistent/b'];
        fake.fireConfigurationChange(['kernelLsp.interpreter']);
        await settle(fake, 'the restart', () => fake.recorded.messages.length === 2);
        assert.match(fake.recorded.messages[1].text, /\/nonexistent\/b/);
        assert.ok(fake.recorded.log.some((l) => l.includes('starting the server (kernelLsp.interpreter changed)')));
        fake.fireConfigurationChange(['kernelLsp.samples']);
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(fake.recorded.messages.length, 2, 'a server setting must not restart the server');
        await ext.deactivate();
    });

    it('Optimize Module asks for a strategy from the palette and from the context menu, the configured one first', async () => {
        const { ext, fake, workspaceFolder } = await activate(
            { interpreter: ['/nonexistent/bin/python'], strategy: 'refine' },
            { quickPickAnswers: [(items) => items.find((i) => i.label === 'best-of-n'), () => undefined] },
        );
        await settle(fake, 'startup', () => fake.recorded.messages.length > 0);
        const file = path.join(workspaceFolder, 'm.py');
        (fake.api.window as { activeTextEditor: unknown }).activeTextEditor = {
            document: fakeDocument(file, 'import torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n'),
            selection: { active: { line: 3, character: 0 } },
        };
        await fake.api.commands.executeCommand('kernelLsp.optimizeModule');
        const items = fake.recorded.quickPicks[0].items as { label: string; description?: string }[];
        assert.deepEqual(
            items.map((i) => i.label),
            ['refine', 'profile-guided', 'zero-shot', 'one-shot', 'best-of-n', 'agent'],
        );
        assert.equal(items[0].description, '(kernelLsp.strategy)');
        assert.match(fake.recorded.messages.at(-1)!.text, /optimize failed: the kernel-lsp server is not running/);
        // The editor's context menu passes the document's Uri: still a question, here dismissed (nothing sent).
        const before = fake.recorded.messages.length;
        await fake.api.commands.executeCommand('kernelLsp.optimizeModule', Uri.file(file));
        assert.equal(fake.recorded.quickPicks.length, 2);
        assert.equal(fake.recorded.messages.length, before, 'a dismissed pick must not start anything');
        await ext.deactivate();
    });

    it('follows the Python extension\'s active environment and restarts when it changes (unless the setting is set)', async () => {
        let active = '/nonexistent/env1/bin/python';
        const changed = new EventEmitter<unknown>();
        const environments = {
            getActiveEnvironmentPath: () => ({ id: active, path: active }),
            resolveEnvironment: (e: { path: string }) => Promise.resolve({ executable: { uri: { fsPath: e.path } } }),
            onDidChangeActiveEnvironmentPath: changed.event,
        };
        const settings: Record<string, unknown> = {};
        const { ext, fake } = await activate(settings, { extensions: { 'ms-python.python': { environments } } });
        await settle(fake, 'the first check', () => fake.recorded.messages.length === 1);
        assert.ok(fake.recorded.log.some((l) => l.includes("interpreter: /nonexistent/env1/bin/python (from the Python extension's active environment)")));
        assert.ok(fake.recorded.messages[0].actions.includes('Select Interpreter'));
        active = '/nonexistent/env2/bin/python';
        changed.fire({ id: active, path: active });
        await settle(fake, 'the restart', () => fake.recorded.messages.length === 2);
        assert.match(fake.recorded.messages[1].text, /env2/);
        // With kernelLsp.interpreter set, the Python extension's choice no longer matters.
        settings.interpreter = ['/nonexistent/pinned/python'];
        fake.fireConfigurationChange(['kernelLsp.interpreter']);
        await settle(fake, 'the restart for the setting', () => fake.recorded.messages.length === 3);
        changed.fire({ id: 'x', path: '/nonexistent/env3/bin/python' });
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(fake.recorded.messages.length, 3, 'restarted for an environment change while kernelLsp.interpreter is set');
        await ext.deactivate();
    });

    it('commands without a server or an editor explain themselves instead of throwing', async () => {
        const { ext, fake } = await activate({ interpreter: ['/nonexistent/bin/python'] });
        await settle(fake, 'startup', () => fake.recorded.messages.length > 0);
        await fake.api.commands.executeCommand('kernelLsp.optimizeModule');
        assert.match(fake.recorded.messages.at(-1)!.text, /open a Python file/);
        await fake.api.commands.executeCommand('kernelLsp.cancelJob');
        assert.match(fake.recorded.messages.at(-1)!.text, /no job is running/);
        await fake.api.commands.executeCommand('kernelLsp.optimizeModule', { uri: 'file:///x.py', module: 'Model', strategy: 'agent' });
        assert.match(fake.recorded.messages.at(-1)!.text, /optimize failed: the kernel-lsp server is not running/);
        await fake.api.commands.executeCommand('kernelLsp.openLog');
        assert.ok(fake.recorded.log.includes('<show>'));
        await ext.deactivate();
    });
});
