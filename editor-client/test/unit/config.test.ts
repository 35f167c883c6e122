import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    buildInitializationOptions,
    buildServerExecutable,
    changeAction,
    contributedSettings,
    defaultServerSettings,
    isClientOnly,
    resolveVariables,
    serverSection,
    serverSettingKeys,
    type PackageJsonLike,
} from '../../src/config';
import { readPackageJson } from './helpers';

const pkg = readPackageJson();

describe('serverSettingKeys', () => {
    it('lists the server settings without the prefix and without client-only ones', () => {
        const keys = serverSettingKeys(pkg);
        assert.ok(keys.includes('model'));
        assert.ok(keys.includes('maxTokens'));
        assert.ok(keys.includes('acceptTarget'));
        assert.ok(!keys.includes('interpreter'));
        assert.ok(!keys.includes('trace.server'));
        assert.ok(keys.every((k) => !k.startsWith('kernelLsp.')));
        assert.ok(keys.every((k) => /^[a-z][A-Za-z0-9]*$/.test(k)), `not camelCase: ${keys.join(', ')}`);
    });

    it('accepts an array of configuration blocks', () => {
        const multi: PackageJsonLike = {
            contributes: {
                configuration: [
                    { properties: { 'kernelLsp.a': { type: 'string', default: 'x' } } },
                    { properties: { 'kernelLsp.b': { type: 'integer', default: 2 }, 'kernelLsp.interpreter': { type: 'array', default: [] } } },
                ],
            },
        };
        assert.deepEqual(Object.keys(contributedSettings(multi)), ['kernelLsp.a', 'kernelLsp.b', 'kernelLsp.interpreter']);
        assert.deepEqual(defaultServerSettings(multi), { a: 'x', b: 2 });
    });

    it('copes with a package.json without settings', () => {
        assert.deepEqual(serverSettingKeys({}), []);
    });
});

describe('buildInitializationOptions', () => {
    it('gives every server setting, defaults where the configuration has no value', () => {
        const opts = buildInitializationOptions(pkg, () => undefined);
        assert.equal(opts.model, 'default');
        assert.equal(opts.strategy, 'profile-guided');
        assert.equal(opts.nCtx, 8192);
        assert.equal(opts.temperature, 0.7);
        assert.equal(opts.apiKeyEnv, 'OPENAI_API_KEY');
        assert.equal(opts.stateDir, '.kernel-lsp');
        assert.equal(Object.keys(opts).length, serverSettingKeys(pkg).length);
        assert.ok(!('interpreter' in opts));
        assert.ok(!('trace' in opts) && !('trace.server' in opts));
    });

    it('takes the configured values', () => {
        const configured: Record<string, unknown> = { samples: 8, endpoint: 'http://127.0.0.1:8080/v1', interpreter: ['/x/python'] };
        const opts = buildInitializationOptions(pkg, (k) => configured[k]);
        assert.equal(opts.samples, 8);
        assert.equal(opts.endpoint, 'http://127.0.0.1:8080/v1');
        assert.equal(opts.rounds, 3);
        assert.ok(!('interpreter' in opts), 'client-only settings never reach the server');
    });

    it('is JSON round-trippable (it travels in initialize)', () => {
        const opts = buildInitializationOptions(pkg, () => undefined);
        assert.deepEqual(JSON.parse(JSON.stringify(opts)), opts);
    });
});

describe('serverSection', () => {
    it('drops client-only keys from a workspace/configuration answer', () => {
        assert.deepEqual(serverSection({ model: 'm.gguf', interpreter: ['/p'], trace: { server: 'verbose' }, samples: 2 }), {
            model: 'm.gguf',
            samples: 2,
        });
    });

    it('passes null and non-objects through', () => {
        assert.equal(serverSection(null), null);
        assert.equal(serverSection(3), 3);
        assert.deepEqual(serverSection([1]), [1]);
    });

    it('knows what is client-only', () => {
        assert.ok(isClientOnly('interpreter'));
        assert.ok(isClientOnly('trace.server'));
        assert.ok(isClientOnly('trace'));
        assert.ok(!isClientOnly('model'));
    });
});

describe('resolveVariables', () => {
    const ctx = { workspaceFolder: '/ws', userHome: '/home/u', cwd: '/cwd', env: { VENV: '/venvs/a' } };

    it('expands the known variables', () => {
        assert.equal(resolveVariables('${workspaceFolder}/.venv/bin/python', ctx), '/ws/.venv/bin/python');
        assert.equal(resolveVariables('${userHome}/py', ctx), '/home/u/py');
        assert.equal(resolveVariables('${env:VENV}/bin/python', ctx), '/venvs/a/bin/python');
        assert.equal(resolveVariables('${cwd}', ctx), '/cwd');
    });

    it('empties unknown environment variables and keeps unknown variables', () => {
        assert.equal(resolveVariables('${env:NOPE}x', ctx), 'x');
        assert.equal(resolveVariables('${workspaceFolder}', {}), '${workspaceFolder}');
        assert.equal(resolveVariables('${unknown}/a', ctx), '${unknown}/a');
    });
});

describe('buildServerExecutable', () => {
    it('runs `-m kernel_lsp serve` with the interpreter', () => {
        const exe = buildServerExecutable(['/venv/bin/python'], { cwd: '/ws', env: { PATH: '/bin' } });
        assert.equal(exe.command, '/venv/bin/python');
        assert.deepEqual(exe.args, ['-m', 'kernel_lsp', 'serve']);
        assert.equal(exe.options.cwd, '/ws');
        assert.equal(exe.options.env.PATH, '/bin');
        assert.equal(exe.options.env.PYTHONUNBUFFERED, '1');
    });

    it('keeps the arguments of a command-line interpreter before -m', () => {
        const exe = buildServerExecutable(['conda', 'run', '-n', 'k', 'python']);
        assert.equal(exe.command, 'conda');
        assert.deepEqual(exe.args, ['run', '-n', 'k', 'python', '-m', 'kernel_lsp', 'serve']);
    });

    it('passes a valid log level on the command line, ignores others', () => {
        assert.deepEqual(buildServerExecutable(['py'], { logLevel: 'debug' }).args.slice(-2), ['--log-level', 'debug']);
        assert.deepEqual(buildServerExecutable(['py'], { logLevel: 'loud' }).args, ['-m', 'kernel_lsp', 'serve']);
    });

    it('refuses an empty interpreter', () => {
        assert.throws(() => buildServerExecutable([]), /no Python interpreter/);
        assert.throws(() => buildServerExecutable(['']), /no Python interpreter/);
    });
});

describe('changeAction', () => {
    const keys = serverSettingKeys(pkg);
    const affects = (changed: string[]) => (s: string) => changed.some((c) => c === s || c.startsWith(`${s}.`));

    it('restarts for the interpreter', () => {
        assert.equal(changeAction(affects(['kernelLsp.interpreter']), keys), 'restart');
    });

    it('notifies the server for a server setting', () => {
        assert.equal(changeAction(affects(['kernelLsp.samples']), keys), 'notify');
        assert.equal(changeAction(affects(['kernelLsp.endpointModel']), keys), 'notify');
    });

    it('leaves trace.server to vscode-languageclient and ignores other sections', () => {
        assert.equal(changeAction(affects(['kernelLsp.trace.server']), keys), 'none');
        assert.equal(changeAction(affects(['python.defaultInterpreterPath']), keys), 'none');
    });
});
