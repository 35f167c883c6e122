import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { EXTENSION_ROOT, readPackageJson } from './helpers';

describe('README.md', () => {
    const readme = readFileSync(path.join(EXTENSION_ROOT, 'README.md'), 'utf8');
    const pkg = readPackageJson();

    it('documents every setting with its default (run `npm run docs` after changing package.json)', () => {
        for (const [key, s] of Object.entries(pkg.contributes.configuration.properties)) {
            assert.ok(readme.includes(`| \`${key}\` |`), `${key} is not in the README's settings table`);
            const row = readme.split('\n').find((l) => l.startsWith(`| \`${key}\` |`))!;
            assert.ok(row.includes(`\`${JSON.stringify(s.default)}\``), `${key}: the README shows another default`);
        }
    });

    it('documents every command', () => {
        for (const c of pkg.contributes.commands) {
            assert.ok(readme.includes(c.command), `${c.command} is not in the README`);
        }
    });

    it('says how to install the .vsix', () => {
        assert.match(readme, /code --install-extension kernel-lsp-[\w.]+\.vsix/);
    });
});
