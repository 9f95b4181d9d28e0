import { describe, expect, it } from 'vitest';
import { ReplicaClients } from '../../src/servers/torchserve/replica-clients.ts';

const sm = (uid: string) => ({ uid, namespace: 'ns' });
const spec = { pluginPath: 'p2p', tokenSecretRef: { name: 'keys', key: '{pod}.json' } };
const replica = (i: number) => ({ endpoint: `http://10.0.0.${i}:8081`, pod: `ts-${i}` });

describe('ReplicaClients', () => {
  it('keeps one token source per replica and drops those of replicas and ServedModels that went away', () => {
    const clients = new ReplicaClients(async () => 'secret');
    for (const i of [1, 2, 3]) clients.get(sm('a'), spec, replica(i));
    clients.get(sm('a'), spec, replica(1)); // the same replica again: the same source
    clients.get(sm('b'), spec, replica(1));
    expect(clients.size).toBe(4);

    // Pod ts-2 went away: its source goes, the others stay.
    clients.prune('a', new Set([replica(1).endpoint, replica(3).endpoint]));
    expect(clients.size).toBe(3);
    // ServedModel a is gone.
    clients.prune('a');
    expect(clients.size).toBe(1);
    clients.prune('b', new Set());
    expect(clients.size).toBe(0);
  });
});
