// Two finished jobs of `cohort serve`, their loss and accuracy curves overlaid on one step axis.
(function () {
  'use strict';
  const params = new URLSearchParams(location.search);
  const ids = [params.get('a'), params.get('b')];
  const colors = ['#2f6fdf', '#c2410c'];

  // One x axis: the union of both jobs' steps; a job without a point at a step has null there.
  function overlay(runs, field) {
    const steps = [...new Set(runs.flatMap((r) => r.metrics.map((m) => m.step)))].sort((x, y) => x - y);
    const at = new Map(steps.map((s, i) => [s, i]));
    const ys = runs.map((r) => {
      const y = new Array(steps.length).fill(null);
      for (const m of r.metrics) if (m[field] !== undefined) y[at.get(m.step)] = m[field];
      return y;
    });
    return [steps, ...ys];
  }

  function chart(el, runs, field) {
    const data = overlay(runs, field);
    new uPlot({
      width: Math.max(300, el.clientWidth), height: 260,
      scales: { x: { time: false } },
      axes: [{ label: 'step' }, { size: 70 }],
      series: [{ label: 'step' }, ...runs.map((r, i) => ({
        label: `#${r.id} ${r.job.name}`, stroke: colors[i], width: 2, spanGaps: true, points: { show: false },
      }))],
    }, data, el);
    el.dataset.series = String(runs.length);
    el.dataset.points = String(data[0].length);
  }

  async function load(id) {
    const [job, metrics] = await Promise.all([
      fetch(`jobs/${id}/api/job`).then((r) => r.json()),
      fetch(`jobs/${id}/api/metrics`).then((r) => r.json()),
    ]);
    return { id, job, metrics };
  }

  Promise.all(ids.map(load)).then((runs) => {
    document.getElementById('names').textContent = runs.map((r) => `#${r.id} ${r.job.name}`).join(' vs ');
    const tbody = document.querySelector('#outcomes tbody');
    for (const r of runs) {
      const s = r.job.summary || {};
      const tr = document.createElement('tr');
      for (const text of [`#${r.id} ${r.job.name}`, r.job.state, String(r.job.step),
        s.test_accuracy !== undefined ? s.test_accuracy.toFixed(4) : '–',
        s.samples_per_sec !== undefined ? s.samples_per_sec.toFixed(0) : '–',
        s.wall_seconds !== undefined ? `${s.wall_seconds.toFixed(1)} s` : '–']) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.appendChild(td);
      }
      tbody.appendChild(tr);
    }
    chart(document.getElementById('chart-loss'), runs, 'loss');
    chart(document.getElementById('chart-accuracy'), runs, 'accuracy');
  });
})();
