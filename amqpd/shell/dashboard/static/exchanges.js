// Exchanges: the list, "Add a new exchange" and every binding; one exchange's page with
// its message-rate chart (the server's history), bindings from and to it (add / unbind),
// "Publish message" and delete. An exchange that does not exist says so.

import { ApiError, api, seg } from "./api.js";
import { chartBlock, drawChart, historyFromSamples } from "./chart.js";
import { DataTable, h, rate } from "./dom.js";
import { field, formPanel, input, keyValues, select, setOptions } from "./forms.js";
import { bindingsTable, exchangeHref, publishForm, vhostNames } from "./shared.js";
import { rangeQuery, scoped, selectedVhost } from "./settings.js";

const TYPES = ["direct", "fanout", "topic", "headers"];

function flags(pairs) {
  return pairs.filter(([on]) => on).map(([, text, title]) => h("abbr", { className: "tag", title }, text));
}

function section(title, table) {
  return h("section", { className: "panel" }, h("h2", {}, title), table.element);
}

const displayName = (name) => (name === "" ? "(AMQP default)" : name);

function addExchangeForm(notify, after) {
  const vhost = select("vhost", ["/"]);
  const name = input("name", { required: true, autocomplete: "off" });
  const type = select("type", TYPES);
  const durable = select("durable", [["true", "Durable"], ["false", "Transient"]]);
  const autoDelete = select("auto_delete", [["false", "No"], ["true", "Yes"]]);
  const internal = select("internal", [["false", "No"], ["true", "Yes"]]);
  const args = keyValues("arguments", [["alternate-exchange", "string"]]);
  const panel = formPanel({
    id: "add-exchange",
    title: "Add a new exchange",
    button: "Add exchange",
    notify,
    after,
    fields: [
      h(
        "div",
        { className: "grid" },
        field("Virtual host", vhost),
        field("Name", name),
        field("Type", type),
        field("Durability", durable),
        field("Auto delete", autoDelete),
        field("Internal", internal),
      ),
      field("Arguments", args.element),
    ],
    submit: async () => {
      await api(`/exchanges/${seg(vhost.value)}/${seg(name.value)}`, {
        method: "PUT",
        body: {
          type: type.value,
          durable: durable.value === "true",
          auto_delete: autoDelete.value === "true",
          internal: internal.value === "true",
          arguments: args.value(),
        },
      });
      const text = `Exchange '${name.value}' declared in virtual host '${vhost.value}'.`;
      name.value = "";
      args.reset();
      return text;
    },
  });
  return { panel, vhost, type };
}

export function exchangesPage(notify) {
  let refresh = async () => {};
  const exchanges = new DataTable(
    "exchanges",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", cell: (e) => h("a", { href: exchangeHref(e.vhost, e.name) }, displayName(e.name)) },
      { key: "type", label: "Type" },
      {
        key: "features",
        label: "Features",
        value: (e) => (e.durable ? 1 : 0),
        cell: (e) => flags([[e.durable, "D", "durable"], [e.auto_delete, "AD", "auto-delete"], [e.internal, "I", "internal"]]),
      },
      { key: "policy", label: "Policy", value: (e) => e.policy || "", cell: (e) => (e.policy ? h("span", { className: "tag policy" }, e.policy) : "") },
      { key: "in", label: "Message rate in", numeric: true, value: (e) => e.message_stats?.publish_in_details?.rate ?? 0, cell: (e) => rate(e.message_stats?.publish_in_details) },
      { key: "out", label: "Message rate out", numeric: true, value: (e) => e.message_stats?.publish_out_details?.rate ?? 0, cell: (e) => rate(e.message_stats?.publish_out_details) },
    ],
    { filterOn: (e) => e.name, empty: "No exchanges." },
  );
  const bindings = new DataTable(
    "bindings",
    [
      { key: "vhost", label: "Virtual host" },
      { key: "source", label: "From", cell: (b) => displayName(b.source) },
      { key: "destination", label: "To" },
      { key: "destination_type", label: "Type" },
      { key: "routing_key", label: "Routing key" },
      { key: "arguments", label: "Arguments", value: (b) => JSON.stringify(b.arguments || {}), cell: (b) => JSON.stringify(b.arguments || {}) },
    ],
    { filterOn: (b) => `${b.source} ${b.destination} ${b.routing_key}`, empty: "No bindings." },
  );
  const add = addExchangeForm(notify, () => refresh());
  const element = h("div", {}, h("h1", {}, "Exchanges"), section("All exchanges", exchanges), add.panel, section("Bindings", bindings));
  refresh = async () => {
    const [ex, bi, vhosts] = await Promise.all([api(scoped("/exchanges")), api(scoped("/bindings")), vhostNames()]);
    exchanges.update(ex);
    bindings.update(bi);
    setOptions(add.vhost, vhosts, add.vhost.value === "/" && selectedVhost() ? selectedVhost() : add.vhost.value);
  };
  return { element, refresh };
}

