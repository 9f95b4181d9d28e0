/**
 * What a unit test of downloads through a node's peer starts once for its file (or describe block): an origin under
 * the name the test gives it (`registry`, `origin`), the peer-proxy emulator in front of it, and the undici
 * dispatcher the test's clients use; all closed after the file. The peer keeps what it fetched between tests:
 * `bed.peer.reset()` (in a test's beforeEach) starts each test from an empty cache.
 */
import { Agent } from 'undici';
import { afterAll, beforeAll } from 'vitest';
import { DEFAULT_LIMITS, type DownloaderConfig } from '../../src/place/placer.ts';
import { startPeerProxy, type PeerProxy } from './peer-proxy.ts';

export type PeerBed<K extends string, O> = { [k in K]: O } & { peer: PeerProxy; dispatcher: Agent };

/** Registers the hooks that start and close the bed; its fields are set once the file's beforeAll has run. */
export function peerBed<K extends string, O extends { close(): Promise<unknown> }>(
  name: K,
  startOrigin: () => Promise<O>,
): PeerBed<K, O> {
  const bed = {} as PeerBed<K, O>;
  beforeAll(async () => {
    (bed as Record<K, O>)[name] = await startOrigin();
    bed.peer = await startPeerProxy();
    bed.dispatcher = new Agent();
  });
  afterAll(async () => {
    await (bed as Partial<Record<K, O>>)[name]?.close();
    await bed.peer?.close();
    await bed.dispatcher?.close();
  });
  return bed;
}

/** The agent's downloader placing into `root` through the bed's peer, with no free-space floor (a test's files are small). */
export function downloaderConfig(
  bed: { peer: PeerProxy; dispatcher: Agent },
  root: string,
): DownloaderConfig {
  return {
    root,
    proxy: bed.peer.url,
    dispatcher: bed.dispatcher,
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
  };
}
