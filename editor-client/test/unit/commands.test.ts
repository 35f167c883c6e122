import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    SERVER_COMMANDS,
    STRATEGIES,
    acceptRequest,
    candidateItems,
    candidateNumber,
    cancelRequest,
    isCorrect,
    listJobsRequest,
    moduleAtRequest,
    moduleRequest,
    optimizeRequest,
    parseCandidates,
    parseModuleAt,
    parseModuleTarget,
    sortCandidates,
} from '../../src/commands';

const URI = 'file:///ws/add.py';

describe('optimizeRequest', () => {
    it('sends {uri, line} to kernel-lsp.generate when no strategy is chosen (the server uses kernelLsp.strategy)', () => {
        assert.deepEqual(optimizeRequest({ uri: URI, line: 4 }), { command: 'kernel-lsp.generate', arguments: [{ uri: URI, line: 4 }] });
    });

    it('also accepts {uri, module}', () => {
        assert.deepEqual(optimizeRequest({ uri: URI, module: 'Model' }), {
            command: 'kernel-lsp.generate',
            arguments: [{ uri: URI, module: 'Model' }],
        });
    });

    it('maps best-of-n and refine to their own server commands', () => {
        assert.deepEqual(optimizeRequest({ uri: URI, module: 'Model' }, 'best-of-n'), {
            command: 'kernel-lsp.bestOfN',
            arguments: [{ uri: URI, module: 'Model' }],
        });
        assert.deepEqual(optimizeRequest({ uri: URI, line: 0 }, 'refine'), { command: 'kernel-lsp.refine', arguments: [{ uri: URI, line: 0 }] });
    });

    it('passes the other strategies to generate', () => {
        for (const s of ['profile-guided', 'zero-shot', 'one-shot', 'agent'] as const) {
            assert.deepEqual(optimizeRequest({ uri: URI, module: 'M' }, s), {
                command: 'kernel-lsp.generate',
                arguments: [{ uri: URI, module: 'M', strategy: s }],
            });
        }
    });

    it('never sends both line and module', () => {
        const req = optimizeRequest({ uri: URI, module: 'M', line: 3 });
        assert.deepEqual(req.arguments, [{ uri: URI, module: 'M' }]);
    });
});

describe('the other server commands', () => {
    it('builds verify, profile and listCandidates as [{uri, module}]', () => {
        for (const c of ['verify', 'profile', 'listCandidates'] as const) {
            assert.deepEqual(moduleRequest(c, { uri: URI, module: 'Model' }), {
                command: SERVER_COMMANDS[c],
                arguments: [{ uri: URI, module: 'Model' }],
            });
        }
    });

    it('builds accept with a candidate id, and refuses a bad one', () => {
        assert.deepEqual(acceptRequest({ uri: URI, module: 'Model' }, 3), {
            command: 'kernel-lsp.accept',
            arguments: [{ uri: URI, module: 'Model', candidate: 3 }],
        });
        assert.throws(() => acceptRequest({ uri: URI, module: 'Model' }, -1));
        assert.throws(() => acceptRequest({ uri: URI, module: 'Model' }, 1.5));
    });

    it('cancels by job id or by module', () => {
        assert.deepEqual(cancelRequest({ jobId: 'j7' }), { command: 'kernel-lsp.cancel', arguments: [{ jobId: 'j7' }] });
        assert.deepEqual(cancelRequest({ uri: URI, module: 'Model' }), {
            command: 'kernel-lsp.cancel',
            arguments: [{ uri: URI, module: 'Model' }],
        });
    });

    it('lists jobs with no arguments', () => {
        assert.deepEqual(listJobsRequest(), { command: 'kernel-lsp.listJobs', arguments: [] });
    });

    it('has every strategy of the server', () => {
        assert.deepEqual([...STRATEGIES], ['profile-guided', 'zero-shot', 'one-shot', 'refine', 'best-of-n', 'agent']);
    });
});

describe('parseModuleTarget', () => {
    it('reads {uri, module} and {uri, line}', () => {
        assert.deepEqual(parseModuleTarget({ uri: URI, module: 'Model', extra: 1 }), { uri: URI, module: 'Model' });
        assert.deepEqual(parseModuleTarget({ uri: URI, line: 2 }), { uri: URI, line: 2 });
    });

    it('reads a vscode.Uri-like object', () => {
        const uri = { scheme: 'file', toString: () => URI };
        assert.deepEqual(parseModuleTarget({ uri, module: 'M' }), { uri: URI, module: 'M' });
    });

    it('rejects anything else', () => {
        for (const bad of [undefined, null, 'x', {}, { uri: URI }, { module: 'M' }, { uri: URI, line: -1 }, { uri: URI, line: 1.5 }, { uri: URI, module: '' }, { uri: {}, module: 'M' }]) {
            assert.equal(parseModuleTarget(bad), undefined, JSON.stringify(bad));
        }
    });
});

describe('the module at a line (the server decides)', () => {
    it('asks kernel-lsp.moduleAt with {uri, line}', () => {
        assert.deepEqual(moduleAtRequest(URI, 7), { command: 'kernel-lsp.moduleAt', arguments: [{ uri: URI, line: 7 }] });
        assert.equal(SERVER_COMMANDS.moduleAt, 'kernel-lsp.moduleAt');
    });

    it('reads the answer: the module, and the file\'s modules for a choice', () => {
        assert.deepEqual(parseModuleAt({ module: 'Encoder', modules: [{ name: 'Encoder', line: 6 }, { name: 'Model', line: 14 }] }), {
            module: 'Encoder',
            modules: [{ name: 'Encoder', line: 6 }, { name: 'Model', line: 14 }],
        });
        assert.deepEqual(parseModuleAt({ module: null, modules: [{ name: 'A', line: 0 }, { name: 'B' }, 'junk'] }), {
            module: undefined,
            modules: [{ name: 'A', line: 0 }],
        });
        assert.deepEqual(parseModuleAt({ module: null, modules: [], error: 'missing uri' }), { module: undefined, modules: [] });
    });

    it('refuses what is not an answer', () => {
        assert.throws(() => parseModuleAt(null), /moduleAt returned null/);
        assert.throws(() => parseModuleAt('Model'), /returned string/);
    });
});

