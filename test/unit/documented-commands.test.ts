/**
 * Every command the README and docs/guide.md show is run by some test: the README's shell blocks and its inline
 * commands, and each `kubectl apply` and `peerload` command of the guide. Each is mapped to the test file that runs
 * it, and that file must still hold what shows it does (its arguments); a command the documents gain without a test
 * fails here, as does a mapping to a test that no longer runs it. The few commands no test runs are listed with why.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

type RunBy = { test: string; shows: string[] } | { notRun: string };

/** The command as the documents show it (normalised, see `commandsOf`) → what runs it. */
const RUN_BY: Record<string, RunBy> = {
  'npm run demo': { test: 'test/e2e/demo.test.ts', shows: ["'scripts/demo.ts'"] },
  'npm run demo -- --real-p2p': { test: 'test/e2e/demo.test.ts', shows: ["'--real-p2p'"] },
  'npm run demo -- --keep': { test: 'test/e2e/demo.test.ts', shows: ["'--keep'", 'left running'] },
  'npm test': { test: '.ci/run', shows: ['npm test'] },
  'bash scripts/setup.sh --all': { test: 'scripts/test.sh', shows: ['bash scripts/setup.sh --all'] },
  'npm run test:vllm': {
    notRun: 'the opt-in vLLM suite itself (6 GB of vLLM, about 12 minutes): outside CI by design',
  },
  'npm run test:kserve': {
    notRun: 'the opt-in KServe suite itself (builds the KServe controller): outside CI by design',
  },
  'npm run bench': { notRun: 'the benchmarks: a measurement run by hand on a quiet machine, not a test' },
  'helm install peerload': { test: 'test/integration/chart.test.ts', shows: ["'install'", 'manager.url'] },
  'kubectl apply --server-side -f install.yaml': {
    test: 'test/e2e/release.test.ts',
    shows: ['install.yaml'],
  },
  'kubectl apply -k deploy/default': {
    test: 'test/integration/deploy-manifests.test.ts',
    shows: ['renderDefault'],
  },
  'kubectl apply -f deploy/examples/servedmodel-preheat-create.yaml': {
    test: 'test/integration/crds.test.ts',
    shows: ["'deploy/examples'"],
  },
  'peerload operator': { test: 'test/support/operator-process.ts', shows: ["'operator'"] },
  'peerload wait': { test: 'test/integration/cli-wait.test.ts', shows: ["'wait'"] },
  'peerload preheat': { test: 'test/integration/cli-wait.test.ts', shows: ["'preheat'"] },
  'peerload check': { test: 'test/integration/cli-wait.test.ts', shows: ["'check'", "'--plugin-config'"] },
  'peerload taskid': { test: 'test/unit/cli.test.ts', shows: ["'taskid'"] },
  'peerload crds': { test: 'test/unit/cli.test.ts', shows: ["'crds'"] },
  'peerload agent': { test: 'test/support/vllm-node.ts', shows: ["'agent'"] },
  'peerload fetch': { test: 'test/unit/agent-cli.test.ts', shows: ["'fetch'", "'--spec'"] },
  'peerload fetch hf://': { test: 'test/e2e/hub-real-p2p.test.ts', shows: ['`hf://${repo}@main`'] },
  'peerload fetch oci://': { test: 'test/e2e/oci-registry.test.ts', shows: ['`oci://${reference}`'] },
  'peerload publish-keys': { test: 'test/e2e/publish-keys.test.ts', shows: ["'publish-keys'"] },
};

/**
 * A command's identity: `peerload <subcommand>` (`fetch` also by its URI's scheme), `kubectl apply` with its file,
 * `helm install <release>`, npm and bash commands whole. Placeholders, comments and line continuations dropped.
 */
function normalise(line: string): string | undefined {
  const command = line
    .replace(/\s+#.*$/, '')
    .replace(/\\$/, '')
    .replace(/\s+/g, ' ')
    .trim();
  const peerload = /^peerload ([a-z-]+)(?: ((?:hf|oci):\/\/))?/.exec(command);
  if (peerload) return `peerload ${peerload[1]}${peerload[2] ? ` ${peerload[2]}` : ''}`;
  const apply = /^kubectl apply( --server-side)? (-[fk]) (\S+)/.exec(command);
  if (apply) return `kubectl apply${apply[1] ?? ''} ${apply[2]} ${apply[3]}`;
  const helm = /^helm install (\S+)/.exec(command);
  if (helm) return `helm install ${helm[1]}`;
  if (/^(npm (test|run \S+)|bash scripts\/)/.test(command)) return command;
  return undefined;
}

/** The commands of a document: its shell blocks' lines, and its inline code that is a command. */
function commandsOf(doc: string, inline: RegExp): string[] {
  const text = read(doc);
  const blocks = [...text.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) => m[1]!);
  const lines = blocks.flatMap((b) => b.replace(/\\\n\s*/g, ' ').split('\n'));
  const spans = [...text.replace(/^```[\s\S]*?^```/gm, '').matchAll(/`([^`\n]+)`/g)]
    .map((m) => m[1]!)
    .filter((s) => inline.test(s));
  return [...lines, ...spans].map(normalise).filter((c): c is string => c !== undefined);
}

const README = commandsOf('README.md', /^(npm |bash |helm |kubectl apply |peerload [a-z])/);
const GUIDE = commandsOf('docs/guide.md', /^(kubectl apply |peerload [a-z])/);

describe('documented commands', () => {
  it('finds the commands the documents show (the extraction works)', () => {
    for (const c of ['npm run demo', 'npm test', 'helm install peerload', 'peerload wait'])
      expect(README).toContain(c);
    for (const c of ['kubectl apply -k deploy/default', 'peerload fetch hf://', 'peerload check'])
      expect(GUIDE).toContain(c);
  });

  it('every command of the README and the guide is run by a test, or says why not', () => {
    const unmapped = [...new Set([...README, ...GUIDE])].filter((c) => !(c in RUN_BY));
    expect(unmapped, 'map each to the test that runs it in RUN_BY').toEqual([]);
  });

  it('each mapped test exists and still holds what shows it runs the command', () => {
    const lost: string[] = [];
    for (const [command, by] of Object.entries(RUN_BY)) {
      if ('notRun' in by) continue;
      if (!existsSync(join(ROOT, by.test))) {
        lost.push(`${command}: ${by.test} does not exist`);
        continue;
      }
      const text = read(by.test);
      for (const s of by.shows) if (!text.includes(s)) lost.push(`${command}: ${by.test} has no ${s}`);
    }
    expect(lost).toEqual([]);
  });

  it('maps no command the documents no longer show', () => {
    const shown = new Set([...README, ...GUIDE]);
    expect(Object.keys(RUN_BY).filter((c) => !shown.has(c))).toEqual([]);
  });

  it('leaves out only the opt-in suites and the benchmarks', () => {
    const notRun = Object.entries(RUN_BY).filter(([, by]) => 'notRun' in by);
    expect(notRun.map(([c]) => c).sort()).toEqual([
      'npm run bench',
      'npm run test:kserve',
      'npm run test:vllm',
    ]);
  });
});
