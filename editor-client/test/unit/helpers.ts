import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { PackageJsonLike, SettingSchema } from '../../src/config';

export const EXTENSION_ROOT = path.resolve(__dirname, '..', '..');
export const REPO_ROOT = path.resolve(EXTENSION_ROOT, '..');

export interface PackageJson extends PackageJsonLike {
    name: string;
    main: string;
    engines: { vscode: string };
    activationEvents: string[];
    contributes: {
        configuration: { title: string; properties: Record<string, SettingSchema> };
        commands: { command: string; title: string; category?: string }[];
        menus: Record<string, { command: string; when?: string }[]>;
    };
    scripts: Record<string, string>;
}

export function readPackageJson(): PackageJson {
    return JSON.parse(readFileSync(path.join(EXTENSION_ROOT, 'package.json'), 'utf8')) as PackageJson;
}

/** A Python 3 on this machine for the parts of the tests that can use one (not necessarily with kernel_lsp). */
export function findPython(): string | undefined {
    for (const candidate of [process.env.KERNEL_LSP_PYTHON, path.join(REPO_ROOT, '.venv', 'bin', 'python'), 'python3', 'python']) {
        if (!candidate) {
            continue;
        }
        const r = spawnSync(candidate, ['-c', 'import sys; assert sys.version_info >= (3, 8)'], { encoding: 'utf8' });
        if (r.status === 0) {
            return candidate;
        }
    }
    return undefined;
}
