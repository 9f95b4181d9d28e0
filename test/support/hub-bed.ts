/**
 * What the integration tests of a Hugging Face source start: a namespace holding the token's Secret `hf` (key
 * `token`), the Hub emulator, a peer proxy, the manager emulator whose jobs really download through it, and the
 * operator with the given controllers, allowed to send the token to the emulated Hub (on loopback).
 */
import * as k8s from '@kubernetes/client-node';
import { inject } from 'vitest';
import type { ControllerFactory, Logger } from '../../src/runtime/index.ts';
import { startHubEmulator, type HubEmulator, type HubEmulatorOptions } from './hub-emulator.ts';
import { createNamespace, createSecret, kubeConfig } from './kube.ts';
import { startManagerEmulator, type ManagerEmulator } from './manager-emulator.ts';
import { startPeerProxy, type PeerProxy } from './peer-proxy.ts';
import { peerloadNamespace, type PeerloadNamespace } from './resources.ts';
import { startManager, type RunningManager } from './runtime-harness.ts';

/** A small model repository: a git config, a nested git file, an LFS weights file, and `.gitattributes`. */
export const hubTree = (weights: Buffer, config = '{"model_type":"tiny"}') => ({
  'config.json': config,
  'weights/model.safetensors': { content: weights, lfs: true },
  'tokenizer/nested/vocab.txt': 'a b c',
  '.gitattributes': '*.safetensors filter=lfs',
});

/** `org/tiny` (public, `main` at the first of two commits that differ in config.json) and `org/private`. */
export const tinyAndPrivate = (weights: Buffer) => [
  {
    id: 'org/tiny',
    commits: [hubTree(weights), hubTree(weights, '{"model_type":"tiny2"}')],
    refs: { main: 0 },
  },
  { id: 'org/private', commits: [hubTree(weights)], private: true },
];

export interface HubBed {
  kc: k8s.KubeConfig;
  custom: k8s.CustomObjectsApi;
  ns: string;
  /** peerload's resources in `ns`. */
  resources: PeerloadNamespace;
  hub: HubEmulator;
  peer: PeerProxy;
  manager: ManagerEmulator;
  operator: RunningManager;
  close(): Promise<void>;
}

export async function startHubBed(o: {
  namespace: string;
  hub: HubEmulatorOptions;
  /** The value of Secret `hf`. */
  token: string;
  controllers: ControllerFactory[];
  /** More operator flags. */
  flags?: string[];
  logger?: Logger;
}): Promise<HubBed> {
  const kc = kubeConfig(inject('kubeconfigPath'));
  const ns = await createNamespace(kc, o.namespace);
  const hub = await startHubEmulator(o.hub);
  await createSecret(kc, ns, 'hf', { token: o.token });
  const peer = await startPeerProxy();
  const manager = await startManagerEmulator({ peer });
  const flags = [
    '--no-leader-elect',
    '--manager-url',
    manager.url,
    // The emulated Hub listens on loopback: the admin allows the token to go there.
    '--allowed-hub-hosts',
    'http://127.0.0.1',
    // And its CDN: the LFS files' redirects go to the emulator's second host, on loopback too.
    '--allowed-hub-redirect-hosts',
    'http://127.0.0.1',
    '--poll-backoff-start',
    '200ms',
    '--poll-backoff-max',
    '1s',
    ...(o.flags ?? []),
  ];
  const operator = await startManager(kc, flags, o.controllers, o.logger ? { logger: o.logger } : {});
  return {
    kc,
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
    ns,
    resources: peerloadNamespace(kc, ns),
    hub,
    peer,
    manager,
    operator,
    async close() {
      await operator.stop();
      await Promise.all([manager.close(), peer.close()]);
      await hub.close();
    },
  };
}
