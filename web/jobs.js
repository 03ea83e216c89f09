// The jobs page of `cohort serve`: every job with its state and outcome, refreshed every two
// seconds; two ticked finished jobs open the comparison page.
(function () {
  'use strict';
  const body = document.querySelector('#jobs tbody');
  const button = document.getElementById('compare');
  const picked = new Set();
  const finished = (s) => s === 'completed' || s === 'failed' || s === 'cancelled';
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : '–');

  function row(j) {
    let tr = body.querySelector(`tr[data-id="${j.id}"]`);
    if (!tr) {
      tr = document.createElement('tr');
      tr.dataset.id = j.id;
      tr.innerHTML = '<td><input type="checkbox"></td>' + '<td></td>'.repeat(9);
      tr.querySelector('input').addEventListener('change', (e) => {
        if (e.target.checked) picked.add(j.id); else picked.delete(j.id);
        button.disabled = picked.size !== 2;
      });
    }
    const td = tr.querySelectorAll('td');
    const s = j.summary || {};
    const end = j.finished || (j.started ? Date.now() / 1000 : 0);
    const cells = [String(j.id), j.name, j.state, String(j.workers), when(j.submitted),
      j.started ? `${Math.max(0, Math.round(end - j.started))} s` : '–',
      s.test_accuracy !== undefined ? s.test_accuracy.toFixed(4) : '–',
      s.samples_per_sec !== undefined ? s.samples_per_sec.toFixed(0) : '–'];
    cells.forEach((text, i) => { if (td[i + 1].textContent !== text) td[i + 1].textContent = text; });
    td[3].innerHTML = '';
    const badge = document.createElement('span');
    badge.className = `state ${j.state}`;
    badge.textContent = j.state;
    td[3].appendChild(badge);
    td[2].innerHTML = '';
    const a = document.createElement('a');
    a.href = `jobs/${j.id}/`;
    a.textContent = j.name;
    td[2].appendChild(a);
    td[9].textContent = j.error || '';
    tr.querySelector('input').disabled = !finished(j.state);
    return tr;
  }

  async function refresh() {
    try {
      const jobs = await (await fetch('api/jobs')).json();
      const rows = jobs.map(row);
      body.replaceChildren(...rows);
    } catch (e) { /* the server restarts: try again */ }
  }
  button.addEventListener('click', () => {
    const [a, b] = [...picked];
    location.href = `compare?a=${a}&b=${b}`;
  });
  refresh();
  setInterval(refresh, 2000);
})();
