// The language client's lifecycle: resolve the interpreter, check kernel_lsp is installed, start, restart, stop.
import * as os from 'node:os';
import {
    Disposable,
    EventEmitter,
    ExtensionContext,
    LogOutputChannel,
    Uri,
    WorkspaceFolder,
    commands,
    env,
    window,
    workspace,
} from 'vscode';
import {
    DidChangeConfigurationNotification,
    ExecuteCommandRequest,
    LanguageClient,
    LanguageClientOptions,
    ResponseError,
    RevealOutputChannelOn,
    ServerOptions,
    State,
} from 'vscode-languageclient/node';
import { type ServerCommandRequest, JOBS_NOTIFICATION } from './commands';
import {
    SECTION,
    SERVER_ID,
    SERVER_NAME,
    buildInitializationOptions,
    buildServerExecutable,
    serverSection,
    serverSettingKeys,
    type PackageJsonLike,
} from './config';
import { checkInterpreter, describeSource, installCommand, resolveInterpreter, type ResolvedInterpreter } from './interpreter';
import { JobTable, parseJobs, type ServerStatus } from './jobs';
import { processRunner } from './process';
import { getPythonExtensionInterpreter, isPythonExtensionInstalled } from './python';

function projectRoot(): WorkspaceFolder | undefined {
    const folders = workspace.workspaceFolders ?? [];
    const active = window.activeTextEditor?.document.uri;
    return (active && workspace.getWorkspaceFolder(active)) || folders[0];
}

export class ServerManager implements Disposable {
    private client: LanguageClient | undefined;
    private clientDisposables: Disposable[] = [];
    private queue: Promise<unknown> = Promise.resolve();
    private statusValue: ServerStatus = 'stopped';
    private readonly statusEmitter = new EventEmitter<void>();
    readonly jobs = new JobTable();
    /** Fires when the server status or the jobs change. */
    readonly onDidChange = this.statusEmitter.event;
    interpreter: ResolvedInterpreter | undefined;

    constructor(
        private readonly context: ExtensionContext,
        private readonly output: LogOutputChannel,
    ) {}

    get status(): ServerStatus {
        return this.statusValue;
    }

    private setStatus(status: ServerStatus): void {
        this.statusValue = status;
        this.statusEmitter.fire();
    }

    private get packageJson(): PackageJsonLike {
        return this.context.extension.packageJSON as PackageJsonLike;
    }

    /** Starts (or restarts) the server. Calls are serialised: a restart never overlaps another. */
    restart(reason: string): Promise<void> {
        const next = this.queue.then(() => this.doRestart(reason));
        this.queue = next.catch(() => undefined);
        return next;
    }

    stop(): Promise<void> {
        const next = this.queue.then(() => this.doStop());
        this.queue = next.catch(() => undefined);
        return next;
    }

