/**
 * The readers of resource health that the operator's conditions are written for, run for real: Argo CD's Lua
 * health checks under a Lua 5.1 interpreter (Argo CD runs them in gopher-lua, a Lua 5.1 implementation) and
 * kstatus of sigs.k8s.io/cli-utils (Flux, kpt), built by scripts/setup-kstatus.sh.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from './kube.ts';

export interface HealthStatus {
  status: string;
  message: string;
}

/** Lua table constructor for a JSON value. Strings use decimal byte escapes: Lua 5.1 has no \u escape. */
export function luaLiteral(v: unknown): string {
  if (v === null || v === undefined) return 'nil';
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  if (typeof v === 'string')
    return `"${[...Buffer.from(v, 'utf8')].map((b) => (b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c ? String.fromCharCode(b) : `\\${b}`)).join('')}"`;
  if (Array.isArray(v)) return `{${v.map(luaLiteral).join(', ')}}`;
  return `{${Object.entries(v as Record<string, unknown>)
    .map(([k, x]) => `[${luaLiteral(k)}] = ${luaLiteral(x)}`)
    .join(', ')}}`;
}

/** Runs an Argo CD health script on `obj` as Argo CD does: `obj` a global, the script returns `hs`. */
export function runLuaHealth(script: string, obj: unknown): HealthStatus {
  const dir = mkdtempSync(join(tmpdir(), 'peerload-lua-'));
  writeFileSync(join(dir, 'health.lua'), script);
  writeFileSync(
    join(dir, 'main.lua'),
    `obj = ${luaLiteral(obj)}\nlocal hs = dofile(${luaLiteral(join(dir, 'health.lua'))})\n` +
      `io.write(hs.status, "\\n", hs.message or "", "\\n")\n`,
  );
  const [status = '', message = ''] = execFileSync('lua5.1', [join(dir, 'main.lua')], {
    encoding: 'utf8',
  }).split('\n');
  return { status, message };
}

/** kstatus of each object (status and message), from the real library. */
export function kstatus(objects: unknown[]): HealthStatus[] {
  const bin = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-kstatus.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
  const out = execFileSync(join(bin, 'kstatus'), {
    input: objects.map((o) => JSON.stringify(o)).join('\n') + '\n',
    encoding: 'utf8',
  });
  return out
    .trimEnd()
    .split('\n')
    .map((line) => {
      const [status = '', message = ''] = line.split('\t');
      return { status, message };
    });
}
