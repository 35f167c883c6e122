// The Python that runs the real server in the harness and the client test.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { checkCommand, parseCheckOutput, type CheckResult } from '../../src/interpreter';
import { REPO_ROOT } from '../unit/helpers';

/**
 * $KERNEL_LSP_PYTHON, else <repo>/.venv/bin/python, else /work/main/.venv/bin/python: the first that has
 * kernel_lsp (checked with the extension's own check). `explicit` says KERNEL_LSP_PYTHON was set.
 */
export function findServerPython(): { python?: string; check?: CheckResult; reason: string; explicit: boolean } {
    const explicit = process.env.KERNEL_LSP_PYTHON;
    const candidates = explicit ? [explicit] : [path.join(REPO_ROOT, '.venv', 'bin', 'python'), '/work/main/.venv/bin/python'];
    const reasons: string[] = [];
    for (const python of [...new Set(candidates)]) {
        if (!existsSync(python) && python.includes(path.sep)) {
            reasons.push(`${python}: no such file`);
            continue;
        }
        // The extension's check (interpreter.ts), run synchronously: the skip is decided before the suite is declared.
        const { command, args } = checkCommand([python]);
        const r = spawnSync(command, args, { encoding: 'utf8', timeout: 120_000 });
        const check = parseCheckOutput(
            { code: r.error ? null : r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '', spawnError: r.error?.message },
            [python],
        );
        if (check.ok) {
            return { python, check, reason: '', explicit: Boolean(explicit) };
        }
        reasons.push(check.message);
    }
    return { reason: reasons.join('; '), explicit: Boolean(explicit) };
}

