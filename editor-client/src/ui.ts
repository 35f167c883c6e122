// The contributed commands: quick picks over the server's commands.
import { LogOutputChannel, QuickPickItem, QuickPickItemKind, TextEditor, window, workspace } from 'vscode';
import {
    CLIENT_COMMANDS,
    STRATEGIES,
    STRATEGY_DESCRIPTIONS,
    type Candidate,
    type ModuleTarget,
    type Strategy,
    acceptRequest,
    candidateItems,
    candidateNumber,
    cancelRequest,
    isStrategy,
    listJobsRequest,
    moduleAtRequest,
    moduleRequest,
    optimizeRequest,
    parseCandidates,
    parseModuleAt,
    parseModuleTarget,
} from './commands';
import { SECTION } from './config';
import { type Job, isActive, jobDetail, jobLabel, parseJobs } from './jobs';
import type { ServerManager } from './server';

type Item<T> = QuickPickItem & { value?: T };

function errorText(e: unknown): string {
    if (e instanceof Error) {
        return e.message;
    }
    return typeof e === 'object' && e !== null && 'message' in e ? String(e.message) : String(e);
}

export class Commands {
    constructor(
        private readonly server: ServerManager,
        private readonly output: LogOutputChannel,
    ) {}

    private async run<T>(what: string, f: () => Promise<T>): Promise<T | undefined> {
        try {
            return await f();
        } catch (e) {
            this.output.error(`${what}: ${errorText(e)}`);
            void window.showErrorMessage(`kernel-lsp: ${what} failed: ${errorText(e)}`);
            return undefined;
        }
    }

    private pythonEditor(): TextEditor | undefined {
        const editor = window.activeTextEditor;
        if (!editor || editor.document.languageId !== 'python') {
            void window.showWarningMessage('kernel-lsp: open a Python file with an nn.Module first.');
            return undefined;
        }
        return editor;
    }

    /**
     * `{uri, module}` from the arguments, else the module the server finds at the line (the cursor's), else ask
     * among the file's modules (the server's list).
     */
    private async moduleTarget(arg: unknown): Promise<{ uri: string; module: string } | undefined> {
        const given = parseModuleTarget(arg);
        if (given && 'module' in given) {
            return given;
        }
        let line: number;
        let uri: string;
        if (given) {
            line = given.line;
            uri = given.uri;
        } else {
            const editor = this.pythonEditor();
            if (!editor) {
                return undefined;
            }
            line = editor.selection.active.line;
            uri = this.server.documentUri(editor.document.uri);
        }
        const found = await this.run('find the module', async () => parseModuleAt(await this.server.execute(moduleAtRequest(uri, line))));
        if (!found) {
            return undefined;
        }
        if (found.module) {
            return { uri, module: found.module };
        }
        if (found.modules.length === 0) {
            void window.showWarningMessage('kernel-lsp: no nn.Module class in this file.');
            return undefined;
        }
        const pick = await window.showQuickPick(
            found.modules.map((m) => ({ label: m.name, description: `line ${m.line + 1}` })),
            { title: 'kernel-lsp: which module?' },
        );
        return pick ? { uri, module: pick.label } : undefined;
    }

    async optimizeModule(arg?: unknown): Promise<void> {
        let target: ModuleTarget | undefined = parseModuleTarget(arg);
        if (!target) {
            const editor = this.pythonEditor();
            if (!editor) {
                return;
            }
            // The server resolves the module at this line (0-based).
            target = { uri: this.server.documentUri(editor.document.uri), line: editor.selection.active.line };
        }
        let strategy: Strategy | undefined;
        const argStrategy = (arg as { strategy?: unknown } | undefined)?.strategy;
        if (isStrategy(argStrategy)) {
            strategy = argStrategy;
        } else if (!parseModuleTarget(arg)) {
            // From the Command Palette (no argument) or the editor's context menu (the document's Uri): ask.
            const configured = workspace.getConfiguration(SECTION).get<string>('strategy');
            const items: Item<Strategy>[] = STRATEGIES.map((s) => ({
                label: s,
                description: s === configured ? '(kernelLsp.strategy)' : undefined,
                detail: STRATEGY_DESCRIPTIONS[s],
                value: s,
            }));
            items.sort((a, b) => Number(b.label === configured) - Number(a.label === configured));
            const pick = await window.showQuickPick(items, { title: 'kernel-lsp: optimize with which strategy?' });
            if (!pick) {
                return;
            }
            strategy = pick.value;
        }
        const request = optimizeRequest(target, strategy === undefined ? undefined : strategy);
        const result = await this.run('optimize', () => this.server.execute(request));
        if (result !== undefined) {
            this.output.info(`${request.command}: ${JSON.stringify(result)}`);
        }
    }

