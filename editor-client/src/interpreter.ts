// Which Python runs the server, and whether it has kernel_lsp. Pure functions over the candidate sources; the
// process runner is injected so tests can fake it. No `vscode` import.

import { MIN_PYTHON, SERVER_MODULE, SERVER_PACKAGE, resolveVariables, type VariableContext } from './config';

export type InterpreterSource = 'setting' | 'python-extension' | 'path';

export interface ResolvedInterpreter {
    /** A command line: the executable, then any arguments (`["conda", "run", "-n", "env", "python"]`). */
    command: string[];
    source: InterpreterSource;
}

export interface InterpreterSources {
    /** `kernelLsp.interpreter`: a string path or an array (command line). Empty means "not set". */
    setting?: unknown;
    /** The active environment of the Python extension, if it is installed and has one. */
    pythonExtension?: readonly string[] | undefined;
    /** Used when neither is set. */
    platform?: NodeJS.Platform;
    variables?: VariableContext;
}

/** The `python3` on PATH (`python` on Windows, where `python3` is often the Store stub). */
export function defaultPython(platform: NodeJS.Platform = process.platform): string {
    return platform === 'win32' ? 'python' : 'python3';
}

/** Normalise the `kernelLsp.interpreter` setting: a string or string array; blanks dropped; variables resolved. */
export function interpreterFromSetting(setting: unknown, variables: VariableContext = {}): string[] | undefined {
    let parts: string[];
    if (typeof setting === 'string') {
        parts = [setting];
    } else if (Array.isArray(setting) && setting.every((p) => typeof p === 'string')) {
        parts = setting;
    } else {
        return undefined;
    }
    const resolved = parts.map((p) => resolveVariables(p.trim(), variables)).filter((p) => p.length > 0);
    return resolved.length > 0 ? resolved : undefined;
}

/** The resolution order: our setting, else the Python extension's active environment, else python3 on PATH. */
export function resolveInterpreter(sources: InterpreterSources): ResolvedInterpreter {
    const fromSetting = interpreterFromSetting(sources.setting, sources.variables);
    if (fromSetting) {
        return { command: fromSetting, source: 'setting' };
    }
    const fromExtension = (sources.pythonExtension ?? []).filter((p) => p.length > 0);
    if (fromExtension.length > 0) {
        return { command: [...fromExtension], source: 'python-extension' };
    }
    return { command: [defaultPython(sources.platform)], source: 'path' };
}

export function describeSource(source: InterpreterSource): string {
    switch (source) {
        case 'setting':
            return 'the kernelLsp.interpreter setting';
        case 'python-extension':
            return "the Python extension's active environment";
        case 'path':
            return 'PATH';
    }
}

// --- the Python extension's API (ms-python.python exports), duck-typed ---------------------------------------

/** The parts of the Python extension's environments API we use; both its current (`environments`) and older (`environment`) names. */
export interface PythonEnvironmentsApi {
    getActiveEnvironmentPath(resource?: unknown): { id: string; path: string };
    resolveEnvironment(env: unknown): Promise<{ executable?: { uri?: { fsPath?: string } } } | undefined>;
    onDidChangeActiveEnvironmentPath?: (listener: (e: unknown) => unknown) => { dispose(): unknown };
}

function isEnvironmentsApi(value: unknown): value is PythonEnvironmentsApi {
    const v = value as Partial<PythonEnvironmentsApi> | undefined;
    return (
        typeof v === 'object' &&
        v !== null &&
        typeof v.getActiveEnvironmentPath === 'function' &&
        typeof v.resolveEnvironment === 'function'
    );
}

/** The environments API from the extension's exports, or undefined for an older/unknown extension. */
export function environmentsApi(exports: unknown): PythonEnvironmentsApi | undefined {
    if (typeof exports !== 'object' || exports === null) {
        return undefined;
    }
    const e = exports as { environments?: unknown; environment?: unknown };
    if (isEnvironmentsApi(e.environments)) {
        return e.environments;
    }
    if (isEnvironmentsApi(e.environment)) {
        return e.environment;
    }
    return undefined;
}

