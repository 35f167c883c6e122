// Arguments of the server's commands (workspace/executeCommand), and the quick-pick items built from their
// answers. No `vscode` import.

/** Commands the server registers (workspace/executeCommand). */
export const SERVER_COMMANDS = {
    generate: 'kernel-lsp.generate',
    bestOfN: 'kernel-lsp.bestOfN',
    refine: 'kernel-lsp.refine',
    verify: 'kernel-lsp.verify',
    profile: 'kernel-lsp.profile',
    cancel: 'kernel-lsp.cancel',
    accept: 'kernel-lsp.accept',
    listCandidates: 'kernel-lsp.listCandidates',
    listJobs: 'kernel-lsp.listJobs',
    moduleAt: 'kernel-lsp.moduleAt',
} as const;

/** Commands this extension contributes (package.json `contributes.commands`). */
export const CLIENT_COMMANDS = {
    optimizeModule: 'kernelLsp.optimizeModule',
    cancelJob: 'kernelLsp.cancelJob',
    showCandidates: 'kernelLsp.showCandidates',
    restartServer: 'kernelLsp.restartServer',
    openLog: 'kernelLsp.openLog',
    showJobs: 'kernelLsp.showJobs',
} as const;

/** The `kernelLsp/jobs` notification. */
export const JOBS_NOTIFICATION = 'kernelLsp/jobs';

export const STRATEGIES = ['profile-guided', 'zero-shot', 'one-shot', 'refine', 'best-of-n', 'agent'] as const;
export type Strategy = (typeof STRATEGIES)[number];

export const STRATEGY_DESCRIPTIONS: Record<Strategy, string> = {
    'profile-guided': 'profile the reference, then target its hottest operators',
    'zero-shot': 'one prompt, no examples',
    'one-shot': 'one prompt with a worked example',
    refine: 'iterate on the best candidate with compiler, correctness and timing feedback',
    'best-of-n': 'sample several candidates per round and keep the fastest correct one',
    agent: 'let the model call tools (compile, run, profile) until it is done',
};

export function isStrategy(value: unknown): value is Strategy {
    return typeof value === 'string' && (STRATEGIES as readonly string[]).includes(value);
}

/**
 * Which module: by name, or by a line (0-based, as in LSP positions) inside it, which the server resolves.
 * `uri` is the document URI exactly as the client sent it in textDocument/didOpen.
 */
export type ModuleTarget = { uri: string; module: string } | { uri: string; line: number };

export interface ServerCommandRequest {
    command: string;
    arguments: unknown[];
}

/** The server command that runs a strategy. best-of-n and refine have their own; the rest go through generate. */
export function optimizeRequest(target: ModuleTarget, strategy?: Strategy): ServerCommandRequest {
    const base = 'module' in target ? { uri: target.uri, module: target.module } : { uri: target.uri, line: target.line };
    if (strategy === 'best-of-n') {
        return { command: SERVER_COMMANDS.bestOfN, arguments: [base] };
    }
    if (strategy === 'refine') {
        return { command: SERVER_COMMANDS.refine, arguments: [base] };
    }
    // No strategy: the server uses kernelLsp.strategy.
    return { command: SERVER_COMMANDS.generate, arguments: [strategy ? { ...base, strategy } : base] };
}

export function moduleRequest(
    command: 'verify' | 'profile' | 'listCandidates',
    target: { uri: string; module: string },
): ServerCommandRequest {
    return { command: SERVER_COMMANDS[command], arguments: [{ uri: target.uri, module: target.module }] };
}

export function acceptRequest(target: { uri: string; module: string }, candidate: number): ServerCommandRequest {
    if (!Number.isInteger(candidate) || candidate < 0) {
        throw new Error(`candidate id must be a non-negative integer, got ${String(candidate)}`);
    }
    return { command: SERVER_COMMANDS.accept, arguments: [{ uri: target.uri, module: target.module, candidate }] };
}

export function cancelRequest(what: { jobId: string | number } | { uri: string; module: string }): ServerCommandRequest {
    return {
        command: SERVER_COMMANDS.cancel,
        arguments: ['jobId' in what ? { jobId: what.jobId } : { uri: what.uri, module: what.module }],
    };
}

export function listJobsRequest(): ServerCommandRequest {
    return { command: SERVER_COMMANDS.listJobs, arguments: [] };
}

/**
 * Arguments a command of ours may be invoked with (from a code lens, a keybinding, another extension):
 * `{uri, module}`, `{uri, line}`, or nothing (then the active editor decides). Returns undefined when absent or
 * malformed.
 */
export function parseModuleTarget(arg: unknown): ModuleTarget | undefined {
    if (typeof arg !== 'object' || arg === null) {
        return undefined;
    }
    const a = arg as Record<string, unknown>;
    // A string, or a vscode.Uri (from another extension's executeCommand call).
    const uri =
        typeof a.uri === 'string'
            ? a.uri
            : typeof a.uri === 'object' && a.uri !== null && 'scheme' in a.uri
              ? (a.uri as { toString(): string }).toString()
              : undefined;
    if (!uri) {
        return undefined;
    }
    if (typeof a.module === 'string' && a.module.length > 0) {
        return { uri, module: a.module };
    }
    if (typeof a.line === 'number' && Number.isInteger(a.line) && a.line >= 0) {
        return { uri, line: a.line };
    }
    return undefined;
}

// --- the module at a line -----------------------------------------------------------------------------------

/** What `kernel-lsp.moduleAt` answers: the module the server acts on at a line, and every module of the file. */
export interface ModuleAt {
    module: string | undefined;
    modules: { name: string; line: number }[];
}

