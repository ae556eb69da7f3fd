// Shovels: each dynamic shovel's state as /api/shovels reports it (RabbitMQ's "Shovel
// Status" page); shovels are defined through /api/parameters/shovel or `amqpd ctl`.

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
  const element = h("div", {}, h("h1", {}, "Shovels"), h("section", { className: "panel" }, h("h2", {}, "Shovel status"), shovels.element));
  async function refresh() {
    shovels.update(await api("/shovels"));
  }
  return { element, refresh };
}
