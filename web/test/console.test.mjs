// Browser test of the live console: headless Chromium (Debian's) driven by playwright-core loads
// the console of a running job and checks that it updates live — the curves gain points and the
// worker rows' steps advance without a reload — then saves a screenshot.
//   node web/test/console.test.mjs URL SCREENSHOT.png [WORKERS]
// Exits 0 on success; on failure prints what was expected and what the page showed.
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const [url, screenshot, workersArg] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error('usage: node console.test.mjs URL SCREENSHOT.png [WORKERS]');
  process.exit(2);
}
const workers = Number(workersArg || 2);
const timeout = 90_000;  // generous: the machine may be busy training

const browser = await chromium.launch({
  executablePath: process.env.COHORT_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
let page;
try {
  page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console error: ${m.text()}`); });

  await page.goto(url, { waitUntil: 'load' });
  // uPlot (from npm, served by the binary) drew its canvases.
  await page.waitForSelector('#chart-loss canvas', { timeout });

  // One row per worker, each training.
  await page.waitForFunction((n) => {
    const rows = [...document.querySelectorAll('#workers tbody tr')];
    return rows.length === n &&
      rows.every((r) => r.querySelector('td[data-field="state"]')?.textContent === 'training');
  }, workers, { timeout });
  const stepsOf = () => page.$$eval('#workers tbody tr',
    (rows) => rows.map((r) => Number(r.querySelector('td[data-field="step"]').textContent)));
  const pointsOf = () => page.$eval('#chart-loss', (el) => Number(el.dataset.points));

  await page.waitForFunction(() => Number(document.querySelector('#chart-loss').dataset.points) > 0,
    null, { timeout });
  const steps0 = await stepsOf();
  const points0 = await pointsOf();
  const title0 = await page.title();

  // Live: more points on the curve and every worker's step advancing, with no navigation.
  await page.waitForFunction((p) => Number(document.querySelector('#chart-loss').dataset.points) >= p + 3,
    points0, { timeout });
  await page.waitForFunction((s) => {
    const now = [...document.querySelectorAll('#workers tbody tr')]
      .map((r) => Number(r.querySelector('td[data-field="step"]').textContent));
    return now.every((v, i) => v > s[i]);
  }, steps0, { timeout });
  const steps1 = await stepsOf();
  const points1 = await pointsOf();
  assert.ok(points1 > points0, `loss curve did not gain points: ${points0} -> ${points1}`);
  steps1.forEach((s, i) => assert.ok(s > steps0[i], `worker ${i} step did not advance: ${steps0[i]} -> ${s}`));
  assert.equal(await pointsOf() > 0 && await page.$eval('#chart-accuracy', (el) => Number(el.dataset.points) > 0), true,
    'accuracy curve has no points');
  assert.match(title0, /running/, `title: ${title0}`);
  assert.equal(await page.$eval('#connection', (el) => el.textContent), 'live');
  const events = await page.$$eval('#events tbody tr td:nth-child(2)', (tds) => tds.map((t) => t.textContent));
  assert.ok(events.includes('job_started'), `events: ${events}`);
  assert.ok(events.filter((e) => e === 'worker_started').length === workers, `events: ${events}`);
  assert.deepEqual(errors, []);

  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`ok: loss curve ${points0} -> ${points1} points, worker steps ${steps0} -> ${steps1}; ` +
              `screenshot ${screenshot}`);
} catch (e) {
  console.error(`FAILED: ${e.message}`);
  if (page) {
    try {
      await page.screenshot({ path: screenshot, fullPage: true });
      console.error('page text:\n' + (await page.innerText('body')).slice(0, 3000));
    } catch (_) { /* the page is gone */ }
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
