/**
 * The drivers' declarations (src/api/drivers.ts) are the one table of what each model server needs and takes: the
 * drivers peerload ships are its rows, each implementing its row's layouts and scaling; the ServedModel schema
 * validates by it; src/api names drivers nowhere else; and no driver folder imports another.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_DRIVER,
  DRIVERS,
  DRIVER_NAMES,
  driverTable,
  type DriverDeclaration,
} from '../../src/api/drivers.ts';
import { ServedModelSpec } from '../../src/api/servedmodel.ts';
import { modelServerDrivers } from '../../src/servers/index.ts';
import { REPO_ROOT, imports, sourceFiles } from '../../scripts/source-shape.ts';

const shipped = modelServerDrivers({ secret: async () => 'x' });

describe('the declarations table', () => {
  it('has one row per shipped driver, and each driver implements its row', () => {
    expect(shipped.names().sort()).toEqual([...DRIVER_NAMES].sort());
    expect(shipped.defaultName).toBe(DEFAULT_DRIVER);
    for (const name of DRIVER_NAMES) {
      const d = shipped.get(name);
      const row: DriverDeclaration = DRIVERS[name];
      expect([d.name, d.layouts, d.scaling ?? 'workers', d.stages ?? false, d.probes ?? false], name).toEqual(
        [name, row.layouts, row.scaling, row.staging === true, !('refused' in row.probe)],
      );
      // A driver that stages switches by making the new version the default, or (a server that serves the newest
      // loaded version) places the files and loads them at the switch.
      const server = d.replica({ uid: 'u', namespace: 'n' }, {}, { endpoint: 'http://127.0.0.1:9' });
      if (d.stages)
        expect(typeof server.setDefault === 'function' || server.staging !== undefined, name).toBe(true);
      expect(server.staging === undefined || d.stages === true, name).toBe(true);
      // A driver that probes has the seam's probe; one that does not has none a canary could call.
      expect(typeof server.probe, name).toBe(d.probes ? 'function' : 'undefined');
    }
  });

  it('is the API reference table', () => {
    const api = readFileSync(join(REPO_ROOT, 'docs/api.md'), 'utf8');
    expect(api).toContain(driverTable());
    for (const name of DRIVER_NAMES) expect(driverTable()).toContain(`| \`${name}\``);
  });

  it('is the only place in src/api that names a driver', () => {
    const named = new RegExp(`['"\`(](${DRIVER_NAMES.join('|')})\\b`);
    const offenders = sourceFiles('src/api')
      .filter((f) => !f.endsWith('/drivers.ts'))
      .flatMap((f) =>
        readFileSync(join(REPO_ROOT, f), 'utf8')
          .split('\n')
          .map((line, i) => ({ where: `${f}:${i + 1}`, line }))
          .filter(({ line }) => named.test(line)),
      );
    expect(offenders).toEqual([]);
  });
});

describe('the ServedModel schema validates by the table', () => {
  const spec = (modelServer: Record<string, unknown>, rest: Record<string, unknown> = {}) => ({
    modelName: 'm',
    fileName: 'm.mar',
    modelServer: { endpoints: ['http://10.0.0.1:8080'], ...modelServer },
    ...rest,
  });
  const agent = { port: 8090, tokenSecretRef: { name: 'a', key: 'token' } };
  const problems = (s: unknown) =>
    ServedModelSpec.safeParse(s).error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`) ?? [];

  it('asks for the agent where the driver needs it, not where it is optional or unused', () => {
    for (const name of DRIVER_NAMES) {
      const found = problems(spec({ driver: name }));
      const wanted = DRIVERS[name].agent === 'required';
      expect(
        found.some((p) => p.startsWith('modelServer.agent: ')),
        name,
      ).toBe(wanted);
      expect(
        problems(spec({ driver: name, agent })).some((p) => p.startsWith('modelServer.agent')),
        name,
      ).toBe(false);
    }
  });

  it('refuses a worker count a fixed-scaling server cannot have, naming the field and the fix', () => {
    for (const name of DRIVER_NAMES) {
      const two = problems(spec({ driver: name, agent }, { workers: { min: 2 } }));
      const refused = two.filter((p) => p.startsWith('workers: '));
      expect(refused.length, name).toBe(DRIVERS[name].scaling === 'fixed' ? 1 : 0);
      if (refused.length) expect(refused[0]).toMatch(/set min \(and max\) to 1/);
      expect(
        problems(spec({ driver: name, agent }, { workers: { min: 1, max: 1 } })),
        name,
      ).not.toContainEqual(expect.stringMatching(/^workers/));
    }
  });

  it('refuses a Staged rollout for a server that cannot stage, naming the field, the reason and the fix', () => {
    const staged = { version: '2', rollout: { strategy: 'Staged' } };
    for (const name of DRIVER_NAMES) {
      const row: DriverDeclaration = DRIVERS[name];
      const refused = problems(spec({ driver: name, agent }, staged)).filter((p) =>
        p.startsWith('rollout.strategy: '),
      );
      expect(refused.length, name).toBe(row.staging === true ? 0 : 1);
      if (row.staging !== true) {
        expect(refused[0]).toContain(`${name}: ${row.staging.refused}`);
        expect(refused[0]).toMatch(/set rollout\.strategy to Rolling/);
      }
    }
    // Staged needs the version it switches to; paused and the deadline are Staged's only.
    expect(problems(spec({}, { rollout: { strategy: 'Staged' } }))).toContainEqual(
      expect.stringMatching(/^version: .*set version/),
    );
    expect(problems(spec({}, { rollout: { paused: true } }))).toContainEqual(
      expect.stringMatching(/^rollout: .*Staged only/),
    );
    expect(problems(spec({}, { ...staged, rollout: { ...staged.rollout, paused: true } }))).toEqual([]);
  });

  it('refuses a canary probe for a driver that sends none, and asks for the port where the driver needs one', () => {
    const probe = { body: '{}' };
    for (const name of DRIVER_NAMES) {
      const row: DriverDeclaration = DRIVERS[name];
      const all = problems(
        spec(
          { driver: name, agent },
          { version: '2', rollout: { strategy: 'Staged', canary: { replicas: 1, probe } } },
        ),
      );
      const refused = all.filter((p) => p.startsWith('rollout.canary.probe: '));
      expect(refused.length, name).toBe('refused' in row.probe ? 1 : 0);
      if ('refused' in row.probe) expect(refused[0]).toContain(`${name}: ${row.probe.refused}`);
      const port = all.filter((p) => p.startsWith('rollout.canary.probe.port: '));
      expect(port.length, name).toBe(!('refused' in row.probe) && row.probe.port === 'required' ? 1 : 0);
      // And refuses one where the driver sends to the endpoint itself.
      const withPort = problems(
        spec(
          { driver: name, agent },
          {
            version: '2',
            rollout: { strategy: 'Staged', canary: { replicas: 1, probe: { ...probe, port: 8080 } } },
          },
        ),
      ).filter((p) => p.startsWith('rollout.canary.probe.port: '));
      expect(withPort.length, name).toBe(!('refused' in row.probe) && row.probe.port === 'unused' ? 1 : 0);
    }
  });

  it("refuses a server's own options with another driver", () => {
    const registration = { batchSize: 4 };
    for (const name of DRIVER_NAMES) {
      const found = problems(spec({ driver: name, agent }, { registration }));
      const takes = (DRIVERS[name].options as readonly string[]).includes('registration');
      expect(
        found.some((p) => p.startsWith('registration: ')),
        name,
      ).toBe(!takes);
    }
    // Without a driver, the default's options.
    expect(problems(spec({}, { registration }))).toEqual([]);
  });
});

describe('driver folders', () => {
  const folders = readdirSync(join(REPO_ROOT, 'src/servers'), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => `src/servers/${e.name}`);

  it('hold every driver the table declares, each in one folder', () => {
    for (const name of DRIVER_NAMES) {
      const cls = shipped.get(name).constructor.name;
      const homes = folders.filter((f) =>
        sourceFiles(f).some((file) =>
          readFileSync(join(REPO_ROOT, file), 'utf8').includes(
            `export class ${cls} implements ModelServerDriver`,
          ),
        ),
      );
      expect(homes.length, `${name} (${cls})`).toBe(1);
    }
  });

  it('import no other driver folder: what drivers share sits in src/servers itself', () => {
    const crossing = imports(folders.flatMap((f) => sourceFiles(f)))
      .filter((e) => {
        const own = folders.find((f) => e.from.startsWith(`${f}/`))!;
        const other = folders.find((f) => e.to.startsWith(`${f}/`));
        return other !== undefined && other !== own;
      })
      .map((e) => `${e.from} -> ${e.to}`);
    expect(crossing).toEqual([]);
  });
});
