// The manifest: contributed commands, activation, menus and settings are consistent with the code.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { CLIENT_COMMANDS, STRATEGIES } from '../../src/commands';
import { SECTION, SERVER_ID } from '../../src/config';
import { EXTENSION_ROOT, readPackageJson } from './helpers';

const pkg = readPackageJson();
const props = pkg.contributes.configuration.properties;

describe('package.json', () => {
    it('contributes exactly the client commands', () => {
        assert.deepEqual(pkg.contributes.commands.map((c) => c.command).sort(), Object.values(CLIENT_COMMANDS).sort());
        for (const c of pkg.contributes.commands) {
            assert.equal(c.category, 'kernel-lsp');
            assert.ok(c.title.length > 0);
        }
    });

    it('activates on Python files and on its commands', () => {
        assert.ok(pkg.activationEvents.includes('onLanguage:python'));
        for (const c of Object.values(CLIENT_COMMANDS)) {
            assert.ok(pkg.activationEvents.includes(`onCommand:${c}`), `no onCommand:${c}`);
        }
    });

    it('menus only name contributed commands', () => {
        const known = new Set(pkg.contributes.commands.map((c) => c.command));
        for (const [menu, entries] of Object.entries(pkg.contributes.menus)) {
            for (const e of entries) {
                assert.ok(known.has(e.command), `${menu}: ${e.command} is not contributed`);
            }
        }
    });

    it('has the client-only settings the client reads', () => {
        // a path, as the README shows it (the settings editor marks a value of another declared type wrong)
        assert.equal(props[`${SECTION}.interpreter`].type, 'string');
        assert.equal(props[`${SECTION}.interpreter`].default, '');
        const readme = readFileSync(path.join(EXTENSION_ROOT, 'README.md'), 'utf8');
        assert.match(readme, /`kernelLsp\.interpreter`, when set: the interpreter's path \(`"\//);
        assert.doesNotMatch(readme, /pip install kernel-lsp\b/, 'not on PyPI');
        // vscode-languageclient reads `<client id>.trace.server`.
        assert.deepEqual(props[`${SERVER_ID}.trace.server`].enum, ['off', 'messages', 'verbose']);
    });

    it('the strategy setting lists the strategies the optimize command offers', () => {
        assert.deepEqual(props[`${SECTION}.strategy`].enum, [...STRATEGIES]);
        assert.equal((props[`${SECTION}.strategy`].enumDescriptions as string[]).length, STRATEGIES.length);
    });

    it('every setting is documented, typed, and its default is valid', () => {
        for (const [key, s] of Object.entries(props)) {
            assert.ok(key.startsWith(`${SECTION}.`), key);
            const text = (s.markdownDescription ?? s.description) as string | undefined;
            assert.ok(text && text.length > 10, `${key}: no description`);
            assert.ok(s.type, `${key}: no type`);
            const d = s.default;
            switch (s.type) {
                case 'integer':
                    assert.ok(Number.isInteger(d), `${key}: default ${String(d)} is not an integer`);
                    break;
                case 'number':
                    assert.equal(typeof d, 'number', key);
                    break;
                case 'string':
                    assert.equal(typeof d, 'string', key);
                    break;
                case 'array':
                    assert.ok(Array.isArray(d), key);
                    break;
            }
            if (s.enum) {
                assert.ok(s.enum.includes(d), `${key}: default ${String(d)} not in its enum`);
            }
            if (typeof d === 'number') {
                assert.ok(s.minimum === undefined || d >= s.minimum, `${key}: default below minimum`);
                assert.ok(s.maximum === undefined || d <= s.maximum, `${key}: default above maximum`);
            }
            if (s.pattern && typeof d === 'string') {
                assert.match(d, new RegExp(s.pattern), `${key}: default does not match its pattern`);
            }
        }
    });

    it('the endpoint pattern accepts URLs and rejects other text', () => {
        const re = new RegExp(props[`${SECTION}.endpoint`].pattern!);
        assert.match('', re);
        assert.match('http://127.0.0.1:8080/v1', re);
        assert.match('https://api.example.com/v1', re);
        assert.doesNotMatch('127.0.0.1:8080', re);
    });

    it('points at the bundle and supports VS Code 1.82', () => {
        assert.equal(pkg.main, './dist/extension.js');
        assert.equal(pkg.engines.vscode, '^1.82.0');
    });

    it('has the files vsce needs', () => {
        for (const f of ['LICENSE', 'README.md', '.vscodeignore']) {
            assert.ok(existsSync(path.join(EXTENSION_ROOT, f)), `${f} missing`);
        }
    });

    it('runs the harness in npm test and on its own', () => {
        assert.match(pkg.scripts.test, /test:unit/);
        assert.match(pkg.scripts.test, /test:harness/);
        assert.match(pkg.scripts['test:harness'], /harness\.test\.ts/);
    });
});
