/** Renders the API reference (Markdown) from the same JSON Schema the CRDs are made of. */
import { KINDS, openAPISchema } from './crd.ts';
import { driverTable } from './drivers.ts';

// JSON Schema is read loosely here: every keyword is optional and of its own type.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = Record<string, any>;

function typeOf(s: Json): string {
  if (s['x-kubernetes-int-or-string']) return 'int or string';
  if (s.enum) return s.enum.map((v: string) => `\`${v}\``).join(' \\| ');
  if (s.type === 'array') return `${typeOf(s.items ?? {})}[]`;
  if (s.type === 'object' && s.additionalProperties) return `map[string]${typeOf(s.additionalProperties)}`;
  return s.format ? `${s.type} (${s.format})` : (s.type ?? 'any');
}

function constraints(s: Json): string {
  const parts: string[] = [];
  if (s.minimum !== undefined) parts.push(`≥ ${s.minimum}`);
  if (s.maximum !== undefined) parts.push(`≤ ${s.maximum}`);
  if (s.minItems !== undefined) parts.push(`min ${s.minItems} items`);
  if (s.maxItems !== undefined) parts.push(`max ${s.maxItems} items`);
  if (s.default !== undefined) parts.push(`default \`${JSON.stringify(s.default)}\``);
  return parts.join(', ');
}

function rows(schema: Json, prefix: string, required: Set<string>, out: string[]): void {
  for (const [name, prop] of Object.entries<Json>(schema.properties ?? {})) {
    const path = `${prefix}.${name}`;
    const req = required.has(name) ? ' (required)' : '';
    const desc = (prop.description ?? '').replace(/\|/g, '\\|').replace(/\n/g, ' ');
    out.push(`| \`${path}\`${req} | ${typeOf(prop)} | ${constraints(prop)} | ${desc} |`);
    for (const v of prop['x-kubernetes-validations'] ?? []) out.push(`| | | rule | ${v.message} |`);
    const child = prop.type === 'array' ? prop.items : prop;
    if (child?.properties)
      rows(child, prop.type === 'array' ? `${path}[]` : path, new Set(child.required ?? []), out);
  }
}

export function apiReference(): string {
  const out: string[] = [];
  for (const info of KINDS) {
    out.push(
      `## ${info.kind} (\`peerload.io/v1alpha1\`, ${info.scope === 'Cluster' ? 'cluster-scoped, ' : ''}short name \`${info.shortNames.join(', ')}\`)`,
      '',
      info.description,
      '',
    );
    for (const part of ['spec', 'status'] as const) {
      const zod = part === 'spec' ? info.spec : info.status;
      if (!zod) continue;
      const schema: Json = openAPISchema(zod);
      out.push('| field | type | constraints | description |', '|---|---|---|---|');
      for (const v of schema['x-kubernetes-validations'] ?? [])
        out.push(`| \`${part}\` | | rule | ${v.message} |`);
      rows(schema, part, new Set(schema.required ?? []), out);
      out.push('');
    }
  }
  out.push(
    '## Model-server drivers',
    '',
    'What each `spec.modelServer.driver` needs, which layouts it loads (`archive`: `spec.fileName`, `directory`: `spec.files`) and what `spec.workers` means for it. A ServedModel whose layout its driver does not load is Stalled before any replica is asked.',
    '',
    driverTable(),
    '',
  );
  return out.join('\n');
}
