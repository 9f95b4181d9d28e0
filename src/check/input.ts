/** The check's input: reading files, and the error for input it cannot use. */
import { readFile } from 'node:fs/promises';
import { text } from 'node:stream/consumers';

/** Bad input (a configuration or manifest that cannot be read); the message names the file and the field. */
export class CheckInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CheckInputError';
  }
}

/** A zod issue path as a field name: `object_storage.endpoint`, `filter[0]`. */
export function fieldPath(path: readonly PropertyKey[]): string {
  return path
    .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
    .join('')
    .replace(/^\./, '');
}

/** A file's text (`-`: stdin); the error names the file and the reason, never its content. */
export async function readText(path: string): Promise<string> {
  try {
    if (path === '-') return await text(process.stdin);
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new CheckInputError(
      `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}