/**
 * The server resolves "which module is at this line" (`kernel-lsp.moduleAt`), with the same rule its job commands
 * use; the extension keeps no rule of its own.
 */
export function moduleAtRequest(uri: string, line: number): ServerCommandRequest {
    return { command: SERVER_COMMANDS.moduleAt, arguments: [{ uri, line }] };
}

/** Validates a kernel-lsp.moduleAt answer; drops malformed module entries. */
export function parseModuleAt(result: unknown): ModuleAt {
    if (typeof result !== 'object' || result === null) {
        throw new Error(`kernel-lsp.moduleAt returned ${result === null ? 'null' : typeof result}, expected an object`);
    }
    const r = result as { module?: unknown; modules?: unknown };
    const modules = Array.isArray(r.modules)
        ? r.modules.filter(
              (m): m is { name: string; line: number } =>
                  typeof m === 'object' && m !== null && typeof (m as { name?: unknown }).name === 'string' && typeof (m as { line?: unknown }).line === 'number',
          )
        : [];
    return { module: typeof r.module === 'string' && r.module ? r.module : undefined, modules: modules.map((m) => ({ name: m.name, line: m.line })) };
}

// --- candidates ---------------------------------------------------------------------------------------------

export interface Candidate {
    /** The server's record id. */
    id: number;
    /** The candidate's number within its module: what kernel-lsp.accept takes. */
    number?: number;
    round?: number;
    strategy?: string;
    status?: string;
    speedupEager?: number | null;
    ms?: number | null;
    speedupCompiled?: number | null;
    /** The speed in the server's words ('1.07× slower than eager', an uncertain one with its ± figure). */
    speed?: string;
    /** Made for an earlier version of the module: the server refuses to accept it. */
    stale?: boolean;
    /** The server's order of the correct current candidates (1 = the fastest by its own time), else null. */
    rank?: number | null;
    /** The one the server offers as the result (★): the best, when it is shown faster than eager. */
    offered?: boolean;
    /** Correct and shown faster than eager; a correct one that is not can still be inserted, anyway. */
    faster?: boolean;
    /** Correct, with PyTorch's operators doing the work (no kernel of its own): offered all the same. */
    libraryOnly?: boolean;
    [key: string]: unknown;
}

/** What kernel-lsp.accept's `candidate` is: the per-module number when the server gives one, else the id. */
export function candidateNumber(c: Candidate): number {
    return typeof c.number === 'number' ? c.number : c.id;
}

/** Validates a kernel-lsp.listCandidates answer; drops entries without a numeric id. */
export function parseCandidates(result: unknown): Candidate[] {
    if (!Array.isArray(result)) {
        throw new Error(`kernel-lsp.listCandidates returned ${result === null ? 'null' : typeof result}, expected an array`);
    }
    return result.filter(
        (c): c is Candidate => typeof c === 'object' && c !== null && typeof (c as { id?: unknown }).id === 'number',
    );
}

const GOOD_STATUS = /^(ok|correct|pass(ed)?|verified|accepted)$/i;

export function isCorrect(c: Candidate): boolean {
    return typeof c.status === 'string' && GOOD_STATUS.test(c.status);
}

function fmt(n: number, digits: number): string {
    return Number.isFinite(n) ? n.toFixed(digits) : String(n);
}

/** Correct, current candidates first, in the server's order (`rank`: the fastest by its own time first); then
 * correct stale ones; then the rest; by number where the server gives no order. */
export function sortCandidates(cands: readonly Candidate[]): Candidate[] {
    const order = (c: Candidate) => (typeof c.rank === 'number' ? c.rank : Infinity);
    const group = (c: Candidate) => (isCorrect(c) ? (c.stale ? 1 : 2) : 0);
    return [...cands].sort((a, b) => {
        if (group(a) !== group(b)) {
            return group(b) - group(a);
        }
        if (order(a) !== order(b)) {
            return order(a) - order(b);
        }
        return candidateNumber(a) - candidateNumber(b);
    });
}

export interface PickItem<T> {
    label: string;
    description?: string;
    detail?: string;
    value: T;
}

export function candidateItems(cands: readonly Candidate[]): PickItem<Candidate>[] {
    return sortCandidates(cands).map((c) => {
        const icon = isCorrect(c) ? '$(pass)' : '$(error)';
        const parts: string[] = [];
        if (typeof c.speed === 'string' && c.speed) {
            parts.push(c.speed); // the server's words: one way to write a speed everywhere
        } else if (typeof c.speedupEager === 'number') {
            const x = c.speedupEager;
            parts.push(`${fmt(x >= 1 ? x : 1 / x, 2)}× ${x >= 1 ? 'faster' : 'slower'} than eager`);
        }
        if (typeof c.ms === 'number') {
            parts.push(`${fmt(c.ms, 3)} ms`);
        }
        const meta: string[] = [];
        if (c.round !== undefined) {
            meta.push(`round ${c.round}`);
        }
        if (c.strategy) {
            meta.push(c.strategy);
        }
        if (c.status) {
            meta.push(c.status);
        }
        if (isCorrect(c) && c.libraryOnly === true) {
            meta.push('uses PyTorch operators only');
        }
        if (c.stale) {
            meta.push('stale: made for an earlier version');
        }
        if (isCorrect(c) && !c.stale && c.faster === false) {
            meta.push('not faster than eager: selecting it inserts it anyway');
        }
        const star = c.offered ? ' ★' : '';
        return {
            label: `${icon} #${candidateNumber(c)}${star}${parts.length > 0 ? `  ${parts.join(' · ')}` : ''}`,
            description: meta.join(' · '),
            value: c,
        };
    });
}
