// package.json's contributed settings must match the server's `Settings` dataclass in kernel_lsp/config.py:
// the same names (snake_case → camelCase), types and defaults; and, where config.py declares them, the same enum
// choices and numeric bounds. Fails when either side changes without the other.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { SECTION, serverSettingKeys } from '../../src/config';
import { REPO_ROOT, findPython, readPackageJson } from './helpers';

const CONFIG_PY = process.env.KERNEL_LSP_CONFIG_PY ?? path.join(REPO_ROOT, 'kernel_lsp', 'config.py');

export function snakeToCamel(name: string): string {
    return name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

interface PyField {
    name: string;
    type: string;
    default: unknown;
}

interface PySchema {
    fields: PyField[];
    bounds: Record<string, [number | null, number | null]>;
    choices: Record<string, string[]>;
}

/** Reads the dataclass with Python's own parser (no import of kernel_lsp: its dependencies need not be installed). */
const AST_SCRIPT = String.raw`
import ast, json, sys
tree = ast.parse(open(sys.argv[1], encoding="utf-8").read())
consts, fields, bounds, choices = {}, [], {}, {}
def value(node):
    return eval(compile(ast.Expression(node), "config.py", "eval"), {"__builtins__": {}}, dict(consts))
for node in tree.body:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name = node.targets[0].id
        if name in ("_BOUNDS", "_CHOICES") or name.isupper():
            try:
                consts[name] = value(node.value)
            except Exception:
                pass
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in ("_BOUNDS", "_CHOICES"):
        consts[node.target.id] = value(node.value)
    if isinstance(node, ast.ClassDef) and node.name == "Settings":
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                fields.append({"name": item.target.id, "type": ast.unparse(item.annotation), "default": ast.literal_eval(item.value)})
bounds = {k: list(v) for k, v in consts.get("_BOUNDS", {}).items()}
choices = {k: list(v) for k, v in consts.get("_CHOICES", {}).items()}
print(json.dumps({"fields": fields, "bounds": bounds, "choices": choices}))
`;

function schemaFromPython(python: string, file: string): PySchema {
    const r = spawnSync(python, ['-c', AST_SCRIPT, file], { encoding: 'utf8' });
    assert.equal(r.status, 0, `python failed to parse ${file}: ${r.stderr}`);
    return JSON.parse(r.stdout) as PySchema;
}

/** The fallback without Python: the dataclass's `name: type = default` lines. */
export function fieldsFromText(text: string): PyField[] {
    const start = text.search(/^class Settings\b.*:\s*$/m);
    assert.ok(start >= 0, 'class Settings not found in config.py');
    const body = text.slice(start).split(/\r?\n/).slice(1);
    const out: PyField[] = [];
    for (const line of body) {
        if (/^\S/.test(line)) {
            break; // dedent: end of the class
        }
        const m = /^ {4}([a-z_][a-z0-9_]*)\s*:\s*([\w.|[\], ]+?)\s*=\s*(.+?)\s*(#.*)?$/.exec(line);
        if (!m) {
            continue;
        }
        const raw = m[3];
        let def: unknown = raw;
        if (/^".*"$|^'.*'$/.test(raw)) {
            def = raw.slice(1, -1);
        } else if (/^-?[\d._]+(e-?\d+)?$/i.test(raw)) {
            def = Number(raw.replace(/_/g, ''));
        } else if (raw === 'True' || raw === 'False') {
            def = raw === 'True';
        }
        out.push({ name: m[1], type: m[2].trim(), default: def });
    }
    return out;
}

const JSON_TYPE: Record<string, string> = { str: 'string', int: 'integer', float: 'number', bool: 'boolean' };

describe('package.json settings match kernel_lsp/config.py', { skip: existsSync(CONFIG_PY) ? false : `${CONFIG_PY} not found` }, () => {
    const pkg = readPackageJson();
    const props = pkg.contributes.configuration.properties;
    const text = existsSync(CONFIG_PY) ? readFileSync(CONFIG_PY, 'utf8') : '';
    const textFields = fieldsFromText(text);
    const python = findPython();

    it('the text parser finds the dataclass fields', () => {
        assert.ok(textFields.length >= 20, `only ${textFields.length} fields parsed from ${CONFIG_PY}`);
    });

    it('the same setting names (snake_case → camelCase), nothing missing, nothing extra', () => {
        const expected = textFields.map((f) => snakeToCamel(f.name)).sort();
        const contributed = serverSettingKeys(pkg).sort();
        const missing = expected.filter((k) => !contributed.includes(k));
        const extra = contributed.filter((k) => !expected.includes(k));
        assert.deepEqual(
            { missing, extra },
            { missing: [], extra: [] },
            `package.json drifted from config.py: add ${missing.map((k) => `${SECTION}.${k}`).join(', ') || 'nothing'}; remove ${extra.map((k) => `${SECTION}.${k}`).join(', ') || 'nothing'}`,
        );
    });

    it('the same types and defaults', () => {
        for (const f of textFields) {
            const key = `${SECTION}.${snakeToCamel(f.name)}`;
            const schema = props[key];
            assert.ok(schema, `${key} missing`);
            assert.equal(schema.type, JSON_TYPE[f.type], `${key}: type ${String(schema.type)}, config.py says ${f.type}`);
            assert.deepEqual(schema.default, f.default, `${key}: default ${JSON.stringify(schema.default)}, config.py says ${JSON.stringify(f.default)}`);
            const documented = schema.markdownDescription ?? schema.description;
            assert.ok(typeof documented === 'string' && documented.length > 10, `${key} has no description`);
        }
    });

    it('the same enums and bounds (read with Python’s parser)', { skip: python ? false : 'no Python found; names, types and defaults were checked from the text' }, () => {
        const schema = schemaFromPython(python!, CONFIG_PY);
        // Both readers see the same fields: the regex is not missing anything the real parser finds.
        assert.deepEqual(
            schema.fields.map((f) => f.name),
            textFields.map((f) => f.name),
        );
        for (const f of schema.fields) {
            const key = `${SECTION}.${snakeToCamel(f.name)}`;
            assert.deepEqual(props[key].default, f.default, `${key}: default`);
        }
        for (const [name, choices] of Object.entries(schema.choices)) {
            const key = `${SECTION}.${snakeToCamel(name)}`;
            assert.deepEqual(props[key]?.enum, choices, `${key}: enum differs from config.py _CHOICES`);
        }
        for (const [name, [lo, hi]] of Object.entries(schema.bounds)) {
            const key = `${SECTION}.${snakeToCamel(name)}`;
            assert.equal(props[key]?.minimum ?? null, lo, `${key}: minimum differs from config.py _BOUNDS`);
            assert.equal(props[key]?.maximum ?? null, hi, `${key}: maximum differs from config.py _BOUNDS`);
        }
        // Settings with a fixed set of values in package.json must have it in config.py too.
        for (const [key, s] of Object.entries(props)) {
            const name = key.slice(SECTION.length + 1).replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
            if (s.enum && schema.fields.some((f) => f.name === name)) {
                assert.ok(schema.choices[name], `${key} is an enum in package.json but config.py accepts any value`);
            }
        }
    });

    it('detects drift: a field added to config.py is reported missing', () => {
        const mutated = text.replace(/^( {4}log_file: str = .*)$/m, '$1\n    new_knob: int = 3');
        const names = fieldsFromText(mutated).map((f) => snakeToCamel(f.name));
        assert.ok(names.includes('newKnob'));
        assert.ok(!serverSettingKeys(pkg).includes('newKnob'));
    });
});

describe('snakeToCamel', () => {
    it('converts the dataclass names', () => {
        assert.equal(snakeToCamel('n_gpu_layers'), 'nGpuLayers');
        assert.equal(snakeToCamel('api_key_env'), 'apiKeyEnv');
        assert.equal(snakeToCamel('model'), 'model');
    });
});
