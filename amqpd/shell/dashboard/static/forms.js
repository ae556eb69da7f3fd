// Form building blocks: labelled fields, RabbitMQ's typed key/value rows for arguments,
// policy definitions, headers and properties, and a submit wrapper that reports the
// API's answer (RabbitMQ's error reason on failure) through the status line.

import { h } from "./dom.js";

export function field(label, input, hint) {
  return h("label", { className: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);
}

export function input(name, attrs = {}) {
  return h("input", { name, ...attrs });
}

export function select(name, options, value) {
  const node = h("select", { name });
  setOptions(node, options, value);
  return node;
}

/** Replace a select's options ([value, label] pairs or plain values), keeping its value. */
export function setOptions(node, options, value = node.value) {
  const pairs = options.map((o) => (Array.isArray(o) ? o : [o, o]));
  const same =
    node.options.length === pairs.length &&
    pairs.every(([v, l], i) => node.options[i].value === String(v) && node.options[i].text === l);
  if (!same) node.replaceChildren(...pairs.map(([v, l]) => h("option", { value: v }, l)));
  if (value !== undefined && pairs.some(([v]) => String(v) === String(value))) node.value = value;
}

const TYPES = [
  ["string", "String"],
  ["number", "Number"],
  ["boolean", "Boolean"],
  ["list", "List (JSON)"],
];

function typed(text, type) {
  if (type === "number") {
    const n = Number(text);
    if (text.trim() === "" || Number.isNaN(n)) throw new Error(`'${text}' is not a number`);
    return n;
  }
  if (type === "boolean") {
    if (!["true", "false"].includes(text.trim())) throw new Error(`'${text}' is not true or false`);
    return text.trim() === "true";
  }
  if (type === "list") {
    const value = JSON.parse(text);
    if (!Array.isArray(value)) throw new Error(`'${text}' is not a JSON list`);
    return value;
  }
  return text;
}

/**
 * Rows of key = value (type), a new empty row appearing as the last one is used. ``hints``:
 * shortcuts [key, type] that add a row with that key (as RabbitMQ's "Add" links).
 */
export function keyValues(name, hints = []) {
  const rows = h("div", { className: "kv-rows" });
  const addRow = (key = "", type = "string") => {
    const keyInput = h("input", { className: "kv-key", placeholder: "key", "aria-label": `${name} key`, value: key });
    const valueInput = h("input", { className: "kv-value", placeholder: "value", "aria-label": `${name} value` });
    const typeSelect = select(undefined, TYPES, type);
    typeSelect.className = "kv-type";
    const row = h("div", { className: "kv-row" }, keyInput, "=", valueInput, typeSelect);
    keyInput.addEventListener("input", () => {
      if (rows.lastElementChild === row && keyInput.value) addRow();
    });
    rows.append(row);
    return row;
  };
  addRow();
  const shortcuts = hints.length
    ? h(
        "div",
        { className: "kv-hints" },
        "Add: ",
        hints.map(([key, type]) =>
          h("button", {
            type: "button",
            className: "link",
            onclick: () => {
              const last = rows.lastElementChild;
              const row = last.querySelector(".kv-key").value ? addRow(key, type) : last;
              row.querySelector(".kv-key").value = key;
              row.querySelector(".kv-type").value = type;
              if (rows.lastElementChild === row) addRow();
              row.querySelector(".kv-value").focus();
            },
          }, key),
        ),
      )
    : null;
  return {
    element: h("div", { className: "kv", dataset: { name } }, rows, shortcuts),
    value() {
      const out = {};
      for (const row of rows.children) {
        const key = row.querySelector(".kv-key").value.trim();
        if (!key) continue;
        out[key] = typed(row.querySelector(".kv-value").value, row.querySelector(".kv-type").value);
      }
      return out;
    },
    reset() {
      rows.replaceChildren();
      addRow();
    },
    /** Show ``object``'s entries as rows (the type guessed from each value). */
    fill(object) {
      rows.replaceChildren();
      for (const [key, value] of Object.entries(object || {})) {
        const type = Array.isArray(value) ? "list" : typeof value === "number" ? "number" : typeof value === "boolean" ? "boolean" : "string";
        const row = addRow(key, type);
        row.querySelector(".kv-value").value = type === "list" ? JSON.stringify(value) : String(value);
      }
      addRow();
    },
  };
}

/**
 * A form in a panel: ``build`` returns its fields; ``submit(form)`` does the work and
 * returns the text to show. Errors (the API's reason) go to the status line.
 */
export function formPanel({ id, title, fields, button, submit, notify, after, open = false }) {
  const form = h("form", { id, className: "admin-form" }, fields, h("div", { className: "actions" }, h("button", { type: "submit" }, button)));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const text = await submit(form);
      if (text) notify(text);
      if (after) await after();
    } catch (error) {
      notify(error.message, true);
    }
  });
  const details = h("details", { className: "panel form-panel", id: `${id}-panel`, open }, h("summary", {}, title), form);
  return details;
}
