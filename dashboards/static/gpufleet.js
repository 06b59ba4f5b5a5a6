// gpufleet dashboard: sortable tables. Pages work without it; this only adds sorting by a click on a
// column header (numbers by their value, cells with data-sort by that).
"use strict";
(function () {
  function key(cell) {
    if (!cell) return "";
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const n = parseFloat(raw.replace(/[^0-9eE.+-]/g, ""));
    return raw !== "" && !isNaN(n) && /^[\s#+-]*[0-9.]/.test(raw) ? n : raw.toLowerCase();
  }
  function sortBy(table, index, th) {
    const body = table.tBodies[0];
    if (!body) return;
    const asc = !th.classList.contains("sort-asc");
    table.querySelectorAll("thead th").forEach(function (h) { h.classList.remove("sort-asc", "sort-desc"); });
    th.classList.add(asc ? "sort-asc" : "sort-desc");
    const rows = Array.from(body.rows);
    rows.sort(function (a, b) {
      const x = key(a.cells[index]), y = key(b.cells[index]);
      if (typeof x === "number" && typeof y === "number") return asc ? x - y : y - x;
      return asc ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable thead th").forEach(function (th) {
    th.style.cursor = "pointer";
    th.title = "sort";
    th.addEventListener("click", function () { sortBy(th.closest("table"), th.cellIndex, th); });
  });
})();

// An agent page's live power: each figure of the channel table follows the agent's stream
// (server-sent events of /api/agents/{name}/power), and the charts are redrawn from the page every
// few seconds. Without JavaScript the page shows the values it was drawn with.
(function () {
  const section = document.getElementById("live-power");
  if (!section || !window.EventSource) return;
  const status = document.getElementById("live-status");
  const fixed = function (v, unit, decimals) {
    return v === null || v === undefined ? "-" : v.toFixed(decimals) + " " + unit;
  };
  const clock = function (unix) {
    return new Date(unix * 1000).toISOString().slice(0, 19) + "Z";
  };
  let seen = 0;
  const events = new EventSource(section.dataset.stream);
  events.onmessage = function (e) {
    const s = JSON.parse(e.data);
    const key = s.source + "|" + s.pci_bus_id + "|" + s.label;
    let row = null;
    section.querySelectorAll("tr[data-channel]").forEach(function (r) {
      if (r.dataset.channel === key) row = r;
    });
    if (!row) return;
    const figures = {
      watts: fixed(s.watts, "W", 1), temp: fixed(s.temperature_c, "°C", 1),
      sclk: fixed(s.sclk_mhz, "MHz", 0), mclk: fixed(s.mclk_mhz, "MHz", 0),
      busy: fixed(s.utilization_pct, "%", 0), at: clock(s.wall_unix_s),
    };
    row.querySelectorAll("[data-fig]").forEach(function (cell) {
      cell.textContent = figures[cell.dataset.fig];
    });
    seen += 1;
    status.textContent = "live: " + seen + " sample" + (seen === 1 ? "" : "s") + " since this page opened (the charts below hold the serve's recent trace)";
  };
  events.addEventListener("end", function (e) {
    events.close();
    status.textContent = "stream ended: " + JSON.parse(e.data).error;
  });
  events.onerror = function () {
    status.textContent = "reconnecting to the stream…";
  };
  const charts = document.getElementById("live-charts");
  if (!charts) return;
  setInterval(function () {
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live-charts");
        if (fresh) charts.innerHTML = fresh.innerHTML;
      })
      .catch(function () {});
  }, 5000);
})();