const RATE_SERIES = [
  { name: "publish_in", label: "Publish (in)" },
  { name: "publish_out", label: "Publish (out)" },
];

export function exchangePage(vhost, name, notify) {
  const apiName = name === "" ? "amq.default" : name;
  const path = `/exchanges/${seg(vhost)}/${seg(apiName)}`;
  const facts = h("tbody");
  const chart = chartBlock("chart-exchange-rates", "Message rates");
  let history = historyFromSamples([]);
  let refresh = async () => {};
  const after = () => refresh();
  const outgoing = bindingsTable("exchange-source-bindings", { vhost, notify, after, show: "destination" });
  const incoming = bindingsTable("exchange-destination-bindings", { vhost, notify, after, show: "source" });
  const destinationType = select("destination_type", [["q", "To queue"], ["e", "To exchange"]]);
  const destination = input("destination", { required: true, autocomplete: "off", list: "destination-names" });
  const key = input("routing_key", { autocomplete: "off" });
  const args = keyValues("binding-arguments");
  const names = h("datalist", { id: "destination-names" });
  const bindForm = formPanel({
    id: "add-binding",
    title: "Add binding from this exchange",
    button: "Bind",
    notify,
    after,
    fields: [
      h("div", { className: "grid" }, field("Destination", destinationType), field("Name", destination), field("Routing key", key)),
      field("Arguments", args.element),
    ],
    submit: async () => {
      await api(`/bindings/${seg(vhost)}/e/${seg(apiName)}/${destinationType.value}/${seg(destination.value)}`, {
        method: "POST",
        body: { routing_key: key.value, arguments: args.value() },
      });
      const text = `'${destination.value}' bound to exchange '${displayName(name)}'.`;
      key.value = "";
      args.reset();
      return text;
    },
  });
  const removable = name !== "" && !name.startsWith("amq.");
  const present = h(
    "div",
    {},
    chart.element,
    h("section", { className: "panel" }, h("h2", {}, "Details"), h("table", { className: "facts" }, facts)),
    h("section", { className: "panel" }, h("h2", {}, "Bindings from this exchange"), outgoing.element),
    name === "" ? null : bindForm,
    h("section", { className: "panel" }, h("h2", {}, "Bindings to this exchange"), incoming.element),
    publishForm({ vhost, exchange: name, notify, after }),
    removable
      ? h(
          "section",
          { className: "panel" },
          h("h2", {}, "Delete this exchange"),
          h("button", {
            type: "button",
            className: "delete danger",
            onclick: async () => {
              if (!window.confirm(`Delete exchange '${name}'?`)) return;
              try {
                await api(path, { method: "DELETE" });
                notify(`Exchange '${name}' deleted.`);
                window.location.hash = "#/exchanges";
              } catch (error) {
                notify(error.message, true);
              }
            },
          }, "Delete"),
        )
      : null,
    names,
  );
  const missing = h(
    "section",
    { className: "panel missing", id: "missing", hidden: true },
    h("h2", {}, "Not found"),
    h("p", {}, `Exchange '${name}' does not exist in virtual host '${vhost}'. It may have been deleted.`),
    h("a", { href: "#/exchanges" }, "All exchanges"),
  );
  const element = h(
    "div",
    {},
    h("h1", {}, "Exchange ", h("b", {}, displayName(name)), h("span", { className: "subtle" }, ` in virtual host ${vhost}`)),
    missing,
    present,
  );
  function draw() {
    if (!present.hidden) drawChart(chart.canvas, chart.legend, history, RATE_SERIES, "/s");
  }
  refresh = async () => {
    let e;
    try {
      e = await api(`${path}?${rangeQuery("msg_rates")}`);
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
    const stats = e.message_stats || {};
    history = historyFromSamples(RATE_SERIES.map((s) => ({ name: s.name, samples: stats[`${s.name}_details`]?.samples, rate: true })));
    draw();
    facts.replaceChildren(
      ...[
        ["Type", e.type],
        ["Features", h("span", {}, flags([[e.durable, "durable", "durable"], [e.auto_delete, "auto-delete", "auto-delete"], [e.internal, "internal", "internal"]]))],
        ["Policy", e.policy || ""],
        ["Arguments", JSON.stringify(e.arguments || {})],
      ].map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))),
    );
    const [source, dest, queues, exchanges] = await Promise.all([
      api(`${path}/bindings/source`),
      api(`${path}/bindings/destination`),
      api(`/queues/${seg(vhost)}?columns=name`),
      api(`/exchanges/${seg(vhost)}?columns=name`),
    ]);
    outgoing.update(source);
    incoming.update(dest);
    const pool = destinationType.value === "q" ? queues : exchanges.filter((x) => x.name);
    names.replaceChildren(...pool.map((x) => h("option", { value: x.name })));
  };
  return { element, refresh, resize: draw };
}
