// A small time-series line chart on a <canvas>: grid, y-axis scale, one line per series
// (a dot while a series has a single sample), and an HTML legend with the latest values.

const HISTORY_SECONDS = 600; // samples kept: ten minutes
const MIN_WINDOW_SECONDS = 60; // the x axis spans the history kept, at least a minute

export const COLORS = ["#edc240", "#afd8f8", "#cb4b4b", "#4da74d", "#9440ed", "#f60"];

/** A fixed-length history of samples: [{t: ms, values: {name: number}}]. */
export class History {
  constructor() {
    this.samples = [];
  }

  add(time, values) {
    this.samples.push({ t: time, values });
    const cutoff = time - HISTORY_SECONDS * 1000;
    while (this.samples.length && this.samples[0].t < cutoff) this.samples.shift();
  }

  latest(name) {
    const last = this.samples[this.samples.length - 1];
    return last ? last.values[name] : undefined;
  }
}

/**
 * A History from the server's samples (RabbitMQ's ``*_details.samples``, newest first):
 * ``series`` [{name, samples, rate}]; a ``rate`` series is the change per second between
 * consecutive samples (counters), the others are the samples themselves (lengths).
 */
export function historyFromSamples(series) {
  const byTime = new Map();
  for (const { name, samples, rate } of series) {
    const list = samples || [];
    for (let i = 0; i < list.length; i += 1) {
      const { sample, timestamp } = list[i];
      let value = sample;
      if (rate) {
        const older = list[i + 1];
        if (!older || older.timestamp === timestamp) continue;
        value = Math.max(0, ((sample - older.sample) * 1000) / (timestamp - older.timestamp));
      }
      if (!byTime.has(timestamp)) byTime.set(timestamp, {});
      byTime.get(timestamp)[name] = value;
    }
  }
  const history = new History();
  history.samples = [...byTime.keys()].sort((a, b) => a - b).map((t) => ({ t, values: byTime.get(t) }));
  return history;
}

/** A chart panel: a canvas and its legend under a title. */
export function chartBlock(id, title) {
  const canvas = document.createElement("canvas");
  canvas.id = id;
  canvas.className = "chart";
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", title);
  const legend = document.createElement("div");
  legend.className = "legend";
  const heading = document.createElement("h2");
  heading.textContent = title;
  const element = document.createElement("section");
  element.className = "panel chart-panel";
  element.append(heading, canvas, legend);
  return { canvas, legend, element };
}

/** A y scale with at most five round steps (1, 2 or 5 times a power of ten) over ``peak``. */
function niceScale(peak) {
  if (peak <= 0) return { max: 1, step: 0.5 };
  const power = 10 ** Math.floor(Math.log10(peak / 5));
  for (const multiple of [1, 2, 5, 10]) {
    const step = multiple * power;
    const steps = Math.ceil(peak / step - 1e-9);
    if (steps <= 5) return { max: steps * step, step };
  }
  return { max: 10 * power * 5, step: 10 * power };
}

