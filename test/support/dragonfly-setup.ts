/**
 * The e2e project's global set-up for the real Dragonfly network: the service through which files share one network
 * per run (shared-dragonfly.ts). Nothing starts until a file asks; the network stops with the run.
 */
import type { TestProject } from 'vitest/node';
import { serveSharedDragonfly } from './shared-dragonfly.ts';

let service: Awaited<ReturnType<typeof serveSharedDragonfly>> | undefined;

export async function setup(project: TestProject): Promise<void> {
  service = await serveSharedDragonfly();
  project.provide('dragonflyService', service.url);
}

export async function teardown(): Promise<void> {
  await service?.close();
}
