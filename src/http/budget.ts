/**
 * One resolution's budget: what reading a source may cost, whatever the host answering it sends. A source names a
 * host the spec chose (a bucket's endpoint, a Hub endpoint, a registry and its token realm), so the answers may be
 * anyone's: every answer of a resolution (listing pages, tree pages, LFS HEADs, a manifest, a token) is read through
 * one {@link SourceBudget}, which bounds
 * - each answer's bytes, and every answer's bytes together;
 * - the answers (requests) made;
 * - the entries kept (tree entries, listed keys), each entry's text and all of their text together;
 * - the time of each request and of the whole resolution (one deadline, one signal for every request of it).
 * A bound that is hit aborts the whole resolution with one error saying which bound (`SourceTooLarge`,
 * `SourceTimeout`), never a heap that fills or a worker held forever. Nothing a resolution holds grows with what a
 * remote sends beyond these caps.
 */
import {
  MAX_ERROR_BODY_BYTES,
  ResponseTooLargeError,
  readBoundedBytes,
  readPrefix,
  type BodyStream,
} from '../http/body.ts';
import { timerDelay } from '../runtime/timers.ts';

/** The reasons a source's condition carries when a bound of its resolution is hit. */
export const SourceBoundReason = {
  /** A size bound: the same answers will pass it again, only another source (or a fixed host) helps. */
  TooLarge: 'SourceTooLarge',
  /** A time bound: the host may answer in time later. */
  Timeout: 'SourceTimeout',
} as const;
export type SourceBoundReason = (typeof SourceBoundReason)[keyof typeof SourceBoundReason];

export interface SourceBounds {
  /** One answer's body at most (an error answer is cut to its first {@link MAX_ERROR_BODY_BYTES} instead). */
  maxAnswerBytes: number;
  /** Every answer's body of the resolution together. */
  maxTotalBytes: number;
  /** Answers (requests) at most: pages, HEADs, manifests, tokens. */
  maxAnswers: number;
  /** Entries kept at most (tree entries, listed keys). */
  maxEntries: number;
  /** One entry's text at most (a path, an object id), in UTF-16 code units. */
  maxEntryChars: number;
  /** Every kept entry's text together. */
  maxEntriesChars: number;
  /** One request (connect, headers and body), ms. */
  requestTimeoutMs: number;
  /** The whole resolution, ms. */
  timeoutMs: number;
}

/**
 * The defaults keep one resolution's memory to a few MiB held (64 MiB read in all, one 4 MiB answer at a time) and
 * its time to two minutes: the operator runs with a 160 MiB heap and up to one resolution per worker. A real tree
 * page of 1,000 entries is about 300 KB, a model manifest of a thousand layers about 300 KiB, a registry token a
 * few KiB; a repository of 100,000 entries of 80-character paths holds 8 M characters.
 */
export const DEFAULT_SOURCE_BOUNDS: SourceBounds = {
  maxAnswerBytes: 4 * 1024 * 1024,
  maxTotalBytes: 64 * 1024 * 1024,
  // 100 tree pages of 1,000 and an LFS HEAD for each of a model directory's 10,000 files at most.
  maxAnswers: 11_000,
  maxEntries: 100_000,
  maxEntryChars: 4096,
  maxEntriesChars: 8 * 1024 * 1024,
  requestTimeoutMs: 30_000,
  timeoutMs: 120_000,
};

/** How a budget's messages name its parts (a listing says "pages" and "objects"). */
export interface BudgetTerms {
  /** `the listing`, `the resolution of org/model`. */
  whole: string;
  /** `a page of the listing`, `an answer`. */
  answer: string;
  /** `pages`, `answers`. */
  answers: string;
  /** `the prefix`, `the source`. */
  holder: string;
  /** `objects`, `entries`. */
  entries: string;
  /** `the listed keys`, `the entries`. */
  entryText: string;
}

const SOURCE_TERMS: BudgetTerms = {
  whole: 'the resolution of the source',
  answer: 'an answer',
  answers: 'answers',
  holder: 'the source',
  entries: 'entries',
  entryText: 'the entries',
};

