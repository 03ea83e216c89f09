// The report of `cohort simulate --html`: REPORT is the same object as `--json` prints.
(function () {
  "use strict";
  const worlds = REPORT.worlds;
  const xs = worlds.map((w) => w.workers);
  document.getElementById("job").textContent = REPORT.job;
  document.getElementById("profile").textContent =
    REPORT.profile + (REPORT.profile_sources.length ? " (" + REPORT.profile_sources.join("; ") + ")" : "");
  document.getElementById("note").textContent = REPORT.note;

  // One curve per configuration: its value at each world where it was simulated.
  const configs = new Map();
  worlds.forEach((w, i) => {
    w.rows.forEach((r) => {
      const name = r.varied === "job" ? "job: " + r.choice.description : r.choice.description;
      if (!configs.has(name)) configs.set(name, new Array(worlds.length).fill(null));
      configs.get(name)[i] = r;
    });
  });
  const fastest = worlds.map((w) => w.rows[w.best]);
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf"];
  const width = Math.min(1100, window.innerWidth - 60);
  const logX = { distr: 3, log: 2 };

  function chart(el, series, data, yLabel) {
    return new uPlot({
      width, height: 360,
      scales: { x: logX },
      axes: [{ label: "workers" }, { label: yLabel }],
      series: [{ label: "workers" }].concat(series),
    }, [xs].concat(data), document.getElementById(el));
  }

  const eff = [], effData = [];
  let k = 0;
  for (const [name, rows] of configs) {
    if (rows.filter((r) => r).length < 2 && !name.startsWith("job:")) continue;
    eff.push({ label: name, stroke: palette[k++ % palette.length], width: name.startsWith("job:") ? 3 : 1.5,
               spanGaps: true });
    effData.push(rows.map((r) => (r ? r.prediction.efficiency : null)));
  }
  eff.push({ label: "fastest at each size", stroke: "#000", dash: [6, 4], width: 2 });
  effData.push(fastest.map((r) => r.prediction.efficiency));
  chart("chart-efficiency", eff, effData, "efficiency");

  const job = worlds.map((w) => w.rows[0].prediction);
  const best = fastest.map((r) => r.prediction);
  const ms = (v) => v * 1e3;
  chart("chart-breakdown", [
    { label: "job: step", stroke: "#1f77b4", width: 3 },
    { label: "job: compute", stroke: "#2ca02c" },
    { label: "job: exposed communication", stroke: "#d62728" },
    { label: "fastest: step", stroke: "#000", dash: [6, 4], width: 2 },
    { label: "fastest: exposed communication", stroke: "#ff7f0e", dash: [6, 4] },
  ], [job.map((p) => ms(p.step_s)), job.map((p) => ms(p.compute_s)), job.map((p) => ms(p.exposed_comm_s)),
      best.map((p) => ms(p.step_s)), best.map((p) => ms(p.exposed_comm_s))], "ms");

  const tables = document.getElementById("tables");
  for (const w of worlds) {
    const h = document.createElement("h2");
    h.textContent = w.workers + " workers on " + w.hosts + " host" + (w.hosts === 1 ? "" : "s");
    tables.appendChild(h);
    const t = document.createElement("table");
    t.innerHTML = "<thead><tr><th>varied</th><th>configuration</th><th>step ms</th><th>compute ms</th>" +
      "<th>exposed ms</th><th>link MB/step</th><th>samples/s</th><th>efficiency</th><th>closed form ms</th></tr></thead>";
    const body = document.createElement("tbody");
    w.rows.forEach((r, i) => {
      const p = r.prediction;
      const tr = document.createElement("tr");
      if (i === w.best) tr.className = "best";
      const cells = [r.varied, r.choice.description, ms(p.step_s).toFixed(2), ms(p.compute_s).toFixed(2),
                     ms(p.exposed_comm_s).toFixed(2), (p.link_bytes / 1e6).toFixed(2), p.samples_per_s.toFixed(0),
                     p.efficiency.toFixed(3), ms(p.closed_form_step_s).toFixed(2)];
      cells.forEach((c, j) => {
        const td = document.createElement("td");
        td.textContent = c;
        if (j === 1) td.className = "config";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    t.appendChild(body);
    tables.appendChild(t);
  }
})();
