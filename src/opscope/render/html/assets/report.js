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

  // ---- the timeline: the compose layer's arrays (start/dur in ns after the step's start, depth, name and kind
  // indexes, lane) turned into flame-chart-js nodes, one collapsible lane per thread or stream. Nothing is
  // computed here but the library's shapes: the tree follows the depths the arrays carry.
  var KIND_COLOURS = { cpu_op: "#9ecae9", user_annotation: "#bab0ac", runtime: "#f58518", overhead: "#d0d0d0",
    other: "#d0d0d0", sync: "#b279a2", kernel: "#54a24b", memcpy: "#e45756", memset: "#ff9d98", comm: "#72b7b2" };

  function fmtMs(ms) {
    if (ms >= 1) { return ms.toFixed(3) + " ms"; }
    if (ms >= 0.001) { return (ms * 1000).toFixed(3) + " us"; }
    return Math.round(ms * 1e6) + " ns";
  }

  function stepNodes(data, step) {
    var lanes = step.lanes.map(function () { return []; });
    var stacks = step.lanes.map(function () { return []; });
    var levels = step.lanes.map(function () { return 0; });
    var nodes = new Array(step.start.length);
    for (var i = 0; i < step.start.length; i++) {
      var start = step.start[i], dur = step.dur[i], depth = step.depth[i], ln = step.lane[i];
      var node = { name: data.strings[step.name[i]], start: start / 1e6, duration: dur / 1e6,
                   type: data.kinds[step.kind[i]], index: i };
      var st = stacks[ln];
      while (st.length && (st[st.length - 1].depth >= depth || st[st.length - 1].end <= start)) { st.pop(); }
      if (st.length) {
        var parent = st[st.length - 1].node;
        (parent.children || (parent.children = [])).push(node);
      } else {
        lanes[ln].push(node);
      }
      st.push({ node: node, depth: depth, end: start + dur });
      levels[ln] = Math.max(levels[ln], st.length);
      nodes[i] = node;
    }
    return { lanes: lanes, levels: levels, nodes: nodes };
  }

  function drawStep(host, data, step) {
    var lib = window.flameChartJs;
    var box = document.createElement("div");
    box.className = "timeline-step";
    box.dataset.step = String(step.step);
    var title = document.createElement("h4");
    title.textContent = "step #" + step.step + " — " + step.label + " (" + fmtMs(step.dur_ns / 1e6) + ", " +
      step.drawn.toLocaleString("en-US") + " of " + step.events.toLocaleString("en-US") + " events drawn)";
    var canvas = document.createElement("canvas");
    var info = document.createElement("p");
    info.className = "timeline-info";
    info.setAttribute("aria-live", "polite");
    info.textContent = "click an event to see its launch or the work it launched";
    box.appendChild(title);
    box.appendChild(canvas);
    box.appendChild(info);
    host.appendChild(box);
    var tree = stepNodes(data, step);
    var partners = {};
    step.links.forEach(function (pair) {
      (partners[pair[0]] || (partners[pair[0]] = [])).push(pair[1]);
      (partners[pair[1]] || (partners[pair[1]] = [])).push(pair[0]);
    });
    var leftOut = {};
    step.left_out.forEach(function (x) { leftOut[x.lane] = x; });
    var plugins = [new lib.TimeGridPlugin()];
    unlimitedListeners(plugins[0]);
    var lanePlugins = [];
    step.lanes.forEach(function (lane, i) {
      var name = lane.name;
      if (leftOut[i]) {
        name += " · " + leftOut[i].events.toLocaleString("en-US") + " shorter events not drawn (" +
          fmtMs(leftOut[i].dur_ns / 1e6) + " in all)";
      }
      var plugin = new lib.FlameChartPlugin({ data: tree.lanes[i], colors: KIND_COLOURS, name: "lane" + i });
      plugin.laneIndex = i;
      lanePlugins.push(plugin);
      plugins.push(new lib.TogglePlugin(name), plugin);
    });
    var blockHeight = 16;
    var height = 30 + step.lanes.reduce(function (sum, _, i) {
      return sum + 17 + Math.max(1, tree.levels[i]) * (blockHeight + 1) + 2;
    }, 0);
    canvas.width = host.clientWidth || 900;
    canvas.height = Math.min(height, 4000);
    var laneOf = function (i) { return step.lanes[step.lane[i]].name; };
    var describe = function (i) {
      return data.strings[step.name[i]] + " (" + laneOf(i) + ", +" + fmtMs(step.start[i] / 1e6) + ", " +
        fmtMs(step.dur[i] / 1e6) + ")";
    };
    var linkText = function (i) {
      var others = partners[i] || [];
      if (!others.length) { return null; }
      var j = others[0];
      var device = step.lanes[step.lane[i]].device;
      var what = device ? "launched by " : "launched ";
      var more = others.length > 1 ? " and " + (others.length - 1) + " more" : "";
      var lag = device ? step.start[i] - step.start[j] : step.start[j] - step.start[i];
      return what + data.strings[step.name[j]] + " on " + laneOf(j) + more + " (" + fmtMs(lag / 1e6) +
        (device ? " before it started)" : " after the launch)");
    };
    var chart = new lib.FlameChartContainer({
      canvas: canvas,
      plugins: plugins,
      settings: {
        options: {
          timeUnits: "ms",
          tooltip: function (region, engine, mouse) {
            if (!region || !region.data || !mouse) { return; }
            var i = region.data.source.index;
            var fields = [{ text: data.strings[step.name[i]] },
                          { text: data.kinds[step.kind[i]] + " on " + laneOf(i) },
                          { text: "duration " + fmtMs(step.dur[i] / 1e6) + ", starts +" +
                                  fmtMs(step.start[i] / 1e6) + " into the step" }];
            var link = linkText(i);
            if (link) { fields.push({ text: link }); }
            engine.renderTooltipFromData(fields, mouse);
          },
        },
      },
    });
    // each lane as tall as its deepest nesting
    lanePlugins.forEach(function (p) {
      p.renderEngine.resize({ height: Math.max(1, tree.levels[p.laneIndex]) * (blockHeight + 1) + 2 });
    });
    chart.renderEngine.recalcChildrenLayout();
    chart.render();
    box.timelineChart = chart;  // the library's state, for whoever inspects the page

    function showView() {
      var engine = chart.renderEngine;
      box.dataset.viewStart = String(engine.positionX);
      box.dataset.viewEnd = String(engine.positionX + engine.getRealView());
    }
    function select(i) {
      var others = i === null ? [] : (partners[i] || []);
      lanePlugins.forEach(function (p) {
        var chosen = null;
        others.forEach(function (j) {
          if (step.lane[j] === p.laneIndex && !chosen) {
            chosen = p.flatTree.find(function (f) { return f.source === tree.nodes[j]; }) || null;
          }
        });
        if (chosen) { p.selectedRegion = { type: "node", data: chosen }; }
        else if (i === null || step.lane[i] !== p.laneIndex) { p.selectedRegion = null; }
      });
      box.dataset.selected = i === null ? "" : String(i);
      box.dataset.linked = others.join(",");
      if (i === null) {
        info.textContent = "click an event to see its launch or the work it launched";
      } else {
        var link = linkText(i);
        info.textContent = "selected: " + describe(i) + (link ? "; " + link + " (outlined in green)" : "");
      }
      chart.render();
    }
    lanePlugins.forEach(function (p) {
      p.on("select", function (event) {
        select(event && event.node ? event.node.source.index : null);
      });
    });
    ["wheel", "mouseup", "mousemove", "touchend"].forEach(function (name) {
      canvas.addEventListener(name, showView);
    });
    wireTouch(canvas, chart, showView);
    window.addEventListener("resize", function () {
      var width = host.clientWidth;
      if (width && width !== chart.renderEngine.width) { chart.resize(width, chart.renderEngine.height); }
    });
    showView();
    return chart;
  }

  // Each lane adds listeners to one shared emitter of the library's, whose event module warns past 10 of them.
  function unlimitedListeners(emitter) {
    for (var p = Object.getPrototypeOf(emitter); p; p = Object.getPrototypeOf(p)) {
      if (p.constructor && Object.prototype.hasOwnProperty.call(p.constructor, "defaultMaxListeners")) {
        p.constructor.defaultMaxListeners = Infinity;
        return;
      }
    }
  }

  // two fingers pinch to zoom, one finger drags (the library handles the wheel, trackpad pinches and the mouse)
  function wireTouch(canvas, chart, done) {
    var last = null;
    function state(e) {
      var r = canvas.getBoundingClientRect();
      var t = Array.prototype.map.call(e.touches, function (x) { return x.clientX - r.left; });
      return { x: t.length > 1 ? (t[0] + t[1]) / 2 : t[0], span: t.length > 1 ? Math.abs(t[0] - t[1]) : 0,
               n: t.length };
    }
    canvas.addEventListener("touchstart", function (e) { last = state(e); }, { passive: true });
    canvas.addEventListener("touchmove", function (e) {
      if (!last) { return; }
      e.preventDefault();
      var now = state(e), engine = chart.renderEngine;
      if (now.n > 1 && last.n > 1 && last.span > 0 && now.span > 0) {
        chart.interactionsEngine.changeZoom(engine.zoom * (1 - now.span / last.span), now.x);
      } else if (now.n === 1 && last.n === 1) {
        engine.tryToChangePosition((last.x - now.x) / engine.zoom);
      }
      last = now;
      chart.render();
      done();
    }, { passive: false });
    canvas.addEventListener("touchend", function () { last = null; }, { passive: true });
  }

  function drawTimelines() {
    document.querySelectorAll("[data-timeline]").forEach(function (el) {
      try {
        var data = JSON.parse(document.getElementById("timeline-data-" + el.dataset.timeline).textContent);
        data.steps.forEach(function (step) { drawStep(el, data, step); });
        el.dataset.rendered = "true";
      } catch (err) {
        el.dataset.rendered = "error";
        el.textContent = "the timeline could not be drawn: " + err;
        el.className += " chart-error";
        console.error(err);
      }
    });
  }

  wireTables();
  drawCharts();
  drawTimelines();
})();
