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
