// Shovels and federation: each dynamic shovel's state as /api/shovels reports it (RabbitMQ's
// "Shovel Status" page) and each federation link's as /api/federation-links does (its
// "Federation Status" page); both are defined through /api/parameters or `amqpd ctl`.

import { api } from "./api.js";
import { DataTable, h } from "./dom.js";

export function shovelsPage() {
  const shovels = new DataTable(
    "shovels",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name" },
      { key: "state", label: "State", cell: (s) => h("span", { className: `state ${s.state}` }, s.state) },
      { key: "src_uri", label: "Source", cell: (s) => [s.src_uri ?? "", h("div", { className: "subtle" }, s.src_queue ?? s.src_exchange ?? "")] },
      { key: "dest_uri", label: "Destination", cell: (s) => [s.dest_uri ?? "", h("div", { className: "subtle" }, s.dest_queue ?? s.dest_exchange ?? "")] },
      { key: "reason", label: "Reason", cell: (s) => s.reason ?? "" },
      { key: "timestamp", label: "Last changed" },
    ],
    { filterOn: (s) => `${s.vhost} ${s.name}`, empty: "No shovels. Define one with PUT /api/parameters/shovel/{vhost}/{name} or amqpd ctl set-parameter shovel." },
  );
  const federation = new DataTable(
    "federation-links",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "type", label: "Type" },
      { key: "exchange", label: "Exchange / queue", cell: (l) => l.exchange ?? l.queue ?? "" },
      { key: "upstream", label: "Upstream", cell: (l) => [l.upstream, h("div", { className: "subtle" }, l.upstream_exchange ?? l.upstream_queue ?? "")] },
      { key: "uri", label: "URI" },
      { key: "status", label: "State", cell: (l) => h("span", { className: `state ${l.status}` }, l.status) },
      { key: "error", label: "Error", cell: (l) => l.error ?? "" },
      { key: "timestamp", label: "Last changed" },
    ],
    { filterOn: (l) => `${l.vhost} ${l.exchange ?? l.queue ?? ""} ${l.upstream}`, empty: "No federation links. Define an upstream (PUT /api/parameters/federation-upstream/{vhost}/{name}) and a policy with federation-upstream-set." },
  );
  const element = h(
    "div",
    {},
    h("h1", {}, "Shovels and federation"),
    h("section", { className: "panel" }, h("h2", {}, "Shovel status"), shovels.element),
    h("section", { className: "panel" }, h("h2", {}, "Federation status"), federation.element),
  );
  async function refresh() {
    const [shovelItems, links] = await Promise.all([api("/shovels"), api("/federation-links")]);
    shovels.update(shovelItems);
    federation.update(links);
  }
  return { element, refresh };
}
