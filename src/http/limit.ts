/**
 * A FIFO bound of requests in flight. Hand-written: a few lines, and a client needs only acquire (abortable, so
 * a caller that gives up leaves the queue) and release.
 */
export class InFlightLimit {
  readonly #max: number;
  #active = 0;
  #peak = 0;
  readonly #waiters: { grant: () => void }[] = [];

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1)
      throw new RangeError(`in-flight limit must be a positive integer: ${max}`);
    this.#max = max;
  }

  get active(): number {
    return this.#active;
  }
  /** Most holders at once so far. */
  get peak(): number {
    return this.#peak;
  }
  get waiting(): number {
    return this.#waiters.length;
  }

  async acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#active < this.#max) {
      this.#take();
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          this.#take();
          resolve();
        },
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  release(): void {
    this.#active--;
    this.#waiters.shift()?.grant();
  }

  async run<T>(f: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    await this.acquire(signal);
    try {
      return await f();
    } finally {
      this.release();
    }
  }

  #take(): void {
    this.#active++;
    this.#peak = Math.max(this.#peak, this.#active);
  }
}
