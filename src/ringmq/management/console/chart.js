// A small line chart drawn on a <canvas>: time on x, one line per series, auto-scaled y.
// No dependencies; redraws from scratch on every update (a few hundred points at most).
"use strict";
window.LineChart = class LineChart {
  constructor(canvas, series, maxPoints) {
    this.canvas = canvas;
    this.series = series;            // [{key, label, color}]
    this.maxPoints = maxPoints || 120;
    this.points = [];                // [{t, values: {key: number}}]
  }
  push(t, values) {
    this.points.push({ t, values });
    if (this.points.length > this.maxPoints) this.points.shift();
    this.draw();
  }
  reset(points) { this.points = points.slice(-this.maxPoints); this.draw(); }
  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    // what is drawn, for tests and the curious: how many points, since when (ms)
    c.dataset.points = this.points.length;
    c.dataset.since = this.points.length ? this.points[0].t : "";
    const w = c.clientWidth || 600, h = c.clientHeight || 200;
    if (c.width !== Math.round(w * dpr)) { c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 48, right = 8, top = 8, bottom = 22;
    const pw = w - left - right, ph = h - top - bottom;
    let max = 0;
    // a rate is never below 0 (a counter reset is no negative rate): clamp what is drawn
    const val = (p, s) => Math.max(0, p.values[s.key] || 0);
    for (const p of this.points) for (const s of this.series) max = Math.max(max, val(p, s));
    max = niceCeil(max || 1);
    g.font = "11px system-ui, sans-serif"; g.fillStyle = "#6b7280"; g.strokeStyle = "#e3e6eb";
    g.lineWidth = 1; g.textAlign = "right"; g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      g.beginPath(); g.moveTo(left, y + 0.5); g.lineTo(left + pw, y + 0.5); g.stroke();
      g.fillText(fmt((max * i) / 4), left - 6, y);
    }
    const n = this.points.length;
    if (n === 0) {
      g.textAlign = "center"; g.fillText("waiting for samples\u2026", left + pw / 2, top + ph / 2);
      return;
    }
    const t0 = this.points[0].t, t1 = this.points[n - 1].t, span = Math.max(1, t1 - t0);
    const x = (t) => left + (n === 1 ? pw : ((t - t0) / span) * pw);
    g.textAlign = "left"; g.textBaseline = "top";
    g.fillText(new Date(t0).toLocaleTimeString(), left, top + ph + 6);
    g.textAlign = "right"; g.fillText(new Date(t1).toLocaleTimeString(), left + pw, top + ph + 6);
    for (const s of this.series) {
      g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
      this.points.forEach((p, i) => {
        const y = top + ph - (val(p, s) / max) * ph;
        if (i === 0) g.moveTo(x(p.t), y); else g.lineTo(x(p.t), y);
      });
      g.stroke();
    }
  }
};
function niceCeil(v) {
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}
function fmt(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(2).replace(/\.?0+$/, "");
}
