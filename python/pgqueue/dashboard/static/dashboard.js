// pgqueue dashboard: live counts and the charts, drawn as SVG by hand. No library, no build step.
// Everything shown is set with textContent or SVG attributes: no server text becomes markup.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#2f6fde", "#e8a317", "#7b4fd6", "#c4302b", "#1f8a4c", "#0aa5a5", "#a05a2c", "#666"];
  var NAMED = { ready: "#2f6fde", scheduled: "#e8a317", leased: "#7b4fd6", dead: "#c4302b",
                enqueued: "#2f6fde", "left the queues": "#1f8a4c", "net change": "#7b4fd6",
                "dead-lettered": "#c4302b", completed: "#1f8a4c", failed: "#e8a317", expired: "#666",
                delivered: "#0aa5a5", dead_lettered: "#c4302b", "oldest ready": "#a05a2c" };

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    for (var k in attrs) { node.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  // A tick step of 1, 2 or 5 times a power of ten such that four steps reach v.
  function niceStep(v) {
    if (v <= 0) { return 0.25; }
    var raw = v / 4, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * p >= raw) { return steps[i] * p; } }
    return 10 * p;
  }

  function fmt(v) {
    if (Math.abs(v) >= 1e6) { return (v / 1e6).toFixed(1) + "M"; }
    if (Math.abs(v) >= 1e4) { return (v / 1e3).toFixed(0) + "k"; }
    if (Math.abs(v) >= 100 || v === Math.round(v)) { return String(Math.round(v)); }
    if (Math.abs(v) < 1) { return String(parseFloat(v.toFixed(2))); }
    return v.toFixed(1);
  }

  function hhmm(t) {
    var d = new Date(t * 1000);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0") +
      (d.getSeconds() ? ":" + String(d.getSeconds()).padStart(2, "0") : "");
  }

  // series: {name: [[t, v], ...]}. Draws lines over time on the svg, and a legend.
  function draw(box, series) {
    var svg = box.querySelector("svg"), legend = box.querySelector(".legend");
    var w = svg.clientWidth || 480, h = svg.clientHeight || 200;
    var left = 44, right = 8, top = 8, bottom = 20;
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var names = Object.keys(series), tmin = Infinity, tmax = -Infinity, vmin = 0, vmax = 0;
    names.forEach(function (n) {
      series[n].forEach(function (p) {
        tmin = Math.min(tmin, p[0]); tmax = Math.max(tmax, p[0]);
        vmax = Math.max(vmax, p[1]); vmin = Math.min(vmin, p[1]);
      });
    });
    if (!isFinite(tmin)) {
      var msg = el("text", { x: w / 2, y: h / 2, "text-anchor": "middle" }, svg);
      msg.textContent = "collecting samples…";
      legend.textContent = "";
      return;
    }
    if (tmax - tmin < 60) { tmin = tmax - 60; }
    if (vmax <= 0 && vmin >= 0) { vmax = 1; }  // all zero: an axis from 0 to 1
    var step = niceStep(Math.max(vmax, -vmin, vmax - vmin));
    var top_ = Math.max(step, Math.ceil(vmax / step) * step), bot = Math.min(0, Math.floor(vmin / step) * step);
    var ticks = Math.round((top_ - bot) / step);
    function x(t) { return left + (w - left - right) * (t - tmin) / (tmax - tmin); }
    function y(v) { return top + (h - top - bottom) * (1 - (v - bot) / (top_ - bot)); }
    for (var i = 0; i <= ticks; i++) {
      var v = bot + step * i;
      el("line", { x1: left, x2: w - right, y1: y(v), y2: y(v), "class": "grid-line" }, svg);
      var label = el("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end" }, svg);
      label.textContent = fmt(v);
    }
    for (var j = 0; j <= 4; j++) {
      var t = tmin + (tmax - tmin) * j / 4;
      var tl = el("text", { x: x(t), y: h - 4, "text-anchor": j === 0 ? "start" : j === 4 ? "end" : "middle" }, svg);
      tl.textContent = hhmm(t);
    }
    legend.textContent = "";
    names.forEach(function (n, k) {
      var color = NAMED[n] || COLORS[k % COLORS.length];
      var pts = series[n].map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); });
      if (pts.length === 1) { el("circle", { cx: x(series[n][0][0]), cy: y(series[n][0][1]), r: 2.5, fill: color }, svg); }
      el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.6 }, svg);
      var sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = color;
      legend.appendChild(sw);
      var last = series[n].length ? series[n][series[n].length - 1][1] : 0;
      legend.appendChild(document.createTextNode(n + " " + fmt(last)));
    });
  }

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); });
  }

  function refreshCounts() {
    return getJSON(root() + "api/queues").then(function (data) {
      data.queues.forEach(function (q) {
        document.querySelectorAll("[data-live] [data-queue]").forEach(function (row) {
          if (row.getAttribute("data-queue") !== q.queue) { return; }
          row.querySelectorAll("[data-field]").forEach(function (cell) {
            var f = cell.getAttribute("data-field"), value = String(q[f]);
            var link = cell.querySelector("a"), href = cell.getAttribute("data-href");
            if (href && value !== "0" && !link) {  // dead letters came: link to them, as a reload would
              link = document.createElement("a");
              link.setAttribute("href", href);
              link.textContent = cell.textContent;
              cell.textContent = "";
              cell.appendChild(link);
            } else if (href && value === "0" && link) {  // and none is left: the link goes
              cell.textContent = link.textContent;
              link = null;
            }
            var target = link || cell;
            if (target.textContent !== value) {
              target.textContent = value;
              cell.classList.add("flash");
              setTimeout(function () { cell.classList.remove("flash"); }, 1200);
            }
          });
        });
      });
    }).catch(function () {});
  }

  function root() {
    var brand = document.querySelector("header a.brand");
    var href = brand ? brand.getAttribute("href") : "/";
    return href.endsWith("/") ? href : href + "/";
  }

  function refreshCharts() {
    var boxes = document.querySelectorAll(".chart[data-chart]");
    if (!boxes.length) { return Promise.resolve(); }
    var queue = boxes[0].getAttribute("data-queue");
    var url = root() + "api/history" + (queue ? "?queue=" + encodeURIComponent(queue) : "");
    return getJSON(url).then(function (data) {
      boxes.forEach(function (box) {
        if (box.getAttribute("data-chart") === "depth") {
          draw(box, data.depth);
        } else if (box.getAttribute("data-chart") === "oldest") {
          draw(box, data.oldest);
        } else {
          draw(box, data.throughput);
          box.setAttribute("data-source", data.throughput_source);
          var legend = box.querySelector(".legend");
          legend.appendChild(document.createElement("br"));
          legend.appendChild(document.createTextNode(data.throughput_source === "counters"
            ? "from the extension's counters" + (data.shared_counters.length
              ? "; shared with another queue (more than 64 queues), so they count its messages too: " +
                data.shared_counters.join(", ") : "")
            : data.throughput["net change"] ? "estimated from depth samples (no counters in this database)"
            : "estimated: enqueued from the message id sequence, left = enqueued minus the growth of depth"));
        }
      });
    }).catch(function () {});
  }

  document.addEventListener("DOMContentLoaded", function () {
    var interval = parseFloat(document.body.getAttribute("data-interval")) || 5;
    if (document.querySelector("[data-live]")) {
      setInterval(refreshCounts, Math.max(1, interval) * 1000);
    }
    refreshCharts();
    setInterval(refreshCharts, Math.max(1, interval) * 1000);
    window.addEventListener("resize", refreshCharts);
    // Dead letters: "all" overrides the boxes, so say so.
    var all = document.getElementById("all");
    if (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll("input[name=id]").forEach(function (b) { b.disabled = all.checked; });
      });
    }
  });
})();
