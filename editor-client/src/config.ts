// Settings → server launch options and initializationOptions.
// Pure: no `vscode` import, so it runs under `node --test` and in the harness.

/** The configuration section, the LanguageClient id and the prefix of every contributed setting. */
export const SECTION = 'kernelLsp';
export const SERVER_ID = 'kernelLsp';
export const SERVER_NAME = 'kernel-lsp';
/** The Python module the server ships as (`python -m kernel_lsp serve`). */
export const SERVER_MODULE = 'kernel_lsp';
/** The PyPI distribution that provides SERVER_MODULE. */
export const SERVER_PACKAGE = 'kernel-lsp';
/** Minimum Python version, from the server's pyproject.toml (`requires-python = ">=3.10"`). */
export const MIN_PYTHON: readonly [number, number] = [3, 10];

/**
 * Settings that only the client reads. They are never sent to the server: the server rejects keys it does not
 * know (`unknown setting 'interpreter'`) and shows them to the user as configuration errors.
 */
export const CLIENT_ONLY_SETTINGS: readonly string[] = ['interpreter', 'trace.server', 'trace'];

/** Whether a setting name (without the `kernelLsp.` prefix, dotted) belongs to the client only. */
export function isClientOnly(key: string): boolean {
    const top = key.split('.')[0];
    return CLIENT_ONLY_SETTINGS.includes(key) || CLIENT_ONLY_SETTINGS.includes(top);
}

/** One entry of package.json `contributes.configuration.properties`. */
export interface SettingSchema {
    type?: string | string[];
    default?: unknown;
    enum?: unknown[];
    minimum?: number;
    maximum?: number;
    pattern?: string;
    [key: string]: unknown;
}

/** The subset of package.json this module reads. */
export interface PackageJsonLike {
    contributes?: {
        configuration?: { properties?: Record<string, SettingSchema> } | { properties?: Record<string, SettingSchema> }[];
    };
}

/** All contributed settings, keyed by full name (`kernelLsp.maxTokens`). Accepts one or several configuration blocks. */
export function contributedSettings(pkg: PackageJsonLike): Record<string, SettingSchema> {
    const conf = pkg.contributes?.configuration;
    const blocks = Array.isArray(conf) ? conf : conf ? [conf] : [];
    const out: Record<string, SettingSchema> = {};
    for (const block of blocks) {
        Object.assign(out, block.properties ?? {});
    }
    return out;
}

/** Setting names (prefix removed) that travel to the server, in package.json order. */
export function serverSettingKeys(pkg: PackageJsonLike): string[] {
    const prefix = `${SECTION}.`;
    return Object.keys(contributedSettings(pkg))
        .filter((k) => k.startsWith(prefix))
        .map((k) => k.slice(prefix.length))
        .filter((k) => !isClientOnly(k));
}

/** The defaults declared in package.json for the server settings (prefix removed). */
export function defaultServerSettings(pkg: PackageJsonLike): Record<string, unknown> {
    const all = contributedSettings(pkg);
    const out: Record<string, unknown> = {};
    for (const key of serverSettingKeys(pkg)) {
        out[key] = all[`${SECTION}.${key}`].default;
    }
    return out;
}

/**
 * initializationOptions: every server setting, prefix removed, camelCase keys, value from `get` (which reads the
 * effective configuration of the workspace folder), falling back to the declared default.
 */
export function buildInitializationOptions(
    pkg: PackageJsonLike,
    get: (key: string) => unknown,
): Record<string, unknown> {
    const defaults = defaultServerSettings(pkg);
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(defaults)) {
        const value = get(key);
        out[key] = value === undefined ? defaults[key] : value;
    }
    return out;
}

/**
 * The `kernelLsp` section as the server should see it in a `workspace/configuration` answer: client-only keys
 * removed. Anything that is not a plain object (null: no such section) is passed through unchanged.
 */
export function serverSection(section: unknown): unknown {
    if (section === null || typeof section !== 'object' || Array.isArray(section)) {
        return section;
    }
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(section as Record<string, unknown>)) {
        if (!isClientOnly(key)) {
            out[key] = value;
        }
    }
    return out;
}

/** Variables understood in path settings, as in the Python tool extensions: ${workspaceFolder}, ${userHome}, ${cwd}, ${env:NAME}. */
export interface VariableContext {
    workspaceFolder?: string;
    userHome?: string;
    cwd?: string;
    env?: Record<string, string | undefined>;
}

export function resolveVariables(value: string, ctx: VariableContext): string {
    return value.replace(/\$\{([^}]+)\}/g, (whole, name: string) => {
        if (name === 'workspaceFolder' && ctx.workspaceFolder !== undefined) {
            return ctx.workspaceFolder;
        }
        if (name === 'userHome' && ctx.userHome !== undefined) {
            return ctx.userHome;
        }
        if (name === 'cwd' && ctx.cwd !== undefined) {
            return ctx.cwd;
        }
        if (name.startsWith('env:')) {
            return ctx.env?.[name.slice(4)] ?? '';
        }
        return whole;
    });
}

/** Same shape as vscode-languageclient's `Executable`, without importing it. */
export interface ExecutableLike {
    command: string;
    args: string[];
    options: { cwd?: string; env: Record<string, string | undefined> };
}

const LOG_LEVELS = ['debug', 'info', 'warning', 'error'];

/**
 * `<interpreter...> -m kernel_lsp serve [--log-level L]`. The interpreter is a command line (`["conda", "run",
 * "-n", "x", "python"]` is allowed, as in the Python tool extensions); its first element is the executable.
 */
export function buildServerExecutable(
    interpreter: readonly string[],
    opts: { cwd?: string; env?: Record<string, string | undefined>; logLevel?: unknown } = {},
): ExecutableLike {
    if (interpreter.length === 0 || !interpreter[0]) {
        throw new Error('no Python interpreter to launch the server with');
    }
    const args = [...interpreter.slice(1), '-m', SERVER_MODULE, 'serve'];
    if (typeof opts.logLevel === 'string' && LOG_LEVELS.includes(opts.logLevel)) {
        args.push('--log-level', opts.logLevel);
    }
    const env: Record<string, string | undefined> = {
        ...(opts.env ?? {}),
        // Log lines reach the output channel as they are written, and decode the same on every platform.
        PYTHONUNBUFFERED: '1',
        PYTHONIOENCODING: 'utf-8',
    };
    return { command: interpreter[0], args, options: { cwd: opts.cwd, env } };
}

/**
 * What a settings change needs. The interpreter (client-only) needs a new server process; a server setting is
 * told to the running server (`workspace/didChangeConfiguration`, after which it pulls `workspace/configuration`);
 * `trace.server` is handled by vscode-languageclient itself.
 */
export function changeAction(
    affects: (setting: string) => boolean,
    serverKeys: readonly string[],
): 'restart' | 'notify' | 'none' {
    if (affects(`${SECTION}.interpreter`)) {
        return 'restart';
    }
    if (serverKeys.some((key) => affects(`${SECTION}.${key}`))) {
        return 'notify';
    }
    return 'none';
}