    async showCandidates(arg?: unknown): Promise<void> {
        const target = await this.moduleTarget(arg);
        if (!target) {
            return;
        }
        const cands = await this.run('list candidates', async () =>
            parseCandidates(await this.server.execute(moduleRequest('listCandidates', target))),
        );
        if (!cands) {
            return;
        }
        if (cands.length === 0) {
            const choice = await window.showInformationMessage(`kernel-lsp: no candidates for ${target.module} yet.`, 'Optimize');
            if (choice) {
                await this.optimizeModule({ uri: target.uri, module: target.module });
            }
            return;
        }
        const pick = await window.showQuickPick<Item<Candidate>>(candidateItems(cands), {
            title: `kernel-lsp: candidates for ${target.module} (select one to accept it)`,
            matchOnDescription: true,
        });
        if (!pick?.value) {
            return;
        }
        const candidate = pick.value;
        await this.run('accept', () => this.server.execute(acceptRequest(target, candidateNumber(candidate))));
    }

    /** The server's list of jobs when it answers, else what the notifications told us. */
    private async refreshJobs(): Promise<Job[]> {
        try {
            this.server.jobs.replace(parseJobs(await this.server.execute(listJobsRequest())));
        } catch (e) {
            this.output.debug(`listJobs: ${errorText(e)}`);
        }
        return this.server.jobs.all();
    }

    async cancelJob(arg?: unknown): Promise<void> {
        const a = (arg ?? {}) as { jobId?: unknown; uri?: unknown; module?: unknown };
        if (typeof a.jobId === 'string' || typeof a.jobId === 'number') {
            const jobId = a.jobId;
            await this.run('cancel', () => this.server.execute(cancelRequest({ jobId })));
            return;
        }
        if (typeof a.uri === 'string' && typeof a.module === 'string') {
            const what = { uri: a.uri, module: a.module };
            await this.run('cancel', () => this.server.execute(cancelRequest(what)));
            return;
        }
        const active = (await this.refreshJobs()).filter(isActive);
        if (active.length === 0) {
            void window.showInformationMessage('kernel-lsp: no job is running.');
            return;
        }
        const pick = await window.showQuickPick<Item<Job>>(
            active.map((j) => ({ label: jobLabel(j), description: jobDetail(j), value: j })),
            { title: 'kernel-lsp: cancel which job?' },
        );
        if (pick?.value) {
            const jobId = pick.value.id;
            await this.run('cancel', () => this.server.execute(cancelRequest({ jobId })));
        }
    }

    async showJobs(): Promise<void> {
        const jobs = await this.refreshJobs();
        const active = jobs.filter(isActive);
        const finished = jobs.filter((j) => !isActive(j)).reverse();
        type Action = { job?: Job; command?: string };
        const items: Item<Action>[] = [];
        if (active.length > 0) {
            items.push({ label: 'Running and queued', kind: QuickPickItemKind.Separator });
            items.push(
                ...active.map((j) => ({
                    label: `$(sync~spin) ${jobLabel(j)}`,
                    description: jobDetail(j),
                    detail: 'Select to cancel',
                    value: { job: j },
                })),
            );
        }
        if (finished.length > 0) {
            items.push({ label: 'Finished', kind: QuickPickItemKind.Separator });
            items.push(
                ...finished.map((j) => ({
                    label: `${j.state === 'done' ? '$(pass)' : j.state === 'failed' ? '$(error)' : '$(circle-slash)'} ${jobLabel(j)}`,
                    description: jobDetail(j),
                    detail: 'Select to show its candidates',
                    value: { job: j },
                })),
            );
        }
        items.push({ label: 'kernel-lsp', kind: QuickPickItemKind.Separator });
        items.push({ label: '$(zap) Optimize Module…', value: { command: CLIENT_COMMANDS.optimizeModule } });
        items.push({ label: '$(output) Open Log', value: { command: CLIENT_COMMANDS.openLog } });
        items.push({ label: '$(debug-restart) Restart Server', value: { command: CLIENT_COMMANDS.restartServer } });
        const pick = await window.showQuickPick(items, {
            title: active.length > 0 ? `kernel-lsp: ${active.length} active job(s)` : 'kernel-lsp: jobs',
        });
        const job = pick?.value?.job;
        if (job && isActive(job)) {
            await this.run('cancel', () => this.server.execute(cancelRequest({ jobId: job.id })));
        } else if (job) {
            await this.showCandidates({ uri: job.uri, module: job.module });
        } else if (pick?.value?.command === CLIENT_COMMANDS.optimizeModule) {
            await this.optimizeModule();
        } else if (pick?.value?.command === CLIENT_COMMANDS.openLog) {
            this.output.show();
        } else if (pick?.value?.command === CLIENT_COMMANDS.restartServer) {
            await this.server.restart('restart requested');
        }
    }
}
