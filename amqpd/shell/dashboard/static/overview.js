// The overview page: object and message totals, the queued-messages and message-rate
// charts (the server's history: /api/overview with lengths_age / msg_rates_age; sampled
// here at each refresh for users the server gives no node history), churn rates, the node,
// its memory breakdown (/api/nodes/{node}/memory, when the broker reports one) and its
// listeners, and the definitions export / import (administrators).

import { ApiError, api, canMonitor, isAdministrator, seg } from "./api.js";
import { History, chartBlock, drawChart, historyFromSamples } from "./chart.js";
import { bytes, duration, h, num, rate } from "./dom.js";
import { rangeQuery, selectedVhost } from "./settings.js";

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

const CHURN = [
  ["Connections", "connection_created", "connection_closed"],
  ["Channels", "channel_created", "channel_closed"],
  ["Queues", "queue_created", "queue_deleted"],
];

function churnTable(churn) {
  const cell = (key) => h("td", { className: "num" }, `${num(churn[key] ?? 0)} (${rate(churn[`${key}_details`]) || "0.0/s"})`);
  return h(
    "table",
    { className: "list", id: "churn" },
    h("thead", {}, h("tr", {}, ["", "Created / declared", "Closed / deleted"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      CHURN.map(([label, opened, closed]) => h("tr", {}, h("th", {}, label), cell(opened), cell(closed))),
      churn.queue_declared !== undefined ? h("tr", {}, h("th", {}, "Queue declarations"), cell("queue_declared"), h("td")) : null,
    ),
  );
}

/** RabbitMQ 3.10's {"memory": {kind: bytes, ..., "strategy", "total": {...}}} as bars. */
function memoryTable(memory) {
  const total = memory.total || {};
  const whole = total.rss || total.allocated || total.erlang || 0;
  const kinds = Object.entries(memory)
    .filter(([, value]) => typeof value === "number")
    .sort((a, b) => b[1] - a[1]);
  return h(
    "div",
    { id: "memory-breakdown" },
    h("p", { className: "subtle" }, `Total ${bytes(whole)} (${memory.strategy || "rss"})`),
    h(
      "table",
      { className: "list memory" },
      h("tbody", {}, kinds.map(([kind, value]) =>
        h(
          "tr",
          {},
          h("td", {}, kind.replaceAll("_", " ")),
          h("td", { className: "num" }, bytes(value)),
          h("td", { className: "bar-cell" }, h("div", { className: "gauge" }, h("div", { className: "bar" }, h("span", { style: `width:${whole ? Math.min(100, (value / whole) * 100).toFixed(1) : 0}%` })))),
        ),
      )),
    ),
  );
}

function definitionsPanel(notify) {
  const file = h("input", { type: "file", id: "definitions-file", accept: ".json,application/json" });
  const scope = () => (selectedVhost() ? `/definitions/${seg(selectedVhost())}` : "/definitions");
  const download = async () => {
    try {
      const definitions = await api(scope());
      const blob = new Blob([JSON.stringify(definitions, null, 2)], { type: "application/json" });
      const link = h("a", { href: URL.createObjectURL(blob), download: `amqpd_definitions_${new Date().toISOString().slice(0, 10)}.json` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    } catch (error) {
      notify(error.message, true);
    }
  };
  const upload = async (event) => {
    event.preventDefault();
    const [chosen] = file.files;
    if (!chosen) {
      notify("Choose a definitions file first.", true);
      return;
    }
    try {
      const text = await chosen.text();
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        throw new Error(`${chosen.name} is not JSON.`);
      }
      await api(scope(), { method: "POST", body });
      notify("Your definitions were imported successfully.");
      file.value = "";
    } catch (error) {
      notify(error.message, true);
    }
  };
  return h(
    "section",
    { className: "panel", id: "definitions" },
    h("h2", {}, "Export and import definitions"),
    h("p", { className: "subtle" }, "Users, virtual hosts, permissions, queues, exchanges, bindings, policies and parameters, as RabbitMQ's definitions file (of the selected virtual host when one is selected)."),
    h("div", { className: "toolbar wrap" }, h("button", { type: "button", id: "export-definitions", onclick: download }, "Download broker definitions")),
    h("form", { className: "toolbar wrap", id: "import-definitions", onsubmit: upload }, file, h("button", { type: "submit" }, "Upload broker definitions")),
  );
}

export function overviewPage(notify) {
  const totals = h("div", { className: "totals" });
  const queued = chartBlock("chart-queued", "Queued messages");
  const rateChart = chartBlock("chart-rates", "Message rates");
  const nodeBody = h("tbody");
  const listenerBody = h("tbody");
  const churn = h("div", {}, h("p", { className: "empty" }, "Not reported by this broker."));
  const memory = h("div", {}, h("p", { className: "empty" }, "Loading..."));
  let depthHistory = depth;
  let rateHistory = rates;
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
        "div",
        { className: "table-wrap" },
        h(
          "table",
          { className: "list", id: "nodes" },
          h("thead", {}, h("tr", {}, ["Name", "File descriptors", "Sockets", "Memory", "Disk space", "Uptime"].map((t) => h("th", {}, t)))),
          nodeBody,
        ),
      ),
    ),
    h(
      "div",
      { className: "charts" },
      h("section", { className: "panel" }, h("h2", {}, "Memory details"), memory),
      h("section", { className: "panel" }, h("h2", {}, "Churn statistics"), churn),
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
    isAdministrator() ? definitionsPanel(notify) : null,
  );

  function draw() {
    drawChart(queued.canvas, queued.legend, depthHistory, DEPTH_SERIES);
    drawChart(rateChart.canvas, rateChart.legend, rateHistory, RATE_SERIES, "/s");
  }

  function chartData(overview) {
    const q = overview.queue_totals || {};
    const stats = overview.message_stats || {};
    if (q.messages_details && Array.isArray(q.messages_details.samples) && q.messages_details.samples.length) {
      // the server's history: full charts from the first refresh (a broker that started
      // seconds ago has none yet: sampled here meanwhile)
      depthHistory = historyFromSamples([
        { name: "ready", samples: q.messages_ready_details?.samples },
        { name: "unacked", samples: q.messages_unacknowledged_details?.samples },
        { name: "total", samples: q.messages_details.samples },
      ]);
      rateHistory = historyFromSamples(RATE_SERIES.map(({ name }) => ({ name, samples: stats[`${name}_details`]?.samples, rate: true })));
      return;
    }
    const now = Date.now();
    depth.add(now, { ready: q.messages_ready || 0, unacked: q.messages_unacknowledged || 0, total: q.messages || 0 });
    const sample = {};
    for (const { name } of RATE_SERIES) {
      const details = stats[`${name}_details`];
      sample[name] = details ? details.rate : 0;
    }
    rates.add(now, sample);
    depthHistory = depth;
    rateHistory = rates;
  }

  async function refreshMemory(node) {
    try {
      const answer = await api(`/nodes/${seg(node)}/memory`);
      memory.replaceChildren(answer && answer.memory ? memoryTable(answer.memory) : h("p", { className: "empty" }, "Not reported by this broker."));
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) throw error;
      const text = error instanceof ApiError && error.status === 404 ? "Not reported by this broker." : `Unavailable: ${error.message}`;
      memory.replaceChildren(h("p", { className: "empty", id: "memory-unavailable" }, text));
    }
  }

  async function refresh() {
    const overview = await api(`/overview?${rangeQuery("lengths", "msg_rates")}`);
    chartData(overview);
    const q = overview.queue_totals || {};
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
    if (overview.churn_rates) churn.replaceChildren(churnTable(overview.churn_rates));
    draw();
    if (!canMonitor()) {
      nodeBody.replaceChildren(
        h("tr", {}, h("td", { colspan: 6, className: "empty" }, "Node details need the monitoring or administrator tag.")),
      );
      memory.replaceChildren(h("p", { className: "empty" }, "Node details need the monitoring or administrator tag."));
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
      if (error instanceof ApiError && error.status === 401) throw error;
      nodeBody.replaceChildren(h("tr", {}, h("td", { colspan: 6 }, `Node details unavailable: ${error.message}`)));
    }
    await refreshMemory(overview.node);
  }

  return { element, refresh, resize: draw };
}
