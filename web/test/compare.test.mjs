// Browser test of `cohort serve`'s comparison page: two finished jobs' curves overlaid.
//   node web/test/compare.test.mjs SERVER_URL JOB_A JOB_B SCREENSHOT.png
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const [server, a, b, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node compare.test.mjs SERVER_URL JOB_A JOB_B SCREENSHOT.png');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.COHORT_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // The jobs page lists both.
  await page.goto(server);
  await page.waitForSelector(`#jobs tr[data-id="${a}"]`, { timeout: 30_000 });
  await page.waitForSelector(`#jobs tr[data-id="${b}"]`, { timeout: 30_000 });
  await page.goto(`${server}compare?a=${a}&b=${b}`);
  await page.waitForFunction(() => document.querySelector('#chart-loss').dataset.series === '2',
    null, { timeout: 30_000 });
  const points = await page.$eval('#chart-loss', (el) => Number(el.dataset.points));
  assert.ok(points >= 4, `overlay has ${points} steps`);
  const legend = await page.$$eval('#chart-loss .u-legend .u-series th', (ths) => ths.map((t) => t.textContent));
  assert.ok(legend.some((t) => t.includes(`#${a} `)) && legend.some((t) => t.includes(`#${b} `)),
    `legend: ${legend}`);
  assert.equal(await page.$$eval('#outcomes tbody tr', (rows) => rows.length), 2);
  assert.deepEqual(errors, []);
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`ok: jobs ${a} and ${b} overlaid over ${points} steps; screenshot ${screenshot}`);
} catch (e) {
  console.error(`FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
