// opscope report: draw the charts from their inline specs, make tables sortable and filterable.
// Runs offline: no request leaves the page (its Content-Security-Policy forbids them).
"use strict";
(function () {
  function drawCharts() {
    var charts = document.querySelectorAll("[data-chart]");
    charts.forEach(function (el) {
      var specEl = document.getElementById("spec-" + el.dataset.chart);
      var spec = JSON.parse(specEl.textContent);
      window.vegaEmbed(el, spec, { actions: false, renderer: "svg" })
        .then(function () { el.dataset.rendered = "true"; })
        .catch(function (err) {
          el.dataset.rendered = "error";
          el.textContent = "this chart could not be drawn: " + err;
          el.className += " chart-error";
          console.error(err);
        });
    });
  }

  function cellKey(td, numeric) {
    var raw = td.getAttribute("data-value");
    if (numeric) {
      var n = parseFloat(raw);
      return isNaN(n) ? -Infinity : n;
    }
    return (raw || td.textContent).toLowerCase();
  }

  function sortBy(table, col, th) {
    var numeric = th.classList.contains("num");
    var order = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
    if (!th.hasAttribute("aria-sort") && !numeric) { order = "ascending"; }
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", order);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = order === "ascending" ? 1 : -1;
    rows.sort(function (a, b) {
      var x = cellKey(a.cells[col], numeric), y = cellKey(b.cells[col], numeric);
      return x < y ? -sign : x > y ? sign : 0;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  function showCount(table) {
    var block = table.closest(".table-block");
    var out = block && block.querySelector(".shown-rows");
    if (!out) { return; }
    var total = table.tBodies[0].rows.length;
    var visible = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; }).length;
    out.textContent = visible === total ? "" : visible + " of " + total + " rows match";
  }

  function wireTables() {
    document.querySelectorAll("table.data").forEach(function (table) {
      table.querySelectorAll("th").forEach(function (th, col) {
        th.addEventListener("click", function () { sortBy(table, col, th); });
      });
    });
    document.querySelectorAll("input.filter").forEach(function (input) {
      var table = document.getElementById(input.dataset.table);
      input.addEventListener("input", function () {
        var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
        Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
          var text = r.textContent.toLowerCase();
          r.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
        });
        showCount(table);
      });
    });
  }

  wireTables();
  drawCharts();
})();
