// The report's charts (rlscope_ray/report): draws every .chart[data-chart] from the
// JSON in #report-data, keyed by the container's data-chart, and sets
// document.body.dataset.rendered to the number drawn. DOM APIs only
// (textContent, setAttribute), never innerHTML, so data strings cannot become
// markup. Inlined into the page, which must stay one self-contained file.
"use strict";
{  // a block, not a function: what it declares stays out of the page's globals
  const NS = "http://www.w3.org/2000/svg";
  const W = 960, LABEL = 250, RIGHT = 20;
  const data = JSON.parse(document.getElementById("report-data").textContent);

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", attrs || {}, parent); t.setAttribute("x", x); t.setAttribute("y", y);
    t.textContent = s; return t;
  }
  function title(parent, s) { el("title", {}, parent).textContent = s; }
  function ms(v) { return v.toFixed(3) + " ms"; }
  function svg(container, height) {
    return el("svg", {width: W, height: height, viewBox: "0 0 " + W + " " + height}, container);
  }
  function ticks(max) {
    if (!(max > 0)) return [0];
    var raw = max / 5, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p, out = [];
    for (var i = 0; i * step <= max * 1.0001; i++) out.push(i * step);
    return out;
  }
  // Vertical grid lines and labels at the top; returns the x of a value.
  function axis(s, max, top, bottom, unit) {
    var scale = max > 0 ? (W - LABEL - RIGHT) / max : 0, g = el("g", {"class": "axis"}, s);
    ticks(max).forEach(function (v) {
      var x = LABEL + v * scale;
      el("line", {x1: x, x2: x, y1: top - 4, y2: bottom, "class": "grid"}, g);
      text(g, x, top - 8, +v.toPrecision(6) + unit, {"text-anchor": "middle"});
    });
    return function (v) { return v * scale; };
  }

  function breakdown(c, d) {
    var rowH = 18, gap = 7, top = 26, h = top + d.rows.length * (rowH + gap) + 4;
    var s = svg(c, h), max = 0;
    var defs = el("defs", {}, s), hatch = "hatch-" + c.getAttribute("data-chart");
    var pat = el("pattern", {id: hatch, width: 5, height: 5, patternUnits: "userSpaceOnUse",
                             patternTransform: "rotate(45)"}, defs);
    el("rect", {width: 5, height: 5, fill: "#ddd"}, pat);
    el("rect", {width: 2, height: 5, fill: "#999"}, pat);
    d.rows.forEach(function (r) {
      var sum = r.values.reduce(function (a, b) { return a + b; }, 0); if (sum > max) max = sum;
    });
    var x = axis(s, max, top, h - 4, " ms");
    d.rows.forEach(function (r, i) {
      var y = top + i * (rowH + gap), at = LABEL, g = el("g", {"class": "bar"}, s);
      title(text(g, LABEL - 6, y + rowH - 5, r.label, {"text-anchor": "end"}), r.title);
      r.values.forEach(function (v, k) {
        if (!(v > 0)) return;
        var kind = d.kinds[k], w = Math.max(x(v), 0.5);
        var rect = el("rect", {x: at, y: y, width: w, height: rowH, "class": "seg seg-" + kind.key}, g);
        if (kind.key === "overhead") rect.setAttribute("fill", "url(#" + hatch + ")");
        if (kind.key === "idle") rect.setAttribute("stroke", "#ccc");
        title(rect, kind.label + ": " + ms(v) + " (" + r.title + ")");
        at += w;
      });
    });
  }

  function criticalPath(c, d) {
    var rowH = 16, gap = 6, top = 26, h = top + d.segments.length * (rowH + gap) + 4;
    var s = svg(c, h), max = d.step_ms;
    d.segments.forEach(function (g) { if (g.begin + g.duration > max) max = g.begin + g.duration; });
    var x = axis(s, max, top, h - 4, " ms");
    d.segments.forEach(function (g, i) {
      var y = top + i * (rowH + gap), x0 = LABEL + x(g.begin), w = Math.max(x(g.duration), 1);
      var grp = el("g", {"class": "segment"}, s);
      var rect = el("rect", {x: x0, y: y, width: w, height: rowH,
                             "class": g.critical ? "cp-seg" : "cp-nocrit"}, grp);
      title(rect, g.title);
      // The label goes right of the bar when it fits, else left of it.
      var right = x0 + w + 4 + g.label.length * 6.3 <= W;
      text(grp, right ? x0 + w + 4 : x0 - 4, y + rowH - 4, g.label,
           right ? {} : {"text-anchor": "end"});
    });
  }

  function gpuUtil(c, d) {
    var barH = 10, gap = 12, top = 26, h = top + d.rows.length * (2 * barH + gap) + 4;
    var s = svg(c, h), x = axis(s, 100, top, h - 4, "%");
    d.rows.forEach(function (r, i) {
      var y = top + i * (2 * barH + gap), g = el("g", {"class": "pair"}, s);
      title(text(g, LABEL - 6, y + barH + 4, r.label, {"text-anchor": "end"}), r.title);
      [["gpu-busy", r.busy, "GPU busy"], ["gpu-naive", r.naive, "naive"]].forEach(function (b, k) {
        var rect = el("rect", {x: LABEL, y: y + k * barH, width: Math.max(x(Math.min(b[1], 100)), 0.5),
                               height: barH - 1, "class": b[0]}, g);
        title(rect, b[2] + ": " + b[1].toFixed(1) + "% (" + r.title + ")");
        text(g, LABEL + x(Math.min(b[1], 100)) + 4, y + k * barH + barH - 2, b[1].toFixed(1) + "%");
      });
    });
  }

  const draw = {"breakdown-chart": breakdown, "attribution-chart": breakdown, "critical-path-chart": criticalPath,
                "gpu-util-chart": gpuUtil};
  let drawn = 0;
  Array.prototype.forEach.call(document.querySelectorAll(".chart[data-chart]"), function (c) {
    var id = c.getAttribute("data-chart"), d = data.charts[id], fn = null;
    for (var cls in draw) if (c.classList.contains(cls)) fn = draw[cls];
    try {
      if (!fn || !d) throw new Error("no drawer or data for chart " + id);
      fn(c, d);
      drawn++;
    } catch (e) {
      window.rlsShowError("chart " + id + ": " + (e && e.message ? e.message : e));
    }
  });
  document.body.dataset.rendered = String(drawn);
}
