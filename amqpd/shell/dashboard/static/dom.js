// DOM helpers: elements built with textContent only (names from the broker are never
// parsed as HTML), number formats, and a sortable, filterable table.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "className") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function num(value) {
  if (value === undefined || value === null) return "";
  return Number(value).toLocaleString("en-US");
}

export function rate(details) {
  if (!details || typeof details.rate !== "number") return "";
  return `${details.rate.toFixed(1)}/s`;
}

export function bytes(value) {
  if (typeof value !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let unit = 0;
  while (v >= 1024 && unit < units.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return `${unit ? v.toFixed(1) : v} ${units[unit]}`;
}

export function duration(ms) {
  let seconds = Math.floor((ms || 0) / 1000);
  const days = Math.floor(seconds / 86400);
  seconds -= days * 86400;
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${minutes}m`;
  if (minutes) return `${minutes}m ${seconds}s`;
  return `${seconds}s`;
}

/** A filter box: substring, or a regular expression when it is ticked (as RabbitMQ's). */
export function matcher(text, regex) {
  if (!text) return () => true;
  if (regex) {
    try {
      const pattern = new RegExp(text, "i");
      return (value) => pattern.test(value);
    } catch {
      return () => false;
    }
  }
  const needle = text.toLowerCase();
  return (value) => value.toLowerCase().includes(needle);
}

/**
 * A table whose state (sort column and direction, filter) outlives refreshes.
 * ``columns``: [{key, label, value(row) -> sortable, cell(row) -> node or text, numeric}].
 */
export class DataTable {
  constructor(id, columns, { filterOn = null, empty = "Nothing to show." } = {}) {
    this.id = id;
    this.columns = columns;
    this.filterOn = filterOn; // row -> text the filter is matched against
    this.empty = empty;
    this.sortKey = columns[0].key;
    this.descending = false;
    this.filter = "";
    this.regex = false;
    this.rows = [];
    this.body = h("tbody");
    this.count = h("span", { className: "count" });
    this.head = h("tr");
    this.element = this.build();
  }

  build() {
    const parts = [];
    if (this.filterOn) {
      const input = h("input", {
        type: "search",
        id: `${this.id}-filter`,
        placeholder: "Filter",
        "aria-label": "Filter",
        className: "filter",
        oninput: (event) => {
          this.filter = event.target.value;
          this.render();
        },
      });
      const regex = h("input", {
        type: "checkbox",
        onchange: (event) => {
          this.regex = event.target.checked;
          this.render();
        },
      });
      parts.push(h("div", { className: "toolbar" }, input, h("label", {}, regex, " Regex"), this.count));
    }
    for (const column of this.columns) {
      const th = h(
        "th",
        {
          className: column.numeric ? "num sortable" : "sortable",
          dataset: { key: column.key },
          onclick: () => {
            if (this.sortKey === column.key) this.descending = !this.descending;
            else {
              this.sortKey = column.key;
              this.descending = Boolean(column.numeric);
            }
            this.render();
          },
        },
        column.label,
      );
      this.head.append(th);
    }
    parts.push(h("table", { className: "list", id: this.id }, h("thead", {}, this.head), this.body));
    return h("div", { className: "table-wrap" }, parts);
  }

  update(rows) {
    this.rows = rows;
    this.render();
  }

  render() {
    const column = this.columns.find((c) => c.key === this.sortKey) || this.columns[0];
    const accept = matcher(this.filter, this.regex);
    const shown = this.rows.filter((row) => !this.filterOn || accept(this.filterOn(row)));
    const value = column.value || ((row) => row[column.key]);
    shown.sort((a, b) => {
      const va = value(a);
      const vb = value(b);
      let order;
      if (typeof va === "number" && typeof vb === "number") order = va - vb;
      else order = String(va ?? "").localeCompare(String(vb ?? ""));
      return this.descending ? -order : order;
    });
    for (const th of this.head.children) {
      th.classList.toggle("sorted", th.dataset.key === column.key);
      th.classList.toggle("desc", th.dataset.key === column.key && this.descending);
    }
    this.count.textContent = `${shown.length} of ${this.rows.length}`;
    if (!shown.length) {
      this.body.replaceChildren(
        h("tr", {}, h("td", { colspan: this.columns.length, className: "empty" }, this.empty)),
      );
      return;
    }
    this.body.replaceChildren(
      ...shown.map((row) =>
        h(
          "tr",
          {},
          this.columns.map((c) =>
            h("td", { className: c.numeric ? "num" : "" }, c.cell ? c.cell(row) : row[c.key]),
          ),
        ),
      ),
    );
  }
}
