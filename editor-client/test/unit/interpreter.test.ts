import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    CHECK_SCRIPT,
    activeInterpreter,
    checkCommand,
    checkInterpreter,
    defaultPython,
    environmentsApi,
    installCommand,
    interpreterFromSetting,
    parseCheckOutput,
    resolveInterpreter,
    type RunResult,
} from '../../src/interpreter';
import { processRunner } from '../../src/process';
import { findPython } from './helpers';

describe('resolveInterpreter: setting, else the Python extension, else python3', () => {
    it('prefers the setting', () => {
        const r = resolveInterpreter({ setting: ['/opt/py/bin/python'], pythonExtension: ['/env/bin/python'] });
        assert.deepEqual(r, { command: ['/opt/py/bin/python'], source: 'setting' });
    });

    it('accepts the setting as a string', () => {
        assert.deepEqual(resolveInterpreter({ setting: '/opt/python' }).command, ['/opt/python']);
    });

    it('expands variables in the setting', () => {
        const r = resolveInterpreter({ setting: ['${workspaceFolder}/.venv/bin/python'], variables: { workspaceFolder: '/ws' } });
        assert.deepEqual(r.command, ['/ws/.venv/bin/python']);
    });

    it('treats an empty setting as unset', () => {
        for (const setting of [[], '', [''], ['  '], undefined, null, 3, [1, 2]]) {
            const r = resolveInterpreter({ setting, pythonExtension: ['/env/bin/python'] });
            assert.deepEqual(r, { command: ['/env/bin/python'], source: 'python-extension' }, `setting ${JSON.stringify(setting)}`);
        }
    });

    it('falls back to python3 on PATH (python on Windows)', () => {
        assert.deepEqual(resolveInterpreter({ platform: 'linux' }), { command: ['python3'], source: 'path' });
        assert.deepEqual(resolveInterpreter({ pythonExtension: [], platform: 'win32' }), { command: ['python'], source: 'path' });
        assert.equal(defaultPython('darwin'), 'python3');
    });

    it('keeps a command-line setting whole', () => {
        assert.deepEqual(interpreterFromSetting(['conda', 'run', '-n', 'x', 'python']), ['conda', 'run', '-n', 'x', 'python']);
    });
});

describe('the Python extension API', () => {
    const env = {
        getActiveEnvironmentPath: (resource?: string) => ({ id: 'x', path: `/envs/${resource ?? 'none'}` }),
        resolveEnvironment: (e: unknown) =>
            Promise.resolve({ executable: { uri: { fsPath: `${(e as { path: string }).path}/bin/python` } } }),
    };

    it('finds `environments` (current API) and `environment` (older API)', () => {
        assert.equal(environmentsApi({ environments: env }), env);
        assert.equal(environmentsApi({ environment: env }), env);
        assert.equal(environmentsApi({ environments: {} }), undefined);
        assert.equal(environmentsApi(undefined), undefined);
        assert.equal(environmentsApi('x'), undefined);
    });

    it('resolves the active environment to its executable', async () => {
        assert.deepEqual(await activeInterpreter(env, 'ws1'), ['/envs/ws1/bin/python']);
        assert.equal(await activeInterpreter(undefined), undefined);
    });

    it('returns undefined when the environment has no executable or the API throws', async () => {
        const noExe = { ...env, resolveEnvironment: () => Promise.resolve({ executable: { uri: undefined } }) };
        assert.equal(await activeInterpreter(noExe), undefined);
        const throwing = {
            ...env,
            getActiveEnvironmentPath: () => {
                throw new Error('boom');
            },
        };
        assert.equal(await activeInterpreter(throwing), undefined);
    });
});

describe('checking the interpreter', () => {
    const ok = (out: object, code = 0): RunResult => ({ code, stdout: `noise\n${JSON.stringify(out)}\n`, stderr: '' });

    it('builds `<python> -c <script>` after the interpreter arguments', () => {
        assert.deepEqual(checkCommand(['conda', 'run', 'python']), { command: 'conda', args: ['run', 'python', '-c', CHECK_SCRIPT] });
        assert.match(CHECK_SCRIPT, /import kernel_lsp/);
    });

    it('accepts an interpreter with kernel_lsp', () => {
        const r = parseCheckOutput(ok({ python: [3, 11, 7], executable: '/v/bin/python', version: '0.1.0' }), ['/v/bin/python']);
        assert.deepEqual(r, { ok: true, executable: '/v/bin/python', python: [3, 11, 7], version: '0.1.0' });
    });

    it('reports a missing package with the error', () => {
        const r = parseCheckOutput(
            ok({ python: [3, 12, 0], executable: '/usr/bin/python3', error: "ModuleNotFoundError: No module named 'kernel_lsp'" }),
            ['python3'],
        );
        assert.equal(r.ok, false);
        assert.ok(!r.ok && r.reason === 'not-installed');
        assert.match(!r.ok ? r.message : '', /kernel-lsp is not installed in `\/usr\/bin\/python3`.*No module named/);
    });

    it('reports a Python older than 3.10', () => {
        const r = parseCheckOutput(ok({ python: [3, 9, 18], executable: '/p', version: '0.1.0' }), ['/p']);
        assert.ok(!r.ok && r.reason === 'too-old' && /3\.10 or newer.*3\.9\.18/.test(r.message));
    });

    it('reports an interpreter that cannot be started', () => {
        const r = parseCheckOutput({ code: null, stdout: '', stderr: '', spawnError: 'ENOENT: spawn nope' }, ['nope']);
        assert.ok(!r.ok && r.reason === 'not-found' && /cannot run.*`nope`.*ENOENT/.test(r.message));
    });

    it('reports something that is not Python', () => {
        const r = parseCheckOutput({ code: 9, stdout: '', stderr: 'bad option: -c\n' }, ['node']);
        assert.ok(!r.ok && r.reason === 'broken' && /not a working Python.*exit status 9.*bad option/.test(r.message));
    });

    it('gives the install command', () => {
        // not on PyPI: always from a checkout, a placeholder path when none is known
        assert.equal(installCommand(['/v/bin/python']), '/v/bin/python -m pip install -e /path/to/kernel-lsp');
        assert.equal(installCommand(['/my venv/python']), '"/my venv/python" -m pip install -e /path/to/kernel-lsp');
        assert.equal(installCommand(['python3'], '/src/kernel-lsp'), 'python3 -m pip install -e /src/kernel-lsp');
    });
});

describe('checking real processes', () => {
    const run = processRunner({ timeoutMs: 30_000 });

    it('a missing executable is not-found', async () => {
        const r = await checkInterpreter(['/nonexistent/bin/python'], run);
        assert.ok(!r.ok && r.reason === 'not-found', JSON.stringify(r));
    });

    it('a program that is not Python is broken', async () => {
        // node -c <script> is a node syntax check of nothing: not our JSON line.
        const r = await checkInterpreter([process.execPath], run);
        assert.ok(!r.ok && r.reason === 'broken', JSON.stringify(r));
    });

    const python = findPython();
    it('a real Python answers the check script', { skip: python ? false : 'no Python found' }, async () => {
        const r = await checkInterpreter([python!], run);
        // Either kernel_lsp is there or the message says it is not: never "broken".
        assert.ok(r.ok || r.reason === 'not-installed' || r.reason === 'too-old', JSON.stringify(r));
    });
});
