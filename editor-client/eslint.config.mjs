// Flat config: typescript-eslint's type-aware recommended rules.
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
    { ignores: ['dist/**', 'out/**', 'node_modules/**', '*.vsix', 'e2e/node_modules/**', 'e2e/artifacts/**'] },
    eslint.configs.recommended,
    ...tseslint.configs.recommendedTypeChecked,
    {
        languageOptions: {
            parserOptions: { projectService: { allowDefaultProject: ['*.mjs', 'scripts/*.mjs', 'e2e/*.mjs'] }, tsconfigRootDir: import.meta.dirname },
        },
        rules: {
            curly: 'error',
            eqeqeq: 'error',
            'no-throw-literal': 'error',
            '@typescript-eslint/naming-convention': [
                'error',
                { selector: 'import', format: ['camelCase', 'PascalCase'] },
            ],
            '@typescript-eslint/no-floating-promises': 'error',
            '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
        },
    },
    {
        // Logic modules stay testable without VS Code: they must not import it.
        files: ['src/config.ts', 'src/interpreter.ts', 'src/commands.ts', 'src/jobs.ts', 'src/process.ts', 'test/**/*.ts'],
        rules: {
            'no-restricted-imports': ['error', { paths: [{ name: 'vscode', message: 'keep this module free of vscode (it is unit-tested under node)' }] }],
        },
    },
    {
        files: ['test/**/*.ts'],
        rules: {
            // node:test's describe/it return promises that the runner itself awaits.
            '@typescript-eslint/no-floating-promises': [
                'error',
                { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite'] }] },
            ],
            '@typescript-eslint/no-non-null-assertion': 'off',
        },
    },
    {
        files: ['**/*.mjs'],
        ...tseslint.configs.disableTypeChecked,
        languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
    },
);
