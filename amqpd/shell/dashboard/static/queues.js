// Queues: the list (with its policies) and "Add a new queue"; one queue's page with its
// charts (the server's history), details, consumers, bindings (add / unbind), "Publish
// message", "Get messages", "Move messages" (a dynamic shovel, as RabbitMQ's UI creates),
// purge and delete. A queue that does not exist says so. A stream (streams.js) shows its
// log's facts and each consumer's offset, and offers no get, purge or move.

import { ApiError, api, seg } from "./api.js";
import { chartBlock, drawChart, historyFromSamples } from "./chart.js";
import { DataTable, bytes, h, num, rate } from "./dom.js";
import { field, formPanel, input, keyValues, select, setOptions } from "./forms.js";
import { bindingsTable, publishForm, vhostNames } from "./shared.js";
import { rangeQuery, scoped, selectedVhost } from "./settings.js";
import { STREAM_ARGUMENTS, consumerOffset, isStream, streamFacts, streamRules } from "./streams.js";

export const QUEUE_ARGUMENTS = [
  ["x-message-ttl", "number"],
  ["x-expires", "number"],
  ["x-max-length", "number"],
  ["x-max-length-bytes", "number"],
  ["x-overflow", "string"],
  ["x-dead-letter-exchange", "string"],
  ["x-dead-letter-routing-key", "string"],
  ["x-single-active-consumer", "boolean"],
  ["x-max-priority", "number"],
  ["x-queue-mode", "string"],
  ...STREAM_ARGUMENTS,
];

function features(queue) {
  const tags = [];
  if (queue.durable) tags.push(["D", "durable"]);
  if (queue.auto_delete) tags.push(["AD", "auto-delete"]);
  if (queue.exclusive) tags.push(["Excl", "exclusive"]);
  for (const key of Object.keys(queue.arguments || {})) tags.push([key.replace(/^x-/, ""), key]);
  return tags.map(([text, title]) => h("abbr", { className: "tag", title }, text));
}

function policies(queue) {
  return [
    queue.policy ? h("span", { className: "tag policy", title: "policy" }, queue.policy) : null,
    queue.operator_policy ? h("span", { className: "tag policy operator", title: "operator policy" }, queue.operator_policy) : null,
  ];
}

export function queueHref(vhost, name) {
  return `#/queues/${seg(vhost)}/${seg(name)}`;
}

