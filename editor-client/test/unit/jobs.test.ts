import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JobTable, isActive, jobDetail, jobIdFromResult, jobLabel, parseJobs, statusView, type Job } from '../../src/jobs';

const job = (id: string, state: Job['state'], extra: Partial<Job> = {}): Job => ({
    id,
    uri: 'file:///ws/dir/my%20model.py',
    module: 'Model',
    kind: 'generate',
    state,
    ...extra,
});

describe('parseJobs', () => {
    it('reads a kernelLsp/jobs notification and a listJobs answer', () => {
        const jobs = [{ id: 'a', uri: 'file:///x.py', module: 'Model', kind: 'generate', state: 'running', message: 'round 1/3', percentage: 33 }];
        assert.deepEqual(parseJobs({ jobs }), jobs);
        assert.deepEqual(parseJobs(jobs), jobs);
    });

    it('drops malformed jobs and clamps percentages', () => {
        const parsed = parseJobs({
            jobs: [
                { id: 1, state: 'queued' },
                { id: 'x', state: 'exploded' },
                { state: 'running' },
                null,
                { id: 'p', state: 'running', percentage: 250, message: '' },
            ],
        });
        assert.deepEqual(parsed, [
            { id: '1', uri: '', module: '', kind: '', state: 'queued' },
            { id: 'p', uri: '', module: '', kind: '', state: 'running', percentage: 100 },
        ]);
        assert.deepEqual(parseJobs(undefined), []);
        assert.deepEqual(parseJobs({ jobs: 'no' }), []);
    });
});

describe('JobTable', () => {
    it('merges notifications by id', () => {
        const t = new JobTable();
        t.merge([job('a', 'queued'), job('b', 'queued')]);
        t.merge([job('a', 'running')]);
        assert.deepEqual(
            t.all().map((j) => [j.id, j.state]),
            [
                ['b', 'queued'],
                ['a', 'running'],
            ],
        );
        assert.deepEqual(
            t.active().map((j) => j.id),
            ['b', 'a'],
        );
        t.merge([job('a', 'done')]);
        assert.deepEqual(
            t.active().map((j) => j.id),
            ['b'],
        );
        assert.equal(t.get('a')?.state, 'done');
    });

    it('replaces on a listJobs answer', () => {
        const t = new JobTable();
        t.merge([job('a', 'running')]);
        t.replace([job('b', 'queued')]);
        assert.deepEqual(
            t.all().map((j) => j.id),
            ['b'],
        );
    });

    it('keeps only the most recent finished jobs, never drops active ones', () => {
        const t = new JobTable(2);
        t.merge([job('r', 'running')]);
        t.merge([job('1', 'done'), job('2', 'failed'), job('3', 'cancelled')]);
        assert.deepEqual(
            t.all().map((j) => j.id),
            ['r', '2', '3'],
        );
    });
});

describe('statusView', () => {
    it('counts running and queued jobs', () => {
        const v = statusView('running', [job('a', 'running'), job('b', 'queued'), job('c', 'queued'), job('d', 'done')]);
        assert.equal(v.text, '$(sync~spin) kernel-lsp: 1 running, 2 queued');
        assert.match(v.tooltip, /generate Model \(my model\.py\): running/);
        assert.match(v.tooltip, /cancel/);
    });

    it('shows only what there is', () => {
        assert.equal(statusView('running', [job('a', 'running'), job('b', 'running')]).text, '$(sync~spin) kernel-lsp: 2 running');
        assert.equal(statusView('running', [job('a', 'queued')]).text, '$(clock) kernel-lsp: 1 queued');
        assert.equal(statusView('running', [job('a', 'failed')]).text, '$(zap) kernel-lsp');
        assert.equal(statusView('running', []).text, '$(zap) kernel-lsp');
    });

    it('shows the server state before jobs', () => {
        assert.equal(statusView('not-installed', [job('a', 'running')]).severity, 'warning');
        assert.match(statusView('not-installed', []).text, /not installed/);
        assert.equal(statusView('error', []).severity, 'error');
        assert.match(statusView('starting', []).text, /spin/);
        assert.match(statusView('stopped', []).text, /kernel-lsp/);
    });
});

describe('job labels', () => {
    it('names the kind, module and file', () => {
        assert.equal(jobLabel(job('a', 'running')), 'generate Model (my model.py)');
        assert.equal(jobLabel({ ...job('a', 'running'), module: '', kind: '' }), 'job my model.py');
    });

    it('details state, progress and message', () => {
        assert.equal(jobDetail(job('a', 'running', { percentage: 42.4, message: 'compiling 3/4' })), 'running · 42% · compiling 3/4');
        assert.equal(jobDetail(job('a', 'done', { percentage: 100, message: '1.8×' })), 'done · 1.8×');
        assert.ok(isActive({ state: 'queued' }) && !isActive({ state: 'cancelled' }));
    });
});

describe('jobIdFromResult', () => {
    it('reads the id from the shapes a command may answer with', () => {
        assert.equal(jobIdFromResult('j1'), 'j1');
        assert.equal(jobIdFromResult(7), '7');
        assert.equal(jobIdFromResult({ jobId: 'a' }), 'a');
        assert.equal(jobIdFromResult({ id: 3 }), '3');
        assert.equal(jobIdFromResult({ jobId: { x: 1 } }), undefined);
        assert.equal(jobIdFromResult(null), undefined);
    });
});
