// Connections and channels (with force-close), and one connection's page: its data-rate
// chart (the server's history: data_rates_age), details, channels and force-close.

import { ApiError, api, seg } from "./api.js";
import { chartBlock, drawChart, historyFromSamples } from "./chart.js";
import { DataTable, bytes, h, num, rate } from "./dom.js";
import { scoped } from "./settings.js";

function section(title, table) {
  return h("section", { className: "panel" }, h("h2", {}, title), table.element);
}

export function connectionHref(name) {
  return `#/connections/${seg(name)}`;
}

async function closeConnection(name, notify) {
  const reason = window.prompt(`Close connection ${name}? Reason:`, "Closed via management plugin");
  if (reason === null) return false;
  await api(`/connections/${seg(name)}`, { method: "DELETE", headers: { "X-Reason": reason } });
  notify(`Connection ${name} closed.`);
  return true;
}

export function connectionsPage(notify) {
  let refresh = async () => {};
  const close = async (event) => {
    try {
      if (await closeConnection(event.currentTarget.dataset.name, notify)) await refresh();
    } catch (error) {
      notify(error.message, true);
    }
  };
  const connections = new DataTable(
    "connections",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", cell: (c) => [h("a", { href: connectionHref(c.name) }, c.name), c.user_provided_name ? h("div", { className: "subtle" }, c.user_provided_name) : null] },
      { key: "user", label: "User name" },
      { key: "state", label: "State", cell: (c) => h("span", { className: `state ${c.state}` }, c.state) },
      { key: "ssl", label: "TLS", value: (c) => (c.ssl ? 1 : 0), cell: (c) => (c.ssl ? "yes" : "") },
      { key: "protocol", label: "Protocol" },
      { key: "channels", label: "Channels", numeric: true, cell: (c) => num(c.channels) },
      { key: "recv", label: "From client", numeric: true, value: (c) => c.recv_oct_details?.rate ?? 0, cell: (c) => `${bytes(c.recv_oct_details?.rate ?? 0)}/s` },
      { key: "send", label: "To client", numeric: true, value: (c) => c.send_oct_details?.rate ?? 0, cell: (c) => `${bytes(c.send_oct_details?.rate ?? 0)}/s` },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (c) => h("button", { type: "button", className: "close danger", dataset: { name: c.name }, onclick: close }, "Force close"),
      },
    ],
    { filterOn: (c) => `${c.name} ${c.user} ${c.user_provided_name || ""}`, empty: "No connections." },
  );
  const mode = (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("") || "";
  const channels = new DataTable(
    "channels",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Channel" },
      { key: "user", label: "User name" },
      { key: "mode", label: "Mode", value: mode, cell: mode },
      { key: "state", label: "State", cell: (c) => h("span", { className: `state ${c.state}` }, c.state) },
      { key: "consumer_count", label: "Consumers", numeric: true, cell: (c) => num(c.consumer_count) },
      { key: "prefetch_count", label: "Prefetch", numeric: true, cell: (c) => num(c.prefetch_count) },
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, cell: (c) => num(c.messages_unacknowledged) },
      { key: "messages_unconfirmed", label: "Unconfirmed", numeric: true, cell: (c) => num(c.messages_unconfirmed) },
      { key: "publish", label: "Publish", numeric: true, value: (c) => c.message_stats?.publish_details?.rate ?? 0, cell: (c) => rate(c.message_stats?.publish_details) },
      { key: "ack", label: "Ack", numeric: true, value: (c) => c.message_stats?.ack_details?.rate ?? 0, cell: (c) => rate(c.message_stats?.ack_details) },
    ],
    { filterOn: (c) => c.name, empty: "No channels." },
  );
  const element = h("div", {}, h("h1", {}, "Connections"), section("All connections", connections), section("Channels", channels));
  refresh = async () => {
    const [conns, chans] = await Promise.all([api(scoped("/connections", "/vhosts/{}/connections")), api(scoped("/channels", "/vhosts/{}/channels"))]);
    connections.update(conns);
    channels.update(chans);
  };
  return { element, refresh };
}

const DATA_SERIES = [
  { name: "recv_oct", label: "From client" },
  { name: "send_oct", label: "To client" },
];

export function connectionPage(name, notify) {
  const path = `/connections/${seg(name)}`;
  const chart = chartBlock("chart-connection-rates", "Data rates");
  let history = historyFromSamples([]);
  const facts = h("tbody");
  const channels = new DataTable(
    "connection-channels",
    [
      { key: "name", label: "Channel" },
      { key: "state", label: "State", cell: (c) => h("span", { className: `state ${c.state}` }, c.state) },
      { key: "consumer_count", label: "Consumers", numeric: true, cell: (c) => num(c.consumer_count) },
      { key: "prefetch_count", label: "Prefetch", numeric: true, cell: (c) => num(c.prefetch_count) },
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, cell: (c) => num(c.messages_unacknowledged) },
      { key: "publish", label: "Publish", numeric: true, value: (c) => c.message_stats?.publish_details?.rate ?? 0, cell: (c) => rate(c.message_stats?.publish_details) },
    ],
    { empty: "No channels." },
  );
  const present = h(
    "div",
    {},
    chart.element,
    h("section", { className: "panel" }, h("h2", {}, "Details"), h("table", { className: "facts" }, facts)),
    section("Channels", channels),
    h(
      "section",
      { className: "panel" },
      h("h2", {}, "Close this connection"),
      h("button", {
        type: "button",
        className: "close danger",
        onclick: async () => {
          try {
            if (await closeConnection(name, notify)) window.location.hash = "#/connections";
          } catch (error) {
            notify(error.message, true);
          }
        },
      }, "Force close"),
    ),
  );
  const missing = h(
    "section",
    { className: "panel missing", id: "missing", hidden: true },
    h("h2", {}, "Not found"),
    h("p", {}, `Connection '${name}' does not exist (any more).`),
    h("a", { href: "#/connections" }, "All connections"),
  );
  const element = h("div", {}, h("h1", {}, "Connection ", h("b", {}, name)), missing, present);
  function draw() {
    if (!present.hidden) drawChart(chart.canvas, chart.legend, history, DATA_SERIES, " B/s");
  }
  async function refresh() {
    let c;
    try {
      c = await api(`${path}?data_rates_age=600&data_rates_incr=5`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        missing.hidden = false;
        present.hidden = true;
        return;
      }
      throw error;
    }
    missing.hidden = true;
    present.hidden = false;
    history = historyFromSamples(DATA_SERIES.map((s) => ({ name: s.name, samples: c[`${s.name}_details`]?.samples, rate: true })));
    draw();
    const client = c.client_properties || {};
    facts.replaceChildren(
      ...[
        ["User name", c.user],
        ["Virtual host", c.vhost],
        ["State", c.state],
        ["Protocol", c.protocol],
        ["Client", [client.product, client.version, client.platform].filter(Boolean).join(" ")],
        ["Connected from", `${c.peer_host}:${c.peer_port}`],
        ["TLS", c.ssl ? "yes" : "no"],
        ["Heartbeat", `${c.timeout}s`],
        ["Frame max", `${num(c.frame_max)} bytes`],
        ["Received / sent", `${bytes(c.recv_oct)} / ${bytes(c.send_oct)}`],
      ].map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))),
    );
    channels.update(await api(`${path}/channels`));
  }
  return { element, refresh, resize: draw };
}