describe('candidates', () => {
    const raw = [
        { id: 1, round: 1, strategy: 'best-of-n', status: 'incorrect', speedupEager: null, ms: null },
        { id: 2, round: 1, strategy: 'best-of-n', status: 'ok', speedupEager: 1.5, ms: 0.2, rank: 2 },
        { id: 3, round: 2, strategy: 'refine', status: 'ok', speedupEager: 2.25, ms: 0.1333, rank: 1 },
        { id: 4, round: 2, strategy: 'refine', status: 'compile_error' },
        { round: 3 },
        'junk',
    ];

    it('validates the listCandidates answer', () => {
        assert.deepEqual(
            parseCandidates(raw).map((c) => c.id),
            [1, 2, 3, 4],
        );
        assert.throws(() => parseCandidates(null), /expected an array/);
        assert.throws(() => parseCandidates({ candidates: [] }), /expected an array/);
    });

    it("sorts correct candidates first, in the server's order", () => {
        assert.deepEqual(
            sortCandidates(parseCandidates(raw)).map((c) => c.id),
            [3, 2, 1, 4],
        );
        // the server's rank (the candidate's own time, docs/REWARDS.md), never the speedup over its own eager run
        const noisy = [
            { id: 1, number: 1, status: 'correct', speedupEager: 9, ms: 0.238, rank: 2 },
            { id: 2, number: 2, status: 'correct', speedupEager: 1.2, ms: 0.22, rank: 1 },
        ];
        assert.deepEqual(
            sortCandidates(noisy).map((c) => c.number),
            [2, 1],
        );
        assert.ok(isCorrect({ id: 0, status: 'correct' }));
        assert.ok(!isCorrect({ id: 0, status: 'incorrect' }));
        assert.ok(!isCorrect({ id: 0 }));
    });

    it('accepts by the per-module number when the server gives one', () => {
        assert.equal(candidateNumber({ id: 41, number: 2 }), 2);
        assert.equal(candidateNumber({ id: 41 }), 41);
        const items = candidateItems([{ id: 41, number: 2, status: 'correct', speedupEager: 1.1 }]);
        assert.match(items[0].label, /^\$\(pass\) #2 /);
    });

    it('puts stale correct candidates after current ones and says so', () => {
        const cands = [
            { id: 1, number: 1, status: 'correct', speedupEager: 3, stale: true },
            { id: 2, number: 2, status: 'correct', speedupEager: 1.2, stale: false },
            { id: 3, number: 3, status: 'incorrect' },
        ];
        assert.deepEqual(
            sortCandidates(cands).map((c) => c.number),
            [2, 1, 3],
        );
        assert.match(candidateItems(cands)[1].description ?? '', /stale/);
    });

    it('stars the offered candidate and says a slower one is inserted anyway', () => {
        const items = candidateItems([
            { id: 1, number: 1, status: 'correct', speed: '1.40× slower than eager', ms: 0.31, rank: 2, faster: false },
            { id: 2, number: 2, status: 'correct', speed: '1.84× faster than eager', ms: 0.22, rank: 1, faster: true, offered: true },
        ]);
        assert.equal(items[0].label, '$(pass) #2 ★  1.84× faster than eager · 0.220 ms');
        assert.ok(!(items[0].description ?? '').includes('anyway'));
        assert.equal(items[1].label, '$(pass) #1  1.40× slower than eager · 0.310 ms');
        assert.match(items[1].description ?? '', /not faster than eager: selecting it inserts it anyway/);
    });

    it('says a library-only candidate uses PyTorch operators only and still offers it', () => {
        const items = candidateItems([
            { id: 1, number: 1, status: 'correct', speed: '2.00× faster than eager', rank: 1, faster: true, offered: true, libraryOnly: true },
            { id: 2, number: 2, status: 'correct', speed: '1.50× faster than eager', rank: 2, faster: true, libraryOnly: false },
        ]);
        assert.equal(items[0].label, '$(pass) #1 ★  2.00× faster than eager');
        assert.equal(items[0].description, 'correct · uses PyTorch operators only');
        assert.equal(items[1].description, 'correct');
    });

    it('labels quick-pick items with speedup, time, round, strategy, status', () => {
        const items = candidateItems(parseCandidates(raw));
        assert.equal(items[0].label, '$(pass) #3  2.25× faster than eager · 0.133 ms');
        // the server's own words when it gives them (an uncertain speed keeps its ± figure)
        const worded = candidateItems([{ id: 9, number: 9, status: 'correct', speedupEager: 2.1, speed: '2.10× ± 25 % faster than eager (uncertain: the machine was busy)' }]);
        assert.equal(worded[0].label, '$(pass) #9  2.10× ± 25 % faster than eager (uncertain: the machine was busy)');
        const slow = candidateItems([{ id: 8, number: 8, status: 'correct', speedupEager: 0.5 }]);
        assert.equal(slow[0].label, '$(pass) #8  2.00× slower than eager');
        assert.equal(items[0].description, 'round 2 · refine · ok');
        assert.equal(items[0].value.id, 3);
        assert.equal(items[2].label, '$(error) #1');
        assert.equal(items[3].description, 'round 2 · refine · compile_error');
    });
});
