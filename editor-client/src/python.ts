// The Python extension (ms-python.python), when installed: its active environment, and changes to it.
import { Disposable, Event, EventEmitter, Uri, extensions } from 'vscode';
import { activeInterpreter, environmentsApi, type PythonEnvironmentsApi } from './interpreter';

const PYTHON_EXTENSION_ID = 'ms-python.python';

const onDidChangeEmitter = new EventEmitter<void>();
/** Fires when the Python extension's active environment changes. */
export const onDidChangePythonInterpreter: Event<void> = onDidChangeEmitter.event;

async function api(): Promise<PythonEnvironmentsApi | undefined> {
    const extension = extensions.getExtension(PYTHON_EXTENSION_ID);
    if (!extension) {
        return undefined;
    }
    try {
        if (!extension.isActive) {
            await extension.activate();
        }
        return environmentsApi(extension.exports);
    } catch {
        return undefined;
    }
}

/** Subscribes to the Python extension's environment changes, if it is installed. */
export async function initializePython(disposables: Disposable[]): Promise<boolean> {
    const environments = await api();
    if (!environments?.onDidChangeActiveEnvironmentPath) {
        return false;
    }
    disposables.push(environments.onDidChangeActiveEnvironmentPath(() => onDidChangeEmitter.fire()));
    return true;
}

/** The active environment's interpreter for a resource, as a command line; undefined without the Python extension. */
export async function getPythonExtensionInterpreter(resource?: Uri): Promise<string[] | undefined> {
    return activeInterpreter(await api(), resource);
}

export function isPythonExtensionInstalled(): boolean {
    return extensions.getExtension(PYTHON_EXTENSION_ID) !== undefined;
}
