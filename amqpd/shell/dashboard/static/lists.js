// Exchanges and bindings, connections and channels (with force-close), and the admin
// page (users, virtual hosts, permissions, policies and operator policies).

import { api, seg } from "./api.js";
import { DataTable, bytes, h, num, rate } from "./dom.js";

function flags(pairs) {
  return pairs.filter(([on]) => on).map(([, text, title]) => h("abbr", { className: "tag", title }, text));
}

function section(title, table) {
  return h("section", { className: "panel" }, h("h2", {}, title), table.element);
}

export function exchangesPage() {
  const exchanges = new DataTable(
    "exchanges",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", cell: (e) => (e.name === "" ? "(AMQP default)" : e.name) },
      { key: "type", label: "Type" },
      {
        key: "features",
        label: "Features",
        value: (e) => (e.durable ? 1 : 0),
        cell: (e) => flags([[e.durable, "D", "durable"], [e.auto_delete, "AD", "auto-delete"], [e.internal, "I", "internal"]]),
      },
      { key: "in", label: "Message rate in", numeric: true, value: (e) => e.message_stats?.publish_in_details?.rate ?? 0, cell: (e) => rate(e.message_stats?.publish_in_details) },
      { key: "out", label: "Message rate out", numeric: true, value: (e) => e.message_stats?.publish_out_details?.rate ?? 0, cell: (e) => rate(e.message_stats?.publish_out_details) },
    ],
    { filterOn: (e) => e.name, empty: "No exchanges." },
  );
  const bindings = new DataTable(
    "bindings",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "source", label: "From", cell: (b) => (b.source === "" ? "(AMQP default)" : b.source) },
      { key: "destination", label: "To" },
      { key: "destination_type", label: "Type" },
      { key: "routing_key", label: "Routing key" },
      { key: "arguments", label: "Arguments", value: (b) => JSON.stringify(b.arguments || {}), cell: (b) => JSON.stringify(b.arguments || {}) },
    ],
    { filterOn: (b) => `${b.source} ${b.destination} ${b.routing_key}`, empty: "No bindings." },
  );
  const element = h("div", {}, h("h1", {}, "Exchanges"), section("All exchanges", exchanges), section("Bindings", bindings));
  async function refresh() {
    const [ex, bi] = await Promise.all([api("/exchanges"), api("/bindings")]);
    exchanges.update(ex);
    bindings.update(bi);
  }
  return { element, refresh };
}

export function connectionsPage(notify) {
  let refresh = async () => {};
  const close = async (event) => {
    const { name } = event.currentTarget.dataset;
    const reason = window.prompt(`Close connection ${name}? Reason:`, "Closed via management plugin");
    if (reason === null) return;
    try {
      await api(`/connections/${seg(name)}`, { method: "DELETE", headers: { "X-Reason": reason } });
      notify(`Connection ${name} closed.`);
      await refresh();
    } catch (error) {
      notify(error.message, true);
    }
  };
  const connections = new DataTable(
    "connections",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", cell: (c) => [c.name, c.user_provided_name ? h("div", { className: "subtle" }, c.user_provided_name) : null] },
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
    const [conns, chans] = await Promise.all([api("/connections"), api("/channels")]);
    connections.update(conns);
    channels.update(chans);
  };
  return { element, refresh };
}

function policyTable(id, empty) {
  return new DataTable(
    id,
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name" },
      { key: "pattern", label: "Pattern" },
      { key: "apply-to", label: "Apply to" },
      { key: "definition", label: "Definition", value: (p) => JSON.stringify(p.definition || {}), cell: (p) => JSON.stringify(p.definition || {}) },
      { key: "priority", label: "Priority", numeric: true, cell: (p) => num(p.priority) },
    ],
    { filterOn: (p) => `${p.vhost} ${p.name} ${p.pattern}`, empty },
  );
}

export function adminPage() {
  const users = new DataTable(
    "users",
    [
      { key: "name", label: "Name" },
      { key: "tags", label: "Tags", value: (u) => [].concat(u.tags || []).join(","), cell: (u) => [].concat(u.tags || []).join(", ") },
      { key: "password", label: "Has password", value: (u) => (u.password_hash ? 1 : 0), cell: (u) => (u.password_hash ? "yes" : "no") },
    ],
    { filterOn: (u) => u.name, empty: "No users." },
  );
  const vhosts = new DataTable(
    "vhosts",
    [
      { key: "name", label: "Name" },
      { key: "description", label: "Description" },
      { key: "messages_ready", label: "Ready", numeric: true, cell: (v) => num(v.messages_ready) },
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, cell: (v) => num(v.messages_unacknowledged) },
      { key: "messages", label: "Total", numeric: true, cell: (v) => num(v.messages) },
    ],
    { filterOn: (v) => v.name, empty: "No virtual hosts." },
  );
  const permissions = new DataTable(
    "permissions",
    [
      { key: "user", label: "User" },
      { key: "vhost", label: "Virtual host" },
      { key: "configure", label: "Configure regexp" },
      { key: "write", label: "Write regexp" },
      { key: "read", label: "Read regexp" },
    ],
    { filterOn: (p) => `${p.user} ${p.vhost}`, empty: "No permissions." },
  );
  const policies = policyTable("policies", "No policies.");
  const operatorPolicies = policyTable("operator-policies", "No operator policies.");
  const element = h(
    "div",
    {},
    h("h1", {}, "Admin"),
    section("Users", users),
    section("Virtual hosts", vhosts),
    section("Permissions", permissions),
    section("Policies", policies),
    section("Operator policies", operatorPolicies),
  );
  async function refresh() {
    const [u, v, p, pol, op] = await Promise.all([
      api("/users"),
      api("/vhosts"),
      api("/permissions"),
      api("/policies"),
      api("/operator-policies"),
    ]);
    users.update(u);
    vhosts.update(v);
    permissions.update(p);
    policies.update(pol);
    operatorPolicies.update(op);
  }
  return { element, refresh };
}