/** The active environment's executable as a command line, or undefined. Never throws. */
export async function activeInterpreter(api: PythonEnvironmentsApi | undefined, resource?: unknown): Promise<string[] | undefined> {
    if (!api) {
        return undefined;
    }
    try {
        const envPath = api.getActiveEnvironmentPath(resource);
        const resolved = await api.resolveEnvironment(envPath);
        const fsPath = resolved?.executable?.uri?.fsPath;
        return fsPath ? [fsPath] : undefined;
    } catch {
        return undefined;
    }
}

// --- checking the interpreter ------------------------------------------------------------------------------

/** Run by the interpreter: prints one JSON line describing it and whether kernel_lsp imports. */
export const CHECK_SCRIPT = [
    'import json, sys',
    'out = {"python": list(sys.version_info[:3]), "executable": sys.executable}',
    'try:',
    `    import ${SERVER_MODULE}`,
    `    out["version"] = getattr(${SERVER_MODULE}, "__version__", "unknown")`,
    'except Exception as e:',
    '    out["error"] = "%s: %s" % (type(e).__name__, e)',
    'sys.stdout.write("\\n" + json.dumps(out) + "\\n")',
].join('\n');

export function checkCommand(interpreter: readonly string[]): { command: string; args: string[] } {
    return { command: interpreter[0], args: [...interpreter.slice(1), '-c', CHECK_SCRIPT] };
}

export interface RunResult {
    /** Exit status; null when the process could not be started (then `spawnError` says why). */
    code: number | null;
    stdout: string;
    stderr: string;
    spawnError?: string;
}

export type Runner = (command: string, args: string[]) => Promise<RunResult>;

export type CheckResult =
    | { ok: true; executable: string; python: number[]; version: string }
    | { ok: false; reason: 'not-found' | 'too-old' | 'not-installed' | 'broken'; message: string; executable?: string };

/** A checkout's path in the install command when none is known (the package is not published on PyPI). */
export const CHECKOUT_PLACEHOLDER = '/path/to/kernel-lsp';

/** The install command for the interpreter: from a checkout of the repository (the package is not on PyPI);
 * without a known checkout, with a placeholder path for the user to fill in. */
export function installCommand(interpreter: readonly string[], checkout?: string): string {
    const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `"${s.replace(/(["\\$`])/g, '\\$1')}"`);
    const python = interpreter.map(quote).join(' ');
    return `${python} -m pip install -e ${checkout ? quote(checkout) : CHECKOUT_PLACEHOLDER}`;
}

export function parseCheckOutput(result: RunResult, interpreter: readonly string[]): CheckResult {
    const shown = interpreter.join(' ');
    if (result.spawnError !== undefined || result.code === null) {
        return {
            ok: false,
            reason: 'not-found',
            message: `cannot run the Python interpreter \`${shown}\`: ${result.spawnError ?? 'it did not start'}`,
        };
    }
    const lines = result.stdout.split(/\r?\n/).filter((l) => l.trim().startsWith('{'));
    let info: { python?: number[]; executable?: string; version?: string; error?: string } | undefined;
    try {
        info = lines.length > 0 ? (JSON.parse(lines[lines.length - 1]) as typeof info) : undefined;
    } catch {
        info = undefined;
    }
    if (!info || !Array.isArray(info.python)) {
        const detail = (result.stderr || result.stdout).trim().split(/\r?\n/).slice(-3).join(' ');
        return {
            ok: false,
            reason: 'broken',
            message: `\`${shown}\` is not a working Python interpreter (exit status ${result.code})${detail ? `: ${detail}` : ''}`,
        };
    }
    const [major, minor] = info.python;
    if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
        return {
            ok: false,
            reason: 'too-old',
            executable: info.executable,
            message: `kernel-lsp needs Python ${MIN_PYTHON.join('.')} or newer; \`${shown}\` is Python ${info.python.join('.')}`,
        };
    }
    if (info.error !== undefined || info.version === undefined) {
        return {
            ok: false,
            reason: 'not-installed',
            executable: info.executable,
            message: `the Python package ${SERVER_PACKAGE} is not installed in \`${info.executable ?? shown}\` (${info.error ?? 'no version'})`,
        };
    }
    return { ok: true, executable: info.executable ?? shown, python: info.python, version: info.version };
}

export async function checkInterpreter(interpreter: readonly string[], run: Runner): Promise<CheckResult> {
    const { command, args } = checkCommand(interpreter);
    return parseCheckOutput(await run(command, args), interpreter);
}
