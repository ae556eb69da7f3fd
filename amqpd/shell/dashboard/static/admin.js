// The admin page (administrators): users, virtual hosts, permissions, policies and
// operator policies, virtual host and user limits, each listed with a form to add or
// update one (a row's "Edit" fills the form) and a button to remove it, as RabbitMQ's UI.

import { ApiError, api, seg } from "./api.js";
import { DataTable, h, num } from "./dom.js";
import { field, formPanel, input, keyValues, select, setOptions } from "./forms.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

function section(title, table, form) {
  return h("section", { className: "panel" }, h("h2", {}, title), table.element, form);
}

function rowButton(label, className, onclick) {
  return h("button", { type: "button", className, onclick }, label);
}

const tagList = (tags) => [].concat(tags || []).join(",");

export function adminPage(notify) {
  let refresh = async () => {};
  const after = () => refresh();
  const remove = (what, path) => async () => {
    if (!window.confirm(`Delete ${what}?`)) return;
    try {
      await api(path, { method: "DELETE" });
      notify(`Deleted ${what}.`);
      await refresh();
    } catch (error) {
      notify(error.message, true);
    }
  };

  // -- users ---------------------------------------------------------------------------
  const userName = input("username", { required: true, autocomplete: "off" });
  const password = input("password", { type: "password", autocomplete: "new-password" });
  const tags = input("tags", { autocomplete: "off", placeholder: "administrator,monitoring" });
  const tagButtons = h(
    "div",
    { className: "kv-hints" },
    "Set: ",
    TAGS.map((tag) =>
      h("button", {
        type: "button",
        className: "link",
        onclick: () => {
          const current = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
          if (!current.includes(tag)) current.push(tag);
          tags.value = current.join(",");
        },
      }, tag),
    ),
  );
  const userForm = formPanel({
    id: "add-user",
    title: "Add / update a user",
    button: "Add / update user",
    notify,
    after,
    fields: [
      h("div", { className: "grid" }, field("Username", userName), field("Password", password, "Empty: keep the current one (or none for a new user)"), field("Tags", tags)),
      tagButtons,
    ],
    submit: async () => {
      const body = { tags: tags.value };
      if (password.value) body.password = password.value;
      await api(`/users/${seg(userName.value)}`, { method: "PUT", body });
      const text = `User '${userName.value}' saved.`;
      password.value = "";
      return text;
    },
  });
  const users = new DataTable(
    "users",
    [
      { key: "name", label: "Name" },
      { key: "tags", label: "Tags", value: (u) => tagList(u.tags), cell: (u) => tagList(u.tags).replaceAll(",", ", ") },
      { key: "password", label: "Has password", value: (u) => (u.password_hash ? 1 : 0), cell: (u) => (u.password_hash ? "yes" : "no") },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (u) => [
          rowButton("Edit", "edit", () => {
            userName.value = u.name;
            tags.value = tagList(u.tags);
            userForm.open = true;
            password.focus();
          }),
          rowButton("Delete", "delete danger", remove(`user '${u.name}'`, `/users/${seg(u.name)}`)),
        ],
      },
    ],
    { filterOn: (u) => u.name, empty: "No users." },
  );

  // -- virtual hosts -------------------------------------------------------------------
  const vhostName = input("vhost", { required: true, autocomplete: "off" });
  const description = input("description", { autocomplete: "off" });
  const vhostTags = input("vhost_tags", { autocomplete: "off" });
  const queueType = select("default_queue_type", [["", "(none)"], ["classic", "classic"], ["quorum", "quorum"]]);
  const vhostForm = formPanel({
    id: "add-vhost",
    title: "Add / update a virtual host",
    button: "Add / update virtual host",
    notify,
    after,
    fields: [h("div", { className: "grid" }, field("Name", vhostName), field("Description", description), field("Tags", vhostTags), field("Default queue type", queueType))],
    submit: async () => {
      const body = { description: description.value, tags: vhostTags.value };
      if (queueType.value) body.default_queue_type = queueType.value;
      await api(`/vhosts/${seg(vhostName.value)}`, { method: "PUT", body });
      return `Virtual host '${vhostName.value}' saved.`;
    },
  });
  const vhosts = new DataTable(
    "vhosts",
    [
      { key: "name", label: "Name" },
      { key: "description", label: "Description" },
      { key: "messages_ready", label: "Ready", numeric: true, cell: (v) => num(v.messages_ready) },
      { key: "messages_unacknowledged", label: "Unacked", numeric: true, cell: (v) => num(v.messages_unacknowledged) },
      { key: "messages", label: "Total", numeric: true, cell: (v) => num(v.messages) },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (v) => [
          rowButton("Edit", "edit", () => {
            vhostName.value = v.name;
            description.value = v.description || "";
            vhostTags.value = tagList(v.tags);
            vhostForm.open = true;
          }),
          rowButton("Delete", "delete danger", remove(`virtual host '${v.name}'`, `/vhosts/${seg(v.name)}`)),
        ],
      },
    ],
    { filterOn: (v) => v.name, empty: "No virtual hosts." },
  );

  // -- permissions ---------------------------------------------------------------------
  const permUser = select("user", []);
  const permVhost = select("vhost", []);
  const configure = input("configure", { value: ".*" });
  const write = input("write", { value: ".*" });
  const read = input("read", { value: ".*" });
  const permissionForm = formPanel({
    id: "set-permission",
    title: "Set permission",
    button: "Set permission",
    notify,
    after,
    fields: [h("div", { className: "grid" }, field("User", permUser), field("Virtual host", permVhost), field("Configure regexp", configure), field("Write regexp", write), field("Read regexp", read))],
    submit: async () => {
      await api(`/permissions/${seg(permVhost.value)}/${seg(permUser.value)}`, {
        method: "PUT",
        body: { configure: configure.value, write: write.value, read: read.value },
      });
      return `Permissions of '${permUser.value}' in '${permVhost.value}' set.`;
    },
  });
  const permissions = new DataTable(
    "permissions",
    [
      { key: "user", label: "User" },
      { key: "vhost", label: "Virtual host" },
      { key: "configure", label: "Configure regexp" },
      { key: "write", label: "Write regexp" },
      { key: "read", label: "Read regexp" },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (p) => [
          rowButton("Edit", "edit", () => {
            permUser.value = p.user;
            permVhost.value = p.vhost;
            configure.value = p.configure;
            write.value = p.write;
            read.value = p.read;
            permissionForm.open = true;
          }),
          rowButton("Clear", "delete danger", remove(`the permissions of '${p.user}' in '${p.vhost}'`, `/permissions/${seg(p.vhost)}/${seg(p.user)}`)),
        ],
      },
    ],
    { filterOn: (p) => `${p.user} ${p.vhost}`, empty: "No permissions." },
  );

  // -- policies ------------------------------------------------------------------------
  const policyKind = select("kind", [["policies", "Policy"], ["operator-policies", "Operator policy"]]);
  const policyVhost = select("vhost", []);
  const policyName = input("name", { required: true, autocomplete: "off" });
  const pattern = input("pattern", { required: true, autocomplete: "off", placeholder: "^amq\\." });
  const applyTo = select("apply-to", [["all", "Exchanges and queues"], ["exchanges", "Exchanges"], ["queues", "Queues"]]);
  const priority = input("priority", { type: "number", value: 0 });
  const definition = keyValues("definition", [
    ["max-length", "number"],
    ["max-length-bytes", "number"],
    ["message-ttl", "number"],
    ["expires", "number"],
    ["overflow", "string"],
    ["dead-letter-exchange", "string"],
    ["dead-letter-routing-key", "string"],
    ["alternate-exchange", "string"],
    ["queue-mode", "string"],
    ["delivery-limit", "number"],
    ["federation-upstream-set", "string"],
  ]);
  const policyForm = formPanel({
    id: "add-policy",
    title: "Add / update a policy",
    button: "Add / update policy",
    notify,
    after,
    fields: [
      h("div", { className: "grid" }, field("Kind", policyKind), field("Virtual host", policyVhost), field("Name", policyName), field("Pattern", pattern), field("Apply to", applyTo), field("Priority", priority)),
      field("Definition", definition.element),
    ],
    submit: async () => {
      await api(`/${policyKind.value}/${seg(policyVhost.value)}/${seg(policyName.value)}`, {
        method: "PUT",
        body: { pattern: pattern.value, definition: definition.value(), priority: Number(priority.value) || 0, "apply-to": applyTo.value },
      });
      const text = `Policy '${policyName.value}' saved in '${policyVhost.value}'.`;
      definition.reset();
      return text;
    },
  });
  const policyTable = (id, kind, empty) =>
    new DataTable(
      id,
      [
        { key: "vhost", label: "Virtual host" },
        { key: "name", label: "Name" },
        { key: "pattern", label: "Pattern" },
        { key: "apply-to", label: "Apply to" },
        { key: "definition", label: "Definition", value: (p) => JSON.stringify(p.definition || {}), cell: (p) => JSON.stringify(p.definition || {}) },
        { key: "priority", label: "Priority", numeric: true, cell: (p) => num(p.priority) },
        {
          key: "actions",
          label: "",
          value: () => "",
          cell: (p) => [
            rowButton("Edit", "edit", () => {
              policyKind.value = kind;
              policyVhost.value = p.vhost;
              policyName.value = p.name;
              pattern.value = p.pattern;
              applyTo.value = p["apply-to"] || "all";
              priority.value = p.priority ?? 0;
              definition.fill(p.definition);
              policyForm.open = true;
            }),
            rowButton("Delete", "delete danger", remove(`policy '${p.name}'`, `/${kind}/${seg(p.vhost)}/${seg(p.name)}`)),
          ],
        },
      ],
      { filterOn: (p) => `${p.vhost} ${p.name} ${p.pattern}`, empty },
    );
  const policies = policyTable("policies", "policies", "No policies.");
  const operatorPolicies = policyTable("operator-policies", "operator-policies", "No operator policies.");

  // -- limits --------------------------------------------------------------------------
  const limitVhost = select("vhost", []);
  const limitName = select("limit", [["max-connections", "max-connections"], ["max-queues", "max-queues"]]);
  const limitValue = input("value", { type: "number", required: true });
  const limitForm = formPanel({
    id: "set-vhost-limit",
    title: "Set a virtual host limit",
    button: "Set limit",
    notify,
    after,
    fields: [h("div", { className: "grid" }, field("Virtual host", limitVhost), field("Limit", limitName), field("Value", limitValue, "-1: no limit"))],
    submit: async () => {
      await api(`/vhost-limits/${seg(limitVhost.value)}/${limitName.value}`, { method: "PUT", body: { value: Number(limitValue.value) } });
      return `Limit ${limitName.value} of '${limitVhost.value}' set to ${limitValue.value}.`;
    },
  });
  const flatten = (items, owner) =>
    items.flatMap((item) => Object.entries(item.value || {}).map(([name, value]) => ({ owner: item[owner], name, value })));
  const vhostLimits = new DataTable(
    "vhost-limits",
    [
      { key: "owner", label: "Virtual host" },
      { key: "name", label: "Limit" },
      { key: "value", label: "Value", numeric: true, cell: (l) => num(l.value) },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (l) => rowButton("Clear", "delete danger", remove(`limit ${l.name} of '${l.owner}'`, `/vhost-limits/${seg(l.owner)}/${l.name}`)),
      },
    ],
    { empty: "No virtual host limits." },
  );
  const limitUser = select("user", []);
  const userLimitName = select("limit", [["max-connections", "max-connections"], ["max-channels", "max-channels"]]);
  const userLimitValue = input("value", { type: "number", required: true });
  const userLimitForm = formPanel({
    id: "set-user-limit",
    title: "Set a user limit",
    button: "Set limit",
    notify,
    after,
    fields: [h("div", { className: "grid" }, field("User", limitUser), field("Limit", userLimitName), field("Value", userLimitValue, "-1: no limit"))],
    submit: async () => {
      await api(`/user-limits/${seg(limitUser.value)}/${userLimitName.value}`, { method: "PUT", body: { value: Number(userLimitValue.value) } });
      return `Limit ${userLimitName.value} of '${limitUser.value}' set to ${userLimitValue.value}.`;
    },
  });
  const userLimits = new DataTable(
    "user-limits",
    [
      { key: "owner", label: "User" },
      { key: "name", label: "Limit" },
      { key: "value", label: "Value", numeric: true, cell: (l) => num(l.value) },
      {
        key: "actions",
        label: "",
        value: () => "",
        cell: (l) => rowButton("Clear", "delete danger", remove(`limit ${l.name} of '${l.owner}'`, `/user-limits/${seg(l.owner)}/${l.name}`)),
      },
    ],
    { empty: "No user limits." },
  );
  const userLimitsSection = section("User limits", userLimits, userLimitForm);

  const element = h(
    "div",
    {},
    h("h1", {}, "Admin"),
    section("Users", users, userForm),
    section("Virtual hosts", vhosts, vhostForm),
    section("Permissions", permissions, permissionForm),
    section("Policies", policies, policyForm),
    section("Operator policies", operatorPolicies),
    section("Virtual host limits", vhostLimits, limitForm),
    userLimitsSection,
  );
  refresh = async () => {
    const [u, v, p, pol, op, limits] = await Promise.all([
      api("/users"),
      api("/vhosts"),
      api("/permissions"),
      api("/policies"),
      api("/operator-policies"),
      api("/vhost-limits"),
    ]);
    users.update(u);
    vhosts.update(v);
    permissions.update(p);
    policies.update(pol);
    operatorPolicies.update(op);
    vhostLimits.update(flatten(limits, "vhost"));
    const userNames = u.map((x) => x.name);
    const vhostList = v.map((x) => x.name);
    for (const node of [permUser, limitUser]) setOptions(node, userNames);
    for (const node of [permVhost, policyVhost, limitVhost]) setOptions(node, vhostList);
    try {
      userLimits.update(flatten(await api("/user-limits"), "user"));
      userLimitsSection.hidden = false;
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      userLimitsSection.hidden = true; // a broker without /api/user-limits
    }
  };
  return { element, refresh };
}
