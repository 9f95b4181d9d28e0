/**
 * modctl (github.com/modelpack/modctl, built by scripts/setup-modctl.sh) as a test drives it: log in, build a
 * ModelPack artifact from a directory and its Modelfile straight into a registry, attach one more file as a tar
 * layer. Each call has its own storage directory, so nothing of the user's is read or written.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { modctlBinDir } from './registry.ts';

const run = promisify(execFile);

export interface Modctl {
  /** Runs modctl with `args` in `cwd`; throws with its output's end on failure. */
  (args: string[], cwd: string): Promise<string>;
}

export async function modctl(storageDir: string): Promise<Modctl> {
  const bin = join(await modctlBinDir(), 'modctl');
  return async (args, cwd) => {
    try {
      const { stdout, stderr } = await run(bin, ['--storage-dir', storageDir, ...args], {
        cwd,
        maxBuffer: 64 << 20,
        timeout: 300_000,
      });
      return `${stdout}${stderr}`;
    } catch (e) {
      const err = e as { stdout?: string; stderr?: string; message: string };
      const tail = `${err.stdout ?? ''}${err.stderr ?? ''}`
        .split('\n')
        .filter((l) => !l.includes('Building'))
        .slice(-15)
        .join('\n');
      throw new Error(`modctl ${args[0]} failed: ${err.message.split('\n')[0]}\n${tail}`, { cause: e });
    }
  };
}

/** `modctl build` of the Modelfile in `dir`, pushed straight to `reference` (a plain-HTTP registry). */
export async function modctlBuild(m: Modctl, dir: string, reference: string): Promise<void> {
  await m(
    [
      'build',
      '-f',
      'Modelfile',
      '-t',
      reference,
      '--plain-http',
      '--output-remote',
      '--no-creation-time',
      '.',
    ],
    dir,
  );
}

/**
 * A Triton-style model directory pushed by modctl as `reference` (a plain-HTTP registry): `config.pbtxt` and
 * `1/weights.bin` as raw layers (modctl's default, the older vnd.cnai types), then `1/model.py` attached as a tar
 * layer (`--raw=false`, a vnd.cncf type). Returns what was pushed, by path.
 */
export async function pushTritonModel(
  m: Modctl,
  dir: string,
  reference: string,
  files: { config: string; weights: Buffer; code: string },
): Promise<void> {
  const { mkdir, writeFile } = await import('node:fs/promises');
  await mkdir(join(dir, '1'), { recursive: true });
  await writeFile(join(dir, 'config.pbtxt'), files.config);
  await writeFile(join(dir, '1/weights.bin'), files.weights);
  await writeFile(join(dir, '1/model.py'), files.code);
  await writeFile(
    join(dir, 'Modelfile'),
    'NAME simple\nARCH transformer\nFAMILY test\nFORMAT pytorch\nCONFIG config.pbtxt\nMODEL 1/weights.bin\n',
  );
  await buildAndAttach(m, dir, reference, '1/model.py');
}

/**
 * The flags of a placement on a node peer: through its proxy, the daemon's files hard-linked into `root` (the same
 * path for the daemon here), the model server said to run as uid 1000 (not the daemon's, root here, so the links
 * may stay), no free-space floor.
 */
export const nodePlacementArgs = (proxyURL: string, root: string): string[] => [
  '--proxy',
  proxyURL,
  '--hard-link-root',
  root,
  '--server-uid',
  '1000',
  '--min-free-bytes',
  '0',
];

/** `peerload fetch` in process: its exit status and its lines (a CLI error as a line of `err`, exit 2). */
export async function peerloadFetch(argv: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const { run } = await import('../../src/cli/fetch.ts');
  const out: string[] = [];
  const err: string[] = [];
  const code = await run(argv, { out: (l) => out.push(l), err: (l) => err.push(l) }).catch((e: Error) => {
    err.push(e.message);
    return 2;
  });
  return { code, out, err };
}

/**
 * One version of a Triton model as modctl pushes it (a plain-HTTP registry): the version directory's files at the
 * artifact's root, as the agent places them under `<model>/<version>/` — `weights.bin` (MODEL) and `offset.json`
 * (CONFIG) raw layers of the older vnd.cnai types, then `model.py` attached as a vnd.cncf tar layer
 * (`--raw=false`). Each call builds in a directory of its own.
 */
export async function pushTritonVersion(
  m: Modctl,
  dir: string,
  reference: string,
  files: { weights: Buffer; offset: string; code: string },
): Promise<void> {
  const { mkdir, writeFile } = await import('node:fs/promises');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'weights.bin'), files.weights);
  await writeFile(join(dir, 'offset.json'), files.offset);
  await writeFile(join(dir, 'model.py'), files.code);
  await writeFile(
    join(dir, 'Modelfile'),
    'NAME echo\nARCH transformer\nFAMILY test\nFORMAT onnx\nCONFIG offset.json\nMODEL weights.bin\n',
  );
  await buildAndAttach(m, dir, reference, 'model.py');
}

/** `modctl build` of dir's Modelfile into the registry as `reference`, then `file` attached as a tar layer. */
async function buildAndAttach(m: Modctl, dir: string, reference: string, file: string): Promise<void> {
  await modctlBuild(m, dir, reference);
  await m(
    ['attach', file, '-s', reference, '-t', reference, '--plain-http', '--output-remote', '--raw=false'],
    dir,
  );
}

/**
 * One version of an MLServer model as modctl pushes it (a plain-HTTP registry), every file a raw layer of the older
 * vnd.cnai types at the artifact's root, as the agent places them under `<model>/<version>/`:
 * `model-settings.json` (CONFIG), the runtime's model file and a data file (MODEL, `weights.bin`; MLServer's
 * loader reads only what the settings name). Each call builds in a directory of its own.
 */
export async function pushMLServerVersion(
  m: Modctl,
  dir: string,
  reference: string,
  files: { settings: string; model: { name: string; body: Buffer }; weights: Buffer },
): Promise<void> {
  const { mkdir, writeFile } = await import('node:fs/promises');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'model-settings.json'), files.settings);
  await writeFile(join(dir, files.model.name), files.model.body);
  await writeFile(join(dir, 'weights.bin'), files.weights);
  await writeFile(
    join(dir, 'Modelfile'),
    `NAME iris\nARCH transformer\nFAMILY test\nFORMAT sklearn\nCONFIG model-settings.json\nMODEL ${files.model.name}\nMODEL weights.bin\n`,
  );
  await modctlBuild(m, dir, reference);
}

/**
 * A PEFT LoRA adapter directory (`adapter_config.json`, `adapter_model.safetensors`) pushed by modctl as
 * `reference` (a plain-HTTP registry): both files raw layers at the artifact's root, as the agent places them under
 * `<adapter>/<version>/` for vLLM to load. Built in `dir`, a directory of its own (nothing else of `from` is taken).
 */
export async function pushLoraAdapter(
  m: Modctl,
  from: string,
  dir: string,
  reference: string,
): Promise<void> {
  const { copyFile, mkdir, writeFile } = await import('node:fs/promises');
  await mkdir(dir, { recursive: true });
  for (const file of ['adapter_config.json', 'adapter_model.safetensors'])
    await copyFile(join(from, file), join(dir, file));
  await writeFile(
    join(dir, 'Modelfile'),
    'NAME adapter\nARCH transformer\nFAMILY llama\nFORMAT safetensors\nCONFIG adapter_config.json\nMODEL adapter_model.safetensors\n',
  );
  await modctlBuild(m, dir, reference);
}
