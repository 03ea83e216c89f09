// Cohort's web console: one job's page. It listens to the server's event stream (api/stream):
// each "update" carries the job, every worker's row, and the progress records and events added
// since the previous update; the page applies it in place, without reloading.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);

  const fmt = {
    num(v, digits) { return v === undefined || v === null ? '–' : Number(v).toFixed(digits); },
    duration(s) {
      if (s === undefined || s === null || !isFinite(s) || s < 0) return '–';
      s = Math.round(s);
      const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
      const two = (n) => String(n).padStart(2, '0');
      return h > 0 ? `${h}:${two(m)}:${two(r)}` : `${m}:${two(r)}`;
    },
    bytes(b) {
      if (b === undefined || b === null) return '–';
      const units = ['B', 'KB', 'MB', 'GB', 'TB'];
      let i = 0;
      while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
      return `${b.toFixed(i ? 1 : 0)} ${units[i]}`;
    },
    time(t) { return new Date(t * 1000).toLocaleTimeString(); },
  };

  // One chart: a uPlot line over training steps; data-points on its element counts the points.
  class Curve {
    constructor(el, label, color) {
      this.el = el;
      this.data = [[], []];
      this.plot = new uPlot({
        width: Math.max(300, el.clientWidth), height: 220,
        scales: { x: { time: false } },
        axes: [{ label: 'step' }, { size: 70 }],
        series: [{ label: 'step' }, { label, stroke: color, width: 2, points: { show: false } }],
        legend: { show: true },
      }, this.data, el);
    }
    reset() { this.data = [[], []]; this.plot.setData(this.data); this.el.dataset.points = '0'; }
    add(x, y) {
      if (y === undefined || y === null) return;
      this.data[0].push(x);
      this.data[1].push(y);
    }
    draw() { this.plot.setData(this.data); this.el.dataset.points = String(this.data[0].length); }
    resize() { this.plot.setSize({ width: Math.max(300, this.el.clientWidth), height: 220 }); }
  }

  const curves = {
    loss: new Curve($('chart-loss'), 'loss', '#2f6fdf'),
    accuracy: new Curve($('chart-accuracy'), 'accuracy', '#16a34a'),
    rate: new Curve($('chart-rate'), 'samples/s', '#c2410c'),
  };
  window.addEventListener('resize', () => Object.values(curves).forEach((c) => c.resize()));

  function setState(el, state) {
    el.textContent = state;
    el.className = `state ${state}`;
  }

  function showJob(j) {
    document.title = `${j.name} · ${j.state} · Cohort`;
    $('job-name').textContent = j.name;
    setState($('job-state'), j.state);
    $('job-step').textContent = j.total_steps ? `${j.step} / ${j.total_steps}` : String(j.step);
    $('job-epoch').textContent = j.epochs ? `${(j.epoch || 0) + 1} / ${j.epochs}` : '–';
    $('job-loss').textContent = fmt.num(j.loss, 4);
    $('job-accuracy').textContent = fmt.num(j.accuracy, 4);
    $('job-rate').textContent = fmt.num(j.samples_per_sec, 0);
    $('job-elapsed').textContent = fmt.duration(j.elapsed_seconds);
    $('job-eta').textContent = fmt.duration(j.eta_seconds);
    $('job-workers').textContent = `${j.joined} / ${j.world_size} joined` +
      (j.members !== undefined && j.members !== j.world_size ? `, ${j.members} training` : '');
    $('progress-bar').style.width = `${Math.round(100 * (j.progress || 0))}%`;
    if ($('job-config').textContent !== j.config) $('job-config').textContent = j.config;
    const result = $('job-result');
    if (j.summary) {
      const s = j.summary;
      result.hidden = false;
      result.textContent = s.error ? `${j.state}: ${s.error}` :
        `${j.state}: test accuracy ${fmt.num(s.test_accuracy, 4)}, ` +
        `${fmt.num(s.samples_per_sec, 0)} samples/s, ${fmt.duration(s.wall_seconds)}`;
    }
  }

  function cell(tr, field, text) {
    let td = tr.querySelector(`td[data-field="${field}"]`);
    if (!td) { td = document.createElement('td'); td.dataset.field = field; tr.appendChild(td); }
    if (td.textContent !== text) td.textContent = text;
    return td;
  }

  function showWorkers(rows) {
    const body = document.querySelector('#workers tbody');
    for (const w of rows) {
      let tr = body.querySelector(`tr[data-rank="${w.rank}"]`);
      if (!tr) { tr = document.createElement('tr'); tr.dataset.rank = w.rank; body.appendChild(tr); }
      cell(tr, 'rank', w.replaces === undefined ? String(w.rank) : `${w.rank} (for ${w.replaces})`);
      cell(tr, 'host', w.host || '–');
      cell(tr, 'pid', w.pid ? String(w.pid) : '–');
      const st = cell(tr, 'state', w.state);
      if (!st.firstElementChild || st.firstElementChild.textContent !== w.state) {
        const badge = document.createElement('span');
        badge.className = `state ${w.state}`;
        badge.textContent = w.state;
        st.replaceChildren(badge);
      }
      cell(tr, 'step', w.step === undefined ? '–' : String(w.step));
      cell(tr, 'step_time', w.step_time === undefined ? '–' : `${(1000 * w.step_time).toFixed(1)} ms`);
      cell(tr, 'comm_share', w.comm_share === undefined ? '–' : `${(100 * w.comm_share).toFixed(0)}%`);
      cell(tr, 'bytes_sent', fmt.bytes(w.bytes_sent));
      cell(tr, 'staleness', w.staleness === undefined ? '–' : `${w.staleness} steps`);
      cell(tr, 'heartbeat', w.last_heartbeat === null || w.last_heartbeat === undefined ? '–' :
        `${fmt.num(w.heartbeat_age_seconds, 1)} s ago`);
    }
  }

  function showServers(rows) {
    $('servers-section').hidden = !rows || rows.length === 0;
    const body = document.querySelector('#servers tbody');
    for (const s of rows || []) {
      let tr = body.querySelector(`tr[data-server="${s.server}"]`);
      if (!tr) { tr = document.createElement('tr'); tr.dataset.server = s.server; body.appendChild(tr); }
      cell(tr, 'server', String(s.server));
      cell(tr, 'address', s.address || '–');
      cell(tr, 'pid', s.pid ? String(s.pid) : '–');
      const st = cell(tr, 'state', s.state);
      if (!st.firstElementChild || st.firstElementChild.textContent !== s.state) {
        const badge = document.createElement('span');
        badge.className = `state ${s.state === 'up' ? 'training' : 'failed'}`;
        badge.textContent = s.state;
        st.replaceChildren(badge);
      }
      cell(tr, 'primary_of', (s.primary_of || []).join(', ') || '–');
      cell(tr, 'backup_of', (s.backup_of || []).join(', ') || '–');
      cell(tr, 'heartbeat', s.heartbeat_age_seconds === undefined ? '–' :
        `${fmt.num(s.heartbeat_age_seconds, 1)} s ago`);
    }
  }

  function addEvents(events) {
    const body = document.querySelector('#events tbody');
    for (const e of events) {
      const tr = document.createElement('tr');
      if (/fail|error|lost|killed/.test(e.event) || e.error) tr.className = 'bad';
      const details = Object.entries(e).filter(([k, v]) => k !== 'time' && k !== 'event' && v !== '')
        .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join('  ');
      for (const text of [fmt.time(e.time), e.event, details]) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.appendChild(td);
      }
      body.prepend(tr);
    }
  }

  function addMetrics(records) {
    for (const m of records) {
      curves.loss.add(m.step, m.loss);
      curves.accuracy.add(m.step, m.accuracy);
      curves.rate.add(m.step, m.samples_per_sec);
    }
    if (records.length) Object.values(curves).forEach((c) => c.draw());
  }

  function reset() {
    Object.values(curves).forEach((c) => c.reset());
    document.querySelector('#events tbody').replaceChildren();
  }

  let fresh = true;  // the next update starts from the beginning (a new stream)
  function apply(d) {
    if (fresh) { reset(); fresh = false; }
    showJob(d.job);
    showWorkers(d.workers);
    showServers(d.servers);
    addMetrics(d.metrics);
    addEvents(d.events);
  }

  const conn = $('connection');
  const stream = new EventSource('api/stream');
  stream.addEventListener('open', () => {
    fresh = true;
    conn.textContent = 'live';
    conn.className = 'connection';
  });
  stream.addEventListener('update', (e) => apply(JSON.parse(e.data)));
  stream.addEventListener('error', () => {
    conn.textContent = 'disconnected (the job has ended or the server is gone); retrying…';
    conn.className = 'connection lost';
  });
})();
