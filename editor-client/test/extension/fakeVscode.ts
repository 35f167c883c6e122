// Just enough of the `vscode` API to activate the bundled extension under node, record what it does to the UI,
// and drive its commands. Anything not modelled here throws, naming the missing member, so a test fails loudly
// instead of silently passing over it.
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
    private listeners: Listener<T>[] = [];
    readonly event = (listener: Listener<T>) => {
        this.listeners.push(listener);
        return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
    };
    fire(e: T): void {
        for (const l of [...this.listeners]) {
            l(e);
        }
    }
    dispose(): void {
        this.listeners = [];
    }
}

export class Disposable {
    constructor(private readonly fn: () => unknown) {}
    static from(...items: { dispose(): unknown }[]): Disposable {
        return new Disposable(() => items.forEach((i) => i.dispose()));
    }
    dispose(): void {
        this.fn();
    }
}

export class Uri {
    private constructor(
        readonly scheme: string,
        readonly fsPath: string,
        private readonly href: string,
    ) {}
    static file(p: string): Uri {
        return new Uri('file', path.resolve(p), pathToFileURL(path.resolve(p)).href);
    }
    static parse(s: string): Uri {
        return s.startsWith('file:') ? Uri.file(new URL(s).pathname) : new Uri(s.split(':')[0], s, s);
    }
    get path(): string {
        return new URL(this.href).pathname;
    }
    toString(): string {
        return this.href;
    }
}

export class ThemeColor {
    constructor(readonly id: string) {}
}

export class CancellationTokenSource {
    private readonly emitter = new EventEmitter<void>();
    readonly token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
    cancel(): void {
        this.token.isCancellationRequested = true;
        this.emitter.fire();
    }
    dispose(): void {
        this.emitter.dispose();
    }
}

export class CodeActionKind {
    constructor(readonly value: string) {}
    append(part: string): CodeActionKind {
        return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
    }
    contains(other: CodeActionKind): boolean {
        return this.value === '' || other.value === this.value || other.value.startsWith(`${this.value}.`);
    }
    intersects(other: CodeActionKind): boolean {
        return this.contains(other) || other.contains(this);
    }
    static readonly Empty = new CodeActionKind('');
    static readonly QuickFix = new CodeActionKind('quickfix');
    static readonly Refactor = new CodeActionKind('refactor');
    static readonly RefactorExtract = new CodeActionKind('refactor.extract');
    static readonly RefactorInline = new CodeActionKind('refactor.inline');
    static readonly RefactorRewrite = new CodeActionKind('refactor.rewrite');
    static readonly Source = new CodeActionKind('source');
    static readonly SourceOrganizeImports = new CodeActionKind('source.organizeImports');
    static readonly SourceFixAll = new CodeActionKind('source.fixAll');
}

export const StatusBarAlignment = { Left: 1, Right: 2 } as const;
export const QuickPickItemKind = { Separator: -1, Default: 0 } as const;

export interface Recorded {
    messages: { level: 'error' | 'warning' | 'info'; text: string; actions: string[] }[];
    log: string[];
    statusBar: { text: string; tooltip: unknown; backgroundColor?: ThemeColor; visible: boolean }[];
    quickPicks: { items: unknown[]; options: unknown }[];
    progress: string[];
}

export interface FakeOptions {
    /** `kernelLsp.*` settings (prefix removed); everything else is package.json's default. */
    settings: Record<string, unknown>;
    defaults: Record<string, unknown>;
    workspaceFolder: string;
    /** Answers for showQuickPick, in order: a function choosing among the items, or undefined (dismissed). */
    quickPickAnswers?: ((items: { label: string }[]) => unknown)[];
    /** Answers for showErrorMessage & co., in order. */
    messageAnswers?: (string | undefined)[];
    /** Model enough of the API for vscode-languageclient to start: events, provider registrations, documents. */
    languageClient?: boolean;
    /** Open documents (for textDocument/didOpen). */
    documents?: FakeDocument[];
    /** Installed extensions by id (ms-python.python): their exports. */
    extensions?: Record<string, unknown>;
}

export interface FakeDocument {
    uri: Uri;
    languageId: string;
    version: number;
    getText(): string;
    fileName: string;
    isUntitled: boolean;
    isClosed: boolean;
    lineCount: number;
}

export function fakeDocument(file: string, text: string): FakeDocument {
    return {
        uri: Uri.file(file),
        languageId: 'python',
        version: 1,
        getText: () => text,
        fileName: file,
        isUntitled: false,
        isClosed: false,
        lineCount: text.split('\n').length,
    };
}

