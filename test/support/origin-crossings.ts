/**
 * How many times a version's files may cross from the origin when the real network preheats them and places them
 * through the node peers. A file above dfdaemon's minimum piece length crosses `crossings` times at most, plus one
 * 1-byte range probe per download (the daemon's, made on a hit as well); a file up to it may cross once per
 * downloading peer (`smallCrossings`), since such content never travels between peers (docs/dragonfly.md). Every
 * file crosses at least once.
 */
import { expect } from 'vitest';

/** The minimum piece length of dfdaemon 1.4.2: content up to it is fetched by each peer from the origin itself. */
export const MIN_PIECE = 4 * 1024 * 1024;

export interface CrossingBounds {
  crossings: number;
  smallCrossings: number;
  downloads: number;
}

/**
 * A version preheated on both node peers and placed by both agents through them: the data file crossed once (the
 * seed peer's fetch), a smaller file once per node peer (and the seed peer's, if the scheduler sent it). 1-byte
 * probes: dfdaemon 1.4.2 probes the origin when a download starts on a task whose size it does not know yet
 * (Task::download_started; a task it holds or is filling is reused without one), and nothing serialises two
 * starts of one task on one daemon. So the seed peer probes once, each node peer once for its preheat, and once
 * more for its agent's placement when that arrives while the preheat's own probe is in flight (replicas are
 * placed as soon as their node's job exists): 3 to 5.
 */
export const PREHEATED_ON_BOTH: CrossingBounds = { crossings: 1, smallCrossings: 3, downloads: 5 };

/** Asserts the bounds on each file (key → size; `served(key)`: the origin's body bytes for it); the bytes, in order. */
export function expectCrossings(
  files: [key: string, size: number][],
  served: (key: string) => number,
  bounds: CrossingBounds,
): number[] {
  return files.map(([key, size]) => {
    const bytes = served(key);
    const crossings = size > MIN_PIECE ? bounds.crossings : bounds.smallCrossings;
    expect(bytes, key).toBeGreaterThanOrEqual(size);
    expect(bytes, key).toBeLessThanOrEqual(crossings * size + bounds.downloads);
    return bytes;
  });
}
