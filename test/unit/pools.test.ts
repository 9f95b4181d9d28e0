/** The shared pools toward the replicas: closed at the operator's shutdown, made again by a later client. */
import { request } from 'undici';
import { expect, it } from 'vitest';
import {
  closeModelServerPools,
  sharedModelServerPool,
  sharedRegistrationPool,
} from '../../src/servers/pools.ts';

it('closes both shared pools; a later client gets new ones', async () => {
  const shared = sharedModelServerPool();
  const registrations = sharedRegistrationPool();
  expect(sharedModelServerPool()).toBe(shared);
  await closeModelServerPools();
  for (const pool of [shared, registrations])
    await expect(request('http://127.0.0.1:9/', { dispatcher: pool })).rejects.toThrow(/closed|destroyed/i);
  expect(sharedModelServerPool()).not.toBe(shared);
  expect(sharedRegistrationPool()).not.toBe(registrations);
  await closeModelServerPools();
});
