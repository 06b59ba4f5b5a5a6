#!/usr/bin/env python3
"""Layout checks of the dashboard's pages, measured in Chromium: what a person sees drawn over
something else, or cut.

- Table cells: no text of a cell drawn outside the cell's box (over the next column's text).
- Charts (inline SVG): no two labels overlapping, no label cut by the chart's edge, no legend
  box over a plotted line, and the tick labels of an axis distinct.

dashboard_test.py calls `check_page` on every page it loads. Standalone, against a running serve:
    layout.py http://127.0.0.1:8787 /compare /devices/local/cpu:0
prints what it finds and exits 1 when anything is found.
"""
import shutil
import sys
import tempfile

# Collects the layout faults of the page as short strings (JavaScript, run in the page).
MEASURE = r"""
const faults = [];
const short = (s) => (s || '').replace(/\s+/g, ' ').trim().slice(0, 70);
const inside = (r, box, slack) => r.left >= box.left - slack && r.right <= box.right + slack
    && r.top >= box.top - slack && r.bottom <= box.bottom + slack;
const overlap = (a, b) => Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left))
    * Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
// 1. Text of a table cell outside its cell.
for (const cell of document.querySelectorAll('table th, table td')) {
  const box = cell.getBoundingClientRect();
  if (box.width === 0) continue;
  const range = document.createRange();
  range.selectNodeContents(cell);
  for (const r of range.getClientRects()) {
    if (r.width > 0 && r.height > 0 && !inside(r, box, 1)) {
      faults.push(`cell text runs outside its cell by ${Math.round(Math.max(r.right - box.right, box.left - r.left))} px: "${short(cell.textContent)}"`);
      break;
    }
  }
}
// 2. Charts.
for (const svg of document.querySelectorAll('svg')) {
  const sbox = svg.getBoundingClientRect();
  if (sbox.width === 0) continue;
  const name = svg.getAttribute('aria-label') || svg.getAttribute('class') || 'chart';
  const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim() !== '');
  const rects = texts.map(t => t.getBoundingClientRect());
  texts.forEach((t, i) => {
    if (!inside(rects[i], sbox, 1)) faults.push(`${short(name)}: label "${short(t.textContent)}" is cut by the chart's edge`);
  });
  for (let i = 0; i < texts.length; i++) {
    for (let j = i + 1; j < texts.length; j++) {
      const area = overlap(rects[i], rects[j]);
      if (area > 4) faults.push(`${short(name)}: labels "${short(texts[i].textContent)}" and "${short(texts[j].textContent)}" overlap`);
    }
  }
  // A legend (a group or box of class legend) over a plotted line.
  for (const legend of svg.querySelectorAll('.legend-box')) {
    const lbox = legend.getBoundingClientRect();
    for (const line of svg.querySelectorAll('.roof, .series')) {
      // A line's own box may include the legend's area without crossing it: sample its points.
      const len = line.getTotalLength ? line.getTotalLength() : 0;
      const ctm = line.getScreenCTM();
      for (let k = 0; k <= 40 && len > 0; k++) {
        const p = line.getPointAtLength(len * k / 40).matrixTransform(ctm);
        if (p.x > lbox.left && p.x < lbox.right && p.y > lbox.top && p.y < lbox.bottom) {
          faults.push(`${short(name)}: the legend covers the line "${short(line.getAttribute('data-name') || line.getAttribute('class'))}"`);
          k = 41;
        }
      }
    }
  }
  // Tick labels of one axis distinct.
  for (const axis of ['tick-x', 'tick-y']) {
    const labels = [...svg.querySelectorAll('text.' + axis)].map(t => t.textContent.trim());
    const seen = new Set();
    for (const l of labels) {
      if (seen.has(l)) { faults.push(`${short(name)}: the ${axis === 'tick-x' ? 'x' : 'y'} axis repeats the tick "${l}"`); break; }
      seen.add(l);
    }
  }
}
return faults;
"""


def check_page(driver):
    """The layout faults of the page the driver shows, as a list of strings."""
    return driver.execute_script(MEASURE)


def browser(js=True):
    """Headless Chromium at 1400 px wide, JavaScript on or off, with the browser's log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for a in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--no-first-run", "--window-size=1400,1000",
              f"--user-data-dir={tempfile.mkdtemp(prefix='gpufleet-chromium-')}"]:
        opts.add_argument(a)
    if not js:
        opts.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Debian's chromedriver, never one Selenium Manager would download.
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)


def main():
    base, paths = sys.argv[1].rstrip("/"), sys.argv[2:] or ["/"]
    d = browser()
    found = 0
    try:
        for p in paths:
            d.get(base + p)
            faults = check_page(d)
            found += len(faults)
            print(f"{p}: {len(faults)} layout fault(s)")
            for f in faults:
                print(f"  {f}")
    finally:
        d.quit()
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
