// Pieces the queue, exchange and admin pages share: a bindings table with "Unbind", the
// "Publish message" form (POST /api/exchanges/{vhost}/{name}/publish) and vhost names.

import { api, seg } from "./api.js";
import { DataTable, h } from "./dom.js";
import { field, formPanel, input, keyValues, select } from "./forms.js";

export async function vhostNames() {
  const vhosts = await api("/vhosts?columns=name");
  return vhosts.map((v) => v.name);
}

export function exchangeHref(vhost, name) {
  return `#/exchanges/${seg(vhost)}/${seg(name || "amq.default")}`;
}

/**
 * Bindings of one queue or exchange: ``show`` "source" lists where they come from (a
 * queue's, or an exchange's as a destination), "destination" where they go.
 */
export function bindingsTable(id, { vhost, notify, after, show }) {
  const unbind = async (binding) => {
    const kind = binding.destination_type === "queue" ? "q" : "e";
    const path = `/bindings/${seg(vhost)}/e/${seg(binding.source)}/${kind}/${seg(binding.destination)}/${seg(binding.properties_key)}`;
    try {
      await api(path, { method: "DELETE" });
      notify(`Unbound '${binding.destination}' from '${binding.source}'.`);
      await after();
    } catch (error) {
      notify(error.message, true);
    }
  };
  const ends =
    show === "source"
      ? [{ key: "source", label: "From", cell: (b) => (b.source === "" ? "(Default exchange binding)" : h("a", { href: exchangeHref(vhost, b.source) }, b.source)) }]
      : [
          { key: "destination", label: "To", cell: (b) => (b.destination_type === "queue" ? h("a", { href: `#/queues/${seg(vhost)}/${seg(b.destination)}` }, b.destination) : h("a", { href: exchangeHref(vhost, b.destination) }, b.destination)) },
          { key: "destination_type", label: "Type" },
        ];
  return new DataTable(
    id,
    [
      ...ends,
      { key: "routing_key", label: "Routing key" },
      { key: "arguments", label: "Arguments", value: (b) => JSON.stringify(b.arguments || {}), cell: (b) => JSON.stringify(b.arguments || {}) },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (b) => (b.source === "" ? "" : h("button", { type: "button", className: "unbind", onclick: () => unbind(b) }, "Unbind")),
      },
    ],
    { empty: "No bindings." },
  );
}

const PROPERTIES = [
  ["content_type", "string"],
  ["content_encoding", "string"],
  ["priority", "number"],
  ["correlation_id", "string"],
  ["reply_to", "string"],
  ["expiration", "string"],
  ["message_id", "string"],
  ["timestamp", "number"],
  ["type", "string"],
  ["user_id", "string"],
  ["app_id", "string"],
];

/** RabbitMQ's "Publish message" form, to ``exchange`` ("" the default exchange). */
export function publishForm({ vhost, exchange, routingKey, notify, after, title = "Publish message", note }) {
  const key = input("routing_key", { autocomplete: "off", value: routingKey ?? "" });
  const mode = select("delivery_mode", [["1", "1 - Non-persistent"], ["2", "2 - Persistent"]]);
  const headers = keyValues("headers");
  const properties = keyValues("properties", PROPERTIES);
  const payload = h("textarea", { name: "payload", rows: 4 });
  const encoding = select("payload_encoding", [["string", "String (default)"], ["base64", "Base64"]]);
  return formPanel({
    id: "publish-message",
    title,
    button: "Publish message",
    notify,
    after,
    fields: [
      note ? h("p", { className: "subtle" }, note) : null,
      h("div", { className: "grid" }, routingKey === undefined ? field("Routing key", key) : null, field("Delivery mode", mode), field("Payload encoding", encoding)),
      field("Headers", headers.element),
      field("Properties", properties.element),
      field("Payload", payload),
    ],
    submit: async () => {
      const props = { delivery_mode: Number(mode.value), ...properties.value() };
      const hdrs = headers.value();
      if (Object.keys(hdrs).length) props.headers = hdrs;
      const answer = await api(`/exchanges/${seg(vhost)}/${seg(exchange || "amq.default")}/publish`, {
        method: "POST",
        body: { properties: props, routing_key: key.value, payload: payload.value, payload_encoding: encoding.value },
      });
      return answer && answer.routed ? "Message published." : "Message published, but not routed.";
    },
  });
}
