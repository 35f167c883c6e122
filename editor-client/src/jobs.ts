// Jobs as the server reports them (`kernelLsp/jobs`, `kernel-lsp.listJobs`) and the status bar text built from
// them. No `vscode` import.

export const JOB_STATES = ['queued', 'running', 'done', 'failed', 'cancelled'] as const;
export type JobState = (typeof JOB_STATES)[number];

export interface Job {
    id: string;
    uri: string;
    module: string;
    kind: string;
    state: JobState;
    message?: string;
    percentage?: number;
}

/** The job id in a command's answer (`"j1"`, `7`, `{jobId}` or `{id}`), if there is one. */
export function jobIdFromResult(result: unknown): string | undefined {
    if (typeof result === 'string' || typeof result === 'number') {
        return String(result);
    }
    if (typeof result === 'object' && result !== null) {
        const r = result as { jobId?: unknown; id?: unknown };
        for (const v of [r.jobId, r.id]) {
            if (typeof v === 'string' || typeof v === 'number') {
                return String(v);
            }
        }
    }
    return undefined;
}

export function isActive(job: Pick<Job, 'state'>): boolean {
    return job.state === 'queued' || job.state === 'running';
}

function parseJob(raw: unknown): Job | undefined {
    if (typeof raw !== 'object' || raw === null) {
        return undefined;
    }
    const r = raw as Record<string, unknown>;
    const id = typeof r.id === 'string' || typeof r.id === 'number' ? String(r.id) : undefined;
    const state = typeof r.state === 'string' && (JOB_STATES as readonly string[]).includes(r.state) ? (r.state as JobState) : undefined;
    if (id === undefined || state === undefined) {
        return undefined;
    }
    const job: Job = {
        id,
        uri: typeof r.uri === 'string' ? r.uri : '',
        module: typeof r.module === 'string' ? r.module : '',
        kind: typeof r.kind === 'string' ? r.kind : '',
        state,
    };
    if (typeof r.message === 'string' && r.message.length > 0) {
        job.message = r.message;
    }
    if (typeof r.percentage === 'number' && Number.isFinite(r.percentage)) {
        job.percentage = Math.max(0, Math.min(100, r.percentage));
    }
    return job;
}

/** Jobs from a listJobs answer (an array) or a kernelLsp/jobs notification (`{jobs: [...]}`). Malformed entries are dropped. */
export function parseJobs(payload: unknown): Job[] {
    const list = Array.isArray(payload)
        ? payload
        : typeof payload === 'object' && payload !== null && Array.isArray((payload as { jobs?: unknown }).jobs)
          ? (payload as { jobs: unknown[] }).jobs
          : [];
    return list.map(parseJob).filter((j): j is Job => j !== undefined);
}

/**
 * The client's view of the server's jobs. Notifications are merged by id (a notification may carry only the jobs
 * that changed); a listJobs answer replaces the whole view. Finished jobs are kept (most recent `keepFinished`) so
 * the jobs quick pick can show what happened.
 */
export class JobTable {
    private readonly jobs = new Map<string, Job>();

    constructor(private readonly keepFinished = 20) {}

    merge(jobs: readonly Job[]): void {
        for (const job of jobs) {
            this.jobs.delete(job.id); // re-insert: Map order is recency order
            this.jobs.set(job.id, job);
        }
        this.prune();
    }

    replace(jobs: readonly Job[]): void {
        this.jobs.clear();
        this.merge(jobs);
    }

    clear(): void {
        this.jobs.clear();
    }

    all(): Job[] {
        return [...this.jobs.values()];
    }

    active(): Job[] {
        return this.all().filter(isActive);
    }

    get(id: string): Job | undefined {
        return this.jobs.get(id);
    }

    private prune(): void {
        const finished = this.all().filter((j) => !isActive(j));
        for (const job of finished.slice(0, Math.max(0, finished.length - this.keepFinished))) {
            this.jobs.delete(job.id);
        }
    }
}

export type ServerStatus = 'starting' | 'running' | 'stopped' | 'not-installed' | 'error';

export interface StatusView {
    text: string;
    tooltip: string;
    /** The status bar item's background: warning/error theme colour, or none. */
    severity?: 'warning' | 'error';
}

function basename(uri: string): string {
    const path = uri.replace(/[?#].*$/, '');
    const name = path.slice(path.lastIndexOf('/') + 1);
    try {
        return decodeURIComponent(name);
    } catch {
        return name;
    }
}

export function jobLabel(job: Job): string {
    const where = job.module ? `${job.module} (${basename(job.uri)})` : basename(job.uri);
    return `${job.kind || 'job'} ${where}`.trim();
}

export function jobDetail(job: Job): string {
    const parts: string[] = [job.state];
    if (job.percentage !== undefined && isActive(job)) {
        parts.push(`${Math.round(job.percentage)}%`);
    }
    if (job.message) {
        parts.push(job.message);
    }
    return parts.join(' · ');
}

/** The status bar item: "$(sync~spin) kernel-lsp: 1 running, 2 queued" while jobs run. */
export function statusView(server: ServerStatus, jobs: readonly Job[]): StatusView {
    switch (server) {
        case 'starting':
            return { text: '$(loading~spin) kernel-lsp', tooltip: 'kernel-lsp: starting the server' };
        case 'stopped':
            return { text: '$(debug-stop) kernel-lsp', tooltip: 'kernel-lsp: the server is stopped. Click for jobs and actions.' };
        case 'not-installed':
            return {
                text: '$(warning) kernel-lsp: not installed',
                tooltip: 'kernel-lsp is not installed in the selected Python interpreter. Click for details.',
                severity: 'warning',
            };
        case 'error':
            return { text: '$(error) kernel-lsp', tooltip: 'kernel-lsp: the server failed. Click for details.', severity: 'error' };
        case 'running':
            break;
    }
    const running = jobs.filter((j) => j.state === 'running');
    const queued = jobs.filter((j) => j.state === 'queued');
    if (running.length === 0 && queued.length === 0) {
        return { text: '$(zap) kernel-lsp', tooltip: 'kernel-lsp: no jobs running. Click for recent jobs.' };
    }
    const counts: string[] = [];
    if (running.length > 0) {
        counts.push(`${running.length} running`);
    }
    if (queued.length > 0) {
        counts.push(`${queued.length} queued`);
    }
    const icon = running.length > 0 ? '$(sync~spin)' : '$(clock)';
    const lines = [...running, ...queued].map((j) => `${jobLabel(j)}: ${jobDetail(j)}`);
    return { text: `${icon} kernel-lsp: ${counts.join(', ')}`, tooltip: `${lines.join('\n')}\n\nClick to cancel a job.` };
}
