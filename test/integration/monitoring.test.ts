/**
 * deploy/monitoring: the alert rules pass `promtool check rules` and fire as meant under `promtool test rules`
 * (promtool built from the Go module proxy by scripts/setup-promtool.sh), and every metric the rules and the
 * Grafana dashboard query is one the operator exports.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dump } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { OPERATOR_IDENTITY } from '../../src/controllers/index.ts';
import { operatorMetrics } from '../../src/controllers/metrics.ts';
import { Metrics } from '../../src/runtime/metrics.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { kustomize } from '../support/runtime-deploy.ts';
import { METRICS_SCRAPE_ENDPOINT } from '../fixtures/metrics-scrape.ts';

const manifests = kustomize(join(REPO_ROOT, 'deploy/monitoring')) as any[];
const rule = manifests.find((m) => m.kind === 'PrometheusRule');
const dashboard = JSON.parse(
  readFileSync(join(REPO_ROOT, 'deploy/monitoring/grafana-dashboard.json'), 'utf8'),
);
const J = 'job="peerload-operator-metrics"';

function promtool(): string {
  const dir = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-promtool.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
  return join(dir.split('\n').pop()!, 'promtool');
}

/** Metric names in a PromQL expression (identifiers followed by `{`, `[` or a space, minus functions and keywords). */
function metricNames(expr: string): string[] {
  const words = expr.replace(/"[^"]*"/g, '""').match(/[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{[])/g) ?? [];
  return words.filter((w) => !['by', 'without', 'on', 'ignoring', 'le'].includes(w));
}

/**
 * promtool's checks of one alert: silent at `silentAt`, firing at `firingAt` with these labels, summary and
 * description (and no other alert of its name).
 */
function silentThenFiring(
  alertname: string,
  silentAt: string,
  firingAt: string,
  labels: Record<string, string>,
  summary: string,
  description: string,
) {
  return [
    { eval_time: silentAt, alertname, exp_alerts: [] },
    {
      eval_time: firingAt,
      alertname,
      exp_alerts: [{ exp_labels: labels, exp_annotations: { summary, description } }],
    },
  ];
}