export interface ReadOptions {
  /** This answer's own cap (a manifest's, a token's), instead of the budget's per-answer one. */
  maxBytes?: number | undefined;
  /** Not a 2xx: only its first bytes are read (its text only ever feeds a message). */
  error?: boolean | undefined;
  /** How the message names the answer (`the manifest of r/m:v1`); default the terms' `answer`. */
  what?: string | undefined;
}

/** A bound that was hit: which one (`bound`), and whether of size or time. */
export class BoundHit extends Error {
  readonly failure: 'tooLarge' | 'timedOut';
  readonly bound: keyof SourceBounds;
  constructor(failure: 'tooLarge' | 'timedOut', bound: keyof SourceBounds, message: string) {
    super(message);
    this.name = 'BoundHit';
    this.failure = failure;
    this.bound = bound;
  }

  /** The condition reason of this hit. */
  get reason(): SourceBoundReason {
    return this.failure === 'tooLarge' ? SourceBoundReason.TooLarge : SourceBoundReason.Timeout;
  }
}

export interface BudgetOptions<E extends Error> {
  /** The caller's: aborting it aborts every request of the resolution with its own reason. */
  signal?: AbortSignal | undefined;
  terms?: Partial<BudgetTerms> | undefined;
  /** The error a hit becomes (a source kind's own, with its reason and the field to change); default the hit. */
  toError?: ((hit: BoundHit) => E) | undefined;
}

/** One resolution in progress: its bounds, its signal (the caller's, the deadline, a bound hit). */
export class SourceBudget<E extends Error = BoundHit> {
  readonly bounds: SourceBounds;
  readonly signal: AbortSignal;
  /** The first bound hit, if any: what the resolution failed of, whatever a library made of the abort. */
  hitBound: BoundHit | undefined;
  /** What the first hit became ({@link BudgetOptions.toError}): thrown by every later use of the budget. */
  #error: E | undefined;
  readonly #toError: (hit: BoundHit) => E;
  protected readonly terms: BudgetTerms;
  readonly #controller = new AbortController();
  readonly #timer: NodeJS.Timeout;
  #answers = 0;
  #bytes = 0;
  #entries = 0;
  #entryChars = 0;

