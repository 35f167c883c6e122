// A stand-in for an OpenAI-compatible endpoint (`kernelLsp.endpoint`): answers every chat completion with the
// same scripted reply, streamed as server-sent events like llama.cpp's server and vLLM do. It lets the harness
// produce a known-correct candidate without a language model, and records the requests it got.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ChatRequest {
    model?: string;
    messages?: { role: string; content: string }[];
    stream?: boolean;
    max_tokens?: number;
}

export class ScriptedEndpoint {
    readonly requests: ChatRequest[] = [];
    private server: Server | undefined;
    baseUrl = '';

    constructor(
        private readonly reply: string,
        readonly model = 'scripted',
    ) {}

    async start(): Promise<string> {
        this.server = createServer((req, res) => {
            void this.handle(req).then(
                ({ status, headers, body }) => {
                    res.writeHead(status, headers);
                    res.end(body);
                },
                (e: unknown) => {
                    res.writeHead(500, { 'content-type': 'text/plain' });
                    res.end(String(e));
                },
            );
        });
        await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
        const { port } = this.server.address() as AddressInfo;
        this.baseUrl = `http://127.0.0.1:${port}/v1`;
        return this.baseUrl;
    }

    private async handle(req: IncomingMessage): Promise<{ status: number; headers: Record<string, string>; body: string }> {
        const chunks: Buffer[] = [];
        for await (const c of req) {
            chunks.push(c as Buffer);
        }
        const url = req.url ?? '';
        if (req.method === 'GET' && url.endsWith('/models')) {
            return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ object: 'list', data: [{ id: this.model, object: 'model' }] }) };
        }
        if (req.method === 'POST' && url.endsWith('/chat/completions')) {
            const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as ChatRequest;
            this.requests.push(body);
            const id = `chatcmpl-${this.requests.length}`;
            const created = Math.floor(Date.now() / 1000);
            const pieces = this.reply.match(/[\s\S]{1,200}/g) ?? [''];
            const event = (choice: object, usage?: object) =>
                `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: this.model, choices: [choice], ...(usage ? { usage } : {}) })}\n\n`;
            if (body.stream === false) {
                return {
                    status: 200,
                    headers: { 'content-type': 'application/json' },
                    body: JSON.stringify({
                        id,
                        object: 'chat.completion',
                        created,
                        model: this.model,
                        choices: [{ index: 0, message: { role: 'assistant', content: this.reply }, finish_reason: 'stop' }],
                        usage: { prompt_tokens: 100, completion_tokens: pieces.length, total_tokens: 100 + pieces.length },
                    }),
                };
            }
            const events = [
                event({ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }),
                ...pieces.map((p) => event({ index: 0, delta: { content: p }, finish_reason: null })),
                event({ index: 0, delta: {}, finish_reason: 'stop' }),
                `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: this.model, choices: [], usage: { prompt_tokens: 100, completion_tokens: pieces.length, total_tokens: 100 + pieces.length } })}\n\n`,
                'data: [DONE]\n\n',
            ];
            return { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }, body: events.join('') };
        }
        return { status: 404, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message: `no route ${req.method} ${url}` } }) };
    }

    async stop(): Promise<void> {
        if (this.server) {
            await new Promise<void>((resolve) => this.server!.close(() => resolve()));
        }
    }
}
