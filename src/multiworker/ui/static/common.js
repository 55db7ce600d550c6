// Shared by every dashboard page: API calls (with the action token), formatting, and uPlot charts.
"use strict";

const MW = (() => {
  const token = document.querySelector('meta[name="mw-token"]').content;
  const TERMINAL = new Set(["Succeeded", "Failed", "Cancelled", "Lost"]);
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                  "#7f7f7f", "#bcbd22", "#17becf"];

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, options = {}) {
    const opts = { credentials: "same-origin", ...options, headers: { ...(options.headers || {}) } };
    if (opts.method === "POST") opts.headers["X-Multiworker-Token"] = token;
    let resp;
    try {
      resp = await fetch(path, opts);
    } catch (err) {
      setLive(false);
      throw new ApiError(0, "the dashboard server is not answering");
    }
    setLive(true);
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new ApiError(resp.status, body.error || resp.statusText);
    return body;
  }

  function setLive(ok) {
    const el = document.getElementById("conn");
    if (!el) return;
    el.classList.toggle("down", !ok);
    el.title = ok ? "live updates" : "server not answering; retrying";
  }

  function esc(text) {
    return String(text ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    let s = Math.max(0, Math.round(seconds));
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    s %= 60;
    if (d) return `${d}d${h}h`;
    if (h) return `${h}h${String(m).padStart(2, "0")}m`;
    if (m) return `${m}m${String(s).padStart(2, "0")}s`;
    return `${s}s`;
  }

  function bytes(n) {
    if (n === null || n === undefined) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i ? `${n.toFixed(1)} ${units[i]}` : `${n} B`;
  }

  function num(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    return Math.abs(v) >= 1000 ? v.toLocaleString(undefined, { maximumFractionDigits: 0 }) : v.toPrecision(4).replace(/\.?0+$/, "");
  }

  function clock(ts) { return ts ? new Date(ts * 1000).toLocaleTimeString() : "-"; }
  function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "-"; }

  function badge(state) {
    return `<span class="badge state-${esc(state)}">${esc(state)}</span>`;
  }

  function headline(h) { return h ? `${esc(h.name)} ${num(h.value)}` : '<span class="muted">-</span>'; }

  // Vertical dashed lines at x values (restarts) drawn over a chart.
  function markersPlugin(getMarkers) {
    return {
      hooks: {
        draw: u => {
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = "#888";
          ctx.setLineDash([5, 4]);
          ctx.lineWidth = 1;
          for (const x of getMarkers()) {
            const px = u.valToPos(x, "x", true);
            if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
            ctx.beginPath();
            ctx.moveTo(px, u.bbox.top);
            ctx.lineTo(px, u.bbox.top + u.bbox.height);
            ctx.stroke();
          }
          ctx.restore();
        },
      },
    };
  }

  // lines: {label: [[x, y], ...]} -> uPlot's aligned columns [xs, ys1, ys2, ...] (null where missing).
  function align(lines) {
    const labels = Object.keys(lines);
    const xs = [...new Set(labels.flatMap(l => lines[l].map(p => p[0])))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const cols = labels.map(l => {
      const col = new Array(xs.length).fill(null);
      for (const [x, y] of lines[l]) col[index.get(x)] = y;
      return col;
    });
    return { labels, data: [xs, ...cols] };
  }

  const charts = {};
  window.mwCharts = charts;  // for tests and the curious: key -> uPlot instance

  // Draw (or update in place) a line chart in el. opts: {xLabel, yLabel, markers, integerX}
  function chart(key, el, lines, opts = {}) {
    const { labels, data } = align(lines);
    const empty = labels.length === 0 || data[0].length === 0;
    el.classList.toggle("no-data", empty);
    let u = charts[key];
    const same = u && u._labels.join("\u0001") === labels.join("\u0001");
    if (empty) {
      if (u) { u.destroy(); delete charts[key]; }
      el.dataset.empty = "no data yet";
      return null;
    }
    if (same) {
      u._markers = opts.markers || [];
      u.setData(data);
      return u;
    }
    if (u) u.destroy();
    const width = Math.max(280, el.clientWidth || 500);
    u = new uPlot({
      width, height: 240,
      scales: { x: { time: false } },
      axes: [
        opts.integerX ? { label: opts.xLabel || "", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] }
                      : { label: opts.xLabel || "" },
        { label: opts.yLabel || "", size: 60 },
      ],
      series: [{ label: opts.xLabel || "x" }, ...labels.map((l, i) => ({
        label: l, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        points: { show: data[0].length <= 60 },
      }))],
      plugins: [markersPlugin(() => charts[key] ? charts[key]._markers : [])],
      legend: { live: true },
    }, data, el);
    u._labels = labels;
    u._markers = opts.markers || [];
    charts[key] = u;
    return u;
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const u of Object.values(charts)) {
        const w = u.root.parentElement.clientWidth;
        if (w) u.setSize({ width: w, height: 240 });
      }
    }, 150);
  });

  // Run step() now and again after the delay it returns (ms; null stops); a failure retries in 3 s.
  function poll(step) {
    let timer = null;
    const tick = async () => {
      let next = 3000;
      try { next = await step(); } catch (err) { console.warn(err); }
      if (next !== null) timer = setTimeout(tick, next);
    };
    tick();
    return { stop: () => clearTimeout(timer), now: () => { clearTimeout(timer); tick(); } };
  }

  return { api, ApiError, esc, duration, bytes, num, clock, when, badge, headline, chart, charts, poll, TERMINAL, token };
})();