  constructor(bounds: SourceBounds, opts: BudgetOptions<E> = {}) {
    this.bounds = bounds;
    this.terms = { ...SOURCE_TERMS, ...opts.terms };
    this.#toError = opts.toError ?? ((hit) => hit as unknown as E);
    const ms = Math.max(1, timerDelay(bounds.timeoutMs));
    this.#timer = setTimeout(
      () => this.hit('timedOut', 'timeoutMs', `${this.terms.whole} did not complete within ${ms} ms`),
      ms,
    );
    // The deadline alone must not keep a process (a CLI run) alive once its work is done.
    this.#timer.unref();
    this.signal = opts.signal
      ? AbortSignal.any([opts.signal, this.#controller.signal])
      : this.#controller.signal;
  }

  /** Bytes every answer so far held together. */
  get bytesRead(): number {
    return this.#bytes;
  }

  /** Records a hit (the first one wins), aborts every request of the resolution and returns what to throw. */
  hit(failure: BoundHit['failure'], bound: keyof SourceBounds, message: string): E {
    if (this.#error === undefined) {
      this.hitBound = new BoundHit(failure, bound, message);
      this.#error = this.#toError(this.hitBound);
      this.#controller.abort(this.#error);
    }
    return this.#error;
  }

  /** An answer is about to be asked for. */
  answer(): void {
    this.signal.throwIfAborted();
    if (++this.#answers > this.bounds.maxAnswers)
      throw this.hit(
        'tooLarge',
        'maxAnswers',
        `${this.terms.whole} went on for more than ${this.bounds.maxAnswers} ${this.terms.answers}`,
      );
  }

  /** Bytes an answer may still have: its own cap (`maxBytes`, else the budget's), and what is left of the total. */
  answerCap(maxBytes = this.bounds.maxAnswerBytes): number {
    return Math.max(0, Math.min(maxBytes, this.bounds.maxTotalBytes - this.#bytes));
  }

  /**
   * An answer's body, read within {@link answerCap} (an error answer: its first bytes only, its text only ever
   * feeds a message) and counted in the total. Past the cap the rest is never read: the stream is destroyed.
   */
  async read(body: BodyStream, opts: ReadOptions = {}): Promise<Buffer> {
    this.signal.throwIfAborted();
    const own = opts.maxBytes ?? this.bounds.maxAnswerBytes;
    const cap = this.answerCap(opts.error ? Math.min(own, MAX_ERROR_BODY_BYTES) : own);
    let buf: Buffer;
    try {
      buf = opts.error ? await readPrefix(body, cap) : await readBoundedBytes(body, cap);
    } catch (e) {
      if (e instanceof ResponseTooLargeError) throw this.#tooLarge(own, cap, opts.what);
      if (this.signal.aborted) throw this.signal.reason as Error;
      throw e;
    }
    this.#bytes += buf.length;
    return buf;
  }

  /** {@link read} as UTF-8 text. */
  async text(body: BodyStream, opts: ReadOptions = {}): Promise<string> {
    return (await this.read(body, opts)).toString('utf8');
  }

  #tooLarge(own: number, cap: number, what = this.terms.answer): E {
    return cap < own
      ? this.hit(
          'tooLarge',
          'maxTotalBytes',
          `the answers of ${this.terms.whole} passed ${this.bounds.maxTotalBytes} bytes together`,
        )
      : this.hit('tooLarge', 'maxAnswerBytes', `${what} was larger than ${own} bytes`);
  }

  /** An entry is kept: its texts (a path, an id) are each within the entry bound, and counted. */
  entry(...texts: string[]): void {
    for (const t of texts)
      if (t.length > this.bounds.maxEntryChars)
        throw this.hit(
          'tooLarge',
          'maxEntryChars',
          `an entry of ${this.terms.holder} is longer than ${this.bounds.maxEntryChars} characters`,
        );
    if (++this.#entries > this.bounds.maxEntries)
      throw this.hit(
        'tooLarge',
        'maxEntries',
        `${this.terms.holder} holds more than ${this.bounds.maxEntries} ${this.terms.entries}`,
      );
    for (const t of texts) this.#entryChars += t.length;
    if (this.#entryChars > this.bounds.maxEntriesChars)
      throw this.hit(
        'tooLarge',
        'maxEntriesChars',
        `${this.terms.entryText} passed ${this.bounds.maxEntriesChars} characters together`,
      );
  }

  /**
   * A signal for one request: the budget's, and the request's own time-out; `timedOut()` says whether the
   * request's time-out ended it (the caller then calls {@link requestTimedOut}). `done()` clears the timer.
   */
  request(timeoutMs = this.bounds.requestTimeoutMs): {
    signal: AbortSignal;
    ms: number;
    timedOut: () => boolean;
    done: () => void;
  } {
    const ms = Math.max(1, timerDelay(timeoutMs));
    const own = new AbortController();
    const timer = setTimeout(() => own.abort(), ms);
    return {
      signal: AbortSignal.any([this.signal, own.signal]),
      ms,
      timedOut: () => own.signal.aborted && !this.signal.aborted,
      done: () => clearTimeout(timer),
    };
  }

  /** A request got no complete answer within `ms`: the whole resolution stops (a retry is the caller's, later). */
  requestTimedOut(ms: number): E {
    return this.hit(
      'timedOut',
      'requestTimeoutMs',
      `a request of ${this.terms.whole} got no complete answer within ${ms} ms`,
    );
  }

  /** Throws what stopped the resolution, if anything did (a hit, the caller's abort). */
  check(): void {
    this.signal.throwIfAborted();
  }

  close(): void {
    clearTimeout(this.#timer);
  }
}

/** `bounds` with the given fields replaced (undefined ones keep the default). */
export function sourceBounds(given: Partial<SourceBounds> = {}, base = DEFAULT_SOURCE_BOUNDS): SourceBounds {
  const out = { ...base };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) out[k as keyof SourceBounds] = v;
  return out;
}
