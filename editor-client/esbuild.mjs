// Bundles the extension into dist/extension.js (CommonJS, `vscode` left external).
// node esbuild.mjs [--production] [--watch]
import * as esbuild from 'esbuild';

const production = process.argv.includes('--production');
const watch = process.argv.includes('--watch');

/** @type {import('esbuild').BuildOptions} */
const options = {
    entryPoints: ['src/extension.ts'],
    bundle: true,
    format: 'cjs',
    platform: 'node',
    // VS Code 1.82 (engines.vscode) runs extensions on Node 18.
    target: 'node18',
    outfile: 'dist/extension.js',
    external: ['vscode'],
    minify: production,
    sourcemap: !production,
    sourcesContent: false,
    logLevel: 'info',
    metafile: true,
};

if (watch) {
    const ctx = await esbuild.context(options);
    await ctx.watch();
} else {
    const result = await esbuild.build(options);
    const inputs = Object.keys(result.metafile.inputs);
    const vscodeImporters = inputs.filter((f) => /node_modules[\\/]vscode[\\/]/.test(f));
    if (vscodeImporters.length > 0) {
        throw new Error(`the vscode module was bundled: ${vscodeImporters.join(', ')}`);
    }
}
