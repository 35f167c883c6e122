// A minimal LSP client over vscode-jsonrpc: spawns the real server the way the extension does (same executable,
// same initializationOptions, same answers to workspace/configuration) and records everything the server sends.
import { spawn, type ChildProcess } from 'node:child_process';
import {
    createMessageConnection,
    ResponseError,
    StreamMessageReader,
    StreamMessageWriter,
    type MessageConnection,
} from 'vscode-jsonrpc/node';
import {
    ConfigurationRequest,
    ExecuteCommandRequest,
    PublishDiagnosticsNotification,
    RegistrationRequest,
    WorkDoneProgressCreateRequest,
    type ConfigurationParams,
    type Diagnostic,
    type Registration,
    type WorkspaceEdit,
} from 'vscode-languageserver-protocol';
import { type ExecutableLike, SECTION, serverSection } from '../../src/config';
import type { ServerCommandRequest } from '../../src/commands';

export interface Received<T> {
    at: number;
    value: T;
}

export class LspSession {
    readonly connection: MessageConnection;
    readonly process: ChildProcess;
    readonly diagnostics: Received<{ uri: string; version?: number; diagnostics: Diagnostic[] }>[] = [];
    readonly jobs: Received<unknown>[] = [];
    readonly progressCreated: Received<string | number>[] = [];
    readonly progress: Received<{ token: string | number; value: { kind?: string; title?: string; message?: string; percentage?: number; cancellable?: boolean } }>[] = [];
    readonly configurationRequests: Received<ConfigurationParams>[] = [];
    readonly registrations: Received<Registration>[] = [];
    readonly appliedEdits: Received<{ label?: string; edit: WorkspaceEdit }>[] = [];
    readonly messages: Received<{ method: string; type?: number; message: string }>[] = [];
    readonly otherRequests: Received<{ method: string; params: unknown }>[] = [];
    readonly otherNotifications: Received<{ method: string; params: unknown }>[] = [];
    private stderrText = '';
    exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

    constructor(
        executable: ExecutableLike,
        /** The `kernelLsp` section as the extension's configuration would give it (client-only keys included). */
        private readonly section: Record<string, unknown>,
        private readonly verbose = false,
    ) {
        this.process = spawn(executable.command, executable.args, {
            cwd: executable.options.cwd,
            env: executable.options.env,
            stdio: ['pipe', 'pipe', 'pipe'],
        });
        this.process.stderr!.setEncoding('utf8');
        this.process.stderr!.on('data', (chunk: string) => {
            this.stderrText += chunk;
            if (this.verbose) {
                process.stderr.write(`[server] ${chunk}`);
            }
        });
        this.process.on('exit', (code, signal) => {
            this.exit = { code, signal };
        });
        this.connection = createMessageConnection(new StreamMessageReader(this.process.stdout!), new StreamMessageWriter(this.process.stdin!));
        const now = () => Date.now();

        this.connection.onNotification(PublishDiagnosticsNotification.type, (p) => {
            this.diagnostics.push({ at: now(), value: { uri: p.uri, version: p.version, diagnostics: p.diagnostics } });
        });
        this.connection.onNotification('kernelLsp/jobs', (p: unknown) => {
            this.jobs.push({ at: now(), value: p });
        });
        this.connection.onNotification('$/progress', (p: { token: string | number; value: Record<string, unknown> }) => {
            this.progress.push({ at: now(), value: p });
        });
        for (const method of ['window/logMessage', 'window/showMessage']) {
            this.connection.onNotification(method, (p: { type?: number; message: string }) => {
                this.messages.push({ at: now(), value: { method, type: p.type, message: p.message } });
                if (this.verbose) {
                    process.stderr.write(`[${method}] ${p.message}\n`);
                }
            });
        }
        this.connection.onNotification((method: string, params: unknown) => {
            this.otherNotifications.push({ at: now(), value: { method, params } });
        });

        // Server → client requests, answered as VS Code and vscode-languageclient answer them.
        this.connection.onRequest(WorkDoneProgressCreateRequest.type, (p) => {
            this.progressCreated.push({ at: now(), value: p.token });
            return null;
        });
        this.connection.onRequest(ConfigurationRequest.type, (p) => {
            this.configurationRequests.push({ at: now(), value: p });
            // The extension's middleware: the kernelLsp section without client-only keys.
            return p.items.map((item) => (item.section === SECTION ? serverSection(this.section) : null));
        });
        this.connection.onRequest(RegistrationRequest.type, (p) => {
            for (const r of p.registrations) {
                this.registrations.push({ at: now(), value: r });
            }
            return null;
        });
        this.connection.onRequest('client/unregisterCapability', () => null);
        this.connection.onRequest('workspace/applyEdit', (p: { label?: string; edit: WorkspaceEdit }) => {
            this.appliedEdits.push({ at: now(), value: p });
            return { applied: true };
        });
        this.connection.onRequest('window/showMessageRequest', (p: { type?: number; message: string }) => {
            this.messages.push({ at: now(), value: { method: 'window/showMessageRequest', type: p.type, message: p.message } });
            return null;
        });
        this.connection.onRequest('window/showDocument', () => ({ success: true }));
        this.connection.onRequest((method: string, params: unknown) => {
            this.otherRequests.push({ at: now(), value: { method, params } });
            if (method.endsWith('/refresh')) {
                return null;
            }
            return new ResponseError(-32601, `harness: unhandled request ${method}`);
        });
        this.connection.listen();
    }

    get stderr(): string {
        return this.stderrText;
    }

    stderrTail(lines = 30): string {
        return this.stderrText.trimEnd().split('\n').slice(-lines).join('\n');
    }

    /** workspace/executeCommand, as ServerManager.execute sends it. */
    execute(request: ServerCommandRequest): Promise<unknown> {
        return this.connection.sendRequest(ExecuteCommandRequest.type, { command: request.command, arguments: request.arguments });
    }

    /** Resolves with the first truthy value of `probe`, polled; rejects after `timeoutMs` naming `what`. */
    async waitFor<T>(what: string, timeoutMs: number, probe: () => T | undefined | false | null): Promise<T> {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
            const value = probe();
            if (value) {
                return value;
            }
            if (this.exit) {
                throw new Error(`the server exited (${JSON.stringify(this.exit)}) while waiting for ${what}\n--- server stderr ---\n${this.stderrTail()}`);
            }
            if (Date.now() > deadline) {
                throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}\n--- server stderr (tail) ---\n${this.stderrTail()}`);
            }
            await new Promise((r) => setTimeout(r, 50));
        }
    }

    async close(): Promise<void> {
        this.connection.dispose();
        if (!this.exit) {
            this.process.kill();
            await new Promise((r) => setTimeout(r, 200));
        }
    }
}

/** The error of a failed request, with what the harness can say about it. */
export function explain(e: unknown, feature: string): Error {
    if (e instanceof ResponseError) {
        const pending = e.code === -32601 ? ` — the server does not implement it yet (pending server feature: ${feature})` : '';
        return new Error(`${feature}: the server answered error ${e.code} "${e.message}"${pending}`);
    }
    return e instanceof Error ? e : new Error(String(e));
}
