// The overview page: object and message totals, the queued-messages and message-rate
// charts (sampled from /api/overview at every refresh), the node and its listeners.

import { api, canMonitor } from "./api.js";
import { History, drawChart } from "./chart.js";
import { bytes, duration, h, num } from "./dom.js";

// kept while the page is left and revisited, as long as the browser tab lives
const depth = new History();
const rates = new History();

const DEPTH_SERIES = [
  { name: "ready", label: "Ready", stack: true },
  { name: "unacked", label: "Unacked", stack: true },
  { name: "total", label: "Total" },
];
const RATE_SERIES = [
  { name: "publish", label: "Publish" },
  { name: "confirm", label: "Publisher confirm" },
  { name: "deliver_get", label: "Deliver / get" },
  { name: "redeliver", label: "Redelivered" },
  { name: "ack", label: "Consumer ack" },
  { name: "drop_unroutable", label: "Unroutable (drop)" },
];

function chartBlock(id, title) {
  const canvas = h("canvas", { id, className: "chart", role: "img", "aria-label": title });
  const legend = h("div", { className: "legend" });
  return { canvas, legend, element: h("section", { className: "panel" }, h("h2", {}, title), canvas, legend) };
}

function gauge(used, limit, format) {
  if (!limit) return h("div", { className: "gauge" }, `${format(used)} (no limit)`);
  const fraction = Math.min(1, used / limit);
  return h(
    "div",
    { className: "gauge" },
    h("div", { className: "bar" }, h("span", { style: `width:${(fraction * 100).toFixed(1)}%` })),
    `${format(used)} of ${format(limit)}`,
  );
}

function disk(node) {
  if (!node.disk_free && !node.disk_free_limit) return "n/a (no data directory)";
  return `${bytes(node.disk_free)} free (limit ${bytes(node.disk_free_limit)})`;
}

export function overviewPage() {
  const totals = h("div", { className: "totals" });
  const queued = chartBlock("chart-queued", "Queued messages");
  const rateChart = chartBlock("chart-rates", "Message rates");
  const nodeBody = h("tbody");
  const listenerBody = h("tbody");
  const element = h(
    "div",
    {},
    h("h1", {}, "Overview"),
    totals,
    h("div", { className: "charts" }, queued.element, rateChart.element),
    h(
      "section",
      { className: "panel" },
      h("h2", {}, "Node"),
      h(
        "table",
        { className: "list", id: "nodes" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Name", "File descriptors", "Sockets", "Memory", "Disk space", "Uptime"].map((t) =>
              h("th", {}, t),
            ),
          ),
        ),
        nodeBody,
      ),
    ),
    h(
      "section",
      { className: "panel" },
      h("h2", {}, "Ports and contexts"),
      h(
        "table",
        { className: "list", id: "listeners" },
        h("thead", {}, h("tr", {}, ["Protocol", "Bound to", "Port"].map((t) => h("th", {}, t)))),
        listenerBody,
      ),
    ),
  );

  function draw() {
    drawChart(queued.canvas, queued.legend, depth, DEPTH_SERIES);
    drawChart(rateChart.canvas, rateChart.legend, rates, RATE_SERIES, "/s");
  }

  async function refresh() {
    const overview = await api("/overview");
    const now = Date.now();
    const q = overview.queue_totals || {};
    depth.add(now, {
      ready: q.messages_ready || 0,
      unacked: q.messages_unacknowledged || 0,
      total: q.messages || 0,
    });
    const stats = overview.message_stats || {};
    const sample = {};
    for (const { name } of RATE_SERIES) {
      const details = stats[`${name}_details`];
      sample[name] = details ? details.rate : 0;
    }
    rates.add(now, sample);
    const objects = overview.object_totals || {};
    totals.replaceChildren(
      ...[
        ["Connections", objects.connections],
        ["Channels", objects.channels],
        ["Exchanges", objects.exchanges],
        ["Queues", objects.queues],
        ["Consumers", objects.consumers],
        ["Ready", q.messages_ready],
        ["Unacked", q.messages_unacknowledged],
        ["Total", q.messages],
      ].map(([label, value]) =>
        h("div", { className: "total", dataset: { total: label.toLowerCase() } }, h("b", {}, num(value ?? 0)), label),
      ),
    );
    listenerBody.replaceChildren(
      ...(overview.listeners || []).map((l) =>
        h("tr", {}, h("td", {}, l.protocol), h("td", {}, l.ip_address), h("td", { className: "num" }, l.port)),
      ),
    );
    draw();
    if (!canMonitor()) {
      nodeBody.replaceChildren(
        h("tr", {}, h("td", { colspan: 6, className: "empty" }, "Node details need the monitoring or administrator tag.")),
      );
      return;
    }
    try {
      const nodes = await api("/nodes");
      nodeBody.replaceChildren(
        ...nodes.map((n) =>
          h(
            "tr",
            {},
            h("td", {}, n.name),
            h("td", {}, gauge(n.fd_used, n.fd_total, num)),
            h("td", {}, gauge(n.sockets_used, n.sockets_total, num)),
            h("td", { className: n.mem_alarm ? "alarm" : "" }, gauge(n.mem_used, n.mem_limit, bytes)),
            h("td", { className: n.disk_free_alarm ? "alarm" : "" }, disk(n)),
            h("td", {}, duration(n.uptime)),
          ),
        ),
      );
    } catch (error) {
      nodeBody.replaceChildren(h("tr", {}, h("td", { colspan: 6 }, `Node details unavailable: ${error.message}`)));
    }
  }

  return { element, refresh, resize: draw };
}
