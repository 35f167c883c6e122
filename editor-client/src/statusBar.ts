// The status bar item: server state and running jobs; a click opens the jobs quick pick.
import { Disposable, StatusBarAlignment, StatusBarItem, ThemeColor, window } from 'vscode';
import { CLIENT_COMMANDS } from './commands';
import { statusView } from './jobs';
import type { ServerManager } from './server';

export class JobsStatusBar implements Disposable {
    private readonly item: StatusBarItem;
    private readonly subscription: Disposable;

    constructor(private readonly server: ServerManager) {
        this.item = window.createStatusBarItem('kernelLsp.status', StatusBarAlignment.Left, 50);
        this.item.name = 'kernel-lsp';
        this.item.command = CLIENT_COMMANDS.showJobs;
        this.subscription = server.onDidChange(() => this.update());
        this.update();
        this.item.show();
    }

    update(): void {
        const view = statusView(this.server.status, this.server.jobs.all());
        this.item.text = view.text;
        this.item.tooltip = view.tooltip;
        this.item.backgroundColor =
            view.severity === 'error'
                ? new ThemeColor('statusBarItem.errorBackground')
                : view.severity === 'warning'
                  ? new ThemeColor('statusBarItem.warningBackground')
                  : undefined;
    }

    dispose(): void {
        this.subscription.dispose();
        this.item.dispose();
    }
}