function format(value) {
  if (value >= 1e9) return `${+(value / 1e9).toFixed(1)}G`;
  if (value >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (value >= 1e4) return `${+(value / 1e3).toFixed(1)}k`;
  return `${+value.toFixed(value < 10 ? 1 : 0)}`;
}

/**
 * Draw ``history``'s ``series`` ([{name, label, stack}]) on ``canvas``; ``legend`` (an element)
 * gets the latest value of each. ``unit`` follows the values in the legend ("/s").
 */
export function drawChart(canvas, legend, history, series, unit = "") {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600;
  const height = canvas.clientHeight || 180;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);

  const left = 48;
  const right = width - 8;
  const top = 8;
  const bottom = height - 22;
  const samples = history.samples;
  const now = samples.length ? samples[samples.length - 1].t : Date.now();
  const span = samples.length ? (now - samples[0].t) / 1000 : 0;
  const windowSeconds = Math.min(HISTORY_SECONDS, Math.max(MIN_WINDOW_SECONDS, Math.ceil(span / 60) * 60));
  const start = now - windowSeconds * 1000;
  let peak = 0;
  for (const sample of samples) {
    let stacked = 0;
    for (const { name, stack } of series) {
      const value = sample.values[name] || 0;
      if (stack) stacked += value;
      peak = Math.max(peak, value, stacked);
    }
  }
  const { max, step: yStep } = niceScale(peak);
  const x = (t) => left + ((t - start) / (windowSeconds * 1000)) * (right - left);
  const y = (v) => bottom - (v / max) * (bottom - top);

  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#666";
  ctx.strokeStyle = "#e4e4e4";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i * yStep <= max + 1e-9; i += 1) {
    const value = i * yStep;
    const py = Math.round(y(value)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(left, py);
    ctx.lineTo(right, py);
    ctx.stroke();
    ctx.fillText(format(value), left - 6, py);
  }
  ctx.textBaseline = "top";
  const step = windowSeconds <= 60 ? 10 : windowSeconds <= 300 ? 60 : 120; // seconds between labels
  for (let ago = windowSeconds; ago >= 0; ago -= step) {
    ctx.textAlign = ago === 0 ? "right" : ago === windowSeconds ? "left" : "center";
    const label = ago === 0 ? "now" : ago % 60 ? `-${ago}s` : `-${ago / 60}m`;
    ctx.fillText(label, ago === 0 ? right : x(now - ago * 1000), bottom + 6);
  }

  // stacked series (``stack: true``) are filled areas, one on top of the other; the
  // others are lines drawn over them
  const base = samples.map(() => 0);
  series.forEach(({ name, stack }, index) => {
    if (!stack) return;
    const color = COLORS[index % COLORS.length];
    const lower = base.slice();
    samples.forEach((s, i) => {
      base[i] += typeof s.values[name] === "number" ? s.values[name] : 0;
    });
    ctx.fillStyle = color;
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    if (samples.length === 1) {
      ctx.beginPath();
      ctx.arc(x(samples[0].t), y(base[0]), 3, 0, 2 * Math.PI);
      ctx.fill();
      return;
    }
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo(x(s.t), y(base[i])) : ctx.moveTo(x(s.t), y(base[i]))));
    for (let i = samples.length - 1; i >= 0; i -= 1) ctx.lineTo(x(samples[i].t), y(lower[i]));
    ctx.closePath();
    ctx.globalAlpha = 0.45;
    ctx.fill();
    ctx.globalAlpha = 1;
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo(x(s.t), y(base[i])) : ctx.moveTo(x(s.t), y(base[i]))));
    ctx.stroke();
  });
  series.forEach(({ name, stack }, index) => {
    if (stack) return;
    const color = COLORS[index % COLORS.length];
    const points = samples
      .filter((s) => typeof s.values[name] === "number")
      .map((s) => [x(s.t), y(s.values[name])]);
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = 2;
    if (points.length === 1) {
      ctx.beginPath();
      ctx.arc(points[0][0], points[0][1], 3, 0, 2 * Math.PI);
      ctx.fill();
    } else if (points.length > 1) {
      ctx.beginPath();
      points.forEach(([px, py], i) => (i ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
      ctx.stroke();
    }
  });

  if (legend) {
    legend.replaceChildren(
      ...series.map(({ name, label }, index) => {
        const item = document.createElement("span");
        item.className = "legend-item";
        const swatch = document.createElement("i");
        swatch.style.background = COLORS[index % COLORS.length];
        const value = history.latest(name);
        item.append(swatch, `${label} `);
        const strong = document.createElement("b");
        strong.textContent = value === undefined ? "?" : `${format(value)}${unit}`;
        item.append(strong);
        return item;
      }),
    );
  }
  canvas.dataset.samples = String(samples.length);
}
