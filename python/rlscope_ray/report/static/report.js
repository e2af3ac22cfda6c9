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

  // A sub-task's colour class (the palette's in turn; -1: outside every one).
  function sub(k) { return k >= 0 ? "seg-sub-" + (k % 10) : "seg-sub-none"; }
  // Boxes of one lane that overlap (its threads' ranges) go one below
  // another, in up to 4 rows; returns each box's row and the rows used.
  function pack(boxes) {
    var ends = [], rows = [];
    boxes.forEach(function (b) {
      var r = 0;
      while (r < ends.length && ends[r] > b[0] + 1e-9) r++;
      if (r >= 4) r = 3;
      ends[r] = Math.max(ends[r] || 0, b[0] + b[1]);
      rows.push(r);
    });
    return {rows: rows, n: Math.max(1, ends.length)};
  }

  // A step's timeline picture: the critical path as a band, then one lane
  // per process (class "lane"; GPU lanes "gpu-lane"; merged ones also
  // "aggregate"), grouped by node, each box a range coloured by the sub-task
  // it began in, outlined when it is on the critical path.
  function timeline(c, d) {
    var ROW = 12, GAP = 5, HEAD = 16, top = 28, y = top, bandY = top, layout = [], lastNode = null;
    y += ROW + GAP + 2;
    d.lanes.forEach(function (lane) {
      var head = null;
      if (lane.node !== lastNode) { head = y; y += HEAD; lastNode = lane.node; }
      var p = pack(lane.boxes);
      layout.push({head: head, y: y, p: p});
      y += p.n * ROW + GAP;
    });
    var h = y + 4, s = svg(c, h), x = axis(s, d.step_ms, top, h - 4, " ms");
    var band = el("g", {"class": "cp-band"}, s);
    text(band, LABEL - 6, bandY + ROW - 2, "critical path", {"text-anchor": "end"});
    d.band.forEach(function (g) {
      title(el("rect", {x: LABEL + x(g.begin), y: bandY, width: Math.max(x(g.duration), 1), height: ROW,
                        "class": "box " + sub(g.sub)}, band), g.label + ", " + ms(g.duration));
    });
    d.lanes.forEach(function (lane, i) {
      var L = layout[i];
      if (L.head !== null) text(s, 4, L.head + 11, "node " + lane.node, {"class": "node-label"});
      var cls = (lane.gpu ? "gpu-lane" : "lane") + (lane.aggregate ? " aggregate" : "");
      var g = el("g", {"class": cls, "data-process": lane.process || lane.label}, s);
      title(text(g, LABEL - 6, L.y + ROW - 2, lane.label, {"text-anchor": "end"}), lane.title);
      el("rect", {x: LABEL, y: L.y - 1, width: W - LABEL - RIGHT, height: L.p.n * ROW + 1, "class": "lane-bg"}, g);
      lane.boxes.forEach(function (b, k) {
        var r = el("rect", {x: LABEL + x(b[0]), y: L.y + L.p.rows[k] * ROW, width: Math.max(x(b[1]), 0.75),
                            height: ROW - 1, "class": "box " + (lane.gpu ? "gpu" : sub(b[3])) +
                            (b[4] ? " critical" : "")}, g);
        title(r, b[2] + (b[3] >= 0 ? " (in " + d.subtasks[b[3]] + ")" : "") + ": begins at " + ms(b[0]) +
                 ", lasts " + ms(b[1]) + (b[4] ? "; on the critical path" : "") + " \u2014 " + lane.title);
      });
    });
  }

  // Steps over time: per written step (class "trend-step", data-step) the
  // sub-tasks' time stacked, and the step time raw and corrected as points
  // (class "point") on two lines.
  function trend(c, d) {
    var top = 14, H = 220, n = d.steps.length, max = 0;
    d.steps.forEach(function (p) {
      var sum = p.parts.reduce(function (a, b) { return a + b; }, 0);
      max = Math.max(max, sum, p.raw, p.corrected || 0);
    });
    var h = top + H + 34, s = svg(c, h), y0 = top + H, scale = max > 0 ? H / max : 0, axisG = el("g", {"class": "axis"}, s);
    ticks(max).forEach(function (v) {
      el("line", {x1: LABEL, x2: W - RIGHT, y1: y0 - v * scale, y2: y0 - v * scale, "class": "grid"}, axisG);
      text(axisG, LABEL - 6, y0 - v * scale + 4, +v.toPrecision(6) + " ms", {"text-anchor": "end"});
    });
    var slot = (W - LABEL - RIGHT) / Math.max(n, 1), bw = Math.max(Math.min(slot * 0.6, 40), 1), raw = [], cor = [];
    var at = function (i) { return LABEL + slot * (i + 0.5); };
    d.steps.forEach(function (p, i) {
      raw.push(at(i) + "," + (y0 - p.raw * scale));
      if (p.corrected !== null) cor.push(at(i) + "," + (y0 - p.corrected * scale));
    });
    var groups = d.steps.map(function (p, i) {
      var g = el("g", {"class": "trend-step", "data-step": p.step}, s), base = y0;
      p.parts.forEach(function (v, k) {
        if (!(v > 0)) return;
        var hh = v * scale;
        title(el("rect", {x: at(i) - bw / 2, y: base - hh, width: bw, height: hh, "class": sub(k)}, g),
              "step " + p.step + ": " + d.names[k] + " " + ms(v));
        base -= hh;
      });
      if (n <= 40 || i % Math.ceil(n / 40) === 0) text(g, at(i), y0 + 14, String(p.step), {"text-anchor": "middle"});
      return g;
    });
    el("polyline", {points: raw.join(" "), "class": "trend-raw"}, s);
    if (cor.length) el("polyline", {points: cor.join(" "), "class": "trend-corrected"}, s);
    d.steps.forEach(function (p, i) {
      title(el("circle", {cx: at(i), cy: y0 - p.raw * scale, r: 3, "class": "point raw"}, groups[i]),
            "step " + p.step + ": " + ms(p.raw) + " raw");
      if (p.corrected !== null) {
        title(el("circle", {cx: at(i), cy: y0 - p.corrected * scale, r: 3, "class": "point corrected"}, groups[i]),
              "step " + p.step + ": " + ms(p.corrected) + " corrected");
      }
      s.appendChild(groups[i]);  // above the lines
    });
    text(s, LABEL + (W - LABEL - RIGHT) / 2, h - 4, "step", {"text-anchor": "middle"});
  }

  const draw = {"breakdown-chart": breakdown, "attribution-chart": breakdown, "critical-path-chart": criticalPath,
                "gpu-util-chart": gpuUtil, "timeline-chart": timeline, "trend-chart": trend};
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
