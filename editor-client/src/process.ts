// A Runner (see interpreter.ts) on node's child_process. No `vscode` import.

import { execFile } from 'node:child_process';
import type { RunResult, Runner } from './interpreter';

export function processRunner(opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Runner {
    return (command, args) =>
        new Promise<RunResult>((resolve) => {
            execFile(
                command,
                args,
                { cwd: opts.cwd, env: opts.env, timeout: opts.timeoutMs ?? 60_000, windowsHide: true, maxBuffer: 4 << 20 },
                (error, stdout, stderr) => {
                    const err = error as (NodeJS.ErrnoException & { code?: number | string; killed?: boolean }) | null;
                    if (err && typeof err.code === 'string') {
                        // ENOENT, EACCES…: the process never ran.
                        resolve({ code: null, stdout: String(stdout), stderr: String(stderr), spawnError: `${err.code}: ${err.message}` });
                    } else if (err && err.killed) {
                        resolve({
                            code: null,
                            stdout: String(stdout),
                            stderr: String(stderr),
                            spawnError: `no answer within ${(opts.timeoutMs ?? 60_000) / 1000} s`,
                        });
                    } else {
                        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout: String(stdout), stderr: String(stderr) });
                    }
                },
            );
        });
}
