import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { healthFixtures } from '../../scripts/gen-health-fixtures.ts';

describe('test/fixtures/health-status.json', () => {
  it('is what the status modules produce now (run node scripts/gen-health-fixtures.ts after changing them)', () => {
    const committed = JSON.parse(
      readFileSync(new URL('../fixtures/health-status.json', import.meta.url), 'utf8'),
    ) as unknown;
    expect(committed).toEqual(healthFixtures());
  });
});