describe('deploy/monitoring', () => {
  it('renders a ServiceMonitor on the metrics Service, a PrometheusRule and the dashboard ConfigMap', () => {
    expect(manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort()).toEqual([
      'ConfigMap/peerload-grafana-dashboard',
      'PrometheusRule/peerload-operator',
      'ServiceMonitor/peerload-operator',
    ]);
    const sm = manifests.find((m) => m.kind === 'ServiceMonitor');
    expect(sm.spec.endpoints[0]).toEqual(METRICS_SCRAPE_ENDPOINT);
    const service = kustomize(join(REPO_ROOT, 'deploy/base')).find((m) => m.kind === 'Service') as any;
    expect(service.spec.ports.map((p: { name: string }) => p.name)).toContain(sm.spec.endpoints[0].port);
    expect(service.metadata.labels).toMatchObject(sm.spec.selector.matchLabels);
    expect(rule.spec.groups[0].rules.map((r: { alert: string }) => r.alert)).toEqual([
      'PeerloadPreheatFailing',
      'PeerloadServedModelReplicasNotReady',
      'PeerloadReconcileErrors',
      'PeerloadLeaderMissing',
    ]);
  });

  it('queries only metrics the operator exports (rules and dashboard)', async () => {
    const exported = new Set<string>();
    const metrics = new Metrics({ namespace: OPERATOR_IDENTITY.metricsNamespace });
    operatorMetrics(metrics);
    for (const m of await metrics.registry.getMetricsAsJSON()) {
      exported.add(m.name);
      if (String(m.type) === 'histogram')
        for (const s of ['_bucket', '_sum', '_count']) exported.add(m.name + s);
    }
    const exprs = [
      ...rule.spec.groups.flatMap((g: any) => g.rules.map((r: any) => r.expr as string)),
      ...dashboard.panels.flatMap((p: any) => p.targets.map((t: any) => t.expr as string)),
    ];
    const used = new Set(exprs.flatMap(metricNames));
    expect(used.size).toBeGreaterThanOrEqual(12);
    expect([...used].filter((n) => !exported.has(n))).toEqual([]);
  });

  it('passes promtool check rules and fires as meant under promtool test rules', () => {
    const dir = mkdtempSync(join(tmpdir(), 'peerload-rules-'));
    writeFileSync(join(dir, 'rules.yaml'), dump({ groups: rule.spec.groups }));
    const bin = promtool();
    const check = spawnSync(bin, ['check', 'rules', join(dir, 'rules.yaml')], { encoding: 'utf8' });
    expect(check.stderr + check.stdout).toMatch(/SUCCESS: 4 rules found/);
    expect(check.status).toBe(0);

    const series = (s: string, values: string) => ({ series: s, values });
    const tests = {
      rule_files: ['rules.yaml'],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: [
            series(`peerload_servedmodel_replicas_ready{${J},namespace="ml",name="resnet"}`, '2x30'),
            series(`peerload_servedmodel_replicas_desired{${J},namespace="ml",name="resnet"}`, '3x30'),
            series(`peerload_servedmodel_replicas_ready{${J},namespace="ml",name="bert"}`, '3x30'),
            series(`peerload_servedmodel_replicas_desired{${J},namespace="ml",name="bert"}`, '3x30'),
            series(`peerload_preheat_jobs_total{${J},result="failed"}`, '0 0 0 1 1 1 1 1 1 1'),
            series(`peerload_preheat_jobs_total{${J},result="succeeded"}`, '0+5x30'),
            series(`leader_election_master_status{${J},name="peerload-operator",pod="a"}`, '1x9 0x20'),
            series(`leader_election_master_status{${J},name="peerload-operator",pod="b"}`, '0x30'),
            series(
              `controller_runtime_reconcile_total{${J},controller="servedmodel",result="success"}`,
              '0+10x30',
            ),
            series(`controller_runtime_reconcile_errors_total{${J},controller="servedmodel"}`, '0+5x30'),
            series(
              `controller_runtime_reconcile_total{${J},controller="modelpreheat",result="success"}`,
              '0+10x30',
            ),
            series(`controller_runtime_reconcile_errors_total{${J},controller="modelpreheat"}`, '0x30'),
          ],
          alert_rule_test: [
            // Replicas: not yet after 10 minutes, firing after 15, only for the one that is short.
            ...silentThenFiring(
              'PeerloadServedModelReplicasNotReady',
              '10m',
              '16m',
              { severity: 'warning', job: 'peerload-operator-metrics', namespace: 'ml', name: 'resnet' },
              'ServedModel ml/resnet is not ready on every replica',
              'ml/resnet has been READY on fewer replicas than found for 15 minutes. `kubectl get sm resnet -n ml -o wide` shows the reason and message.',
            ),
            ...silentThenFiring(
              'PeerloadPreheatFailing',
              '2m',
              '5m',
              { severity: 'warning' },
              'Preheat jobs failed after all their retries',
              "1 preheat job(s) failed for good in the last 30 minutes. Find them with `kubectl get mph -A` (STATE FAILURE) and read the Ready condition's message.",
            ),
            // Leader lost at minute 9: fires 5 minutes later.
            ...silentThenFiring(
              'PeerloadLeaderMissing',
              '12m',
              '15m',
              { severity: 'critical' },
              'No peerload operator replica is leading',
              'No replica of the peerload operator has held the Lease peerload-operator for 5 minutes, so no ModelPreheat or ServedModel is reconciled. Check the pods in peerload-system.',
            ),
            // servedmodel fails half of its reconciles (5 errors a minute over 10 successes); modelpreheat none.
            ...silentThenFiring(
              'PeerloadReconcileErrors',
              '10m',
              '25m',
              { severity: 'warning', controller: 'servedmodel' },
              'The servedmodel controller fails more than 10 % of its reconciles',
              "50% of servedmodel reconciles failed over 15 minutes; the operator's log (reconcile failed; will retry) and the resources' Events say why.",
            ),
          ],
        },
      ],
    };
    writeFileSync(join(dir, 'tests.yaml'), dump(tests));
    const test = spawnSync(bin, ['test', 'rules', join(dir, 'tests.yaml')], { encoding: 'utf8', cwd: dir });
    expect(test.stdout + test.stderr).toMatch(/SUCCESS/);
    expect(test.status).toBe(0);
  });
});
