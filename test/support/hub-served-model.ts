/** A ServedModel of a Triton replica set whose model is a Hugging Face repository, as a controller's pass sees it. */
import { ServedModelSpec, type ServedModel } from '../../src/api/index.ts';

export function hubServedModel(
  endpoint: string,
  huggingface: object,
  meta: Partial<ServedModel['metadata']> = {},
  status?: object,
  extra: object = {},
): ServedModel {
  return {
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ServedModel',
    metadata: { name: 'm', namespace: 'ns', uid: 'u1', generation: 1, ...meta },
    spec: ServedModelSpec.parse({
      modelName: 'tiny',
      modelServer: {
        service: { name: 'triton' },
        driver: 'triton',
        agent: { port: 8200, tokenSecretRef: { name: 'agent', key: 'token' } },
      },
      source: { huggingface: { endpoint, ...huggingface } },
      ...extra,
    }),
    ...(status ? { status } : {}),
  } as ServedModel;
}