function queueLink(queue) {
  return h("a", { href: queueHref(queue.vhost, queue.name) }, queue.name);
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

function addQueueForm(notify, after) {
  const vhost = select("vhost", ["/"]);
  const type = select("type", [["classic", "Classic"], ["quorum", "Quorum"], ["stream", "Stream"]]);
  const name = input("name", { required: true, autocomplete: "off" });
  const durable = select("durable", [["true", "Durable"], ["false", "Transient"]]);
  const autoDelete = select("auto_delete", [["false", "No"], ["true", "Yes"]]);
  const args = keyValues("arguments", QUEUE_ARGUMENTS);
  const rules = streamRules(type, durable, autoDelete);
  const panel = formPanel({
    id: "add-queue",
    title: "Add a new queue",
    button: "Add queue",
    notify,
    after,
    fields: [
      h("div", { className: "grid" }, field("Virtual host", vhost), field("Type", type), field("Name", name), field("Durability", durable), field("Auto delete", autoDelete)),
      rules.note,
      field("Arguments", args.element),
    ],
    submit: async () => {
      const argumentsValue = args.value();
      if (type.value !== "classic") argumentsValue["x-queue-type"] = type.value;
      await api(`/queues/${seg(vhost.value)}/${seg(name.value)}`, {
        method: "PUT",
        body: { durable: durable.value === "true", auto_delete: autoDelete.value === "true", arguments: argumentsValue },
      });
      const text = `Queue '${name.value}' declared in virtual host '${vhost.value}'.`;
      name.value = "";
      args.reset();
      rules.apply();
      return text;
    },
  });
  return { panel, vhost };
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
      { key: "policy", label: "Policy", value: (q) => q.policy || q.operator_policy || "", cell: policies },
      { key: "state", label: "State" },
      { key: "messages_ready", label: "Ready", numeric: true, cell: (q) => num(q.messages_ready) },
      // a stream keeps acked messages: its deliveries awaiting ack are no part of its count
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, value: (q) => (isStream(q) ? 0 : q.messages_unacknowledged), cell: (q) => (isStream(q) ? h("span", { className: "subtle", title: "A stream keeps its messages after acks" }, "–") : num(q.messages_unacknowledged)) },
      { key: "messages", label: "Total", numeric: true, cell: (q) => num(q.messages) },
      { key: "consumers", label: "Consumers", numeric: true, cell: (q) => num(q.consumers) },
      { key: "incoming", label: "Incoming", numeric: true, value: (q) => q.message_stats?.publish_details?.rate ?? 0, cell: (q) => rate(q.message_stats?.publish_details) },
      { key: "deliver", label: "Deliver / get", numeric: true, value: (q) => q.message_stats?.deliver_get_details?.rate ?? 0, cell: (q) => rate(q.message_stats?.deliver_get_details) },
      { key: "ack", label: "Ack", numeric: true, value: (q) => q.message_stats?.ack_details?.rate ?? 0, cell: (q) => rate(q.message_stats?.ack_details) },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (q) => [
          isStream(q) ? null : h("button", { type: "button", className: "purge", dataset: { vhost: q.vhost, name: q.name }, onclick: act(purgeQueue) }, "Purge"),
          h("button", { type: "button", className: "delete danger", dataset: { vhost: q.vhost, name: q.name }, onclick: act(deleteQueue) }, "Delete"),
        ],
      },
    ],
    { filterOn: (q) => q.name, empty: "No queues." },
  );
  table.sortKey = "name";
  const add = addQueueForm(notify, () => refresh());
  const element = h("div", {}, h("h1", {}, "Queues"), h("section", { className: "panel" }, table.element), add.panel);
  refresh = async () => {
    const [queues, vhosts] = await Promise.all([api(scoped("/queues")), vhostNames()]);
    table.update(queues);
    setOptions(add.vhost, vhosts, add.vhost.value === "/" && selectedVhost() ? selectedVhost() : add.vhost.value);
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

// a stream's ready samples are its kept messages (engine/stream_inventory.py: sampled_ready)
const STREAM_DEPTH_SERIES = [{ name: "ready", label: "Messages kept" }];
const DEPTH_SERIES = [
  { name: "ready", label: "Ready", stack: true },
  { name: "unacked", label: "Unacked", stack: true },
  { name: "total", label: "Total" },
];
const RATE_SERIES = [
  { name: "publish", label: "Publish" },
  { name: "deliver_get", label: "Deliver / get" },
  { name: "redeliver", label: "Redelivered" },
  { name: "ack", label: "Consumer ack" },
];

function getForm(path, notify, after) {
  const output = h("div", { id: "messages" });
  const count = h("input", { type: "number", name: "count", min: 1, value: 1 });
  const ackmode = select("ackmode", [
    ["ack_requeue_true", "Nack message requeue true"],
    ["ack_requeue_false", "Automatic ack"],
    ["reject_requeue_true", "Reject requeue true"],
    ["reject_requeue_false", "Reject requeue false"],
  ]);
  const encoding = select("encoding", [["auto", "Automatic string/base64"], ["base64", "base64"]]);
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
          await after();
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
  return h("section", { className: "panel", id: "get-messages-section" }, h("h2", {}, "Get messages"), h("p", { className: "subtle" }, "Getting messages from a queue is a destructive action."), form, output);
}

/** RabbitMQ's "Move messages": a dynamic shovel that empties this queue into another. */
function moveForm(vhost, name, notify) {
  const destination = input("destination", { required: true, autocomplete: "off", list: "queue-names" });
  return formPanel({
    id: "move-messages",
    title: "Move messages",
    button: "Move messages",
    notify,
    fields: [
      h("p", { className: "subtle" }, "Creates a dynamic shovel that moves the messages in this queue (as many as it holds now) to another queue of this virtual host, then removes itself."),
      field("Destination queue", destination),
    ],
    submit: async () => {
      const uri = `amqp:///${seg(vhost)}`;
      const shovel = `Move from ${name}`;
      await api(`/parameters/shovel/${seg(vhost)}/${seg(shovel)}`, {
        method: "PUT",
        body: {
          component: "shovel",
          vhost,
          name: shovel,
          value: {
            "src-uri": uri,
            "src-queue": name,
            "src-protocol": "amqp091",
            "src-prefetch-count": 1000,
            "src-delete-after": "queue-length",
            "dest-protocol": "amqp091",
            "dest-uri": uri,
            "dest-add-forward-headers": false,
            "ack-mode": "on-confirm",
            "dest-queue": destination.value,
          },
        },
      });
      return `Moving the messages of '${name}' to '${destination.value}' (shovel '${shovel}').`;
    },
  });
}

export function queuePage(vhost, name, notify) {
  const path = `/queues/${seg(vhost)}/${seg(name)}`;
  const facts = h("div");
  const streamPanel = h("section", { className: "panel", id: "stream", hidden: true }, h("h2", {}, "Stream"));
  const consumers = h("tbody");
  const offsetHeader = h("th", { hidden: true, title: "The next offset the consumer will be sent" }, "Offset");
  const queued = chartBlock("chart-queue-depth", "Queued messages");
  const rates = chartBlock("chart-queue-rates", "Message rates");
  let depthHistory = historyFromSamples([]);
  let rateHistory = historyFromSamples([]);
  let depthSeries = DEPTH_SERIES;
  const queueNames = h("datalist", { id: "queue-names" });
  let refresh = async () => {};
  const bindings = bindingsTable("queue-bindings", { vhost, notify, after: () => refresh(), show: "source" });
  const bindParts = {
    source: input("source", { required: true, autocomplete: "off", list: "exchange-names" }),
    key: input("routing_key", { autocomplete: "off" }),
    args: keyValues("binding-arguments"),
  };
  const bindForm = formPanel({
    id: "add-binding",
    title: "Add binding to this queue",
    button: "Bind",
    notify,
    after: () => refresh(),
    fields: [
      h("div", { className: "grid" }, field("From exchange", bindParts.source), field("Routing key", bindParts.key)),
      field("Arguments", bindParts.args.element),
    ],
    submit: async () => {
      const { source, key, args } = bindParts;
      await api(`/bindings/${seg(vhost)}/e/${seg(source.value)}/q/${seg(name)}`, {
        method: "POST",
        body: { routing_key: key.value, arguments: args.value() },
      });
      const text = `Queue '${name}' bound to exchange '${source.value}'.`;
      key.value = "";
      args.reset();
      return text;
    },
  });
  const exchangeNames = h("datalist", { id: "exchange-names" });
  const publish = publishForm({ vhost, exchange: "", routingKey: name, notify, after: () => refresh(), title: "Publish message", note: "Published to the default exchange with this queue's name as the routing key." });
  const buttons = h(
    "div",
    { className: "toolbar" },
    h("button", {
      type: "button", className: "purge", id: "purge-queue",
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
  // what a stream refuses (RabbitMQ answers get, purge and a shovel's get with errors)
  const getPanel = getForm(path, notify, () => refresh());
  const movePanel = moveForm(vhost, name, notify);
  const purgeTitle = h("h2", {}, "Purge and delete");
  const present = h(
    "div",
    {},
    h("div", { className: "charts" }, queued.element, rates.element),
    h("section", { className: "panel" }, h("h2", {}, "Details"), facts),
    streamPanel,
    h(
      "section",
      { className: "panel" },
      h("h2", {}, "Consumers"),
      h(
        "div",
        { className: "table-wrap" },
        h(
          "table",
          { className: "list", id: "consumers" },
          h("thead", {}, h("tr", {}, ["Channel", "Consumer tag", "Ack required", "Exclusive", "Prefetch"].map((t) => h("th", {}, t)), offsetHeader)),
          consumers,
        ),
      ),
    ),
    h("section", { className: "panel" }, h("h2", {}, "Bindings"), bindings.element),
    bindForm,
    publish,
    getPanel,
    movePanel,
    h("section", { className: "panel" }, purgeTitle, buttons),
    queueNames,
    exchangeNames,
  );
  const missing = h(
    "section",
    { className: "panel missing", id: "missing", hidden: true },
    h("h2", {}, "Not found"),
    h("p", {}, `Queue '${name}' does not exist in virtual host '${vhost}'. It may have been deleted.`),
    h("a", { href: "#/queues" }, "All queues"),
  );
  const element = h(
    "div",
    {},
    h("h1", {}, "Queue ", h("b", {}, name), h("span", { className: "subtle" }, ` in virtual host ${vhost}`)),
    missing,
    present,
  );
  function draw() {
    if (present.hidden) return;
    drawChart(queued.canvas, queued.legend, depthHistory, depthSeries);
    drawChart(rates.canvas, rates.legend, rateHistory, RATE_SERIES, "/s");
  }
  refresh = async () => {
    let q;
    try {
      q = await api(`${path}?${rangeQuery("lengths", "msg_rates")}`);
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
    const stream = isStream(q);
    depthSeries = stream ? STREAM_DEPTH_SERIES : DEPTH_SERIES;
    for (const refused of [getPanel, movePanel, buttons.querySelector("#purge-queue")]) refused.hidden = stream;
    purgeTitle.textContent = stream ? "Delete" : "Purge and delete";
    streamPanel.hidden = !stream;
    offsetHeader.hidden = !stream;
    if (stream) streamPanel.replaceChildren(h("h2", {}, "Stream"), definitionList(streamFacts(q)));
    depthHistory = historyFromSamples([
      { name: "ready", samples: q.messages_ready_details?.samples },
      { name: "unacked", samples: q.messages_unacknowledged_details?.samples },
      { name: "total", samples: q.messages_details?.samples },
    ]);
    const stats = q.message_stats || {};
    rateHistory = historyFromSamples(RATE_SERIES.map(({ name: series }) => ({ name: series, samples: stats[`${series}_details`]?.samples, rate: true })));
    draw();
    facts.replaceChildren(
      definitionList([
        ["Type", q.type],
        ["Features", h("span", {}, features(q))],
        ["Policy", h("span", {}, policies(q))],
        ["State", q.state],
        ["Consumers", num(q.consumers)],
        ["Consumer capacity", q.consumer_utilisation === null || q.consumer_utilisation === undefined ? "" : `${Math.round(q.consumer_utilisation * 100)}%`],
        // a stream's count and size are in its own panel
        ...(stream
          ? []
          : [
              ["Messages (ready / unacked / total)", `${num(q.messages_ready)} / ${num(q.messages_unacknowledged)} / ${num(q.messages)}`],
              ["Message body bytes", bytes(q.message_bytes)],
            ]),
        ["Arguments", JSON.stringify(q.arguments || {})],
        ["Effective policy definition", JSON.stringify(q.effective_policy_definition || {})],
      ]),
    );
    const [details, bound, queues, exchanges] = await Promise.all([
      // RabbitMQ puts them in the queue's consumer_details; otherwise ask /api/consumers
      q.consumer_details || api(`/consumers/${seg(vhost)}`).then((all) => all.filter((c) => c.queue && c.queue.name === name)),
      api(`${path}/bindings`),
      api(`/queues/${seg(vhost)}?columns=name`),
      api(`/exchanges/${seg(vhost)}?columns=name`),
    ]);
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
              stream ? h("td", { className: "num offset" }, consumerOffset(c, q)) : null,
            ),
          )
        : [h("tr", {}, h("td", { colspan: stream ? 6 : 5, className: "empty" }, "No consumers."))]),
    );
    bindings.update(bound);
    queueNames.replaceChildren(...queues.filter((x) => x.name !== name).map((x) => h("option", { value: x.name })));
    exchangeNames.replaceChildren(...exchanges.filter((x) => x.name).map((x) => h("option", { value: x.name })));
  };
  return { element, refresh, resize: draw };
}
