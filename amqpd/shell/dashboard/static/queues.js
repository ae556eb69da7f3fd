// Queues: the sortable, filterable list with purge and delete, and one queue's page with
// its details, its consumers and "Get messages".

import { api, seg } from "./api.js";
import { DataTable, bytes, h, num, rate } from "./dom.js";

function features(queue) {
  const tags = [];
  if (queue.durable) tags.push(["D", "durable"]);
  if (queue.auto_delete) tags.push(["AD", "auto-delete"]);
  if (queue.exclusive) tags.push(["Excl", "exclusive"]);
  for (const key of Object.keys(queue.arguments || {})) tags.push([key.replace(/^x-/, ""), key]);
  return tags.map(([text, title]) => h("abbr", { className: "tag", title }, text));
}

function queueLink(queue) {
  return h("a", { href: `#/queues/${seg(queue.vhost)}/${seg(queue.name)}` }, queue.name);
}

export async function purgeQueue(vhost, name, notify) {
  if (!window.confirm(`Purge all messages in queue '${name}'?`)) return false;
  await api(`/queues/${seg(vhost)}/${seg(name)}/contents`, { method: "DELETE" });
  notify(`Queue '${name}' purged.`);
  return true;
}

export async function deleteQueue(vhost, name, notify) {
  if (!window.confirm(`Delete queue '${name}'?`)) return false;
  await api(`/queues/${seg(vhost)}/${seg(name)}`, { method: "DELETE" });
  notify(`Queue '${name}' deleted.`);
  return true;
}

export function queuesPage(notify) {
  let refresh = async () => {};
  const act = (action) => async (event) => {
    const { vhost, name } = event.currentTarget.dataset;
    try {
      if (await action(vhost, name, notify)) await refresh();
    } catch (error) {
      notify(error.message, true);
    }
  };
  const table = new DataTable(
    "queues",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", cell: queueLink },
      { key: "type", label: "Type" },
      { key: "features", label: "Features", value: (q) => Object.keys(q.arguments || {}).length, cell: features },
      { key: "state", label: "State" },
      { key: "messages_ready", label: "Ready", numeric: true, cell: (q) => num(q.messages_ready) },
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, cell: (q) => num(q.messages_unacknowledged) },
      { key: "messages", label: "Total", numeric: true, cell: (q) => num(q.messages) },
      { key: "consumers", label: "Consumers", numeric: true, cell: (q) => num(q.consumers) },
      {
        key: "incoming",
        label: "Incoming",
        numeric: true,
        value: (q) => q.message_stats?.publish_details?.rate ?? 0,
        cell: (q) => rate(q.message_stats?.publish_details),
      },
      {
        key: "deliver",
        label: "Deliver / get",
        numeric: true,
        value: (q) => q.message_stats?.deliver_get_details?.rate ?? 0,
        cell: (q) => rate(q.message_stats?.deliver_get_details),
      },
      {
        key: "ack",
        label: "Ack",
        numeric: true,
        value: (q) => q.message_stats?.ack_details?.rate ?? 0,
        cell: (q) => rate(q.message_stats?.ack_details),
      },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (q) => [
          h("button", { type: "button", className: "purge", dataset: { vhost: q.vhost, name: q.name }, onclick: act(purgeQueue) }, "Purge"),
          h("button", { type: "button", className: "delete danger", dataset: { vhost: q.vhost, name: q.name }, onclick: act(deleteQueue) }, "Delete"),
        ],
      },
    ],
    { filterOn: (q) => q.name, empty: "No queues." },
  );
  table.sortKey = "name";
  const element = h("div", {}, h("h1", {}, "Queues"), h("section", { className: "panel" }, table.element));
  refresh = async () => {
    table.update(await api("/queues"));
  };
  return { element, refresh };
}

function definitionList(pairs) {
  return h(
    "table",
    { className: "facts" },
    h("tbody", {}, pairs.map(([key, value]) => h("tr", {}, h("th", {}, key), h("td", {}, value)))),
  );
}

function showMessages(target, messages) {
  if (!messages.length) {
    target.replaceChildren(h("p", { className: "empty" }, "Queue is empty."));
    return;
  }
  target.replaceChildren(
    ...messages.map((m, index) =>
      h(
        "div",
        { className: "message" },
        h("h3", {}, `Message ${index + 1}`),
        definitionList([
          ["Exchange", m.exchange === "" ? "(AMQP default)" : m.exchange],
          ["Routing key", m.routing_key],
          ["Redelivered", String(m.redelivered)],
          ["Remaining messages", num(m.message_count)],
          ["Properties", JSON.stringify(m.properties || {})],
          ["Payload", `${num(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`],
        ]),
        h("pre", { className: "payload" }, m.payload),
      ),
    ),
  );
}

