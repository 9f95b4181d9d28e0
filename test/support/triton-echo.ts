/**
 * The echo model on a real Triton, as the ServedModel tests read it: the versions the server has loaded (of any
 * model, on Triton or MLServer), and one inference (INPUT0 plus the version's offset).
 */
import type { OipServer } from './oip-servers.ts';

/** The versions of `model` the server serves (its repository index, state READY): Triton or MLServer. */
export async function servedVersions(server: Pick<OipServer, 'url'>, model: string): Promise<string[]> {
  // MLServer answers with the index only to a body declared JSON.
  const res = await fetch(`${server.url}/v2/repository/index`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  if (res.status !== 200) throw new Error(`repository index: HTTP ${res.status} ${await res.text()}`);
  const index = (await res.json()) as { name: string; version?: string; state?: string }[];
  return index
    .filter((e) => e.name === model && e.state === 'READY')
    .map((e) => e.version!)
    .sort();
}

/** One inference of the echo model; throws unless Triton answers 200. */
export async function inferEcho(
  server: Pick<OipServer, 'url'>,
  data: number[],
): Promise<{ model_version: string; outputs: { data: number[] }[] }> {
  const res = await fetch(`${server.url}/v2/models/echo/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length], data }] }),
  });
  if (res.status !== 200) throw new Error(`echo inference: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as { model_version: string; outputs: { data: number[] }[] };
}