export function createFakeVscode(opts: FakeOptions) {
    const recorded: Recorded = { messages: [], log: [], statusBar: [], quickPicks: [], progress: [] };
    const commands = new Map<string, (...args: unknown[]) => unknown>();
    const onDidChangeConfiguration = new EventEmitter<{ affectsConfiguration(s: string): boolean }>();
    const folder = { uri: Uri.file(opts.workspaceFolder), name: path.basename(opts.workspaceFolder), index: 0 };
    const statusItems: { text: string; tooltip: unknown; backgroundColor?: ThemeColor; visible: boolean }[] = [];

    const message = (level: 'error' | 'warning' | 'info') => (text: string, ...actions: unknown[]) => {
        recorded.messages.push({ level, text, actions: actions.filter((a): a is string => typeof a === 'string') });
        return Promise.resolve(opts.messageAnswers?.shift());
    };

    const outputChannel = (name: string) => {
        const line = (level: string) => (text: string) => {
            recorded.log.push(`[${level}] ${text}`);
        };
        return {
            name,
            logLevel: 2,
            onDidChangeLogLevel: new EventEmitter<number>().event,
            trace: line('trace'),
            debug: line('debug'),
            info: line('info'),
            warn: line('warn'),
            error: (e: unknown) => line('error')(String(e)),
            append: (t: string) => recorded.log.push(t),
            appendLine: (t: string) => recorded.log.push(t),
            replace: () => undefined,
            clear: () => undefined,
            show: () => recorded.log.push('<show>'),
            hide: () => undefined,
            dispose: () => undefined,
        };
    };

    const vscode = {
        EventEmitter,
        Disposable,
        Uri,
        ThemeColor,
        StatusBarAlignment,
        QuickPickItemKind,
        CodeActionKind,
        CancellationTokenSource,
        version: '1.82.0',
        env: { clipboard: { writeText: () => Promise.resolve() }, appName: 'fake', language: 'en', machineId: 'x', sessionId: 'y' },
        window: {
            activeTextEditor: undefined as unknown,
            createOutputChannel: outputChannel,
            createStatusBarItem: () => {
                const item = {
                    text: '',
                    tooltip: undefined as unknown,
                    backgroundColor: undefined as ThemeColor | undefined,
                    visible: false,
                    name: '',
                    command: undefined as unknown,
                    show() {
                        item.visible = true;
                    },
                    hide() {
                        item.visible = false;
                    },
                    dispose() {
                        item.visible = false;
                    },
                };
                statusItems.push(item);
                recorded.statusBar = statusItems;
                return item;
            },
            showErrorMessage: message('error'),
            showWarningMessage: message('warning'),
            showInformationMessage: message('info'),
            showQuickPick: (items: { label: string }[] | Promise<{ label: string }[]>, options: unknown) =>
                Promise.resolve(items).then((list) => {
                    recorded.quickPicks.push({ items: list, options });
                    const answer = opts.quickPickAnswers?.shift();
                    return answer ? answer(list) : undefined;
                }),
            createTerminal: () => ({ show: () => undefined, sendText: () => undefined, dispose: () => undefined }),
        },
        workspace: {
            workspaceFolders: [folder],
            getWorkspaceFolder: () => folder,
            onDidChangeConfiguration: onDidChangeConfiguration.event,
            getConfiguration: (section?: string) => ({
                get: <T>(key: string, fallback?: T): T | undefined => {
                    if (section === undefined && key === 'kernelLsp') {
                        // The whole section, as vscode-languageclient reads it for workspace/configuration.
                        return { ...opts.defaults, trace: { server: 'off' }, ...opts.settings } as T;
                    }
                    if (section !== 'kernelLsp') {
                        return fallback;
                    }
                    const value = key in opts.settings ? opts.settings[key] : opts.defaults[key];
                    return (value === undefined ? fallback : value) as T;
                },
                has: (key: string) => key in opts.settings || key in opts.defaults,
                inspect: () => undefined,
                update: () => Promise.resolve(),
            }),
            openTextDocument: () => Promise.reject(new Error('fake vscode: openTextDocument is not modelled')),
        },
        commands: {
            registerCommand: (id: string, fn: (...args: unknown[]) => unknown) => {
                if (commands.has(id)) {
                    throw new Error(`command ${id} registered twice`);
                }
                commands.set(id, fn);
                return { dispose: () => commands.delete(id) };
            },
            executeCommand: (id: string, ...args: unknown[]) => {
                const fn = commands.get(id);
                return fn ? Promise.resolve(fn(...args)) : Promise.reject(new Error(`command ${id} not found`));
            },
        },
        extensions: {
            getExtension: (id: string) =>
                opts.extensions && id in opts.extensions
                    ? { id, isActive: true, activate: () => Promise.resolve(opts.extensions![id]), exports: opts.extensions[id] }
                    : undefined,
        },
    };

    // vscode-languageclient subclasses API classes when it loads (class ProtocolCompletionItem extends
    // vscode.CompletionItem): unmodelled classes are empty stand-ins, created on first use.
    const standIns = new Map<string, unknown>();
    const standIn = (name: string) => {
        if (!standIns.has(name)) {
            standIns.set(name, { [name]: class {} }[name]);
        }
        return standIns.get(name);
    };

    /** Members the extension touches that are not modelled: fail with their name. */
    const strict = <T extends object>(obj: T, where: string): T =>
        new Proxy(obj, {
            get(target, prop, receiver) {
                if (typeof prop === 'symbol' || prop in target || prop === 'then' || prop === '__esModule' || prop === 'default') {
                    return Reflect.get(target, prop, receiver) as unknown;
                }
                if (where === 'vscode' && /^[A-Z]/.test(prop)) {
                    return standIn(prop);
                }
                throw new Error(`fake vscode: ${where}.${String(prop)} is not modelled`);
            },
        });

    /** Provider registrations and diagnostics, when `languageClient` is on. */
    const registrations: { method: string; args: unknown[] }[] = [];
    const diagnostics = new Map<string, unknown[]>();
    const lenient = <T extends object>(obj: T, where: string): T =>
        new Proxy(obj, {
            get(target, prop, receiver) {
                if (typeof prop === 'symbol' || prop in target || prop === 'then') {
                    return Reflect.get(target, prop, receiver) as unknown;
                }
                if (/^on(Did|Will)/.test(prop)) {
                    return () => ({ dispose: () => undefined });
                }
                if (/^register/.test(prop)) {
                    return (...args: unknown[]) => {
                        registrations.push({ method: `${where}.${prop}`, args });
                        return { dispose: () => undefined };
                    };
                }
                throw new Error(`fake vscode: ${where}.${prop} is not modelled`);
            },
        });
    if (opts.languageClient) {
        Object.assign(vscode.workspace, {
            textDocuments: opts.documents ?? [],
            notebookDocuments: [],
            createFileSystemWatcher: () => lenient({ dispose: () => undefined }, 'FileSystemWatcher'),
        });
        Object.assign(vscode.window, {
            // $/progress from the server: run the task with a token that is never cancelled; record the reports.
            withProgress: (options: { title?: string }, task: (p: unknown, t: unknown) => Promise<unknown>) => {
                recorded.progress.push(options.title ?? '');
                const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };
                return task({ report: (r: { message?: string }) => recorded.progress.push(r.message ?? '') }, token);
            },
        });
        Object.assign(vscode.window, { visibleTextEditors: [], tabGroups: { all: [] }, activeNotebookEditor: undefined, visibleNotebookEditors: [] });
        Object.assign(vscode, {
            languages: lenient(
                {
                    createDiagnosticCollection: (name: string) => ({
                        name,
                        set: (uri: Uri, d: unknown[]) => diagnostics.set(uri.toString(), d),
                        delete: (uri: Uri) => diagnostics.delete(uri.toString()),
                        clear: () => diagnostics.clear(),
                        forEach: () => undefined,
                        get: (uri: Uri) => diagnostics.get(uri.toString()),
                        has: (uri: Uri) => diagnostics.has(uri.toString()),
                        dispose: () => undefined,
                    }),
                    match: () => 10,
                },
                'languages',
            ),
        });
    }

    return {
        registrations,
        diagnostics,
        api: strict(
            {
                ...vscode,
                window: opts.languageClient ? lenient(vscode.window, 'window') : strict(vscode.window, 'window'),
                workspace: opts.languageClient ? lenient(vscode.workspace, 'workspace') : strict(vscode.workspace, 'workspace'),
            },
            'vscode',
        ),
        recorded,
        commands,
        fireConfigurationChange: (changed: string[]) =>
            onDidChangeConfiguration.fire({ affectsConfiguration: (s: string) => changed.some((c) => c === s || c.startsWith(`${s}.`)) }),
        status: () => statusItems[0],
    };
}