    private async doStop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        for (const d of this.clientDisposables) {
            d.dispose();
        }
        this.clientDisposables = [];
        this.jobs.clear();
        if (client) {
            try {
                await client.stop(5000);
            } catch (e) {
                this.output.warn(`stopping the server: ${String(e)}`);
            }
            await client.dispose().catch(() => undefined);
        }
        this.setStatus('stopped');
    }

    private async doRestart(reason: string): Promise<void> {
        await this.doStop();
        this.output.info(`starting the server (${reason})`);
        this.setStatus('starting');
        const folder = projectRoot();
        const config = workspace.getConfiguration(SECTION, folder?.uri);

        const interpreter = resolveInterpreter({
            setting: config.get<unknown>('interpreter'),
            pythonExtension: await getPythonExtensionInterpreter(folder?.uri),
            variables: { workspaceFolder: folder?.uri.fsPath, userHome: os.homedir(), cwd: process.cwd(), env: process.env },
        });
        this.interpreter = interpreter;
        this.output.info(`interpreter: ${interpreter.command.join(' ')} (from ${describeSource(interpreter.source)})`);

        const cwd = folder?.uri.fsPath ?? os.homedir();
        const check = await checkInterpreter(interpreter.command, processRunner({ cwd, timeoutMs: 60_000 }));
        if (!check.ok) {
            this.output.error(check.message);
            this.setStatus(check.reason === 'not-installed' ? 'not-installed' : 'error');
            void this.showInterpreterProblem(check.message, check.reason, interpreter);
            return;
        }
        this.output.info(`kernel-lsp ${check.version} on Python ${check.python.join('.')} (${check.executable})`);

        const executable = buildServerExecutable(interpreter.command, {
            cwd,
            env: { ...process.env },
            logLevel: config.get('logLevel'),
        });
        this.output.info(`server command: ${[executable.command, ...executable.args].join(' ')}`);
        const serverOptions: ServerOptions = { run: executable, debug: executable };
        const pkg = this.packageJson;
        const clientOptions: LanguageClientOptions = {
            documentSelector: [
                { scheme: 'file', language: 'python' },
                { scheme: 'untitled', language: 'python' },
            ],
            outputChannel: this.output,
            traceOutputChannel: this.output,
            revealOutputChannelOn: RevealOutputChannelOn.Never,
            initializationOptions: buildInitializationOptions(pkg, (key) => config.get(key)),
            initializationFailedHandler: (error) => {
                this.output.error(`the server failed to initialize: ${String(error)}`);
                return false;
            },
            middleware: {
                workspace: {
                    // The server pulls the `kernelLsp` section; it must not see client-only keys (interpreter, trace).
                    configuration: async (params, token, next) => {
                        const result: unknown = await next(params, token);
                        if (!Array.isArray(result)) {
                            return result as ResponseError;
                        }
                        return (result as unknown[]).map((value, i) =>
                            params.items[i]?.section === SECTION ? serverSection(value) : value,
                        );
                    },
                },
            },
        };

        const client = new LanguageClient(SERVER_ID, SERVER_NAME, serverOptions, clientOptions);
        this.client = client;
        this.clientDisposables.push(
            client.onDidChangeState((e) => {
                if (e.newState === State.Running) {
                    // The client says Running before its features register the server's providers and
                    // commands; its start promise (the same one on an automatic restart) settles after them.
                    void client.start().then(
                        () => {
                            if (this.client === client && client.isRunning()) {
                                this.setStatus('running');
                            }
                        },
                        () => undefined,
                    );
                } else if (e.newState === State.Starting) {
                    this.setStatus('starting');
                } else if (this.client === client) {
                    this.jobs.clear();
                    this.setStatus('stopped');
                }
            }),
            client.onNotification(JOBS_NOTIFICATION, (params: unknown) => {
                this.jobs.merge(parseJobs(params));
                this.statusEmitter.fire();
            }),
        );
        try {
            await client.start();
            this.setStatus('running');
        } catch (e) {
            this.output.error(`the server did not start: ${String(e)}`);
            this.setStatus('error');
            void window.showErrorMessage(`kernel-lsp: the server did not start (${String(e)}).`, 'Open Log').then((choice) => {
                if (choice) {
                    this.output.show();
                }
            });
        }
    }

    private async showInterpreterProblem(message: string, reason: string, interpreter: ResolvedInterpreter): Promise<void> {
        // kernel-lsp is not on PyPI: the command installs a checkout, whose path the user fills in (so it is
        // copied, never run in a terminal as it is).
        const install = installCommand(interpreter.command);
        const actions: string[] = [];
        if (reason === 'not-installed') {
            actions.push('Copy Install Command');
        }
        if (isPythonExtensionInstalled()) {
            actions.push('Select Interpreter');
        }
        actions.push('Open Settings');
        const detail = reason === 'not-installed' ? ` Install it from a checkout of the repository: \`${install}\`.` : '';
        const choice = await window.showErrorMessage(`kernel-lsp: ${message}.${detail}`, ...actions);
        switch (choice) {
            case 'Copy Install Command':
                await env.clipboard.writeText(install);
                break;
            case 'Select Interpreter':
                await commands.executeCommand('python.setInterpreter');
                break;
            case 'Open Settings':
                await commands.executeCommand('workbench.action.openSettings', `${SECTION}.interpreter`);
                break;
        }
    }

    /** workspace/executeCommand on the server. Throws when the server is not running or answers with an error. */
    async execute(request: ServerCommandRequest): Promise<unknown> {
        const client = this.client;
        if (!client || !client.isRunning()) {
            throw new Error('the kernel-lsp server is not running (see the kernel-lsp output)');
        }
        this.output.debug(`executeCommand ${request.command} ${JSON.stringify(request.arguments)}`);
        return client.sendRequest(ExecuteCommandRequest.type, { command: request.command, arguments: request.arguments });
    }

    /** Tells the running server its settings changed; it pulls them with workspace/configuration. */
    async notifyConfigurationChanged(): Promise<void> {
        const client = this.client;
        if (!client || !client.isRunning()) {
            return;
        }
        const config = workspace.getConfiguration(SECTION, projectRoot()?.uri);
        const settings = buildInitializationOptions(this.packageJson, (key) => config.get(key));
        await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: settings } });
    }

    serverSettingKeys(): string[] {
        return serverSettingKeys(this.packageJson);
    }

    documentUri(uri: Uri): string {
        return this.client ? this.client.code2ProtocolConverter.asUri(uri) : uri.toString();
    }

    dispose(): void {
        void this.stop();
        this.statusEmitter.dispose();
    }
}