export function queuePage(vhost, name, notify) {
  const path = `/queues/${seg(vhost)}/${seg(name)}`;
  const facts = h("div");
  const consumers = h("tbody");
  const output = h("div", { id: "messages" });
  const count = h("input", { type: "number", name: "count", min: 1, value: 1 });
  const ackmode = h(
    "select",
    { name: "ackmode" },
    h("option", { value: "ack_requeue_true" }, "Nack message requeue true"),
    h("option", { value: "ack_requeue_false" }, "Automatic ack"),
    h("option", { value: "reject_requeue_true" }, "Reject requeue true"),
    h("option", { value: "reject_requeue_false" }, "Reject requeue false"),
  );
  const encoding = h(
    "select",
    { name: "encoding" },
    h("option", { value: "auto" }, "Automatic string/base64"),
    h("option", { value: "base64" }, "base64"),
  );
  let refresh = async () => {};
  const form = h(
    "form",
    {
      id: "get-messages",
      className: "inline-form",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const messages = await api(`${path}/get`, {
            method: "POST",
            body: { count: Number(count.value) || 1, ackmode: ackmode.value, encoding: encoding.value, truncate: 50000 },
          });
          showMessages(output, messages);
          await refresh();
        } catch (error) {
          notify(error.message, true);
        }
      },
    },
    h("label", {}, "Ack mode ", ackmode),
    h("label", {}, "Encoding ", encoding),
    h("label", {}, "Messages ", count),
    h("button", { type: "submit" }, "Get message(s)"),
  );
  const buttons = h(
    "div",
    { className: "toolbar" },
    h("button", {
      type: "button", className: "purge",
      onclick: async () => {
        try {
          if (await purgeQueue(vhost, name, notify)) await refresh();
        } catch (error) {
          notify(error.message, true);
        }
      },
    }, "Purge messages"),
    h("button", {
      type: "button", className: "delete danger",
      onclick: async () => {
        try {
          if (await deleteQueue(vhost, name, notify)) window.location.hash = "#/queues";
        } catch (error) {
          notify(error.message, true);
        }
      },
    }, "Delete queue"),
  );
  const element = h(
    "div",
    {},
    h("h1", {}, "Queue ", h("b", {}, name), h("span", { className: "subtle" }, ` in virtual host ${vhost}`)),
    h("section", { className: "panel" }, h("h2", {}, "Details"), facts),
    h(
      "section",
      { className: "panel" },
      h("h2", {}, "Consumers"),
      h(
        "table",
        { className: "list" },
        h("thead", {}, h("tr", {}, ["Channel", "Consumer tag", "Ack required", "Exclusive", "Prefetch"].map((t) => h("th", {}, t)))),
        consumers,
      ),
    ),
    h("section", { className: "panel" }, h("h2", {}, "Get messages"), h("p", { className: "subtle" }, "Getting messages from a queue is a destructive action."), form, output),
    h("section", { className: "panel" }, h("h2", {}, "Purge and delete"), buttons),
  );
  refresh = async () => {
    const q = await api(path);
    facts.replaceChildren(
      definitionList([
        ["Type", q.type],
        ["Features", h("span", {}, features(q))],
        ["State", q.state],
        ["Consumers", num(q.consumers)],
        ["Consumer capacity", q.consumer_utilisation === null || q.consumer_utilisation === undefined ? "" : `${Math.round(q.consumer_utilisation * 100)}%`],
        ["Messages (ready / unacked / total)", `${num(q.messages_ready)} / ${num(q.messages_unacknowledged)} / ${num(q.messages)}`],
        ["Message body bytes", bytes(q.message_bytes)],
        ["Arguments", JSON.stringify(q.arguments || {})],
      ]),
    );
    // RabbitMQ puts them in the queue's consumer_details; otherwise ask /api/consumers
    const details =
      q.consumer_details ||
      (await api(`/consumers/${seg(vhost)}`)).filter((c) => c.queue && c.queue.name === name);
    consumers.replaceChildren(
      ...(details.length
        ? details.map((c) =>
            h(
              "tr",
              {},
              h("td", {}, c.channel_details?.name ?? ""),
              h("td", {}, c.consumer_tag),
              h("td", {}, String(c.ack_required)),
              h("td", {}, String(c.exclusive)),
              h("td", { className: "num" }, num(c.prefetch_count)),
            ),
          )
        : [h("tr", {}, h("td", { colspan: 5, className: "empty" }, "No consumers."))]),
    );
  };
  return { element, refresh };
}
