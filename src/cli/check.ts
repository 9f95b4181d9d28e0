/** `peerload check`: the command line of src/check/consistency.ts. */
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import {
  CheckInputError,
  checkDocuments,
  parsePluginConfig,
  readManifests,
  readText,
} from '../check/consistency.ts';

const USAGE = `Usage: peerload check --plugin-config <config.json> [--json] <manifest.yaml>...

For each URL a ModelPreheat would warm and each download the plugin would make (ServedModel fileName, or the
preheated keys), says whether both have the same P2P task id, and why not when they do not.
--plugin-config   the endpoint plugin's configuration file (seed 2.2: addr, header, filter, object_storage,
                  daemon_version: the peer daemon's version, whose task id rule is used; default 1.4)
--json            machine-readable output
Manifests hold ModelPreheat and/or ServedModel documents (other kinds are ignored).
Warnings say when the configuration would make downloads bypass P2P altogether.
Exit status: 0 all share a task id, 1 at least one does not, 2 bad input.`;

export interface CheckIO {
  out: (line: string) => void;
  err: (line: string) => void;
}

const defaultIO: CheckIO = {
  out: (line) => console.log(line),
  err: (line) => console.error(line),
};

/** `peerload check`. Exit status: 0 all match, 1 a miss, 2 bad input. */
export async function run(argv: string[], io: CheckIO = defaultIO): Promise<number> {
  try {
    const { values, positionals } = parseCommandArgs(
      argv,
      {
        'plugin-config': { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      true,
    );
    if (values.help) {
      io.out(USAGE);
      return 0;
    }
    if (values['plugin-config'] === undefined) throw new CliError(`--plugin-config is required\n\n${USAGE}`);
    if (positionals.length === 0) throw new CliError(`expected at least one manifest\n\n${USAGE}`);
    const configPath = values['plugin-config'];
    const plugin = parsePluginConfig(await readText(configPath), configPath);
    const docs = await readManifests(positionals, plugin);
    const results = checkDocuments(plugin, docs);
    const ok = results.every((r) => r.status === 'OK');
    if (values.json) {
      io.out(JSON.stringify({ ok, results, notes: docs.notes, warnings: plugin.warnings }, null, 2));
    } else {
      for (const warning of plugin.warnings) io.err(`warning: ${configPath}: ${warning}`);
      for (const note of docs.notes) io.err(`note: ${note}`);
      for (const r of results) {
        if (r.status === 'OK') {
          io.out(`OK   ${r.label}  task ${r.taskID}`);
        } else {
          io.out(`MISS ${r.label}`);
          for (const reason of r.reasons) io.out(`     ${reason.message}`);
        }
      }
      const misses = results.filter((r) => r.status === 'MISS').length;
      io.err(`${results.length - misses} of ${results.length} downloads share the preheat's task id`);
    }
    return ok ? 0 : 1;
  } catch (err) {
    if (err instanceof CliError || err instanceof CheckInputError) {
      io.err(`peerload check: ${err.message}`);
      return 2;
    }
    throw err;
  }
}
