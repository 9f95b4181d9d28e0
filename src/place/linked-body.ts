/**
 * The body of a download whose file the peer daemon is still filling through our hard link (a task it did not hold
 * yet): read to its end and written nowhere, so the file costs no write of its own. The daemon's proxy sends a piece
 * only after it wrote that piece to its file, so a body received whole means the file is whole. What that does not
 * prove is that the link IS the file being filled (a daemon that filled another file and linked a placeholder would
 * leave a file of zeros), so blocks of the body spread over its length, the last one included, are kept and compared
 * with the linked file at the same offsets; on a mismatch the file is downloaded again without the link.
 *
 * The TorchServe plugin checks its cold links the same way (16 blocks of 4 KiB), so both take a daemon's file on
 * the same evidence.
 */
import { open, type FileHandle } from 'node:fs/promises';

export const SAMPLES = 16;
export const SAMPLE_SIZE = 4096;

export class LinkedBody {
  private readonly offsets: number[];
  private readonly samples: Buffer[];

  /** `expected`: the announced length (a link is taken only for a body of known length). */
  constructor(expected: number) {
    // A body of one block or less is one sample; a longer one gets all of them (they may overlap), its last block too.
    const n = expected <= SAMPLE_SIZE ? 1 : SAMPLES;
    this.offsets = Array.from({ length: n }, (_, k) =>
      n === 1 ? 0 : Math.floor(((expected - SAMPLE_SIZE) * k) / (n - 1)),
    );
    this.samples = this.offsets.map((start) => Buffer.alloc(Math.min(SAMPLE_SIZE, expected - start)));
  }

  /** Keeps the parts of `chunk` (the body's bytes from `at`) that fall in a sample. */
  keep(chunk: Buffer, at: number): void {
    for (const [k, offset] of this.offsets.entries()) {
      const sample = this.samples[k]!;
      const from = Math.max(offset, at);
      const to = Math.min(offset + sample.length, at + chunk.length);
      if (from < to) chunk.copy(sample, from - offset, from - at, to - at);
    }
  }

  /** Undefined when `path` holds the kept samples at their offsets; else what differs. */
  async mismatch(path: string): Promise<string | undefined> {
    const unreadable = (e: unknown) =>
      `cannot read the daemon's file to check it: ${(e as { code?: string }).code ?? (e as Error).message}`;
    let file: FileHandle;
    try {
      file = await open(path, 'r');
    } catch (e) {
      return unreadable(e);
    }
    try {
      return await this.compare(file);
    } catch (e) {
      return unreadable(e);
    } finally {
      await file.close();
    }
  }

  private async compare(file: FileHandle): Promise<string | undefined> {
    for (const [k, offset] of this.offsets.entries()) {
      const sample = this.samples[k]!;
      const got = Buffer.alloc(sample.length);
      let read = 0;
      while (read < got.length) {
        const { bytesRead } = await file.read(got, read, got.length - read, offset + read);
        if (bytesRead === 0) return `the daemon's file ends before byte ${offset + read}`;
        read += bytesRead;
      }
      if (!got.equals(sample)) return `the daemon's file differs from the body at byte ${offset}`;
    }
    return undefined;
  }
}
