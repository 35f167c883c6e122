// Entry point: wires the server manager, the status bar, the commands and the change listeners.
import { ExtensionContext, commands, window, workspace } from 'vscode';
import { CLIENT_COMMANDS } from './commands';
import { SECTION, SERVER_NAME, changeAction } from './config';
import { initializePython, onDidChangePythonInterpreter } from './python';
import { ServerManager } from './server';
import { JobsStatusBar } from './statusBar';
import { Commands } from './ui';

let manager: ServerManager | undefined;

export async function activate(context: ExtensionContext): Promise<void> {
    const output = window.createOutputChannel(SERVER_NAME, { log: true });
    const server = new ServerManager(context, output);
    manager = server;
    const ui = new Commands(server, output);
    context.subscriptions.push(
        output,
        server,
        new JobsStatusBar(server),
        commands.registerCommand(CLIENT_COMMANDS.optimizeModule, (arg?: unknown) => ui.optimizeModule(arg)),
        commands.registerCommand(CLIENT_COMMANDS.showCandidates, (arg?: unknown) => ui.showCandidates(arg)),
        commands.registerCommand(CLIENT_COMMANDS.cancelJob, (arg?: unknown) => ui.cancelJob(arg)),
        commands.registerCommand(CLIENT_COMMANDS.showJobs, () => ui.showJobs()),
        commands.registerCommand(CLIENT_COMMANDS.restartServer, () => server.restart('restart requested')),
        commands.registerCommand(CLIENT_COMMANDS.openLog, () => output.show()),
        workspace.onDidChangeConfiguration(async (e) => {
            switch (changeAction((s) => e.affectsConfiguration(s), server.serverSettingKeys())) {
                case 'restart':
                    await server.restart(`${SECTION}.interpreter changed`);
                    break;
                case 'notify':
                    await server.notifyConfigurationChanged();
                    break;
                case 'none':
                    break;
            }
        }),
        onDidChangePythonInterpreter(async () => {
            // Our own setting wins over the Python extension's choice: nothing to do while it is set.
            if (server.interpreter?.source !== 'setting') {
                await server.restart('the Python environment changed');
            }
        }),
    );
    if (await initializePython(context.subscriptions)) {
        output.info('following the Python extension\'s active environment');
    }
    void server.restart('activation');
}

export async function deactivate(): Promise<void> {
    await manager?.stop();
    manager = undefined;
}
